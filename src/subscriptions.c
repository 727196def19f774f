/* odbox — subscriptions are data (see odbox/handlers.h): a delivery
 * records its handlers in <eventlog>.subscriptions and
 * subscription_types, and heartbeats its process in
 * subscription_processes, in the database's time; the fan-out reads the
 * types of the subscriptions that are not retired (odbox_subs_read_types);
 * operators retire them (the list: subscription_list.c; a replay:
 * subscription_replay.c).
 *
 * Every statement is dialect-neutral but for the dialect's fields it
 * takes: insert_ignore_fmt and now_sql. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "delivery_internal.h"
#include "notifications_internal.h"
#include "odbox/uuid.h"
#include "registry_internal.h"

#define T_SUBS "subscriptions"
#define T_TYPES "subscription_types"
#define T_PROCS "subscription_processes"
#define DEFAULT_LIVE_MS 30000
/* odbox_sql_key operation of the fan-out's read of the types */
enum { SQL_SUBS_TYPES = 121 };

/* ---- small helpers -------------------------------------------------------------- */

void odbox_subs_table(const odbox_conn *c, const char *eventlog, const char *name, char *out, size_t cap)
{
    odbox_dialect_eventlog_table(odbox_conn_dialect((odbox_conn *)c), eventlog, name, out, cap);
}

int odbox_subs_run(odbox_conn *c, char *sql, const char *const *args, size_t n, odbox_stmt **s, odbox_error *err)
{
    *s = NULL;
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    int rc = odbox_stmt_prepare(c, sql, s, err);
    free(sql);
    for (size_t i = 0; rc == ODBOX_OK && i < n; i++)
        rc = odbox_stmt_bind_text(*s, (int)i + 1, args[i], err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(*s, err);
    if (rc != ODBOX_OK)
        odbox_stmt_free(s);
    return rc;
}

/* Runs a statement that returns no rows; *changed (may be NULL) gets its
 * row count. */
static int exec(odbox_conn *c, char *sql, const char *const *args, size_t n, int64_t *changed, odbox_error *err)
{
    odbox_stmt *s = NULL;
    int rc = odbox_subs_run(c, sql, args, n, &s, err);
    if (rc == ODBOX_OK && changed)
        *changed = odbox_stmt_rows_affected(s);
    odbox_stmt_free(&s);
    return rc;
}

/* INSERT ... VALUES (values) skipping a row whose key exists. */
static char *insert_ignore(const odbox_dialect *d, const char *tbl, const char *cols, const char *values,
                           const char *key)
{
    odbox_buf b = {0};
    odbox_buf_appendf(&b, d->insert_ignore_fmt, tbl, cols, values, key);
    return odbox_buf_take(&b);
}

static char *values_now(const odbox_dialect *d, const char *params)
{
    odbox_buf b = {0};
    odbox_buf_cat(&b, "(", params, d->now_sql, ")", (char *)NULL);
    return odbox_buf_take(&b);
}

/* ---- the process --------------------------------------------------------------- */

void odbox_subs_process_id(odbox_delivery *d)
{
    char host[64] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0)
        strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    char uuid[ODBOX_UUID_LEN + 1] = "";
    odbox_shard_id any = {0, 0};
    /* the uuid's random tail: another delivery in this process, or this
     * pid reused later, is another process */
    if (odbox_uuid_v7_sharded(any, uuid, NULL) != ODBOX_OK)
        snprintf(uuid, sizeof uuid, "%036llx", (unsigned long long)(odbox_mono_us() ^ (uintptr_t)d));
    snprintf(d->process, sizeof d->process, "%s:%ld:%.8s", host, (long)getpid(), uuid + 28);
}

/* ---- registration and heartbeat -------------------------------------------------- */

/* Records whether h's subscription is ordered; where that changes, its
 * unfinished rows (under its name and former names) take or leave their
 * order_key at once, in the same transaction: the fan-out writes the key
 * by the recorded value from then on. */
static int record_order(odbox_conn *c, const char *subs, const char *notifications, const odbox_hentry *h,
                        odbox_error *err)
{
    int ordered = h->options.ordered != 0;
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", subs, ordered ? " SET ordered = 1 WHERE name = ? AND ordered <> 1"
                                               : " SET ordered = 0 WHERE name = ? AND ordered <> 0", (char *)NULL);
    const char *args[] = {h->name};
    int64_t changed = 0;
    int rc = odbox_conn_begin(c, err);
    if (rc == ODBOX_OK)
        rc = exec(c, odbox_buf_take(&b), args, 1, &changed, err);
    for (size_t k = 0; rc == ODBOX_OK && changed > 0 && k <= h->nformer; k++) {
        odbox_buf_cat(&b, "UPDATE ", notifications,
                      ordered ? " SET order_key = model_id WHERE handler_name = ? AND state IN ('PENDING', 'FAILED')"
                                " AND model_id IS NOT NULL"
                              : " SET order_key = NULL WHERE handler_name = ? AND order_key IS NOT NULL",
                      (char *)NULL);
        const char *nargs[] = {k ? h->former[k - 1] : h->name};
        rc = exec(c, odbox_buf_take(&b), nargs, 1, NULL, err);
    }
    if (rc == ODBOX_OK)
        return odbox_conn_commit(c, err);
    odbox_conn_rollback(c, NULL);
    return rc;
}

/* Records h's max attempts (NULL: none) as its subscription's: every
 * process judges its rows by them from its next heartbeat on
 * (read_limits). */
static int record_limit(odbox_conn *c, const char *subs, const odbox_hentry *h, odbox_error *err)
{
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", subs, " SET max_attempts = ", (char *)NULL);
    if (h->max_attempts > 0)
        odbox_buf_appendf(&b, "%d", h->max_attempts);
    else
        odbox_buf_append(&b, "NULL");
    odbox_buf_append(&b, " WHERE name = ?");
    const char *args[] = {h->name};
    return exec(c, odbox_buf_take(&b), args, 1, NULL, err);
}

/* Whether the space-separated list has the word name. */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *w = list; *w; w += strcspn(w, " "), w += *w == ' ') {
        if (strcspn(w, " ") == n && !strncmp(w, name, n))
            return 1;
    }
    return 0;
}

/* Adds h's former names to those its subscription records: a later
 * deploy may name one more (a replay skips the events with rows under
 * them), and one that names fewer leaves the others, whose rows may
 * still be there. The UPDATE is guarded by the list it read, and read
 * again if another registration changed it meanwhile. */
static int record_former(odbox_conn *c, const char *subs, const odbox_hentry *h, odbox_error *err)
{
    enum { TRIES = 10 };
    for (int attempt = 0; attempt < TRIES; attempt++) {
        odbox_buf b = {0};
        odbox_buf_cat(&b, "SELECT former_names FROM ", subs, " WHERE name = ?", (char *)NULL);
        const char *args[] = {NULL, h->name, NULL};
        odbox_stmt *s = NULL;
        const char *v = NULL;
        int null = 1;
        int rc = odbox_subs_run(c, odbox_buf_take(&b), args + 1, 1, &s, err);
        if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
            rc = odbox_stmt_get_text(s, 1, &v, &null, err);
        char *was = rc >= 0 && !null ? odbox_strdup(v) : NULL;
        odbox_stmt_free(&s);
        if (rc < 0)
            return rc;
        odbox_buf merged = {0};
        odbox_buf_append(&merged, was ? was : "");
        for (size_t k = 0; k < h->nformer; k++)
            if (!listed(was ? was : "", h->former[k]))
                odbox_buf_cat(&merged, merged.len ? " " : "", h->former[k], (char *)NULL);
        int grown = merged.len > (was ? strlen(was) : 0), again = 0;
        args[0] = odbox_buf_take(&merged), args[2] = was;
        if (!args[0] || (!null && !was))
            rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        else if (grown) {
            int64_t changed = 0;
            odbox_buf_cat(&b, "UPDATE ", subs, " SET former_names = ? WHERE name = ? AND ",
                          was ? "former_names = ?" : "former_names IS NULL", (char *)NULL);
            rc = exec(c, odbox_buf_take(&b), args, was ? 3 : 2, &changed, err);
            again = rc == ODBOX_OK && changed == 0; /* changed meanwhile: read again */
        }
        free((char *)args[0]), free(was);
        if (!again)
            return rc;
    }
    return odbox_fail(err, ODBOX_EBUSY, "the former names of subscription '%s' changed %d times while recorded",
                      h->name, TRIES);
}

static int record_handlers(odbox_delivery *d, odbox_dshard *ds, odbox_conn *c, odbox_error *err)
{
    const odbox_dialect *dl = odbox_conn_dialect(c);
    const char *ev = odbox_shard_eventlog(ds->shard);
    char subs[ODBOX_NAME_MAX * 2 + 32], types[ODBOX_NAME_MAX * 2 + 32], notifications[ODBOX_NAME_MAX * 2 + 32];
    odbox_subs_table(c, ev, T_SUBS, subs, sizeof subs);
    odbox_subs_table(c, ev, T_TYPES, types, sizeof types);
    odbox_subs_table(c, ev, "event_notifications", notifications, sizeof notifications);
    int rc = ODBOX_OK;
    for (size_t i = 0; rc == ODBOX_OK && i < d->h->n; i++) {
        const odbox_hentry *h = &d->h->v[i];
        odbox_buf fb = {0};
        for (size_t k = 0; k < h->nformer; k++)
            odbox_buf_cat(&fb, k ? " " : "", h->former[k], (char *)NULL);
        char *former = h->nformer ? odbox_buf_take(&fb) : NULL;
        if (h->nformer && !former)
            return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        char *vals = values_now(dl, "?, ?, ");
        const char *args[] = {h->name, former};
        if (!vals)
            rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        else if (former)
            rc = exec(c, insert_ignore(dl, subs, "name, former_names, created_date", vals, "name"), args, 2, NULL,
                      err);
        else {
            free(vals);
            vals = values_now(dl, "?, NULL, ");
            rc = vals ? exec(c, insert_ignore(dl, subs, "name, former_names, created_date", vals, "name"), args, 1,
                             NULL, err)
                      : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        }
        free(vals);
        free(former);
        if (rc == ODBOX_OK && h->nformer)
            rc = record_former(c, subs, h, err);
        if (rc == ODBOX_OK)
            rc = record_order(c, subs, notifications, h, err);
        if (rc == ODBOX_OK)
            rc = record_limit(c, subs, h, err);
        for (size_t k = 0; rc == ODBOX_OK && k < h->ntypes; k++) {
            const char *targs[] = {h->name, h->types[k]};
            rc = exec(c, insert_ignore(dl, types, "name, event_type", "(?, ?)", "name"), targs, 2, NULL, err);
        }
        /* a former name's subscription ends: its rows still reach h */
        for (size_t k = 0; rc == ODBOX_OK && k < h->nformer; k++) {
            odbox_buf b = {0};
            odbox_buf_cat(&b, "UPDATE ", subs, " SET retired_date = ", dl->now_sql,
                          " WHERE name = ? AND retired_date IS NULL", (char *)NULL);
            const char *fargs[] = {h->former[k]};
            rc = exec(c, odbox_buf_take(&b), fargs, 1, NULL, err);
        }
    }
    /* the retired among ours: said once per delivery and shard */
    if (rc != ODBOX_OK)
        return rc;
    odbox_buf b = {0};
    odbox_buf_cat(&b, "SELECT name FROM ", subs, " WHERE retired_date IS NOT NULL", (char *)NULL);
    odbox_stmt *s = NULL;
    if ((rc = odbox_subs_run(c, odbox_buf_take(&b), NULL, 0, &s, err)) == ODBOX_OK) {
        while ((rc = odbox_stmt_fetch(s, err)) == 1) {
            const char *name = NULL;
            int null = 0;
            if ((rc = odbox_stmt_get_text(s, 1, &name, &null, err)) != ODBOX_OK)
                break;
            for (size_t i = 0; !null && i < d->h->n; i++)
                if (!strcmp(d->h->v[i].name, name))
                    odbox_log(ODBOX_LOG_WARN,
                              "delivery: subscription '%s' on shard %d.%d is retired: it gets no new "
                              "notifications (its existing ones are still handled); subscribe again under a "
                              "new name",
                              name, ds->id.group, ds->id.member);
        }
        odbox_stmt_free(&s);
        rc = rc < 0 ? rc : ODBOX_OK;
    }
    return rc;
}

/* Runs the statement begun in b (freed) on this process's rows of
 * subscription_processes, by their key (name, process): "WHERE process =
 * ?" alone read the whole table at every heartbeat of every process. */
static int exec_own_rows(odbox_delivery *d, odbox_conn *c, odbox_buf *b, int64_t *changed, odbox_error *err)
{
    odbox_buf_append(b, " WHERE name IN (");
    odbox_buf_list(b, "?", d->h->n);
    odbox_buf_append(b, ") AND process = ?");
    const char **args = malloc((d->h->n + 1) * sizeof *args);
    if (!args) {
        free(odbox_buf_take(b));
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < d->h->n; i++)
        args[i] = d->h->v[i].name;
    args[d->h->n] = d->process;
    int rc = exec(c, odbox_buf_take(b), args, d->h->n + 1, changed, err);
    free(args);
    return rc;
}

static int heartbeat(odbox_delivery *d, odbox_dshard *ds, odbox_conn *c, odbox_error *err)
{
    const odbox_dialect *dl = odbox_conn_dialect(c);
    char procs[ODBOX_NAME_MAX * 2 + 32];
    odbox_subs_table(c, odbox_shard_eventlog(ds->shard), T_PROCS, procs, sizeof procs);
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", procs, " SET last_seen = ", dl->now_sql, (char *)NULL);
    int64_t changed = 0;
    int rc = exec_own_rows(d, c, &b, &changed, err);
    /* fewer rows than handlers: the first beat, or a purge removed them
     * (it measures last_seen against its window): written again */
    if (rc != ODBOX_OK || changed >= (int64_t)d->h->n)
        return rc;
    char *vals = values_now(dl, "?, ?, ");
    if (!vals)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    for (size_t i = 0; rc == ODBOX_OK && i < d->h->n; i++) {
        const char *pargs[] = {d->h->v[i].name, d->process};
        rc = exec(c, insert_ignore(dl, procs, "name, process, last_seen", vals, "name"), pargs, 2, NULL, err);
    }
    free(vals);
    return rc;
}

/* The max attempts the database records for this process's handlers
 * (the last registration's), into ds->max_attempts. */
static int read_limits(odbox_delivery *d, odbox_dshard *ds, odbox_conn *c, odbox_error *err)
{
    char subs[ODBOX_NAME_MAX * 2 + 32];
    odbox_subs_table(c, odbox_shard_eventlog(ds->shard), T_SUBS, subs, sizeof subs);
    odbox_buf b = {0};
    odbox_buf_cat(&b, "SELECT name, max_attempts FROM ", subs, " WHERE retired_date IS NULL", (char *)NULL);
    odbox_stmt *s = NULL;
    int rc = odbox_subs_run(c, odbox_buf_take(&b), NULL, 0, &s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *name = NULL;
        int64_t max = 0;
        int null_name = 0, null_max = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &name, &null_name, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 2, &max, &null_max, err)) != ODBOX_OK)
            break;
        for (size_t k = 0; !null_name && k < d->h->n; k++)
            if (!strcmp(d->h->v[k].name, name))
                atomic_store(&ds->max_attempts[k], odbox_subs_limit_of(max, null_max));
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

int odbox_subs_limit_of(int64_t max, int null)
{
    return null || max < 0 || max > INT_MAX ? 0 : (int)max;
}

int odbox_subs_max_attempts(const odbox_delivery *d, const odbox_dshard *ds, int k)
{
    int recorded = atomic_load(&ds->max_attempts[k]);
    return recorded >= 0 ? recorded : d->h->v[k].max_attempts;
}

int odbox_subs_beat(odbox_delivery *d, odbox_dshard *ds, int force, odbox_error *err)
{
    int64_t now = odbox_mono_us(), every = (int64_t)d->cfg.live_ms * 1000 / 3;
    pthread_mutex_lock(&d->mu);
    int registered = ds->subs_registered;
    /* until this process's handlers are recorded on the shard, every
     * caller records them itself (insert-ignores: twice is harmless):
     * a fan-out round never reads the types while another thread is
     * halfway through them (the round would flip events that a handler
     * not recorded yet then misses) */
    int due = force || !registered || !ds->subs_beat_us || now - ds->subs_beat_us >= every;
    if (due)
        ds->subs_beat_us = now;
    pthread_mutex_unlock(&d->mu);
    if (!due)
        return ODBOX_OK;
    odbox_pool *pool = odbox_shard_primary(ds->shard);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK && !registered)
        rc = record_handlers(d, ds, c, err);
    if (rc == ODBOX_OK)
        rc = heartbeat(d, ds, c, err);
    if (rc == ODBOX_OK)
        rc = read_limits(d, ds, c, err);
    if (c)
        odbox_pool_release(pool, &c);
    pthread_mutex_lock(&d->mu);
    if (rc == ODBOX_OK)
        ds->subs_registered = 1;
    else
        ds->subs_beat_us = 0; /* tried again at the next round */
    pthread_mutex_unlock(&d->mu);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "subscriptions on shard %d.%d", ds->id.group, ds->id.member);
    return ODBOX_OK;
}

/* This process's rows on a shard where it recorded them, by the key as
 * the heartbeat updates them. A row is this process's alone (its id has
 * a random tail), so no other process, of this version or an older one,
 * loses a row; an older odbox reads a missing row as no live process, as
 * after a purge. */
static int leave_shard(odbox_delivery *d, odbox_dshard *ds, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(ds->shard);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    char procs[ODBOX_NAME_MAX * 2 + 32];
    odbox_subs_table(c, odbox_shard_eventlog(ds->shard), T_PROCS, procs, sizeof procs);
    odbox_buf b = {0};
    odbox_buf_cat(&b, "DELETE FROM ", procs, (char *)NULL);
    rc = exec_own_rows(d, c, &b, NULL, err);
    odbox_pool_release(pool, &c);
    return rc;
}

void odbox_subs_leave(odbox_delivery *d)
{
    odbox_subs_stop_beat(d); /* it would write them again */
    for (size_t i = 0; i < d->nshards; i++) {
        odbox_dshard *ds = &d->shards[i];
        pthread_mutex_lock(&d->mu);
        /* a shard whose last beat failed is not answering: its rows age out */
        int beating = ds->subs_registered && ds->subs_beat_us;
        pthread_mutex_unlock(&d->mu);
        odbox_error e = {0};
        if (beating && leave_shard(d, ds, &e) != ODBOX_OK)
            odbox_log(ODBOX_LOG_WARN,
                      "delivery free: this process's heartbeat rows on shard %d.%d stay (%s): odbox handlers shows "
                      "it live until they are older than its live window",
                      ds->id.group, ds->id.member, e.message);
    }
}

int odbox_delivery_register(odbox_delivery *d, odbox_error *err)
{
    if (!d)
        return odbox_fail(err, ODBOX_EINVAL, "delivery register: delivery is NULL");
    int rc = ODBOX_OK;
    for (size_t i = 0; rc == ODBOX_OK && i < d->nshards; i++)
        rc = odbox_subs_beat(d, &d->shards[i], 1, err);
    return rc;
}

static void *beat_main(void *arg)
{
    odbox_delivery *d = arg;
    int failing = 0;
    pthread_mutex_lock(&d->mu);
    while (!d->closing) {
        pthread_mutex_unlock(&d->mu);
        odbox_error e = {0}, one = {0};
        int rc = ODBOX_OK;
        for (size_t i = 0; i < d->nshards; i++) /* a shard that fails holds up no other */
            if (odbox_subs_beat(d, &d->shards[i], 0, &one) != ODBOX_OK && rc == ODBOX_OK)
                rc = one.code ? one.code : ODBOX_EINVAL, e = one;
        if (rc != ODBOX_OK && !failing)
            odbox_log(ODBOX_LOG_WARN, "delivery: heartbeat failed: %s; retrying", e.message);
        failing = rc != ODBOX_OK;
        /* due again after a third of the window; a failure, sooner */
        struct timespec until = odbox_mono_after(failing ? 1000 : d->cfg.live_ms / 3);
        pthread_mutex_lock(&d->mu);
        while (!d->closing && !odbox_mono_passed(&until))
            pthread_cond_timedwait(&d->cv, &d->mu, &until);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

int odbox_subs_start_beat(odbox_delivery *d, odbox_error *err)
{
    if (d->beat_started)
        return ODBOX_OK;
    if (pthread_create(&d->beat, NULL, beat_main, d) != 0)
        return odbox_fail(err, ODBOX_ENOMEM, "delivery: cannot start the heartbeat thread");
    d->beat_started = 1;
    return ODBOX_OK;
}

void odbox_subs_stop_beat(odbox_delivery *d)
{
    if (!d->beat_started)
        return;
    pthread_mutex_lock(&d->mu);
    d->closing = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->beat, NULL);
    d->beat_started = 0;
}

/* ---- the fan-out's read ---------------------------------------------------------- */

void odbox_subs_types_free(odbox_subtype *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++) {
        free(t[i].name);
        for (size_t k = 0; k < t[i].n; k++)
            free(t[i].subs[k]);
        free(t[i].subs);
    }
    free(t);
}

int odbox_subs_read_types(odbox_conn *c, const char *eventlog, odbox_subtype **out, size_t *n, int64_t *db_now,
                          odbox_error *err)
{
    *out = NULL;
    *n = 0;
    *db_now = 0;
    char subs[ODBOX_NAME_MAX * 2 + 32], types[ODBOX_NAME_MAX * 2 + 32];
    odbox_subs_table(c, eventlog, T_SUBS, subs, sizeof subs);
    odbox_subs_table(c, eventlog, T_TYPES, types, sizeof types);
    odbox_sql_key key;
    odbox_sql_key_init(&key, SQL_SUBS_TYPES, 0);
    odbox_sql_key_add(&key, 0, types);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        odbox_buf b = {0};
        odbox_buf_append(&b, "SELECT t.event_type, t.name, ");
        odbox_ops_ts_col(&b, odbox_conn_dialect(c), odbox_conn_dialect(c)->now_sql);
        odbox_buf_cat(&b, " FROM ", types, " t JOIN ", subs,
                      " s ON s.name = t.name WHERE s.retired_date IS NULL ORDER BY t.event_type, t.name",
                      (char *)NULL);
        char *sql = odbox_buf_take(&b);
        rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_subtype *v = NULL;
    size_t nv = 0, cap = 0;
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *type = NULL, *name = NULL;
        int n1 = 0, n2 = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &type, &n1, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &name, &n2, err)) != ODBOX_OK ||
            (!*db_now && (rc = odbox_stmt_get_timestamp(s, 3, db_now, NULL, err)) != ODBOX_OK))
            break;
        if (n1 || n2)
            continue;
        if (!nv || strcmp(v[nv - 1].name, type)) {
            if (nv == cap) {
                size_t nc = cap ? cap * 2 : 8;
                odbox_subtype *g = realloc(v, nc * sizeof *g);
                if (!g) {
                    rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
                    break;
                }
                v = g, cap = nc;
            }
            v[nv] = (odbox_subtype){strdup(type), NULL, 0};
            if (!v[nv++].name) {
                rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
                break;
            }
        }
        odbox_subtype *t = &v[nv - 1];
        char **g = realloc(t->subs, (t->n + 1) * sizeof *g);
        if (!g || !(g[t->n] = strdup(name))) {
            if (g)
                t->subs = g;
            rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
            break;
        }
        t->subs = g;
        t->n++;
    }
    odbox_stmt_free(&s);
    if (rc < 0) {
        odbox_subs_types_free(v, nv);
        return rc;
    }
    *out = v;
    *n = nv;
    return ODBOX_OK;
}

/* ---- retire ---------------------------------------------------------------------- */

static int count_named(odbox_conn *c, const char *subs, const char *name, int64_t *count, odbox_error *err)
{
    odbox_buf b = {0};
    odbox_buf_cat(&b, "SELECT COUNT(*) FROM ", subs, " WHERE name = ?", (char *)NULL);
    const char *args[] = {name};
    odbox_stmt *s = NULL;
    *count = 0;
    int rc = odbox_subs_run(c, odbox_buf_take(&b), args, 1, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        int null = 0;
        rc = odbox_stmt_get_int64(s, 1, count, &null, err);
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

int odbox_subscription_retire(const odbox_registry *r, const char *name, int64_t *retired, odbox_error *err)
{
    if (retired)
        *retired = 0;
    if (!r || !name || !*name)
        return odbox_fail(err, ODBOX_EINVAL, "subscription retire: registry or name is missing");
    int64_t found = 0, done = 0;
    int rc = ODBOX_OK;
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_registry_shard_count(r); i++) {
        odbox_shard *sh = odbox_registry_shard_at(r, i);
        odbox_conn *c = NULL;
        char subs[ODBOX_NAME_MAX * 2 + 32];
        if ((rc = odbox_ops_connect(sh, T_SUBS, &c, subs, sizeof subs, err)) != ODBOX_OK)
            break;
        odbox_buf b = {0};
        odbox_buf_cat(&b, "UPDATE ", subs, " SET retired_date = ", odbox_conn_dialect(c)->now_sql,
                      " WHERE name = ? AND retired_date IS NULL", (char *)NULL);
        const char *args[] = {name};
        int64_t changed = 0, count = 0;
        rc = exec(c, odbox_buf_take(&b), args, 1, &changed, err);
        if (rc == ODBOX_OK && changed <= 0)
            rc = count_named(c, subs, name, &count, err);
        done += changed > 0 ? changed : 0;
        found += changed > 0 ? changed : count;
        odbox_ops_release(sh, &c);
        if (rc != ODBOX_OK)
            rc = odbox_ops_shard_error(sh, rc, err);
    }
    if (rc == ODBOX_OK && !found)
        return odbox_fail(err, ODBOX_ENOTFOUND, "no subscription named '%s'", name);
    if (retired)
        *retired = done;
    return rc;
}
