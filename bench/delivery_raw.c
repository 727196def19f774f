/* odbox-bench-delivery --mode raw and --mode due-sql (see
 * delivery_bench.c's head): the claim work of the handling done by a plain
 * client on odbox's db layer, and the SQL a claim runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "delivery_bench.h"

/* The handling's due read (src/delivery_claim.c, due_sql) for one
 * handler name without a limit, with the order checks (an older
 * unfinished row, a row in flight) every row passes when its order_key is
 * NULL, and the database's now:
 * variant -1 where the due index is partial, else 0 (PENDING) or 1
 * (FAILED). The table is aliased n and ORDER BY names its column (the
 * select list's text cast of next_retry_at has the same name). */
static char *due_read_sql(const odbox_dialect *d, const char *table, int variant)
{
    static const char *const cols[] = {"id", "event_id", "handler_name", "namespace", "action_id", "action_name",
                                       "action_params", "started_date", "completion_date", "model_id",
                                       "model_type", "event_type", "payload", "event_date", "attempts",
                                       "created_date", "next_retry_at", "order_key", NULL};
    static const char *const states[] = {"PENDING", "FAILED"};
    size_t cap = 4096;
    char *sql = malloc(cap);
    if (!sql)
        return NULL;
    size_t n = (size_t)snprintf(sql, cap, "SELECT ");
    for (int i = 0; cols[i]; i++) {
        const char *open = "", *close = "";
        if (strstr(cols[i], "date") || strstr(cols[i], "retry"))
            open = d->timestamp_read_open ? d->timestamp_read_open : "",
            close = d->timestamp_read_open ? d->timestamp_read_close : "";
        n += (size_t)snprintf(sql + n, cap - n, "%s%s%s%s", i ? ", " : "", open, cols[i], close);
    }
    if (d->timestamp_read_open)
        n += (size_t)snprintf(sql + n, cap - n, ", %s%s%s", d->timestamp_read_open, d->now_sql,
                              d->timestamp_read_close);
    else
        n += (size_t)snprintf(sql + n, cap - n, ", %s", d->now_sql);
    n += (size_t)snprintf(sql + n, cap - n, " FROM %s n WHERE state IN ('PENDING', 'FAILED')", table);
    if (variant >= 0)
        n += (size_t)snprintf(sql + n, cap - n, " AND state = '%s'", states[variant]);
    n += (size_t)snprintf(sql + n, cap - n,
                          " AND handler_name = ? AND (n.order_key IS NULL OR (NOT EXISTS (SELECT 1 FROM %s o%s WHERE "
                          "o.handler_name = n.handler_name AND o.order_key = n.order_key AND (o.event_date < "
                          "n.event_date OR (o.event_date = n.event_date AND o.event_id < n.event_id)))",
                          table, d->order_probe_hint ? d->order_probe_hint : "");
    if (!d->claim_order_recheck) /* else odbox's recheck looks for a row in flight */
        n += (size_t)snprintf(sql + n, cap - n,
                              " AND NOT EXISTS (SELECT 1 FROM %s o%s WHERE o.handler_name = n.handler_name AND "
                              "o.order_key = n.order_key AND o.order_lease_until > %s)",
                              table, d->order_lease_probe_hint ? d->order_lease_probe_hint : "", d->now_sql);
    snprintf(sql + n, cap - n,
             ")) AND next_retry_at <= ? AND (lease_until IS NULL OR lease_until <= %s) ORDER BY n.next_retry_at "
             "LIMIT ?%s",
             d->now_sql, d->claim_suffix ? d->claim_suffix : "");
    return sql;
}

int mode_due_sql(const opts *o, odbox_error *e)
{
    const char *name = !strncmp(o->dsn, "postgres", 8) ? "postgresql"
                       : !strncmp(o->dsn, "mariadb", 7) ? "mariadb"
                       : !strncmp(o->dsn, "mysql", 5)   ? "mysql"
                                                        : "sqlite";
    const odbox_dialect *d = odbox_dialect_find(name);
    char table[160];
    if (!d || odbox_dialect_eventlog_table(d, o->eventlog, "event_notifications", table, sizeof table) != ODBOX_OK)
        return bench_fail(e, ODBOX_EINVAL, "no dialect for this DSN");
    if (d->delivery_isolation_sql)
        printf("isolation\t%s\n", d->delivery_isolation_sql);
    if (d->claim_begin_sql)
        printf("begin\t%s\n", d->claim_begin_sql);
    for (int v = d->has_partial_indexes ? -1 : 0; v < (d->has_partial_indexes ? 0 : 2); v++) {
        char *sql = due_read_sql(d, table, v);
        if (!sql)
            return bench_fail(e, ODBOX_ENOMEM, "out of memory");
        printf("due\t%s\n", sql);
        free(sql);
    }
    return ODBOX_OK;
}

/* A claim's transaction begun as odbox begins it (odbox_delivery_begin in
 * src/delivery_claim.c): the dialect's isolation for the delivery's
 * transactions, the begin, then its claim_begin_sql. */
static int claim_begin(odbox_conn *c, odbox_error *e)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    int rc = d->delivery_isolation_sql ? odbox_conn_exec(c, d->delivery_isolation_sql, e) : ODBOX_OK;
    if (rc == ODBOX_OK)
        rc = odbox_conn_begin(c, e);
    if (rc == ODBOX_OK && d->claim_begin_sql && (rc = odbox_conn_exec(c, d->claim_begin_sql, e)) != ODBOX_OK)
        odbox_conn_rollback(c, NULL);
    return rc;
}

/* A statement cached by its number of ids (the batch's: kept), else
 * prepared for the round. */
static int prepare_ids(odbox_conn *c, const char *head, const char *tail, const odbox_dialect *d, size_t k,
                       odbox_stmt **out, odbox_error *e)
{
    size_t cap = strlen(head) + strlen(tail) + k * (strlen(d->uuid_param) + 2) + 16;
    char *sql = malloc(cap);
    if (!sql)
        return bench_fail(e, ODBOX_ENOMEM, "out of memory");
    size_t n = (size_t)snprintf(sql, cap, "%s", head);
    for (size_t i = 0; i < k; i++)
        n += (size_t)snprintf(sql + n, cap - n, "%s%s", i ? ", " : "", d->uuid_param);
    snprintf(sql + n, cap - n, "%s", tail);
    int rc = odbox_stmt_prepare(c, sql, out, e);
    free(sql);
    return rc;
}

/* The raw client: see --mode raw at the top. */
int mode_raw(const opts *o, odbox_error *e)
{
    odbox_conn *c = NULL;
    int rc = odbox_conn_open(o->dsn, &c, e);
    if (rc != ODBOX_OK)
        return rc;
    const odbox_dialect *d = odbox_conn_dialect(c);
    long batch = o->hbatch ? o->hbatch : 100, workers = o->workers ? o->workers : 8;
    char table[160];
    odbox_dialect_eventlog_table(d, o->eventlog, "event_notifications", table, sizeof table);
    int nvar = d->has_partial_indexes ? 1 : 2;
    odbox_stmt *read[2] = {NULL, NULL}, *claim = NULL, *done = NULL;
    char head[512];
    for (int v = 0; v < nvar && rc == ODBOX_OK; v++) {
        char *sql = due_read_sql(d, table, nvar == 1 ? -1 : v);
        rc = sql ? odbox_stmt_prepare(c, sql, &read[v], e) : bench_fail(e, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    snprintf(head, sizeof head, "UPDATE %s SET lease_owner = ?, lease_until = ?, next_retry_at = ? WHERE id IN (",
             table);
    if (rc == ODBOX_OK)
        rc = prepare_ids(c, head, ")", d, (size_t)batch, &claim, e);
    char head2[512];
    snprintf(head2, sizeof head2,
             "UPDATE %s SET state = 'SUCCEEDED', attempts = attempts + 1, updated_date = ?, next_retry_at = ?, "
             "order_key = NULL, lease_owner = NULL, lease_until = NULL, limit_lease_until = NULL, order_lease_until = NULL "
             "WHERE id IN (",
             table);
    const char *tail2 = ") AND state NOT IN ('SUCCEEDED', 'EXPIRED') AND attempts = ? AND lease_owner = ?";
    if (rc == ODBOX_OK)
        rc = prepare_ids(c, head2, tail2, d, (size_t)batch, &done, e);
    char (*ids)[40] = calloc((size_t)batch * 2, sizeof *ids);
    if (!ids && rc == ODBOX_OK)
        rc = bench_fail(e, ODBOX_ENOMEM, "out of memory");
    if (rc == ODBOX_OK)
        wait_go(o);
    double u0, s0, u1, s1;
    cpu_seconds(&u0, &s0);
    int64_t start = wall_ns(), last = 0;
    long succeeded = 0, rounds = 0, stale = 0, retries = 0;
    while (rc == ODBOX_OK) {
        char token[ODBOX_UUID_LEN + 1];
        odbox_uuid_v4(token);
        int64_t now = wall_ns() / 1000;
        size_t n = 0;
        if ((rc = claim_begin(c, e)) != ODBOX_OK)
            break;
        for (int v = 0; v < nvar && rc == ODBOX_OK; v++) {
            odbox_stmt *s = read[v];
            odbox_stmt_clear_binds(s);
            if ((rc = odbox_stmt_bind_text(s, 1, "bench-1", e)) == ODBOX_OK &&
                (rc = odbox_stmt_bind_timestamp(s, 2, now, e)) == ODBOX_OK &&
                (rc = odbox_stmt_bind_int64(s, 3, batch, e)) == ODBOX_OK)
                rc = odbox_stmt_execute(s, e);
            while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, e)) == 1) {
                rc = ODBOX_OK;
                /* every column read, as the handling reads them */
                for (int col = 1; col <= odbox_stmt_column_count(s) && rc == ODBOX_OK; col++) {
                    const char *val;
                    int null;
                    if ((rc = odbox_stmt_get_text(s, col, &val, &null, e)) == ODBOX_OK && col == 1 &&
                        n < (size_t)batch * 2)
                        snprintf(ids[n++], sizeof ids[0], "%s", val);
                }
            }
            if (rc > 0)
                rc = ODBOX_OK;
        }
        if (n > (size_t)batch) /* two states: the first batch (by due time not merged: a raw client's choice) */
            n = (size_t)batch;
        odbox_stmt *cl = claim, *own = NULL;
        if (rc == ODBOX_OK && n && n != (size_t)batch)
            rc = prepare_ids(c, head, ")", d, n, &own, e), cl = own;
        if (rc == ODBOX_OK && n) {
            odbox_stmt_clear_binds(cl);
            int idx = 1;
            if ((rc = odbox_stmt_bind_text(cl, idx++, token, e)) == ODBOX_OK &&
                (rc = odbox_stmt_bind_timestamp(cl, idx++, now + 300000000, e)) == ODBOX_OK)
                rc = odbox_stmt_bind_timestamp(cl, idx++, now + 300000000, e);
            for (size_t i = 0; i < n && rc == ODBOX_OK; i++)
                rc = odbox_stmt_bind_uuid(cl, idx++, ids[i], e);
            if (rc == ODBOX_OK)
                rc = odbox_stmt_execute(cl, e);
        }
        odbox_stmt_free(&own);
        if (rc == ODBOX_OK)
            rc = odbox_conn_commit(c, e);
        if (rc != ODBOX_OK) {
            odbox_conn_rollback(c, NULL);
            if (rc == ODBOX_EDEADLOCK) { /* 40001: the round again at once, as a client would */
                retries++;
                rc = ODBOX_OK;
                continue;
            }
            break;
        }
        rounds++;
        if (n == 0)
            break;
        if (o->handler_ms)
            sleep_ms(o->handler_ms * (((long)n + workers - 1) / workers));
        odbox_stmt *dn = done;
        if (n != (size_t)batch)
            rc = prepare_ids(c, head2, tail2, d, n, &own, e), dn = own;
        if (rc == ODBOX_OK) {
            odbox_stmt_clear_binds(dn);
            int idx = 1;
            int64_t finished = wall_ns() / 1000;
            if ((rc = odbox_stmt_bind_timestamp(dn, idx++, finished, e)) == ODBOX_OK)
                rc = odbox_stmt_bind_timestamp(dn, idx++, finished, e);
            for (size_t i = 0; i < n && rc == ODBOX_OK; i++)
                rc = odbox_stmt_bind_uuid(dn, idx++, ids[i], e);
            if (rc == ODBOX_OK && (rc = odbox_stmt_bind_int64(dn, idx++, 0, e)) == ODBOX_OK &&
                (rc = odbox_stmt_bind_text(dn, idx++, token, e)) == ODBOX_OK)
                rc = odbox_stmt_execute(dn, e);
            for (int again = 0; rc == ODBOX_EDEADLOCK && again < 100; again++) { /* the outcome again */
                retries++;
                rc = odbox_stmt_execute(dn, e);
            }
        }
        if (rc == ODBOX_OK) {
            int64_t changed = odbox_stmt_rows_affected(dn);
            succeeded += changed;
            stale += (long)n - (long)changed;
            last = wall_ns();
        }
        odbox_stmt_free(&own);
    }
    cpu_seconds(&u1, &s1);
    atomic_fetch_add(&log_retries, retries);
    if (rc == ODBOX_OK)
        print_result("raw", succeeded, rounds, 1, stale, retries, start, last, u1 - u0 + s1 - s0);
    free(ids);
    for (int v = 0; v < 2; v++)
        odbox_stmt_free(&read[v]);
    odbox_stmt_free(&claim);
    odbox_stmt_free(&done);
    odbox_conn_close(&c);
    return rc;
}
