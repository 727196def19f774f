/* odbox — the claim of a handling round: due rows of the handlers served
 * here, read with a locking read that skips rows other rounds hold, and
 * marked with the round's token and a lease deadline in database time.
 * Handlers with a concurrency limit are claimed one at a time across the
 * cluster (their subscription's row lock) up to the room their live
 * leases leave; ordered handlers' rows wait for the older rows of their
 * model_id. A call's run (on a worker thread) and release are here too:
 * the claim makes the calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "delivery_round.h"
#include "notifications_internal.h"
#include "registry_internal.h"
#include "odbox/uuid.h"

/* how many times a claim that lost a deadlock is tried in all */
#define CLAIM_TRIES 3

/* ---- one call, on a worker thread --------------------------------------------- */

#define RETRY_AFTER_MAX_MS (INT64_C(366) * 86400 * 1000)

/* The delay the handler running on this thread asked for
 * (odbox_handler_retry_after): NOT_IN_CALL outside a call, NOT_ASKED
 * until it asks. */
enum { NOT_IN_CALL = -2, NOT_ASKED = -1 };
static _Thread_local int64_t asked_retry_us = NOT_IN_CALL;

static void hcall_run(odbox_work *w)
{
    call *c = (call *)w;
    odbox_error e = {0};
    asked_retry_us = NOT_ASKED;
    int64_t t0 = odbox_mono_us();
    int rc = c->fn(&c->env, c->user, &e);
    int64_t took = odbox_mono_us() - t0;
    c->retry_asked = asked_retry_us >= 0;
    c->retry_after_us = asked_retry_us;
    asked_retry_us = NOT_IN_CALL;
    odbox_hcall_done(c, rc, &e, took);
}

int odbox_handler_retry_after(int64_t delay_ms, odbox_error *err)
{
    if (asked_retry_us == NOT_IN_CALL)
        return odbox_fail(err, ODBOX_ESTATE,
                          "handler retry after: not during a handler's call on its thread (a batch's included)");
    if (delay_ms < 0 || delay_ms > RETRY_AFTER_MAX_MS)
        return odbox_fail(err, ODBOX_EINVAL, "handler retry after: %lld ms is not in 0 .. 366 days",
                          (long long)delay_ms);
    asked_retry_us = delay_ms * 1000;
    return ODBOX_OK;
}

void odbox_hcall_done(call *c, int rc, const odbox_error *e, int64_t took_us)
{
    c->duration_us = took_us;
    c->rc = rc == 0 ? 0 : rc < 0 ? rc : ODBOX_EINVAL;
    snprintf(c->message, sizeof c->message, "%.255s", e && e->message[0] ? e->message : odbox_strerror(c->rc));
    atomic_store(&c->finished, 1);
}

void odbox_hcall_release(odbox_work *w)
{
    call *c = (call *)w;
    if (atomic_fetch_sub(&c->w.refs, 1) != 1)
        return;
    json_object_put(c->params);
    json_object_put(c->payload);
    free(c->text);
    free(c);
}

/* ---- reading -------------------------------------------------------------------- */

/* The select list read back: timestamps as the dialect reads them best;
 * prefix qualifies the columns ("" or "u."). */
static void select_list(odbox_buf *b, const odbox_dialect *d, const char *prefix)
{
    static const char *const cols[] = {"id", "event_id", "handler_name", "namespace", "action_id", "action_name",
                                       "action_params", "started_date", "completion_date", "model_id",
                                       "model_type", "event_type", "payload", "event_date", "attempts",
                                       "created_date"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        char col[64];
        snprintf(col, sizeof col, "%s%s", prefix, cols[i]);
        odbox_buf_append(b, i ? ", " : "");
        if (strstr(cols[i], "date"))
            odbox_ops_ts_col(b, d, col);
        else
            odbox_buf_append(b, col);
    }
}

/* Name f of handler e: 0 its name, then its former names (1 + nformer
 * in all). */
static const char *name_of(const odbox_hentry *e, size_t f)
{
    return f ? e->former[f - 1] : e->name;
}

/* The rows a read for one name of a handler takes: that name and the
 * event types this process's handler declares, so that during a rolling
 * deploy that adds a type to a handler, a process of the older version
 * leaves that type's rows to one that declares it, instead of calling
 * its handler with a type it never took (and marking the row SUCCEEDED
 * without it being handled). The fan-out writes rows for every type a
 * subscription ever declared. handler_name = ?: the due index leads with
 * it (V17), so the read steps over no other handler's rows. */
static void served_sql(odbox_buf *b, const odbox_hentry *e)
{
    odbox_buf_append(b, "handler_name = ? AND event_type IN (");
    odbox_buf_list(b, "?", e->ntypes);
    odbox_buf_append(b, ")");
}

/* Binds served_sql's parameters for name f of e from *idx. */
static int served_bind(const odbox_hentry *e, size_t f, odbox_stmt *s, int *idx, odbox_error *err)
{
    int rc = odbox_stmt_bind_text(s, (*idx)++, name_of(e, f), err);
    for (size_t t = 0; t < e->ntypes && rc == ODBOX_OK; t++)
        rc = odbox_stmt_bind_text(s, (*idx)++, e->types[t], err);
    return rc;
}

/* The look for a row o of n's handler and order_key (hint: the dialect's
 * index hint, may be NULL). A handler renamed (former_names) is one order
 * under all its names: its backlog under a former name holds back the
 * newer rows the fan-out writes under the new one (before, those
 * overtook it). One term per handler with former names (same_order_key,
 * same_order_bind); the others' probe is as it was. */
static void same_order(odbox_buf *b, const char *hint, const char *table, const odbox_handlers *hs)
{
    odbox_buf_cat(b, "SELECT 1 FROM ", table, " o", hint ? hint : "", " WHERE (o.handler_name = n.handler_name",
                  (char *)NULL);
    for (size_t k = 0; k < hs->n; k++) {
        if (!hs->v[k].nformer)
            continue;
        odbox_buf_append(b, " OR (n.handler_name IN (");
        odbox_buf_list(b, "?", 1 + hs->v[k].nformer);
        odbox_buf_append(b, ") AND o.handler_name IN (");
        odbox_buf_list(b, "?", 1 + hs->v[k].nformer);
        odbox_buf_append(b, "))");
    }
    odbox_buf_append(b, ") AND o.order_key = n.order_key");
}

/* ... one older than n (event_date, then the event id), unfinished (its
 * order_key set): a row that holds n back. */
static void older_row(odbox_buf *b, const odbox_dialect *d, const char *table, const odbox_handlers *hs)
{
    same_order(b, d->order_probe_hint, table, hs);
    odbox_buf_append(b, " AND (o.event_date < n.event_date OR (o.event_date = n.event_date AND o.event_id < n.event_id))");
}

/* ... one whose call runs (its order lease holds), whatever its age: it
 * holds n back too. n became visible after that row was claimed (its
 * action committed late, or a requeue or replay brought it back); before
 * order_lease_until (V18) both were called at once. now: the database's
 * (db_time) or bound. */
static void leased_row(odbox_buf *b, const odbox_dialect *d, const char *table, const odbox_handlers *hs,
                       int db_time)
{
    same_order(b, d->order_lease_probe_hint, table, hs);
    odbox_buf_cat(b, " AND o.order_lease_until > ", db_time ? d->now_sql : "?", (char *)NULL);
}

/* The shape of same_order's text, in a statement's cache key. */
static void same_order_key(odbox_sql_key *key, const odbox_handlers *hs)
{
    for (size_t k = 0; k < hs->n; k++)
        if (hs->v[k].nformer)
            odbox_sql_key_add_count(key, 3, hs->v[k].nformer);
}

/* Binds same_order's parameters (older_row's) from *idx. */
static int same_order_bind(const odbox_handlers *hs, odbox_stmt *s, int *idx, odbox_error *err)
{
    int rc = ODBOX_OK;
    for (size_t k = 0; k < hs->n && rc == ODBOX_OK; k++)
        for (int twice = 0; twice < 2 && hs->v[k].nformer && rc == ODBOX_OK; twice++) {
            rc = odbox_stmt_bind_text(s, (*idx)++, hs->v[k].name, err);
            for (size_t f = 0; f < hs->v[k].nformer && rc == ODBOX_OK; f++)
                rc = odbox_stmt_bind_text(s, (*idx)++, hs->v[k].former[f], err);
        }
    return rc;
}

/* Binds leased_row's parameters (same_order's, then now unless db_time)
 * from *idx. */
static int leased_bind(const odbox_handlers *hs, odbox_stmt *s, int db_time, int64_t now, int *idx,
                       odbox_error *err)
{
    int rc = same_order_bind(hs, s, idx, err);
    return rc == ODBOX_OK && !db_time ? odbox_stmt_bind_timestamp(s, (*idx)++, now, err) : rc;
}

/* Due rows that no round holds (lease_until NULL or past), in
 * next_retry_at order, locked for the claim that follows (the dialect's
 * claim_suffix: FOR UPDATE SKIP LOCKED, so that rounds of other processes
 * take other rows; SQLite has one writer), of one name of handler e and
 * its types (served_sql).
 * Where the due index is partial ((handler_name, next_retry_at), for the
 * two states) one ordered scan finds them (variant -1); where it holds
 * the state after the name, one statement per state (variant 0: PENDING,
 * 1: FAILED). A single read of several names or states would sort every
 * due row of them in each round, and a locking read may not be a UNION.
 * A row of an ordered subscription
 * (its order_key, the model_id, set) waits while an older row of its
 * handler has the same order_key, that is, is unfinished (older:
 * event_date, then the event id, which follows emission order within an
 * action), and while a row of its model is in flight (leased_row; where
 * the dialect rechecks the order, in the recheck only: measured on
 * MariaDB, in both it cost ordered claims 10-15% more); the order is the
 * subscription's, recorded in the database, so every process claims by
 * it whatever its own options say. The columns:
 * select_list's 16, next_retry_at, order_key, and with db_time the
 * database's now.
 * ORDER BY names the table's column: the select list's text cast of
 * next_retry_at has its name, and PostgreSQL would sort by that output
 * column instead of reading the index in order. */
static char *due_sql(const odbox_dialect *d, const char *table, int variant, int db_time,
                     const odbox_handlers *hs, const odbox_hentry *e)
{
    static const char *const states[] = {"PENDING", "FAILED"};
    odbox_buf b = {0};
    odbox_buf_append(&b, "SELECT ");
    select_list(&b, d, "");
    odbox_buf_append(&b, ", ");
    odbox_ops_ts_col(&b, d, "next_retry_at");
    odbox_buf_append(&b, ", order_key");
    if (db_time) {
        odbox_buf_append(&b, ", ");
        odbox_ops_ts_col(&b, d, d->now_sql);
    }
    odbox_buf_cat(&b, " FROM ", table, " n WHERE state IN ('PENDING', 'FAILED')", (char *)NULL);
    if (variant >= 0)
        odbox_buf_appendf(&b, " AND state = '%s'", states[variant]);
    odbox_buf_append(&b, " AND ");
    served_sql(&b, e);
    odbox_buf_cat(&b, " AND (n.order_key IS NULL OR (NOT EXISTS (", (char *)NULL);
    older_row(&b, d, table, hs);
    if (!d->claim_order_recheck) { /* else the recheck looks */
        odbox_buf_append(&b, ") AND NOT EXISTS (");
        leased_row(&b, d, table, hs, db_time);
    }
    odbox_buf_append(&b, ")))");
    odbox_buf_cat(&b, " AND next_retry_at <= ", db_time ? d->now_sql : "?",
                  " AND (lease_until IS NULL OR lease_until <= ", db_time ? d->now_sql : "?",
                  ") ORDER BY n.next_retry_at LIMIT ?", d->claim_suffix, (char *)NULL);
    return odbox_buf_take(&b);
}

/* Copies the row's text columns into one allocation; env points into it. */
static int take_row(hround *h, odbox_stmt *s, call *c, odbox_error *err)
{
    static const int text_cols[] = {1, 2, 3, 4, 5, 6, 10, 11, 12};
    const char *v[sizeof text_cols / sizeof text_cols[0]];
    int null[sizeof text_cols / sizeof text_cols[0]];
    size_t total = 0;
    int rc = ODBOX_OK;
    for (size_t i = 0; i < sizeof text_cols / sizeof text_cols[0] && rc == ODBOX_OK; i++)
        if ((rc = odbox_stmt_get_text(s, text_cols[i], &v[i], &null[i], err)) == ODBOX_OK)
            total += null[i] ? 0 : strlen(v[i]) + 1;
    if (rc != ODBOX_OK)
        return rc;
    if (!(c->text = malloc(total ? total : 1)))
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    const char *at[sizeof text_cols / sizeof text_cols[0]];
    char *p = c->text;
    for (size_t i = 0; i < sizeof text_cols / sizeof text_cols[0]; i++) {
        at[i] = NULL;
        if (!null[i]) {
            size_t len = strlen(v[i]) + 1;
            memcpy(p, v[i], len);
            at[i] = p;
            p += len;
        }
    }
    odbox_envelope *e = &c->env;
    e->notification_id = at[0];
    e->event_id = at[1];
    e->handler_name = at[2];
    e->ns = at[3];
    e->action_id = at[4];
    e->action_name = at[5];
    e->model_id = at[6];
    e->model_type = at[7];
    e->event_type = at[8];
    e->shard = h->ds->id;
    int64_t attempts = 0, created = 0;
    const char *params = NULL, *payload = NULL;
    int payload_null = 1;
    if ((rc = odbox_stmt_get_timestamp(s, 8, &e->started_us, NULL, err)) != ODBOX_OK ||
        (rc = odbox_stmt_get_timestamp(s, 9, &e->completion_us, NULL, err)) != ODBOX_OK ||
        (rc = odbox_stmt_get_timestamp(s, 14, &e->event_us, NULL, err)) != ODBOX_OK ||
        (rc = odbox_stmt_get_int64(s, 15, &attempts, NULL, err)) != ODBOX_OK ||
        (rc = odbox_stmt_get_timestamp(s, 16, &created, NULL, err)) != ODBOX_OK ||
        (rc = odbox_stmt_get_text(s, 7, &params, NULL, err)) != ODBOX_OK)
        return rc;
    c->attempts = (int)attempts;
    e->attempt = c->attempts + 1;
    c->deadline_us = (e->event_us > created ? e->event_us : created) + h->d->cfg.retention_us;
    /* a row odbox did not write may hold what json-c cannot read: that
     * row fails, not the round */
    enum json_tokener_error params_error = json_tokener_success, payload_error = json_tokener_success;
    c->params = json_tokener_parse_verbose(params ? params : "", &params_error);
    if ((rc = odbox_stmt_get_text(s, 13, &payload, &payload_null, err)) != ODBOX_OK)
        return rc;
    if (!payload_null)
        c->payload = json_tokener_parse_verbose(payload, &payload_error);
    e->action_params = c->params;
    e->payload = c->payload;
    if (!c->params || (!payload_null && !c->payload)) {
        c->skip = NO_CALL_BAD_ROW;
        snprintf(c->why, sizeof c->why, "the row's %s cannot be read as JSON (%s)", c->params ? "payload" : "action_params",
                 json_tokener_error_desc(c->params ? payload_error : params_error));
    } else if (!e->notification_id || !e->event_id || !e->handler_name || !odbox_uuid_is_valid(e->notification_id)) {
        c->skip = NO_CALL_BAD_ROW;
        snprintf(c->why, sizeof c->why, "the row's id, event id or handler name is missing or not valid");
    }
    return ODBOX_OK;
}

/* The rows of s (select_list's columns, next_retry_at, and for a claim
 * order_key and with db_now the database's now), at most limit, as calls
 * appended to h->calls. */
static int fetch_calls(hround *h, odbox_stmt *s, size_t limit, int limited, int claim, int64_t *db_now,
                       odbox_error *err)
{
    int rc = ODBOX_OK;
    for (size_t got = 0; got < limit && (rc = odbox_stmt_fetch(s, err)) == 1; got++) {
        call *cl = calloc(1, sizeof *cl);
        if (!cl)
            return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        h->calls[h->n++] = cl;
        cl->w.run = hcall_run;
        cl->w.release = odbox_hcall_release;
        atomic_init(&cl->w.refs, 1);
        atomic_init(&cl->finished, 0);
        cl->handler = -1;
        cl->bucket = -1;
        cl->limited = limited;
        const char *order_key = NULL;
        int unordered = 1;
        if ((rc = take_row(h, s, cl, err)) == ODBOX_OK)
            rc = odbox_stmt_get_timestamp(s, 17, &cl->due_us, NULL, err);
        if (rc == ODBOX_OK && claim && (rc = odbox_stmt_get_text(s, 18, &order_key, &unordered, err)) == ODBOX_OK)
            cl->ordered = !unordered;
        if (rc == ODBOX_OK && db_now)
            rc = odbox_stmt_get_timestamp(s, 19, db_now, NULL, err);
        if (rc != ODBOX_OK)
            return rc;
    }
    return rc < 0 ? rc : ODBOX_OK;
}

/* One locking read of at most limit due rows of name f of handler k
 * (variant: see due_sql), appended to h->calls; *db_now gets the
 * database's time when it is read. */
static int read_due(hround *h, odbox_conn *c, size_t k, size_t f, int variant, int limit, int64_t now,
                    int64_t *db_now, odbox_error *err)
{
    odbox_delivery *d = h->d;
    const odbox_hentry *e = &d->h->v[k];
    odbox_sql_key key;
    odbox_sql_key_init(&key, SQL_DUE_READ, e->ntypes);
    odbox_sql_key_add_count(&key, variant + 1, (size_t)d->db_time);
    same_order_key(&key, d->h);
    odbox_sql_key_add(&key, 0, h->table);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        char *sql = due_sql(h->dialect, h->table, variant, d->db_time, d->h, e);
        rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    int idx = 1;
    if (rc == ODBOX_OK)
        rc = served_bind(e, f, s, &idx, err);
    if (rc == ODBOX_OK)
        rc = same_order_bind(d->h, s, &idx, err);
    if (rc == ODBOX_OK && !h->dialect->claim_order_recheck)
        rc = leased_bind(d->h, s, d->db_time, now, &idx, err);
    for (int t = 0; t < 2 && rc == ODBOX_OK && !d->db_time; t++) /* next_retry_at, lease_until */
        rc = odbox_stmt_bind_timestamp(s, idx++, now, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_int64(s, idx++, limit, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    h->rd->statements++;
    if (rc == ODBOX_OK)
        rc = fetch_calls(h, s, (size_t)limit, e->options.max_in_flight > 0, 1, d->db_time ? db_now : NULL, err);
    odbox_stmt_free(&s);
    return rc;
}

/* The room handler k's limit leaves: max_in_flight less its rows whose
 * limited lease holds (limit_lease_until, set by the claims of limited
 * handlers only), counted after an UPDATE of its subscription's row,
 * whose lock makes the claims of a limited handler take turns across the
 * cluster until this transaction ends. */
static int limit_room(hround *h, odbox_conn *c, size_t k, int64_t now, int *room, odbox_error *err)
{
    odbox_delivery *d = h->d;
    const odbox_dialect *dl = h->dialect;
    char subs[ODBOX_NAME_MAX * 2 + 32];
    odbox_dialect_eventlog_table(dl, odbox_shard_eventlog(h->ds->shard), "subscriptions", subs, sizeof subs);
    const odbox_hentry *e = &d->h->v[k];
    size_t nnames = 1 + e->nformer;
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", subs, " SET name = name WHERE name = ?", (char *)NULL);
    char *lock = odbox_buf_take(&b);
    odbox_buf_cat(&b, "SELECT COUNT(*) FROM ", h->table, " WHERE handler_name IN (", (char *)NULL);
    odbox_buf_list(&b, "?", nnames);
    odbox_buf_cat(&b, ") AND limit_lease_until > ", d->db_time ? dl->now_sql : "?", (char *)NULL);
    char *count = odbox_buf_take(&b);
    odbox_stmt *s = NULL;
    int rc = lock && count ? odbox_stmt_prepare(c, lock, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, e->name, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_prepare(c, count, &s, err);
    int idx = 1;
    for (size_t f = 0; f < nnames && rc == ODBOX_OK; f++)
        rc = odbox_stmt_bind_text(s, idx++, name_of(e, f), err);
    if (rc == ODBOX_OK && !d->db_time)
        rc = odbox_stmt_bind_timestamp(s, idx++, now, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    int64_t held = 0;
    if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
        rc = odbox_stmt_get_int64(s, 1, &held, NULL, err);
    odbox_stmt_free(&s);
    h->rd->statements += 2;
    free(lock);
    free(count);
    /* this process's hung calls of it hold their threads still, their
     * rows' leases ended by their outcomes */
    int64_t left = e->options.max_in_flight - held - odbox_workers_hung(d->workers, (int)k);
    *room = left > 0 ? (int)left : 0;
    return rc < 0 ? rc : ODBOX_OK;
}

/* Where the dialect asks for it (claim_order_recheck), the rows read of
 * ordered subscriptions that an older unfinished row of their model, or a
 * row of it in flight, holds back, looked for again in a statement of its
 * own, whose snapshot holds every row the locking read saw: those rows
 * are left (still locked by this transaction, so no other round takes
 * them before it ends) and due for a later round. Seen on MariaDB 10.11:
 * rows of two events of one model, committed by a fan-out while a due
 * read ran, both came back to it (the newer row's subquery did not see
 * the older row). */
static int recheck_order(hround *h, odbox_conn *c, int64_t now, odbox_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < h->n; i++)
        n += h->calls[i]->ordered;
    if (!n || !h->dialect->claim_order_recheck)
        return ODBOX_OK;
    int db_time = h->d->db_time;
    size_t nolder = 0; /* older_row's parameters, and leased_row's */
    for (size_t k = 0; k < h->d->h->n; k++)
        nolder += h->d->h->v[k].nformer ? 2 * 2 * (1 + h->d->h->v[k].nformer) : 0;
    size_t per = (size_t)h->dialect->max_params - 2 - nolder, next = 0;
    int rc = ODBOX_OK;
    for (size_t at = 0; at < n && rc == ODBOX_OK; at += per) {
        size_t k = n - at < per ? n - at : per;
        odbox_sql_key key;
        odbox_sql_key_init(&key, SQL_ORDER_RECHECK, k);
        same_order_key(&key, h->d->h);
        odbox_sql_key_add(&key, 0, h->table);
        odbox_stmt *s = NULL;
        rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
        if (rc == ODBOX_OK && !s) {
            odbox_buf b = {0};
            odbox_buf_cat(&b, "SELECT n.id FROM ", h->table, " n WHERE n.id IN (", (char *)NULL);
            odbox_buf_list(&b, h->dialect->uuid_param, k);
            odbox_buf_append(&b, ") AND (EXISTS (");
            older_row(&b, h->dialect, h->table, h->d->h);
            odbox_buf_append(&b, ") OR EXISTS (");
            leased_row(&b, h->dialect, h->table, h->d->h, db_time);
            odbox_buf_append(&b, "))");
            char *sql = odbox_buf_take(&b);
            rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, &s, err)
                     : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
            free(sql);
        }
        for (size_t i = 0; i < k && rc == ODBOX_OK; i++, next++) {
            while (!h->calls[next]->ordered)
                next++;
            rc = odbox_stmt_bind_valid_uuid(s, (int)i + 1, h->calls[next]->env.notification_id, err);
        }
        int idx = (int)k + 1;
        if (rc == ODBOX_OK)
            rc = same_order_bind(h->d->h, s, &idx, err);
        if (rc == ODBOX_OK)
            rc = leased_bind(h->d->h, s, db_time, now, &idx, err);
        if (rc == ODBOX_OK)
            rc = odbox_stmt_execute(s, err);
        h->rd->statements++;
        const char *id = NULL;
        while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1 &&
               (rc = odbox_stmt_get_text(s, 1, &id, NULL, err)) == ODBOX_OK)
            for (size_t i = 0; i < h->n; i++)
                if (h->calls[i]->ordered && !strcasecmp(h->calls[i]->env.notification_id, id)) {
                    h->calls[i]->ordered = -1; /* held back */
                    break;
                }
        rc = rc < 0 ? rc : ODBOX_OK;
        odbox_stmt_free(&s);
    }
    size_t kept = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (h->calls[i]->ordered < 0)
            odbox_hcall_release(&h->calls[i]->w);
        else
            h->calls[kept++] = h->calls[i];
    }
    h->n = kept;
    return rc;
}

static int by_due(const void *a, const void *b)
{
    const call *x = *(call *const *)a, *y = *(call *const *)b;
    return (x->due_us > y->due_us) - (x->due_us < y->due_us);
}

/* The claim: lease_owner = the round's token, lease_until = the
 * database's now (or the clock's) + lease, by primary key; the rows of
 * limited handlers (limited) get limit_lease_until too, which their
 * limits count. next_retry_at moves to the lease's end as well: a claimed
 * row leaves the front of the due index's order, so the next claim's
 * ordered read does not step over every row in flight (measured on
 * PostgreSQL with 8 handling loops: a claim's read took 0.7 ms whatever
 * it found, 0.5 ms once it no longer read the leased rows), and a claim
 * that is never finished is due again when its lease ends. lease_until
 * is still the guard: a claim of an older odbox leaves next_retry_at as
 * it was. The rows of ordered subscriptions get order_lease_until too,
 * which holds back every other row of their model (leased_row). One
 * UPDATE per class of rows (claim_class) the claim has. */
static int claim_class(const call *c) { return (c->limited ? 1 : 0) | (c->ordered > 0 ? 2 : 0); }

static int claim_rows(hround *h, odbox_conn *c, int64_t until, int cls, odbox_error *err)
{
    int limited = cls & 1, ordered = (cls & 2) != 0;
    size_t per = (size_t)(h->dialect->max_params - 5), n = 0, next = 0; /* next: the call to bind next */
    for (size_t i = 0; i < h->n; i++)
        n += claim_class(h->calls[i]) == cls;
    int rc = ODBOX_OK;
    for (size_t at = 0; at < n && rc == ODBOX_OK;) {
        size_t k = n - at < per ? n - at : per;
        odbox_sql_key key;
        odbox_sql_key_init(&key, SQL_CLAIM, k);
        odbox_sql_key_add_count(&key, 0, (size_t)cls);
        odbox_sql_key_add(&key, 0, h->table);
        odbox_stmt *s = NULL;
        rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
        if (rc == ODBOX_OK && !s) {
            odbox_buf b = {0};
            odbox_buf_cat(&b, "UPDATE ", h->table, " SET lease_owner = ?, lease_until = ?, next_retry_at = ?",
                          limited ? ", limit_lease_until = ?" : "", ordered ? ", order_lease_until = ?" : "",
                          " WHERE id IN (", (char *)NULL);
            odbox_buf_list(&b, h->dialect->uuid_param, k);
            odbox_buf_append(&b, ")");
            char *sql = odbox_buf_take(&b);
            rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, &s, err)
                     : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
            free(sql);
        }
        int idx = 1;
        if (rc == ODBOX_OK)
            rc = odbox_stmt_bind_text(s, idx++, h->token, err);
        for (int t = 0; t < 2 + limited + ordered && rc == ODBOX_OK; t++)
            rc = odbox_stmt_bind_timestamp(s, idx++, until, err);
        for (size_t i = 0; i < k && rc == ODBOX_OK; i++, next++) {
            while (claim_class(h->calls[next]) != cls)
                next++;
            rc = odbox_stmt_bind_valid_uuid(s, idx++, h->calls[next]->env.notification_id, err);
        }
        if (rc == ODBOX_OK)
            rc = odbox_stmt_execute(s, err);
        h->rd->statements++;
        odbox_stmt_free(&s);
        at += k;
    }
    return rc;
}

int odbox_delivery_begin(odbox_conn *c, const char *first_sql, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    int rc = d->delivery_isolation_sql ? odbox_conn_exec(c, d->delivery_isolation_sql, err) : ODBOX_OK;
    if (rc == ODBOX_OK)
        rc = odbox_conn_begin(c, err);
    if (rc == ODBOX_OK && first_sql && (rc = odbox_conn_exec(c, first_sql, err)) != ODBOX_OK)
        odbox_conn_rollback(c, NULL);
    return rc;
}

/* Reads the due rows of handler k's names (its name, then its former
 * names), each name's and state's read for what the batch has room for. */
static int read_handler(hround *h, odbox_conn *c, size_t k, size_t room, int64_t now, int64_t *db_now, int *reads,
                        odbox_error *err)
{
    int nvar = h->dialect->has_partial_indexes ? 1 : 2, rc = ODBOX_OK;
    size_t n0 = h->n;
    for (size_t f = 0; f <= h->d->h->v[k].nformer && rc == ODBOX_OK && h->n - n0 < room; f++)
        for (int v = 0; v < nvar && rc == ODBOX_OK && h->n - n0 < room; v++, (*reads)++)
            rc = read_due(h, c, k, f, nvar == 1 ? -1 : v, (int)(room - (h->n - n0)), now, db_now, err);
    return rc;
}

/* One claim transaction: the reads, the order's recheck, the claim.
 * Each name of each handler is read on its own (read_due, through the
 * due index led by the name), so no read steps over the rows of handlers
 * it does not serve. The limited handlers first, in name order, so that
 * every process takes their locks in one order, each up to the room its
 * limit leaves; then the others, for what is left of the batch, in turn:
 * each claim on the shard begins with the handler after the one the
 * claim before it began with, so that one handler's backlog leaves every
 * other handler a claim of its own in each turn (it took the whole batch
 * of every claim before, when older). Each handler's rows come oldest first.
 * A handler whose hung calls here reached their cap is not read: its rows
 * wait for another process, or for one of those calls to return.
 * Rolled back whole on failure, its calls dropped. */
static int claim_once(hround *h, odbox_conn *c, int64_t now, const size_t *limited, size_t nlimited,
                      odbox_error *err)
{
    odbox_delivery *d = h->d;
    int batch = d->cfg.batch[JOB_HANDLING];
    int64_t db_now = now;
    odbox_uuid_v4(h->token);
    /* the lease's end in this process's count, from before the claim
     * began: its lease_until may count from the transaction's start
     * (PostgreSQL's now), and a wait for the limit's lock must not move
     * this process's end past the database's */
    int64_t t0 = odbox_mono_us();
    int rc = odbox_delivery_begin(c, h->dialect->claim_begin_sql, err);
    int reads = 0;
    for (size_t i = 0; i < nlimited && rc == ODBOX_OK && h->n < (size_t)batch; i++) {
        size_t k = limited[i], left = (size_t)batch - h->n;
        int room = batch;
        if (odbox_delivery_hung_full(d, k))
            continue;
        if ((rc = limit_room(h, c, k, now, &room, err)) == ODBOX_OK && room > 0)
            rc = read_handler(h, c, k, (size_t)room < left ? (size_t)room : left, now, &db_now, &reads, err);
    }
    size_t n = d->h->n, first = n ? atomic_fetch_add(&h->ds->claim_turn, 1) % n : 0;
    for (size_t i = 0; i < n && rc == ODBOX_OK && h->n < (size_t)batch; i++) {
        size_t k = (first + i) % n;
        if (!d->h->v[k].options.max_in_flight && !odbox_delivery_hung_full(d, k))
            rc = read_handler(h, c, k, (size_t)batch - h->n, now, &db_now, &reads, err);
    }
    if (rc == ODBOX_OK && reads > 1)
        qsort(h->calls, h->n, sizeof *h->calls, by_due);
    if (rc == ODBOX_OK)
        rc = recheck_order(h, c, now, err);
    h->claimed_at_us = db_now;
    for (int cls = 0; cls < 4 && rc == ODBOX_OK && h->n; cls++)
        rc = claim_rows(h, c, db_now + d->cfg.lease_us, cls, err);
    if (rc == ODBOX_OK)
        rc = odbox_conn_commit(c, err);
    if (rc != ODBOX_OK) {
        odbox_conn_rollback(c, NULL);
        while (h->n)
            odbox_hcall_release(&h->calls[--h->n]->w);
    }
    h->lease_end_mono_us = t0 + d->cfg.lease_us;
    return rc;
}

/* The claim of a round. One that loses a deadlock (MariaDB: two claims'
 * UPDATEs each wanting a due-index entry the other's locking read
 * holds, with fan-outs inserting beside them) rolled back whole and
 * called nothing: it runs again, a few times, after a short nap. */
int odbox_handling_claim(hround *h, odbox_conn *c, int64_t now, odbox_error *err)
{
    odbox_delivery *d = h->d;
    const odbox_handlers *hs = d->h;
    int batch = d->cfg.batch[JOB_HANDLING];
    size_t *limited = calloc(hs->n ? hs->n : 1, sizeof *limited), nlimited = 0;
    if (!limited)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    for (size_t k = 0; k < hs->n; k++) {
        if (!hs->v[k].options.max_in_flight)
            continue;
        size_t at = nlimited++;
        while (at > 0 && strcmp(hs->v[limited[at - 1]].name, hs->v[k].name) > 0) {
            limited[at] = limited[at - 1];
            at--;
        }
        limited[at] = k;
    }
    /* the reads of a claim take a batch in all */
    if (!(h->calls = calloc((size_t)batch, sizeof *h->calls))) {
        free(limited);
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    }
    int rc;
    for (int attempt = 1;; attempt++) {
        rc = claim_once(h, c, now, limited, nlimited, err);
        if (rc != ODBOX_EDEADLOCK || attempt == CLAIM_TRIES)
            break;
        odbox_sleep_ms(attempt * 5); /* 5, 10 ms */
    }
    free(limited);
    return rc;
}

/* The rows of a hand-off still leased to it, read by id in one statement
 * (in a transaction only for the dialect's handoff_begin_sql: the rows
 * are this round's already, as a claim's are once it commits). */
int odbox_handling_take(hround *h, odbox_conn *c, const odbox_handoff *ho, odbox_error *err)
{
    snprintf(h->token, sizeof h->token, "%s", ho->token);
    h->claimed_at_us = ho->claimed_at_us;
    h->lease_end_mono_us = ho->lease_end_mono_us;
    if (!(h->calls = calloc(ho->n ? ho->n : 1, sizeof *h->calls)))
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    odbox_sql_key key;
    odbox_sql_key_init(&key, SQL_HANDOFF_READ, ho->n);
    odbox_sql_key_add(&key, 0, h->table);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        odbox_buf b = {0};
        odbox_buf_append(&b, "SELECT ");
        select_list(&b, h->dialect, "");
        odbox_buf_append(&b, ", ");
        odbox_ops_ts_col(&b, h->dialect, "next_retry_at");
        odbox_buf_cat(&b, " FROM ", h->table, " WHERE id IN (", (char *)NULL);
        odbox_buf_list(&b, h->dialect->uuid_param, ho->n);
        odbox_buf_append(&b, ") AND lease_owner = ?");
        char *sql = odbox_buf_take(&b);
        rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    const char *begin = h->dialect->handoff_begin_sql;
    if (rc == ODBOX_OK && begin)
        rc = odbox_delivery_begin(c, begin, err);
    int idx = 1;
    for (size_t i = 0; i < ho->n && rc == ODBOX_OK; i++)
        rc = odbox_stmt_bind_valid_uuid(s, idx++, ho->ids[i], err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_bind_text(s, idx++, ho->token, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    h->rd->statements++;
    if (rc == ODBOX_OK)
        rc = fetch_calls(h, s, ho->n, 0, 0, NULL, err);
    odbox_stmt_free(&s);
    if (rc == ODBOX_OK && begin)
        rc = odbox_conn_commit(c, err);
    if (begin && odbox_conn_in_transaction(c))
        odbox_conn_rollback(c, NULL);
    if (rc != ODBOX_OK)
        while (h->n)
            odbox_hcall_release(&h->calls[--h->n]->w);
    return rc;
}
