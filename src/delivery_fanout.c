/* odbox — a fan-out round on one shard: undelivered events whose type has
 * a subscription become one event_notifications row per (event x
 * subscription), and are flipped to delivered, in one transaction on the
 * primary. The subscriptions are the eventlog's (subscriptions.c), read
 * on the primary at the start of each round (one statement), not the
 * handlers of the process running the round: during a rolling deploy an
 * old process fans out to the new processes' subscriptions too.
 *
 * The context is copied on the server: the round reads only ids and
 * types (from the replica when the shard has one), and the insert takes
 * the other columns from the primary's events row (INSERT ... SELECT
 * joined to the bound (notification id, event id, handler) rows). An
 * event the primary shows as delivered already (a lagging replica, a
 * fan-out that overlapped) gets nothing, and a notification already
 * there is skipped by the unique key (event_id, handler_name): a round
 * run twice writes nothing twice. Where the dialect joins writes into one
 * statement (PostgreSQL), insert and flip are one statement in autocommit.
 *
 * The writes find events by id only: they test delivered with IS NOT
 * TRUE (the flip) and COALESCE(delivered, TRUE) = FALSE (the insert),
 * which the undelivered index's predicate (delivered = FALSE) is not
 * proven from. Else a planner whose statistics predate a backlog (they
 * say: nothing undelivered) scans that whole index instead of looking ids
 * up: measured on PostgreSQL, 2,000 events/s instead of 20,000 on a
 * backlog of 100,000.
 *
 * The insert reads the bound rows LEFT JOINed to the events (a missing
 * event fails the WHERE, as it would an inner join): SQLite (3.38+) puts
 * a Bloom filter on the inner side of an inner join once the table has
 * ANALYZE statistics, built by reading the whole events table in every
 * round (31x the round's time with 1,000,000 delivered events, bench/
 * odbox-bench-delivery --mode scale); it builds none for a LEFT JOIN. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "delivery_internal.h"
#include "notifications_internal.h"
#include "odbox/log.h"
#include "registry_internal.h"
#include "odbox/uuid.h"

/* A round hands its rows to this process's loops while none of them has
 * been in its round longer than this (a drain's rounds take a few ms
 * each). */
#define HANDOFF_BUSY_US 50000

/* odbox_sql_key operations of this module (apart from internal.h's) */
enum { SQL_FANOUT_READ = 101, SQL_FANOUT_INSERT, SQL_FANOUT_FLIP, SQL_FANOUT_JOINED };

typedef struct nrow {
    char nid[ODBOX_UUID_LEN + 1];
    size_t event;         /* index into the round's events */
    const char *handler;  /* the handler's name */
} nrow;

typedef struct fevent {
    char id[ODBOX_UUID_LEN + 1];
    const odbox_subtype *type;
} fevent;

typedef struct fround {
    const odbox_round_ctx *x;
    odbox_delivery *d;
    odbox_dshard *ds;
    odbox_delivery_round *rd;
    const odbox_dialect *dialect;
    char events[ODBOX_NAME_MAX * 2 + 32], notifications[ODBOX_NAME_MAX * 2 + 32], subs[ODBOX_NAME_MAX * 2 + 32];
    odbox_subtype *types; /* the subscriptions' types, read at the round's start */
    size_t ntypes;
    fevent *ev;
    size_t nev;
    nrow *rows;
    size_t nrows;
    int64_t db_now;      /* the database's time at the round's start (the delivery's clock without db_time) */
    int64_t db_mono;     /* when it was read, by this process's monotonic clock */
    /* the monotonic clock before db_now was read: a hand-off's lease,
     * db_now + lease_us in the database, ends no later in this process's
     * count from there */
    int64_t lease_from_mono;
    odbox_handoff *handoff; /* the rows are claimed as they are written, for this process's loops */
} fround;

static void tables(fround *f, const odbox_dialect *d)
{
    const char *ev = odbox_shard_eventlog(f->ds->shard);
    f->dialect = d;
    odbox_dialect_eventlog_table(d, ev, "events", f->events, sizeof f->events);
    odbox_dialect_eventlog_table(d, ev, "event_notifications", f->notifications, sizeof f->notifications);
    odbox_dialect_eventlog_table(d, ev, "subscriptions", f->subs, sizeof f->subs);
}

/* ---- reading ------------------------------------------------------------------ */

/* Per type, the oldest undelivered events through the index on
 * (event_type, event_date); the types merged by event_date. One
 * "event_type IN (...) ORDER BY event_date" would sort every undelivered
 * row of those types in each round: a backlog would cost its square. */
static char *read_sql(const fround *f)
{
    size_t n = f->ntypes;
    odbox_buf b = {0};
    if (n == 1) {
        odbox_buf_cat(&b, "SELECT id, event_type FROM ", f->events,
                      " WHERE delivered = FALSE AND event_type = ? ORDER BY event_date LIMIT ?", (char *)NULL);
        return odbox_buf_take(&b);
    }
    for (size_t i = 0; i < n; i++)
        odbox_buf_appendf(&b,
                          "%sSELECT id, event_type, event_date FROM (SELECT id, event_type, event_date FROM %s "
                          "WHERE delivered = FALSE AND event_type = ? ORDER BY event_date LIMIT ?) AS t%zu",
                          i ? " UNION ALL " : "", f->events, i);
    odbox_buf_append(&b, " ORDER BY event_date LIMIT ?");
    return odbox_buf_take(&b);
}

static const odbox_subtype *find_type(const fround *f, const char *name)
{
    for (size_t i = 0; i < f->ntypes; i++)
        if (!strcmp(f->types[i].name, name))
            return &f->types[i];
    return NULL;
}

static int read_events(fround *f, odbox_conn *c, odbox_error *err)
{
    odbox_delivery *d = f->d;
    int rc = ODBOX_OK;
    tables(f, odbox_conn_dialect(c));
    odbox_sql_key key;
    odbox_sql_key_init(&key, SQL_FANOUT_READ, f->ntypes);
    odbox_sql_key_add(&key, 0, f->events);
    odbox_stmt *s = NULL;
    if ((rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err)) == ODBOX_OK && !s) {
        char *sql = read_sql(f);
        rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    int batch = d->cfg.batch[JOB_FANOUT], idx = 1;
    for (size_t i = 0; rc == ODBOX_OK && i < f->ntypes; i++)
        if ((rc = odbox_stmt_bind_text(s, idx++, f->types[i].name, err)) == ODBOX_OK)
            rc = odbox_stmt_bind_int64(s, idx++, batch, err);
    if (rc == ODBOX_OK && f->ntypes > 1)
        rc = odbox_stmt_bind_int64(s, idx++, batch, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    f->rd->statements++;
    if (rc == ODBOX_OK && !(f->ev = calloc((size_t)batch, sizeof *f->ev)))
        rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *id, *type;
        if ((rc = odbox_stmt_get_text(s, 1, &id, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &type, NULL, err)) != ODBOX_OK)
            break;
        const odbox_subtype *t = find_type(f, type);
        if (!t || f->nev == (size_t)batch || !odbox_uuid_is_valid(id))
            continue; /* what the query cannot return */
        fevent *e = &f->ev[f->nev++];
        snprintf(e->id, sizeof e->id, "%s", id);
        e->type = t;
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

/* ---- which copy to read -------------------------------------------------------- */

/* A one-row query's first column as text (malloc'd; NULL for SQL NULL or
 * no row), binding arg (NULL: none). */
static int query_text(odbox_conn *c, const char *sql, const char *arg, char **out, odbox_error *err)
{
    *out = NULL;
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && arg)
        rc = odbox_stmt_bind_text(s, 1, arg, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *v = NULL;
        int null = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &v, &null, err)) == ODBOX_OK && !null && !(*out = strdup(v)))
            rc = odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

/* 1 when the replica (c) has applied position pos of the primary. */
static int replica_reached(odbox_conn *c, const odbox_dialect *dl, const char *pos, odbox_error *err)
{
    char *v = NULL;
    int rc = query_text(c, dl->replica_reached_sql, pos, &v, err);
    int reached = rc == ODBOX_OK && v && atoi(v) == 1;
    free(v);
    return rc == ODBOX_OK ? reached : rc;
}

/* The replica's lag in ms as it measures it: 0 when it cannot tell
 * (no query), -1 when replication stopped or the answer makes no
 * sense; < -1 an error. */
static int64_t replica_lag_ms(odbox_conn *c, const odbox_dialect *dl, odbox_error *err)
{
    if (!dl->replica_lag_sql)
        return 0;
    odbox_stmt *s = NULL;
    int64_t lag = 0, unit = dl->replica_lag_unit_ms > 0 ? dl->replica_lag_unit_ms : 1;
    int rc = odbox_stmt_prepare(c, dl->replica_lag_sql, &s, err), col = 1;
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        if (dl->replica_lag_column && (col = odbox_stmt_column_index(s, dl->replica_lag_column)) == 0) {
            lag = -1; /* no such column: cannot tell */
            break;
        }
        int64_t v = 0;
        int null = 0;
        if ((rc = odbox_stmt_get_int64(s, col, &v, &null, err)) != ODBOX_OK)
            break;
        if (null || v < 0 || v > INT64_MAX / unit) {
            lag = -1;
            break;
        }
        if (v * unit > lag)
            lag = v * unit;
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : lag;
}

/* Decides where the round reads: the replica (*c, from the replica's
 * pool) unless the replica has not applied the last flips yet, or lags
 * past the bound; then *c is NULL and the primary is read. A failed
 * probe reads the primary too. */
static int pick_replica(fround *f, odbox_conn **c, odbox_error *err)
{
    odbox_delivery *d = f->d;
    odbox_dshard *ds = f->ds;
    odbox_pool *pool = odbox_shard_replica(ds->shard);
    *c = NULL;
    pthread_mutex_lock(&d->mu);
    int unknown = ds->replica_wait_unknown;
    char *wait = ds->replica_wait ? strdup(ds->replica_wait) : NULL;
    int oom = ds->replica_wait && !wait;
    pthread_mutex_unlock(&d->mu);
    if (oom)
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    if (unknown) {
        free(wait);
        return ODBOX_OK;
    }
    odbox_conn *rc_conn = NULL;
    int rc = odbox_pool_acquire(pool, &rc_conn, err);
    if (rc != ODBOX_OK) {
        free(wait);
        return rc;
    }
    const odbox_dialect *dl = odbox_conn_dialect(rc_conn);
    odbox_error pe = {0};
    int use = 1;
    if (wait && dl->replica_reached_sql) {
        int r = replica_reached(rc_conn, dl, wait, &pe);
        f->rd->statements++;
        if (r == 1) {
            pthread_mutex_lock(&d->mu);
            if (ds->replica_wait && !strcmp(ds->replica_wait, wait)) {
                free(ds->replica_wait);
                ds->replica_wait = NULL;
            }
            pthread_mutex_unlock(&d->mu);
        } else {
            use = 0;
        }
    }
    free(wait);
    if (use) {
        int64_t lag = replica_lag_ms(rc_conn, dl, &pe);
        f->rd->statements += dl->replica_lag_sql != NULL;
        use = lag >= 0 && lag <= d->cfg.replica_max_lag_ms;
    }
    if (pe.code)
        odbox_log(ODBOX_LOG_DEBUG, "delivery: fan-out on shard %d.%d reads the primary: %s", ds->id.group,
                  ds->id.member, pe.message);
    if (use)
        *c = rc_conn;
    else
        odbox_pool_release(pool, &rc_conn);
    return ODBOX_OK;
}

/* After a round: what the replica must show before it is read again. */
static void remember_flips(fround *f, odbox_conn *primary)
{
    odbox_delivery *d = f->d;
    odbox_dshard *ds = f->ds;
    if (!odbox_shard_has_replica(ds->shard))
        return;
    char *pos = NULL;
    if (f->rd->delivered > 0 && primary && f->dialect->replica_position_sql) {
        odbox_error pe = {0};
        if (query_text(primary, f->dialect->replica_position_sql, NULL, &pos, &pe) != ODBOX_OK)
            odbox_log(ODBOX_LOG_DEBUG, "delivery: fan-out on shard %d.%d: no replication position: %s",
                      ds->id.group, ds->id.member, pe.message);
        f->rd->statements++;
        if (pos && !*pos) {
            free(pos);
            pos = NULL;
        }
    }
    pthread_mutex_lock(&d->mu);
    if (f->rd->delivered > 0) {
        free(ds->replica_wait);
        ds->replica_wait = pos;
        ds->replica_wait_unknown = pos == NULL;
        pos = NULL;
    } else if (!f->rd->from_replica) {
        ds->replica_wait_unknown = 0; /* the primary shows no more to flip */
    }
    pthread_mutex_unlock(&d->mu);
    free(pos);
}

/* One notification per (event x subscription), ids that carry the shard. */
static int plan_rows(fround *f, odbox_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < f->nev; i++)
        n += f->ev[i].type->n;
    if (!(f->rows = calloc(n, sizeof *f->rows)))
        return odbox_fail(err, ODBOX_ENOMEM, "out of memory");
    for (size_t i = 0; i < f->nev; i++)
        for (size_t k = 0; k < f->ev[i].type->n; k++) {
            nrow *r = &f->rows[f->nrows++];
            int rc = odbox_uuid_v7_sharded(f->ds->id, r->nid, err);
            if (rc != ODBOX_OK)
                return rc;
            r->event = i;
            r->handler = f->ev[i].type->subs[k];
        }
    return ODBOX_OK;
}

/* ---- writing ------------------------------------------------------------------ */

/* A chunk of the round: events [e0, e1) and their rows [r0, r1). */
typedef struct chunk {
    size_t e0, e1, r0, r1;
} chunk;

static char *insert_sql(const fround *f, size_t nrows)
{
    return odbox_notifications_insert_sql(f->dialect, f->events, f->notifications, f->subs, nrows,
                                          "COALESCE(e.delivered, TRUE) = FALSE", f->handoff != NULL);
}

static char *flip_sql(const fround *f, size_t nev)
{
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", f->events, " SET delivered = TRUE WHERE id IN (", (char *)NULL);
    odbox_buf_list(&b, f->dialect->uuid_param, nev);
    odbox_buf_append(&b, ") AND delivered IS NOT TRUE");
    return odbox_buf_take(&b);
}

static char *joined_sql(const fround *f, size_t nrows, size_t nev, odbox_error *err)
{
    char *parts[2] = {insert_sql(f, nrows), flip_sql(f, nev)}, *out = NULL;
    if (parts[0] && parts[1])
        f->dialect->join_writes_sql(f->dialect, (const char *const *)parts, 2, 0, &out, err);
    free(parts[0]);
    free(parts[1]);
    return out;
}

static int bind_insert(const fround *f, odbox_stmt *s, const chunk *k, int64_t now, int *idx, odbox_error *err)
{
    const odbox_handoff *ho = f->handoff;
    int64_t until = f->db_now + f->d->cfg.lease_us;
    int rc = ODBOX_OK;
    if (ho)
        rc = odbox_notifications_bind_handoff(s, idx, 0, ho->token, now, until, err);
    if (rc != ODBOX_OK || (rc = odbox_stmt_bind_timestamp(s, (*idx)++, now, err)) != ODBOX_OK ||
        (rc = odbox_stmt_bind_timestamp(s, (*idx)++, now, err)) != ODBOX_OK ||
        (ho && (rc = odbox_notifications_bind_handoff(s, idx, 1, ho->token, now, until, err)) != ODBOX_OK))
        return rc;
    for (size_t r = k->r0; r < k->r1; r++) {
        const nrow *row = &f->rows[r];
        if ((rc = odbox_stmt_bind_valid_uuid(s, (*idx)++, row->nid, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_valid_uuid(s, (*idx)++, f->ev[row->event].id, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_text(s, (*idx)++, row->handler, err)) != ODBOX_OK)
            return rc;
    }
    return ODBOX_OK;
}

static int bind_flip(const fround *f, odbox_stmt *s, const chunk *k, int *idx, odbox_error *err)
{
    int rc = ODBOX_OK;
    for (size_t e = k->e0; e < k->e1 && rc == ODBOX_OK; e++)
        rc = odbox_stmt_bind_valid_uuid(s, (*idx)++, f->ev[e].id, err);
    return rc;
}

/* Prepares the statement of op for a chunk (cached per connection by its
 * shape), binds it, runs it; *changed gets its row count. */
static int run_chunk(fround *f, odbox_conn *c, int op, const chunk *k, int64_t now, int64_t *changed,
                     odbox_error *err)
{
    size_t nrows = k->r1 - k->r0, nev = k->e1 - k->e0;
    odbox_sql_key key;
    odbox_sql_key_init(&key, op, nev);
    odbox_sql_key_add_count(&key, 0, nrows);
    odbox_sql_key_add_count(&key, 1, f->handoff != NULL);
    odbox_sql_key_add(&key, 0, f->notifications);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        char *sql = op == SQL_FANOUT_INSERT ? insert_sql(f, nrows)
                    : op == SQL_FANOUT_FLIP ? flip_sql(f, nev)
                                            : joined_sql(f, nrows, nev, err);
        rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "out of memory");
        free(sql);
    }
    int idx = 1;
    if (rc == ODBOX_OK && op != SQL_FANOUT_FLIP)
        rc = bind_insert(f, s, k, now, &idx, err);
    if (rc == ODBOX_OK && op != SQL_FANOUT_INSERT)
        rc = bind_flip(f, s, k, &idx, err);
    if (rc == ODBOX_OK) {
        rc = odbox_stmt_execute(s, err);
        f->rd->statements++;
    }
    if (rc == ODBOX_OK)
        *changed = odbox_stmt_rows_affected(s);
    odbox_stmt_free(&s);
    return rc;
}

/* Cuts [e0, nev) into chunks whose statement fits in the dialect's
 * parameter limit (2 dates, 3 per notification, and with join 1 per
 * event for the flip): the whole round in one chunk but for batches of
 * very many handlers. */
static chunk next_chunk(const fround *f, size_t e0, size_t r0, int join)
{
    int64_t limit = f->dialect->max_params, used = 2;
    chunk k = {e0, e0, r0, r0};
    while (k.e1 < f->nev) {
        size_t n = f->ev[k.e1].type->n;
        int64_t add = 3 * (int64_t)n + join;
        if (k.e1 > k.e0 && used + add > limit)
            break;
        used += add;
        k.e1++;
        k.r1 += n;
    }
    return k;
}

static int write_round(fround *f, odbox_conn *c, odbox_error *err)
{
    const odbox_dialect *d = f->dialect;
    /* the dates written and the hand-off's due test: with db_time, in the
     * database's time (no process's wall clock decides when a delayed
     * event is due) */
    int64_t now = f->d->db_time && f->db_now ? f->db_now + (odbox_mono_us() - f->db_mono) : odbox_round_now(f->x);
    int64_t changed = 0;
    chunk all = next_chunk(f, 0, 0, d->join_writes_sql != NULL);
    if (d->join_writes_sql && all.e1 == f->nev) {
        /* one statement, in a transaction only when the dialect has
         * something to set for it */
        int rc = d->fanout_begin_sql ? odbox_delivery_begin(c, d->fanout_begin_sql, err) : ODBOX_OK;
        if (rc == ODBOX_OK)
            rc = run_chunk(f, c, SQL_FANOUT_JOINED, &all, now, &changed, err);
        if (rc == ODBOX_OK && odbox_conn_in_transaction(c))
            rc = odbox_commit_failed(odbox_conn_commit(c, err), err);
        else if (odbox_conn_in_transaction(c))
            odbox_conn_rollback(c, NULL);
        if (rc == ODBOX_OK)
            f->rd->delivered = changed > 0 ? (size_t)changed : 0;
        return rc;
    }
    int rc = odbox_delivery_begin(c, d->fanout_begin_sql, err);
    f->rd->statements++;
    int64_t flipped = 0;
    for (size_t e = 0, r = 0; rc == ODBOX_OK && e < f->nev;) {
        chunk k = next_chunk(f, e, r, 0);
        rc = run_chunk(f, c, SQL_FANOUT_INSERT, &k, now, &changed, err);
        e = k.e1, r = k.r1;
    }
    /* the flip: one statement unless the events exceed the parameter limit */
    for (size_t e = 0; rc == ODBOX_OK && e < f->nev;) {
        size_t n = f->nev - e < (size_t)d->max_params ? f->nev - e : (size_t)d->max_params;
        chunk k = {e, e + n, 0, 0};
        if ((rc = run_chunk(f, c, SQL_FANOUT_FLIP, &k, now, &changed, err)) == ODBOX_OK)
            flipped += changed > 0 ? changed : 0;
        e += n;
    }
    if (rc == ODBOX_OK) {
        rc = odbox_commit_failed(odbox_conn_commit(c, err), err);
        f->rd->statements++;
    } else if (odbox_conn_in_transaction(c)) {
        odbox_conn_rollback(c, NULL);
        f->rd->statements++;
    }
    if (rc == ODBOX_OK)
        f->rd->delivered = (size_t)flipped;
    return rc;
}

/* ---- the wake-up and the hand-off -------------------------------------------- */

/* Whether every row's handler is served here without a concurrency limit
 * and takes the row's event type here, as the claims require, and has
 * room for its calls (its hung calls below their cap) (a run of rows with
 * the same handler and type looked up once). */
static int served_here(const fround *f)
{
    const odbox_handlers *hs = f->d->h;
    const char *last = NULL;
    const odbox_subtype *last_type = NULL;
    for (size_t i = 0; i < f->nrows; i++) {
        const odbox_subtype *type = f->ev[f->rows[i].event].type;
        if (f->rows[i].handler == last && type == last_type)
            continue;
        last = f->rows[i].handler;
        last_type = type;
        int k = odbox_handlers_find(hs, last);
        if (k < 0 || hs->v[k].options.max_in_flight > 0 || !odbox_handlers_takes(hs, k, type->name) ||
            odbox_delivery_hung_full(f->d, (size_t)k))
            return 0;
    }
    return 1;
}

/* Whether the round's rows, each served here (served_here), go to this
 * process's handling loops: then the round claims them as it writes them
 * (a hand-off). With db_time, only where the round has read the
 * database's time, which the lease is counted from. */
static int hand_off(const fround *f)
{
    return f->nrows && (f->db_now || !f->d->db_time) && odbox_handoff_room(f->d, f->ds, HANDOFF_BUSY_US);
}

/* The hand-off of the round's rows, token made, no ids yet (push_handoff
 * adds them once they are written); NULL when out of memory (the round
 * then claims nothing, as before hand-offs). */
static odbox_handoff *new_handoff(const fround *f)
{
    odbox_handoff *ho = calloc(1, sizeof *ho);
    if (!ho)
        return NULL;
    odbox_uuid_v4(ho->token);
    ho->claimed_at_us = f->db_now;
    ho->lease_end_mono_us = f->lease_from_mono + f->d->cfg.lease_us;
    return ho;
}

/* Queues the written rows for the handling loops, a batch (and a
 * statement's parameters) at most per hand-off, so that several loops
 * share them; f->nrows > 0 (hand_off), so the last one takes the claim.
 * The rows the insert did not claim (ordered subscriptions, events not
 * yet due, rows that were there) are read by no loop: the take reads
 * rows by id and lease_owner. */
static void push_handoff(fround *f)
{
    size_t per = (size_t)f->d->cfg.batch[JOB_HANDLING], cap = (size_t)f->dialect->max_params - 1;
    if (per > cap)
        per = cap;
    odbox_handoff *claim = f->handoff;
    f->handoff = NULL;
    for (size_t at = 0; at < f->nrows; at += per) {
        size_t n = f->nrows - at < per ? f->nrows - at : per;
        int last = at + n >= f->nrows;
        odbox_handoff *ho = last ? claim : malloc(sizeof *ho);
        if (ho && !last)
            *ho = *claim; /* the same claim: token and lease */
        if (ho && (ho->ids = malloc(n * sizeof *ho->ids))) {
            for (size_t i = 0; i < n; i++)
                memcpy(ho->ids[i], f->rows[at + i].nid, sizeof ho->ids[i]);
            ho->n = n;
            odbox_handoff_push(f->d, f->ds, ho);
        } else {
            odbox_log(ODBOX_LOG_WARN, "delivery: out of memory: %zu notifications wait for their lease to end", n);
            free(ho);
        }
    }
}

/* ---- the round ----------------------------------------------------------------- */

static int shard_error(const odbox_dshard *ds, int rc, odbox_error *err)
{
    return odbox_error_prefix(err, rc, "fan-out on shard %d.%d", ds->id.group, ds->id.member);
}

int odbox_fanout_round(const odbox_round_ctx *x, odbox_delivery_round *rd, odbox_error *err)
{
    odbox_delivery *d = x->d;
    odbox_dshard *ds = x->ds;
    rd->job = ODBOX_DELIVERY_FANOUT;
    rd->shard = ds->id;
    fround f = {.x = x, .d = d, .ds = ds, .rd = rd};
    odbox_conn *c = NULL, *rc_conn = NULL;
    odbox_pool *primary = odbox_shard_primary(ds->shard);
    int here = 0; /* this process's handling takes the round's rows */
    odbox_handoff_expire(d, ds); /* before deciding on a new one */
    int rc = odbox_shard_check_eventlog(ds->shard, err);
    /* this process's handlers are recorded, its heartbeat due or not;
     * then the subscriptions' types, on the primary: a subscription
     * registered there is seen at once */
    if (rc == ODBOX_OK)
        rc = odbox_subs_beat(d, ds, 0, err);
    if (rc == ODBOX_OK && (rc = odbox_pool_acquire(primary, &c, err)) == ODBOX_OK) {
        f.lease_from_mono = odbox_mono_us();
        rc = odbox_subs_read_types(c, odbox_shard_eventlog(ds->shard), &f.types, &f.ntypes, &f.db_now, err);
        f.db_mono = odbox_mono_us();
        rd->statements++;
        if (!d->db_time)
            f.db_now = odbox_round_now(x);
    }
    /* the replica, unless it has not shown the last flips yet or lags
     * past the bound: else the primary, on the connection that writes */
    if (rc == ODBOX_OK && odbox_shard_has_replica(ds->shard))
        rc = pick_replica(&f, &rc_conn, err);
    if (rc == ODBOX_OK && !rc_conn && !c)
        rc = odbox_pool_acquire(primary, &c, err);
    if (rc == ODBOX_OK && f.ntypes) {
        rd->from_replica = rc_conn != NULL;
        rc = read_events(&f, rc_conn ? rc_conn : c, err);
    }
    if (rc_conn)
        odbox_pool_release(odbox_shard_replica(ds->shard), &rc_conn);
    rd->read = f.nev;
    if (rc == ODBOX_OK && f.nev > 0 && (rc = plan_rows(&f, err)) == ODBOX_OK &&
        (c || (rc = odbox_pool_acquire(primary, &c, err)) == ODBOX_OK)) {
        tables(&f, odbox_conn_dialect(c));
        rd->notifications = f.nrows;
        /* taken here: handed off, or claimed at once by the loops waiting
         * here. Else other processes are told (a NOTIFY where the dialect
         * can); told when this process takes the rows, each would wake a
         * loop for a claim that finds nothing (with 4 relay processes, 78%
         * of the claims did) */
        int local = served_here(&f);
        if (local && hand_off(&f))
            f.handoff = new_handoff(&f);
        here = f.handoff || (local && odbox_handling_free_for(d, ds, f.nrows));
        rc = write_round(&f, c, err);
    }
    if (rc == ODBOX_OK)
        remember_flips(&f, c);
    if (rc == ODBOX_OK) {
        odbox_dmetrics_fanout(d->metrics, rd->delivered, rd->notifications);
        /* the handling job of this shard has work: the hand-off wakes a
         * loop here; else here and, where the dialect can and this
         * process does not take it all, in other processes */
        if (f.handoff)
            push_handoff(&f);
        else if (rd->delivered > 0)
            odbox_wake_raise(d->wake, ds->id, ODBOX_WAKE_NOTIFICATIONS, !here);
    }
    odbox_handoff_free(f.handoff);
    if (d->hook)
        d->hook(d->hook_ud, ODBOX_DELIVERY_ROUND_DONE, ds->shard, f.nev > 0 ? c : NULL, rd);
    if (c)
        odbox_pool_release(primary, &c);
    free(f.ev);
    free(f.rows);
    odbox_subs_types_free(f.types, f.ntypes);
    return rc == ODBOX_OK ? rc : shard_error(ds, rc, err);
}
