/* odbox — idempotency keys (see idempotency.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "idempotency.h"
#include "odbox/dialect.h"
#include "odbox/registry.h"

#define COLUMNS "id, namespace, idem_key, action_name, params_sha256, result, created_date"
#define COLUMN_COUNT (ODBOX_IDEM_CLAIM_PARAMS + 1) /* created_date is no parameter */
/* What a missing table or column reads as (ODBOX_EDB); a lock wait, a
 * deadlock or a lost session has other causes. */
#define MIGRATIONS_HINT(rc) ((rc) == ODBOX_EDB ? " (are migrations V11 and V15 applied?)" : "")

int odbox_idem_key_check(const char *what, const char *key, odbox_error *err)
{
    if (!key || !*key)
        return odbox_fail(err, ODBOX_EINVAL, "%s: the idempotency key is empty", what);
    size_t n = strlen(key);
    if (n > ODBOX_IDEM_KEY_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "%s: the idempotency key is %zu bytes (at most %d)", what, n,
                          ODBOX_IDEM_KEY_MAX);
    /* UTF-8 because the key column is text on PostgreSQL, whose server
     * refuses other bytes at the INSERT while MySQL/MariaDB and SQLite
     * store them: one rule for every dialect, told before any write */
    const unsigned char *u = (const unsigned char *)key;
    for (size_t i = 0, len; i < n; i += len) {
        if (u[i] < 0x20 || u[i] == 0x7f)
            return odbox_fail(err, ODBOX_EINVAL, "%s: the idempotency key has a control character (byte %zu)", what,
                              i);
        if ((len = odbox_utf8_len(u + i)) == 0)
            return odbox_fail(err, ODBOX_EINVAL, "%s: the idempotency key is not valid UTF-8 (byte %zu)", what, i);
    }
    return ODBOX_OK;
}

void odbox_idem_params_sha256(const char *params_json, char out[65])
{
    odbox_sha256_hex(params_json, strlen(params_json), out);
}

void odbox_idem_outcome_clear(odbox_idem_outcome *o)
{
    if (!o)
        return;
    free(o->action_name);
    free(o->result);
    memset(o, 0, sizeof *o);
}

/* A nullable text column's copy into *out (NULL for NULL). */
static int dup_text(odbox_stmt *s, int col, char **out, odbox_error *err)
{
    const char *v = NULL;
    int is_null = 0;
    int rc = odbox_stmt_get_text(s, col, &v, &is_null, err);
    if (rc == ODBOX_OK && !is_null && !(*out = strdup(v)))
        rc = odbox_fail(err, ODBOX_ENOMEM, "idempotency key: out of memory");
    return rc;
}

/* The cached statement op of eventlog's keys table on c, or fmt (one %s:
 * the table) prepared. */
static int prepare(odbox_conn *c, int op, const char *eventlog, const char *fmt, odbox_stmt **s, odbox_error *err)
{
    odbox_sql_key k;
    odbox_sql_key_init(&k, op, 1);
    odbox_sql_key_add(&k, 0, eventlog);
    int rc = odbox_stmt_prepare_keyed(c, NULL, &k, s, err);
    if (rc == ODBOX_OK && !*s) {
        char table[ODBOX_NAME_MAX * 2 + 32], sql[512];
        odbox_dialect_eventlog_table(odbox_conn_dialect(c), eventlog, "idempotency_keys", table, sizeof table);
        snprintf(sql, sizeof sql, fmt, table);
        rc = odbox_stmt_prepare_keyed(c, sql, &k, s, err);
    }
    return rc;
}

static int copy_text(odbox_stmt *s, int col, char *out, size_t cap, odbox_error *err)
{
    const char *v = NULL;
    int is_null = 0;
    int rc = odbox_stmt_get_text(s, col, &v, &is_null, err);
    if (rc == ODBOX_OK && (is_null || strlen(v) >= cap))
        rc = odbox_fail(err, ODBOX_EDB, "idempotency key: a stored row has a bad column %d", col);
    if (rc == ODBOX_OK)
        memcpy(out, v, strlen(v) + 1);
    return rc;
}

int odbox_idem_find(odbox_conn *c, const char *eventlog, const char *ns, const char *key, odbox_idem_outcome *out,
                    int *found, odbox_error *err)
{
    memset(out, 0, sizeof *out);
    *found = 0;
    odbox_stmt *s = NULL;
    int rc = prepare(c, ODBOX_SQL_IDEM_FIND, eventlog,
                     "SELECT id, params_sha256, action_name, result FROM %s WHERE namespace = ? AND idem_key = ?", &s,
                     err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, ns, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, key, err)) == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK)
        rc = odbox_stmt_fetch(s, err);
    if (rc == 1) {
        if ((rc = copy_text(s, 1, out->action_id, sizeof out->action_id, err)) == ODBOX_OK &&
            (rc = copy_text(s, 2, out->params_sha256, sizeof out->params_sha256, err)) == ODBOX_OK &&
            (rc = dup_text(s, 3, &out->action_name, err)) == ODBOX_OK)
            rc = dup_text(s, 4, &out->result, err);
        *found = rc == ODBOX_OK;
    }
    odbox_stmt_free(&s);
    if (rc != ODBOX_OK) {
        odbox_idem_outcome_clear(out);
        odbox_error_prefix(err, rc, "reading idempotency key%s", MIGRATIONS_HINT(rc));
    }
    return rc;
}

int odbox_idem_claim_sql(const odbox_dialect *d, const char *eventlog, int select_form, char **out,
                         odbox_error *err)
{
    /* created_date is the database's time, never the writer's clock:
     * purge measures a key's age by the database's time too, and the
     * processes sharing the table may disagree */
    const char *forms[COLUMN_COUNT] = {"?", "?", "?", "?", "?", "?", d->now_sql};
    char table[ODBOX_NAME_MAX * 2 + 32];
    odbox_dialect_eventlog_table(d, eventlog, "idempotency_keys", table, sizeof table);
    char *source = odbox_sql_insert_source(1, forms, COLUMN_COUNT, select_form);
    odbox_buf b = {0};
    odbox_buf_cat(&b, "INSERT INTO ", table, " (" COLUMNS ") ", source ? source : "", (char *)NULL);
    b.oom |= !source;
    free(source);
    *out = odbox_buf_take(&b);
    return *out ? ODBOX_OK : odbox_fail(err, ODBOX_ENOMEM, "idempotency key: out of memory");
}

int odbox_idem_claim_bind(odbox_stmt *s, int *idx, const char *ns, const char *key, const odbox_idem_spend *sp,
                          odbox_error *err)
{
    int rc;
    if ((rc = odbox_stmt_bind_text(s, (*idx)++, sp->action_id, err)) != ODBOX_OK ||
        (rc = odbox_stmt_bind_text(s, (*idx)++, ns, err)) != ODBOX_OK ||
        (rc = odbox_stmt_bind_text(s, (*idx)++, key, err)) != ODBOX_OK ||
        (rc = odbox_stmt_bind_text(s, (*idx)++, sp->action_name, err)) != ODBOX_OK ||
        (rc = odbox_stmt_bind_text(s, (*idx)++, sp->params_sha256, err)) != ODBOX_OK)
        return rc;
    return odbox_stmt_bind_text(s, (*idx)++, sp->result_json, err);
}

int odbox_idem_claim(odbox_conn *c, const char *eventlog, const char *ns, const char *key,
                     const odbox_idem_spend *sp, int *taken, odbox_error *err)
{
    *taken = 0;
    odbox_sql_key k;
    odbox_sql_key_init(&k, ODBOX_SQL_IDEM_CLAIM, 1);
    odbox_sql_key_add(&k, 0, eventlog);
    odbox_stmt *s = NULL;
    int idx = 1;
    int rc = odbox_stmt_prepare_keyed(c, NULL, &k, &s, err);
    if (rc == ODBOX_OK && !s) {
        char *sql = NULL;
        if ((rc = odbox_idem_claim_sql(odbox_conn_dialect(c), eventlog, 0, &sql, err)) == ODBOX_OK)
            rc = odbox_stmt_prepare_keyed(c, sql, &k, &s, err);
        free(sql);
    }
    if (rc == ODBOX_OK && (rc = odbox_idem_claim_bind(s, &idx, ns, key, sp, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    if (rc == ODBOX_EUNIQUE)
        *taken = 1;
    else if (rc == ODBOX_ETIMEDOUT) /* the lock wait's bound: PostgreSQL's lock_timeout, InnoDB's */
        odbox_error_prefix(err, rc, "idempotency key '%.80s': another transaction holds it, uncommitted, past the "
                                    "lock wait bound (50 s unless the session set its own): nothing written; try "
                                    "again once it ended",
                           key);
    else if (rc != ODBOX_OK)
        odbox_error_prefix(err, rc, "claiming idempotency key '%.80s'%s", key, MIGRATIONS_HINT(rc));
    return rc;
}

/* InnoDB answers callers that wait on a key whose holder then rolls back
 * with a deadlock among their own duplicate-key checks: all but one of
 * them lose. The claim is the transaction's first statement, so nothing
 * else is lost: claimed again, it waits for the one that won and then
 * replays it, as on the other databases. */
#define CLAIM_DEADLOCK_TRIES 5

int odbox_idem_begin(odbox_shard *shard, const char *ns, const char *key, const odbox_idem_spend *sp,
                     odbox_conn **out, int *taken, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(shard);
    int rc;
    for (int attempt = 1;; attempt++) {
        *out = NULL;
        *taken = 0;
        rc = odbox_pool_acquire(pool, out, err);
        if (rc == ODBOX_OK && (rc = odbox_conn_begin(*out, err)) == ODBOX_ETIMEDOUT) /* SQLite: BEGIN IMMEDIATE */
            odbox_error_prefix(err, rc, "idempotency key '%.80s': another transaction holds the database's write "
                                        "lock past the wait bound: nothing written",
                               key);
        if (rc == ODBOX_OK)
            rc = odbox_idem_claim(*out, odbox_shard_eventlog(shard), ns, key, sp, taken, err);
        if (rc != ODBOX_OK)
            odbox_pool_release(pool, out); /* rolls the transaction back */
        if (rc != ODBOX_EDEADLOCK || attempt == CLAIM_DEADLOCK_TRIES)
            return rc;
        odbox_log(ODBOX_LOG_INFO, "idempotency key '%.80s': the claim lost a deadlock (attempt %d of %d); claiming "
                                  "again",
                  key, attempt, CLAIM_DEADLOCK_TRIES);
    }
}

int odbox_idem_set_result(odbox_conn *c, const char *eventlog, const char *ns, const char *key,
                          const char *result_json, odbox_error *err)
{
    odbox_stmt *s = NULL;
    int rc = prepare(c, ODBOX_SQL_IDEM_RESULT, eventlog,
                     "UPDATE %s SET result = ? WHERE namespace = ? AND idem_key = ?", &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, result_json, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, ns, err)) == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 3, key, err)) == ODBOX_OK &&
        (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && odbox_stmt_rows_affected(s) == 0)
        rc = odbox_fail(err, ODBOX_EDB, "idempotency key '%.80s': its row in this transaction was not found", key);
    odbox_stmt_free(&s);
    if (rc != ODBOX_OK)
        odbox_error_prefix(err, rc, "writing the idempotency key's result");
    return rc;
}

int odbox_idem_match(const odbox_idem_outcome *o, const char *key, const char *action_name,
                     const char *params_sha256, odbox_error *err)
{
    /* A row without a name was written before V15 (or by a build before
     * it, during a rolling deploy): its params alone decide, as they did
     * then, so that no retry of a request that build took is refused. */
    if (o->action_name && strcmp(o->action_name, action_name))
        return odbox_fail(err, ODBOX_EUNIQUE,
                          "idempotency key '%.80s' was used by action %.100s (action_id %s), not by %.100s: a key "
                          "stands for one action; refused, nothing written",
                          key, o->action_name, o->action_id, action_name);
    if (!strcmp(o->params_sha256, params_sha256))
        return ODBOX_OK;
    return odbox_fail(err, ODBOX_EUNIQUE,
                      "idempotency key '%.80s' was used with other parameters (by action_id %s; parameters are "
                      "compared by the SHA-256 of their JSON text): refused, nothing written",
                      key, o->action_id);
}

int odbox_idem_lookup(odbox_shard *shard, const char *ns, const char *key, const char *action_name,
                      const char *params_sha256, odbox_idem_outcome *out, int *found, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(shard);
    odbox_conn *c = NULL;
    memset(out, 0, sizeof *out);
    *found = 0;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    rc = odbox_idem_find(c, odbox_shard_eventlog(shard), ns, key, out, found, err);
    odbox_pool_release(pool, &c);
    if (rc == ODBOX_OK && *found && (rc = odbox_idem_match(out, key, action_name, params_sha256, err)) != ODBOX_OK)
        odbox_idem_outcome_clear(out);
    return rc;
}

int odbox_idem_id_used(odbox_shard *shard, const char *action_id, int *used, odbox_error *err)
{
    odbox_pool *pool = odbox_shard_primary(shard);
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    *used = 0;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK && (rc = prepare(c, ODBOX_SQL_IDEM_ID, odbox_shard_eventlog(shard),
                                        "SELECT id FROM %s WHERE id = ?", &s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 1, action_id, err)) == ODBOX_OK &&
        (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) >= 0) {
        *used = rc == 1;
        rc = ODBOX_OK;
    }
    odbox_stmt_free(&s);
    odbox_pool_release(pool, &c);
    if (rc != ODBOX_OK)
        odbox_error_prefix(err, rc, "reading the idempotency keys by action id");
    return rc;
}
