/* odbox — operations on event_notifications: counts by handler and state
 * with the due rows, rows in due order, and requeue (see
 * odbox/notifications.h). The delivery lag and the Prometheus text are in
 * notifications_metrics.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "notifications_internal.h"
#include "odbox/uuid.h"

#define TABLE "event_notifications"

/* ---- shared with notifications_metrics.c and purge.c ------------------ */

size_t odbox_ops_shard_count(const odbox_registry *r, const odbox_shard *one)
{
    return one ? 1 : odbox_registry_shard_count(r);
}

odbox_shard *odbox_ops_shard_at(const odbox_registry *r, const odbox_shard *one, size_t i)
{
    return one ? (odbox_shard *)one : odbox_registry_shard_at(r, i);
}

int odbox_ops_shard_error(const odbox_shard *s, int rc, odbox_error *err)
{
    odbox_shard_id id = odbox_shard_get_id(s);
    return odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
}

int odbox_ops_connect(const odbox_shard *s, const char *table, odbox_conn **conn, char *name, size_t cap,
                      odbox_error *err)
{
    int rc = odbox_pool_acquire(odbox_shard_primary(s), conn, err);
    if (rc != ODBOX_OK)
        return odbox_ops_shard_error(s, rc, err);
    /* the eventlog is a validated name: the table's name fits */
    odbox_dialect_eventlog_table(odbox_conn_dialect(*conn), odbox_shard_eventlog(s), table, name, cap);
    return ODBOX_OK;
}

void odbox_ops_release(const odbox_shard *s, odbox_conn **conn)
{
    odbox_pool_release(odbox_shard_primary(s), conn);
}

int64_t odbox_ops_given_now(const odbox_clock *clock)
{
    return clock && clock->now_us ? clock->now_us(clock->ud) : ODBOX_OPS_DB_NOW;
}

int odbox_ops_now(odbox_conn *c, int64_t given, int64_t *now, odbox_error *err)
{
    *now = given;
    if (given != ODBOX_OPS_DB_NOW)
        return ODBOX_OK;
    int rc = odbox_job_db_now(c, now, err);
    return rc == ODBOX_OK ? rc : odbox_error_prefix(err, rc, "reading the database's time");
}

void odbox_ops_ts_col(odbox_buf *b, const odbox_dialect *d, const char *col)
{
    if (d->timestamp_read_open)
        odbox_buf_cat(b, d->timestamp_read_open, col, d->timestamp_read_close, (char *)NULL);
    else
        odbox_buf_append(b, col);
}

static const char *const states[] = {"PENDING", "FAILED", "SUCCEEDED", "EXPIRED", NULL};

/* in, any case, as one of states (or one of allowed when given) in out. */
static int state_parse(const char *in, const char *const *allowed, char out[16], odbox_error *err)
{
    for (const char *const *s = allowed; *s; s++)
        if (odbox_strcaseeq(in, *s)) {
            snprintf(out, 16, "%s", *s);
            return ODBOX_OK;
        }
    return odbox_fail(err, ODBOX_EINVAL, "notifications: unknown state '%.40s' (%s)", in,
                      allowed == states ? "PENDING, FAILED, SUCCEEDED or EXPIRED" : "FAILED or EXPIRED");
}

static int name_ok(const char *what, const char *v, odbox_error *err)
{
    if (v && !*v)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: the %s is empty", what);
    return ODBOX_OK;
}

int odbox_ops_filter_init(const odbox_notification_filter *f, odbox_ops_filter *out, odbox_error *err)
{
    static const odbox_notification_filter all = {0};
    if (!f)
        f = &all;
    memset(out, 0, sizeof *out);
    int rc;
    if (f->state && (rc = state_parse(f->state, states, out->state, err)) != ODBOX_OK)
        return rc;
    if ((rc = name_ok("handler name", f->handler, err)) != ODBOX_OK ||
        (rc = name_ok("event type", f->event_type, err)) != ODBOX_OK)
        return rc;
    out->shard = f->shard;
    out->handler = f->handler;
    out->event_type = f->event_type;
    out->now_us = odbox_ops_given_now(f->clock);
    return ODBOX_OK;
}

void odbox_ops_filter_sql(odbox_buf *b, const odbox_ops_filter *f)
{
    if (f->state[0])
        odbox_buf_append(b, " AND state = ?");
    if (f->handler)
        odbox_buf_append(b, " AND handler_name = ?");
    if (f->event_type)
        odbox_buf_append(b, " AND event_type = ?");
}

int odbox_ops_filter_bind(odbox_stmt *s, const odbox_ops_filter *f, int *idx, odbox_error *err)
{
    int rc = ODBOX_OK;
    if (f->state[0])
        rc = odbox_stmt_bind_text(s, (*idx)++, f->state, err);
    if (rc == ODBOX_OK && f->handler)
        rc = odbox_stmt_bind_text(s, (*idx)++, f->handler, err);
    if (rc == ODBOX_OK && f->event_type)
        rc = odbox_stmt_bind_text(s, (*idx)++, f->event_type, err);
    return rc;
}

odbox_notification_stats *odbox_ops_stats_entry(odbox_ops_stats *v, size_t from, odbox_shard_id shard,
                                                const char *handler, odbox_error *err)
{
    for (size_t i = from; i < v->n; i++)
        if (!strcmp(v->v[i].handler, handler))
            return &v->v[i];
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        odbox_notification_stats *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) {
            odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
            return NULL;
        }
        v->v = nv, v->cap = cap;
    }
    odbox_notification_stats *e = &v->v[v->n];
    memset(e, 0, sizeof *e);
    if (!(e->handler = odbox_strdup(handler))) {
        odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
        return NULL;
    }
    e->shard = shard;
    v->n++;
    return e;
}

/* Runs sql (built in b) with f's parameters after `pre` timestamps. */
static int prepare_run(odbox_conn *c, odbox_buf *b, const int64_t *pre, int npre, const odbox_ops_filter *f,
                       odbox_stmt **s, odbox_error *err)
{
    char *sql = odbox_buf_take(b);
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
    int rc = odbox_stmt_prepare(c, sql, s, err), idx = 1;
    free(sql);
    for (int i = 0; rc == ODBOX_OK && i < npre; i++)
        rc = odbox_stmt_bind_timestamp(*s, idx++, pre[i], err);
    if (rc == ODBOX_OK && (rc = odbox_ops_filter_bind(*s, f, &idx, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(*s, err);
    return rc;
}

/* Rows by handler and state: every selected row is read. */
static int read_counts(odbox_conn *c, const char *table, const odbox_ops_filter *f, odbox_ops_stats *v, size_t from,
                       odbox_shard_id id, odbox_error *err)
{
    odbox_buf b = {0};
    odbox_buf_cat(&b, "SELECT handler_name, state, COUNT(*) FROM ", table, " WHERE 1 = 1", (char *)NULL);
    odbox_ops_filter_sql(&b, f);
    odbox_buf_append(&b, " GROUP BY handler_name, state");
    odbox_stmt *s = NULL;
    int rc = prepare_run(c, &b, NULL, 0, f, &s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *handler, *state;
        int64_t count = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &handler, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &state, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 3, &count, NULL, err)) != ODBOX_OK)
            break;
        odbox_notification_stats *e = odbox_ops_stats_entry(v, from, id, handler, err);
        if (!e) {
            rc = ODBOX_ENOMEM;
            break;
        }
        /* a state odbox does not write (another application's) counts nowhere */
        int64_t *slot = !strcmp(state, "PENDING")     ? &e->pending
                        : !strcmp(state, "FAILED")    ? &e->failed
                        : !strcmp(state, "SUCCEEDED") ? &e->succeeded
                        : !strcmp(state, "EXPIRED")   ? &e->expired
                                                      : NULL;
        if (slot)
            *slot += count;
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

/* Due rows by handler and the oldest next_retry_at among them, through
 * a due index: (handler_name, next_retry_at) WHERE state IN ('PENDING',
 * 'FAILED') (V17), read in handler order, or (state, next_retry_at) on
 * MySQL/MariaDB. */
static int read_due(odbox_conn *c, const char *table, const odbox_ops_filter *f, int64_t now, odbox_ops_stats *v,
                    size_t from, odbox_shard_id id, odbox_error *err)
{
    if (f->state[0] && strcmp(f->state, "PENDING") && strcmp(f->state, "FAILED"))
        return ODBOX_OK; /* finished rows are never due */
    odbox_buf b = {0};
    odbox_buf_append(&b, "SELECT handler_name, COUNT(*), ");
    odbox_ops_ts_col(&b, odbox_conn_dialect(c), "MIN(next_retry_at)");
    odbox_buf_cat(&b, " FROM ", table, " WHERE state IN ('PENDING', 'FAILED') AND next_retry_at <= ?",
                  (char *)NULL);
    odbox_ops_filter_sql(&b, f);
    odbox_buf_append(&b, " GROUP BY handler_name");
    odbox_stmt *s = NULL;
    int rc = prepare_run(c, &b, &now, 1, f, &s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *handler;
        int64_t due = 0, oldest = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &handler, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 2, &due, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_timestamp(s, 3, &oldest, NULL, err)) != ODBOX_OK)
            break;
        odbox_notification_stats *e = odbox_ops_stats_entry(v, from, id, handler, err);
        if (!e) {
            rc = ODBOX_ENOMEM;
            break;
        }
        e->due = due;
        e->oldest_due_age_us = now - oldest;
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

int odbox_ops_shard_counts(const odbox_shard *s, const odbox_ops_filter *f, odbox_ops_stats *v, int64_t *now,
                           odbox_error *err)
{
    odbox_conn *c = NULL;
    char table[ODBOX_NAME_MAX * 2 + 32];
    size_t from = v->n;
    odbox_shard_id id = odbox_shard_get_id(s);
    int64_t at = 0;
    int rc = odbox_ops_connect(s, TABLE, &c, table, sizeof table, err);
    if (rc != ODBOX_OK)
        return rc;
    if ((rc = odbox_ops_now(c, f->now_us, &at, err)) == ODBOX_OK &&
        (rc = read_counts(c, table, f, v, from, id, err)) == ODBOX_OK)
        rc = read_due(c, table, f, at, v, from, id, err);
    if (now)
        *now = at;
    odbox_ops_release(s, &c);
    for (size_t i = from; i < v->n; i++)
        v->v[i].backlog = v->v[i].pending + v->v[i].failed;
    return rc == ODBOX_OK ? rc : odbox_ops_shard_error(s, rc, err);
}

void odbox_ops_stats_finish(odbox_ops_stats *v, odbox_notification_stats **out, size_t *n)
{
    /* entries are grouped by shard in the order the shards were read
     * (the registry's): sort each group by handler */
    for (size_t i = 0; i < v->n;) {
        size_t j = i;
        while (j < v->n && v->v[j].shard.group == v->v[i].shard.group && v->v[j].shard.member == v->v[i].shard.member)
            j++;
        for (size_t a = i + 1; a < j; a++) /* insertion sort: a shard has few handlers */
            for (size_t k = a; k > i && strcmp(v->v[k - 1].handler, v->v[k].handler) > 0; k--) {
                odbox_notification_stats t = v->v[k];
                v->v[k] = v->v[k - 1];
                v->v[k - 1] = t;
            }
        i = j;
    }
    *out = v->v;
    *n = v->n;
    v->v = NULL;
    v->n = v->cap = 0;
}

void odbox_notification_stats_free(odbox_notification_stats **p, size_t n)
{
    if (!p || !*p)
        return;
    for (size_t i = 0; i < n; i++)
        free((*p)[i].handler);
    free(*p);
    *p = NULL;
}

/* ---- counts ---------------------------------------------------------- */

int odbox_notifications_count(const odbox_registry *r, const odbox_notification_filter *f,
                              odbox_notification_stats **out, size_t *n, odbox_error *err)
{
    if (!r || !out || !n)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: registry, out or n is NULL");
    *out = NULL;
    *n = 0;
    odbox_ops_filter of;
    int rc = odbox_ops_filter_init(f, &of, err);
    odbox_ops_stats v = {0};
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_ops_shard_count(r, of.shard); i++)
        rc = odbox_ops_shard_counts(odbox_ops_shard_at(r, of.shard, i), &of, &v, NULL, err);
    if (rc == ODBOX_OK)
        odbox_ops_stats_finish(&v, out, n);
    odbox_notification_stats_free(&v.v, v.n);
    return rc;
}

/* ---- rows ------------------------------------------------------------ */

void odbox_notification_rows_free(odbox_notification_row **rows, size_t n)
{
    if (!rows || !*rows)
        return;
    for (size_t i = 0; i < n; i++) {
        free((*rows)[i].handler);
        free((*rows)[i].event_type);
    }
    free(*rows);
    *rows = NULL;
}

typedef struct row_vec {
    odbox_notification_row *v;
    size_t n, cap;
} row_vec;

static int read_row(odbox_stmt *s, odbox_shard_id id, odbox_notification_row *row, odbox_error *err)
{
    const char *t;
    int64_t attempts = 0;
    int rc;
    memset(row, 0, sizeof *row);
    row->shard = id;
    if ((rc = odbox_stmt_get_text(s, 1, &t, NULL, err)) != ODBOX_OK)
        return rc;
    snprintf(row->id, sizeof row->id, "%s", t);
    if ((rc = odbox_stmt_get_text(s, 2, &t, NULL, err)) != ODBOX_OK)
        return rc;
    snprintf(row->event_id, sizeof row->event_id, "%s", t);
    if ((rc = odbox_stmt_get_text(s, 3, &t, NULL, err)) != ODBOX_OK)
        return rc;
    if (!(row->handler = odbox_strdup(t)))
        return odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
    if ((rc = odbox_stmt_get_text(s, 4, &t, NULL, err)) != ODBOX_OK)
        return rc;
    snprintf(row->state, sizeof row->state, "%s", t);
    if ((rc = odbox_stmt_get_int64(s, 5, &attempts, NULL, err)) != ODBOX_OK ||
        (rc = odbox_stmt_get_timestamp(s, 6, &row->next_retry_us, NULL, err)) != ODBOX_OK ||
        (rc = odbox_stmt_get_text(s, 7, &t, NULL, err)) != ODBOX_OK)
        return rc;
    row->attempts = (int)attempts;
    if (!(row->event_type = odbox_strdup(t)))
        return odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
    return ODBOX_OK;
}

/* Up to limit rows of shard s in due order, appended to v. In order from
 * a due index when f selects PENDING or FAILED rows of one handler
 * (PostgreSQL, SQLite) or of one state (MySQL/MariaDB); otherwise
 * sorted. */
static int shard_rows(const odbox_shard *sh, const odbox_ops_filter *f, size_t limit, row_vec *v, odbox_error *err)
{
    odbox_conn *c = NULL;
    char table[ODBOX_NAME_MAX * 2 + 32];
    int rc = odbox_ops_connect(sh, TABLE, &c, table, sizeof table, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_buf b = {0};
    odbox_buf_append(&b, "SELECT id, event_id, handler_name, state, attempts, ");
    odbox_ops_ts_col(&b, odbox_conn_dialect(c), "next_retry_at");
    odbox_buf_cat(&b, ", event_type FROM ", table, " WHERE 1 = 1", (char *)NULL);
    odbox_ops_filter_sql(&b, f);
    /* the table's column, not the select list's text cast of the same name */
    odbox_buf_cat(&b, " ORDER BY ", table, ".next_retry_at, ", table, ".id LIMIT ?", (char *)NULL);
    char *sql = odbox_buf_take(&b);
    odbox_stmt *s = NULL;
    int idx = 1;
    if (!sql)
        rc = odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
    else if ((rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK &&
             (rc = odbox_ops_filter_bind(s, f, &idx, err)) == ODBOX_OK &&
             (rc = odbox_stmt_bind_int64(s, idx, (int64_t)limit, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    free(sql);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        if (v->n == v->cap) {
            size_t cap = v->cap ? v->cap * 2 : 64;
            odbox_notification_row *nv = realloc(v->v, cap * sizeof *nv);
            if (!nv) {
                rc = odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
                break;
            }
            v->v = nv, v->cap = cap;
        }
        rc = read_row(s, odbox_shard_get_id(sh), &v->v[v->n], err);
        v->n++; /* also a half-read row: its strings are freed with the rest */
    }
    odbox_stmt_free(&s);
    odbox_ops_release(sh, &c);
    return rc < 0 ? odbox_ops_shard_error(sh, rc, err) : ODBOX_OK;
}

static int row_cmp(const void *a, const void *b)
{
    const odbox_notification_row *x = a, *y = b;
    if (x->next_retry_us != y->next_retry_us)
        return x->next_retry_us < y->next_retry_us ? -1 : 1;
    if (x->shard.group != y->shard.group)
        return x->shard.group - y->shard.group;
    if (x->shard.member != y->shard.member)
        return x->shard.member - y->shard.member;
    return strcmp(x->id, y->id);
}

int odbox_notifications_list(const odbox_registry *r, const odbox_notification_filter *f, size_t limit,
                             odbox_notification_row **rows, size_t *n, odbox_error *err)
{
    if (!r || !rows || !n)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: registry, rows or n is NULL");
    *rows = NULL;
    *n = 0;
    if (limit < 1 || limit > 100000)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: a list of %zu rows (1..100000)", limit);
    odbox_ops_filter of;
    int rc = odbox_ops_filter_init(f, &of, err);
    row_vec v = {0};
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_ops_shard_count(r, of.shard); i++)
        rc = shard_rows(odbox_ops_shard_at(r, of.shard, i), &of, limit, &v, err);
    if (rc != ODBOX_OK) {
        odbox_notification_rows_free(&v.v, v.n);
        return rc;
    }
    /* each shard gave its first `limit`: the first `limit` of all are among them */
    if (v.n)
        qsort(v.v, v.n, sizeof *v.v, row_cmp);
    for (size_t i = limit; i < v.n; i++) {
        free(v.v[i].handler);
        free(v.v[i].event_type);
    }
    *rows = v.v;
    *n = v.n < limit ? v.n : limit;
    return ODBOX_OK;
}

/* ---- requeue --------------------------------------------------------- */

/* The state of notification id on shard sh into state ("" when none). */
static int state_of(const odbox_shard *sh, const char *id, char state[16], odbox_error *err)
{
    odbox_conn *c = NULL;
    char table[ODBOX_NAME_MAX * 2 + 32], sql[ODBOX_NAME_MAX * 2 + 96];
    state[0] = '\0';
    int rc = odbox_ops_connect(sh, TABLE, &c, table, sizeof table, err);
    if (rc != ODBOX_OK)
        return rc;
    snprintf(sql, sizeof sql, "SELECT state FROM %s WHERE id = %s", table, odbox_conn_dialect(c)->uuid_param);
    odbox_stmt *s = NULL;
    const char *t;
    if ((rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_uuid(s, 1, id, err)) == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1 &&
        (rc = odbox_stmt_get_text(s, 1, &t, NULL, err)) == ODBOX_OK)
        snprintf(state, 16, "%s", t);
    odbox_stmt_free(&s);
    odbox_ops_release(sh, &c);
    return rc < 0 ? odbox_ops_shard_error(sh, rc, err) : ODBOX_OK;
}

/* What a requeue selects: " AND ..." for the state, handler and id
 * given, bound by requeue_bind_run. */
static void requeue_filter(odbox_buf *b, const odbox_dialect *d, const char *state, const odbox_requeue_spec *q)
{
    if (state[0])
        odbox_buf_append(b, " AND state = ?");
    if (q->handler)
        odbox_buf_append(b, " AND handler_name = ?");
    if (q->id)
        odbox_buf_cat(b, " AND id = ", d->uuid_param, (char *)NULL);
}

/* A deadlock (MySQL/MariaDB lock the rows a requeue's UPDATE scans, and
 * a handling round or a purge writes them in another order) rolled the
 * statement back whole: it runs again, up to this many times in all. */
#define REQUEUE_TRIES 5

/* Binds from idx on: now (unless it is the database's: now_sql in the
 * text) nnow times, then requeue_filter's parameters; runs s. */
static int requeue_bind_run(odbox_stmt *s, int64_t now, int nnow, const char *state, const odbox_requeue_spec *q,
                            odbox_error *err)
{
    int rc = ODBOX_OK, idx = 1;
    for (int i = 0; rc == ODBOX_OK && now != ODBOX_OPS_DB_NOW && i < nnow; i++)
        rc = odbox_stmt_bind_timestamp(s, idx++, now, err);
    if (rc == ODBOX_OK && state[0])
        rc = odbox_stmt_bind_text(s, idx++, state, err);
    if (rc == ODBOX_OK && q->handler)
        rc = odbox_stmt_bind_text(s, idx++, q->handler, err);
    if (rc == ODBOX_OK && q->id)
        rc = odbox_stmt_bind_uuid(s, idx++, q->id, err);
    return rc == ODBOX_OK ? odbox_stmt_execute_autocommit(s, REQUEUE_TRIES, NULL, err) : rc;
}

static int prepare_built(odbox_conn *c, odbox_buf *b, odbox_stmt **s, odbox_error *err)
{
    char *sql = odbox_buf_take(b);
    int rc = sql ? odbox_stmt_prepare(c, sql, s, err) : odbox_fail(err, ODBOX_ENOMEM, "notifications: out of memory");
    free(sql);
    return rc;
}

/* The requeue of one shard: one UPDATE, then the count of the rows it
 * left because a round holds them. "now" is the clock's, or the
 * database's own (now_sql, no parameter): the rows' times and leases are
 * the database's, and this process's clock may disagree with it (a row
 * requeued "due now" by a host ahead would wait until that host's now).
 * A row whose lease runs is being called: requeued, its round's outcome
 * (guarded by the attempts it read) would be lost and the row called
 * again after the lease; its round decides it, and the operator is told
 * how many such rows were left. */
static int shard_requeue(const odbox_shard *sh, const char *state, const odbox_requeue_spec *q, int64_t now,
                         odbox_requeue_result *res, odbox_error *err)
{
    odbox_conn *c = NULL;
    char table[ODBOX_NAME_MAX * 2 + 32];
    int rc = odbox_ops_connect(sh, TABLE, &c, table, sizeof table, err);
    if (rc != ODBOX_OK)
        return rc;
    const odbox_dialect *d = odbox_conn_dialect(c);
    const char *at = now == ODBOX_OPS_DB_NOW ? d->now_sql : "?";
    /* a requeued row of an ordered subscription takes its place in the
     * order again (an EXPIRED one left it) */
    char subs[ODBOX_NAME_MAX * 2 + 32];
    odbox_dialect_eventlog_table(d, odbox_shard_eventlog(sh), "subscriptions", subs, sizeof subs);
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", table, " SET state = 'PENDING', attempts = 0, next_retry_at = ", at,
                  ", updated_date = ", at, ", created_date = ", at,
                  ", order_key = CASE WHEN EXISTS (SELECT 1 FROM ", subs,
                  " s WHERE s.name = handler_name AND s.ordered = 1) THEN model_id END"
                  " WHERE state IN ('FAILED', 'EXPIRED') AND (lease_until IS NULL OR lease_until <= ",
                  at, ")", (char *)NULL);
    requeue_filter(&b, d, state, q);
    odbox_stmt *s = NULL;
    if ((rc = prepare_built(c, &b, &s, err)) == ODBOX_OK)
        rc = requeue_bind_run(s, now, 4, state, q, err);
    if (rc == ODBOX_OK) {
        int64_t k = odbox_stmt_rows_affected(s);
        if (k < 0)
            rc = odbox_fail(err, ODBOX_EDB, "notifications: the driver did not tell how many rows moved");
        else
            res->moved += k;
    }
    odbox_stmt_free(&s);
    if (rc == ODBOX_OK) {
        odbox_buf_cat(&b, "SELECT COUNT(*) FROM ", table, " WHERE state IN ('FAILED', 'EXPIRED') AND lease_until > ",
                      at, (char *)NULL);
        requeue_filter(&b, d, state, q);
        int64_t held = 0;
        if ((rc = prepare_built(c, &b, &s, err)) == ODBOX_OK &&
            (rc = requeue_bind_run(s, now, 1, state, q, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
            rc = odbox_stmt_get_int64(s, 1, &held, NULL, err);
        res->in_flight += held;
        odbox_stmt_free(&s);
    }
    odbox_ops_release(sh, &c);
    return rc == ODBOX_OK ? rc : odbox_ops_shard_error(sh, rc, err);
}

int odbox_notifications_requeue(const odbox_registry *r, const odbox_requeue_spec *s, int64_t *moved,
                                odbox_error *err)
{
    odbox_requeue_result res;
    int rc = odbox_notifications_requeue_run(r, s, &res, err);
    if (moved)
        *moved = res.moved;
    return rc;
}

int odbox_notifications_requeue_run(const odbox_registry *r, const odbox_requeue_spec *s, odbox_requeue_result *res,
                                    odbox_error *err)
{
    static const odbox_requeue_spec all = {0};
    static const char *const requeueable[] = {"FAILED", "EXPIRED", NULL};
    odbox_requeue_result total = {0, 0};
    if (!s)
        s = &all;
    if (res)
        *res = total;
    if (!r)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: registry is NULL");
    char state[16] = "";
    int rc;
    if (s->state && (rc = state_parse(s->state, requeueable, state, err)) != ODBOX_OK)
        return rc;
    if ((rc = name_ok("handler name", s->handler, err)) != ODBOX_OK)
        return rc;
    if (s->id && !odbox_uuid_is_valid(s->id))
        return odbox_fail(err, ODBOX_EINVAL, "notifications: '%.40s' is not a notification id (a UUID)", s->id);
    if (s->id && s->handler)
        return odbox_fail(err, ODBOX_EINVAL, "notifications: requeue one handler's rows or one id, not both");
    int64_t now = odbox_ops_given_now(s->clock);
    size_t ns = odbox_ops_shard_count(r, s->shard);
    for (size_t i = 0; rc == ODBOX_OK && i < ns; i++)
        rc = shard_requeue(odbox_ops_shard_at(r, s->shard, i), state, s, now, &total, err);
    if (res)
        *res = total;
    if (rc != ODBOX_OK || !s->id || total.moved || total.in_flight)
        return rc;
    /* say why the id moved nothing */
    char found[16] = "";
    for (size_t i = 0; rc == ODBOX_OK && !found[0] && i < ns; i++)
        rc = state_of(odbox_ops_shard_at(r, s->shard, i), s->id, found, err);
    if (rc != ODBOX_OK)
        return rc;
    if (found[0])
        return odbox_fail(err, ODBOX_ENOTFOUND, "notifications: notification %s is %s, not %s", s->id, found,
                          state[0] ? state : "FAILED or EXPIRED");
    return odbox_fail(err, ODBOX_ENOTFOUND, "notifications: no notification %s", s->id);
}

/* ---- the notification rows the fan-out and a replay insert ------------------------ */

#define NOTIFICATION_COLUMNS                                                                                     \
    "id, event_id, handler_name, namespace, action_id, action_name, action_params, started_date, "              \
    "completion_date, model_id, model_type, event_type, payload, event_date, state, attempts, next_retry_at, " \
    "created_date, updated_date, order_key"

/* INSERT ... SELECT of notification rows (v.nid, v.eid, v.h) bound as
 * nrows rows, the event's columns copied in, created_date and
 * updated_date bound first; rows that exist (event_id, handler_name) are
 * skipped. where: what the joined event must be (e for the events). The
 * order_key is the model_id where the subscription is ordered, read in
 * the same statement. With handoff, the rows are claimed as they are
 * written (next_retry_at, lease_owner and lease_until as a claim sets
 * them; odbox_notifications_bind_handoff), but for the rows of an ordered
 * subscription (they wait for the older rows of their model_id) and of
 * events not yet due (deliver_after). */
#define HANDOFF_WHEN "CASE WHEN COALESCE(s.ordered, 0) = 0 AND COALESCE(e.deliver_after, e.event_date) <= %s THEN "
char *odbox_notifications_insert_sql(const odbox_dialect *d, const char *events, const char *notifications,
                                     const char *subscriptions, size_t nrows, const char *where, int handoff)
{
    static const char *const cols[] = {"nid", "eid", "h"};
    static const int types[] = {ODBOX_TYPE_UUID, ODBOX_TYPE_UUID, ODBOX_TYPE_TEXT};
    char *rows = NULL;
    if (d->bound_rows_sql(d, "v", cols, types, 3, nrows, &rows, NULL) != ODBOX_OK)
        return NULL;
    const char *ts = d->typed_param[ODBOX_TYPE_TIMESTAMP];
    odbox_buf sel = {0};
    odbox_buf_append(&sel,
                     "SELECT v.nid, e.id, v.h, e.namespace, e.action_id, e.action_name, e.action_params, "
                     "e.started_date, e.completion_date, e.model_id, e.model_type, e.event_type, e.payload, "
                     "e.event_date, 'PENDING', 0, ");
    if (handoff) {
        odbox_buf_appendf(&sel, HANDOFF_WHEN, ts);
        odbox_buf_cat(&sel, ts, " ELSE COALESCE(e.deliver_after, e.event_date) END, ", (char *)NULL);
    } else {
        odbox_buf_append(&sel, "COALESCE(e.deliver_after, e.event_date), ");
    }
    odbox_buf_cat(&sel, ts, ", ", ts, ", CASE WHEN s.ordered = 1 THEN e.model_id END", (char *)NULL);
    if (handoff) {
        odbox_buf_append(&sel, ", ");
        odbox_buf_appendf(&sel, HANDOFF_WHEN, ts);
        odbox_buf_cat(&sel, d->typed_param[ODBOX_TYPE_TEXT], " END, ", (char *)NULL);
        odbox_buf_appendf(&sel, HANDOFF_WHEN, ts);
        odbox_buf_cat(&sel, ts, " END", (char *)NULL);
    }
    odbox_buf_cat(&sel, " FROM ", rows, " LEFT JOIN ", events, " e ON e.id = v.eid LEFT JOIN ", subscriptions,
                  " s ON s.name = v.h WHERE ", where, (char *)NULL);
    free(rows);
    char *select = odbox_buf_take(&sel);
    if (!select)
        return NULL;
    odbox_buf b = {0};
    odbox_buf_appendf(&b, d->insert_select_ignore_fmt, notifications,
                      handoff ? NOTIFICATION_COLUMNS ", lease_owner, lease_until" : NOTIFICATION_COLUMNS, select, "id");
    free(select);
    return odbox_buf_take(&b);
}

int odbox_notifications_bind_handoff(odbox_stmt *s, int *idx, int part, const char *token, int64_t now_us,
                                     int64_t until_us, odbox_error *err)
{
    int rc = odbox_stmt_bind_timestamp(s, (*idx)++, now_us, err);
    if (rc == ODBOX_OK && part == 1 && (rc = odbox_stmt_bind_text(s, (*idx)++, token, err)) == ODBOX_OK)
        rc = odbox_stmt_bind_timestamp(s, (*idx)++, now_us, err);
    return rc == ODBOX_OK ? odbox_stmt_bind_timestamp(s, (*idx)++, until_us, err) : rc;
}
