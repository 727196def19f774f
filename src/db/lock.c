/* odbox — session-level keyed locks, through the dialect's lock SQL. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "odbc.h"
#include "lock_local.h"

#define POLL_INTERVAL_MS 50

/* Runs a lock statement; *answer is its integer result, -1 for NULL. */
static int run_lock_sql(odbox_conn *c, const char *sql, const char *key, int64_t *answer,
                        odbox_error *err)
{
    const odbox_dialect *d = c ? c->dialect : NULL;
    if (!c || !key || !*key)
        return odbox_fail(err, ODBOX_EINVAL, "lock: connection or key missing");
    if (!d || d->lock_key_form == ODBOX_LOCK_KEY_NONE || !sql)
        return odbox_fail(err, ODBOX_EUNSUPPORTED, "lock: dialect %s has no keyed locks",
                          d ? d->name : "(unknown)");
    int64_t h = odbox_sha256_int64(key, strlen(key));
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK) {
        if (d->lock_key_form == ODBOX_LOCK_KEY_INT64) {
            rc = odbox_stmt_bind_int64(s, 1, h, err);
        } else {
            char hex[17];
            snprintf(hex, sizeof hex, "%llx", (unsigned long long)h);
            rc = odbox_stmt_bind_text(s, 1, hex, err);
        }
    }
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    if (rc == ODBOX_OK) {
        int null = 0;
        rc = odbox_stmt_fetch(s, err);
        if (rc == 1)
            rc = odbox_stmt_get_int64(s, 1, answer, &null, err);
        else if (rc == 0)
            rc = odbox_fail(err, ODBOX_EDB, "lock: the lock query returned no row");
        if (rc == ODBOX_OK && null)
            *answer = -1;
    }
    odbox_stmt_free(&s);
    return rc;
}

/* No server locks (SQLite): the process holds them. */
static int local(const odbox_conn *c)
{
    return c && c->dialect && c->dialect->lock_key_form == ODBOX_LOCK_KEY_NONE;
}

int odbox_conn_try_lock(odbox_conn *c, const char *key, int *taken, odbox_error *err)
{
    /* Without *taken the caller could not know it holds the lock (and
     * never release it): refused before one is taken. */
    if (!taken)
        return odbox_fail(err, ODBOX_EINVAL, "lock: taken is NULL");
    if (local(c))
        return odbox_local_lock_try(c, key, taken, err);
    int64_t answer = 0;
    int rc = run_lock_sql(c, c && c->dialect ? c->dialect->lock_try_sql : NULL, key, &answer, err);
    if (rc == ODBOX_OK && answer < 0)
        rc = odbox_fail(err, ODBOX_EDB, "lock: the server could not take lock '%.64s'", key);
    *taken = rc == ODBOX_OK && answer == 1;
    return rc;
}

int odbox_conn_lock(odbox_conn *c, const char *key, int wait_ms, odbox_error *err)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        int taken = 0;
        int rc = odbox_conn_try_lock(c, key, &taken, err);
        if (rc != ODBOX_OK || taken)
            return rc;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed = (long)(now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed >= wait_ms)
            return odbox_fail(err, ODBOX_ETIMEDOUT, "lock '%.64s' is held by another session; waited %d ms",
                              key, wait_ms);
        odbox_sleep_ms(POLL_INTERVAL_MS);
    }
}

int odbox_conn_unlock(odbox_conn *c, const char *key, odbox_error *err)
{
    if (local(c))
        return odbox_local_lock_release(c, key, err);
    int64_t answer = 0;
    int rc = run_lock_sql(c, c && c->dialect ? c->dialect->lock_release_sql : NULL, key, &answer, err);
    if (rc == ODBOX_OK && answer != 1)
        rc = odbox_fail(err, ODBOX_ESTATE, "unlock: lock '%.64s' was not held by this session", key);
    return rc;
}
