/* odbox — writing one shard's part of a plan: its domain rows and its
 * events (or the sentinel row), all or nothing.
 *
 * Two ways to the same rows:
 *  - a transaction: BEGIN, per model type its INSERT and its UPDATE, the
 *    events INSERT, COMMIT. Every dialect; the hook's points sit in it.
 *  - one statement in autocommit, where the dialect joins writes
 *    (join_writes_sql: PostgreSQL's data-modifying WITH): one round trip
 *    instead of four or more, and no BEGIN/COMMIT for the server to run.
 *    Taken only when that statement cannot half-succeed: when the shard
 *    has no UPDATE, or one optimistic UPDATE of one row on which every
 *    other row is made to depend, so that a stale version writes nothing.
 *    An UPDATE of several rows could match some and not others: that
 *    needs a transaction to roll back, and takes the first way.
 * Either way, a connection lost once the commit was sent (the COMMIT, or
 * the one statement) is ODBOX_EINDOUBT, which the executor never retries;
 * odbox_action_committed answers it from the events table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "action_internal.h"
#include "idempotency.h"
#include "odbox/dialect.h"
#include "odbox/uuid.h"

#define EVENT_COLUMNS 14
/* completion_date and event_date are the database's stmt_now_sql (else
 * two parameters more), delivered is the literal FALSE */
#define EVENT_PARAMS 11

/* Parameters per event row: the writer's time is bound for the dates
 * where the dialect has no stmt_now_sql. */
static size_t event_params(const odbox_dialect *d) { return EVENT_PARAMS + (d->stmt_now_sql ? 0 : 2); }

/* Most WITH items one guarded statement has: the UPDATE, one per inserted
 * domain row, and the events. The server plans every item; shards with
 * more inserted rows take a transaction. */
#define MAX_GUARDED_ITEMS 32

/* The idempotency key's INSERT as a part (idempotency.h), beside
 * ODBOX_SQL_INSERT, _UPDATE and _EVENTS. */
#define PART_KEY ODBOX_SQL_IDEM_CLAIM

/* One statement's worth of a shard's writes: rows of one model type to
 * insert or update, or event rows. */
typedef struct part {
    int op;                          /* ODBOX_SQL_INSERT, _UPDATE, _EVENTS or PART_KEY */
    const odbox_model_type *t;       /* NULL for events */
    odbox_model **models;            /* the plan's copies */
    const staged_event **events;     /* a NULL entry is the sentinel */
    size_t n;
} part;

/* A shard's writes in the order they are made: per model type in plan
 * order its inserts, then its updates; the events last. */
typedef struct shard_writes {
    part *parts;
    size_t nparts;
    size_t updated_rows;
    part key; /* n 1 when the run has an idempotency key, else 0 */
    odbox_model **models;
    const staged_event **events;
} shard_writes;

static void writes_free(shard_writes *w)
{
    free(w->parts);
    free(w->models);
    free(w->events);
}

static int collect(const run *rn, odbox_shard *shard, shard_writes *w, odbox_error *err)
{
    const odbox_plan *p = rn->plan;
    memset(w, 0, sizeof *w);
    w->parts = malloc((2 * p->n + 1) * sizeof *w->parts);
    w->models = malloc((p->n + 1) * sizeof *w->models);
    w->events = malloc((p->nevents + 1) * sizeof *w->events);
    if (!w->parts || !w->models || !w->events) {
        writes_free(w);
        return odbox_fail(err, ODBOX_ENOMEM, "persist: out of memory");
    }
    size_t nm = 0;
    for (size_t i = 0; i < p->n; i++) {
        const odbox_model_type *t = p->items[i].m->type;
        int seen = p->items[i].shard != shard;
        for (size_t j = 0; j < i && !seen; j++)
            seen = p->items[j].m->type == t && p->items[j].shard == shard;
        if (seen)
            continue;
        for (int op = STAGE_ADD; op <= STAGE_UPDATE; op++) {
            size_t first = nm;
            for (size_t j = i; j < p->n; j++)
                if (p->items[j].m->type == t && p->items[j].shard == shard && p->items[j].op == (stage_op)op)
                    w->models[nm++] = p->items[j].m;
            if (nm == first)
                continue;
            int sql_op = op == STAGE_ADD ? ODBOX_SQL_INSERT : ODBOX_SQL_UPDATE;
            w->parts[w->nparts++] = (part){sql_op, t, w->models + first, NULL, nm - first};
            if (sql_op == ODBOX_SQL_UPDATE)
                w->updated_rows += nm - first;
        }
    }
    size_t ne = 0;
    for (size_t i = 0; i < p->nevents; i++)
        if (p->events[i].shard == shard)
            w->events[ne++] = &p->events[i];
    if (ne == 0)
        w->events[ne++] = NULL; /* the sentinel: model and event columns NULL */
    w->parts[w->nparts++] = (part){ODBOX_SQL_EVENTS, NULL, NULL, w->events, ne};
    w->key = (part){PART_KEY, NULL, NULL, NULL, rn->key ? 1 : 0};
    return ODBOX_OK;
}

/* ---- events --------------------------------------------------------------- */

/* The events INSERT of n rows: INSERT ... VALUES, or with select_form an
 * INSERT ... SELECT that a WHERE can follow. One row selects its values
 * bare, typed by their columns; several come from a VALUES list, which
 * cannot take types from the columns, so each value carries its own (the
 * events table's column types are odbox's own).
 *
 * completion_date and event_date are the database's clock as the
 * statement runs, not the writer's: an ordered handler orders a model's
 * rows by event_date, and an action that read another's committed result
 * must come after it even when the two processes' clocks disagree. */
static int events_sql(const odbox_dialect *d, const char *eventlog, size_t n, int select_form, char **out,
                      odbox_error *err)
{
    enum { DB_NOW = -1, LITERAL_FALSE = -2 };
    static const int types[EVENT_COLUMNS] = {
        ODBOX_TYPE_UUID, ODBOX_TYPE_TEXT, ODBOX_TYPE_UUID, ODBOX_TYPE_TEXT,      ODBOX_TYPE_JSON,
        ODBOX_TYPE_TIMESTAMP /* started_date */, DB_NOW /* completion_date */, ODBOX_TYPE_TEXT, ODBOX_TYPE_TEXT,
        ODBOX_TYPE_TEXT, ODBOX_TYPE_JSON, DB_NOW /* event_date */, ODBOX_TYPE_TIMESTAMP /* deliver_after */,
        LITERAL_FALSE /* delivered */};
    const char *forms[EVENT_COLUMNS], *typed[EVENT_COLUMNS];
    for (size_t i = 0; i < EVENT_COLUMNS; i++) {
        if (types[i] == DB_NOW && d->stmt_now_sql) {
            forms[i] = typed[i] = d->stmt_now_sql;
        } else if (types[i] == DB_NOW) {
            forms[i] = odbox_repo_param_form(d, ODBOX_TYPE_TIMESTAMP);
            typed[i] = d->typed_param[ODBOX_TYPE_TIMESTAMP];
        } else if (types[i] == LITERAL_FALSE) {
            forms[i] = typed[i] = "FALSE";
        } else {
            forms[i] = odbox_repo_param_form(d, types[i]);
            typed[i] = d->typed_param[types[i]];
        }
    }
    int typed_rows = select_form && n > 1;
    char *source = typed_rows ? odbox_sql_insert_source((int)n, typed, EVENT_COLUMNS, 0)
                              : odbox_sql_insert_source((int)n, forms, EVENT_COLUMNS, select_form);
    odbox_buf b = {0};
    char table[ODBOX_NAME_MAX * 2];
    odbox_dialect_eventlog_table(d, eventlog, "events", table, sizeof table); /* a valid name: fits */
    odbox_buf_cat(&b, "INSERT INTO ", table,
                  " (id, namespace, action_id, action_name, action_params, started_date, "
                  "completion_date, model_id, model_type, event_type, payload, event_date, deliver_after, delivered) ",
                  typed_rows ? "SELECT * FROM (" : "", source ? source : "", typed_rows ? ") AS v" : "",
                  (char *)NULL);
    b.oom |= !source;
    free(source);
    *out = odbox_buf_take(&b);
    return *out ? ODBOX_OK : odbox_fail(err, ODBOX_ENOMEM, "events: out of memory");
}

/* rows[0] is the shard's event number `first` of the action: the ids
 * follow emission order (ordered handlers break event_date ties with
 * them), from the writer's millisecond writer_us (the dates are the
 * database's: events_sql). */
static int bind_events(odbox_stmt *s, int *idx, const odbox_dialect *d, const run *rn,
                       const staged_event *const *rows, size_t first, size_t n, int64_t writer_us, odbox_error *err)
{
    int rc = ODBOX_OK;
    for (size_t i = 0; rc == ODBOX_OK && i < n; i++) {
        const staged_event *ev = rows[i];
        char id[ODBOX_UUID_LEN + 1];
        odbox_uuid_v7_seq(writer_us / 1000, first + i, id);
        if ((rc = odbox_stmt_bind_valid_uuid(s, (*idx)++, id, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_text(s, (*idx)++, rn->ns, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_valid_uuid(s, (*idx)++, rn->action_id, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_text(s, (*idx)++, rn->action->name, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_json(s, (*idx)++, rn->params_json, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_timestamp(s, (*idx)++, rn->started_us, err)) != ODBOX_OK ||
            (!d->stmt_now_sql && (rc = odbox_stmt_bind_timestamp(s, (*idx)++, writer_us, err)) != ODBOX_OK) ||
            (rc = odbox_stmt_bind_text(s, (*idx)++, ev ? ev->model_id : NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_text(s, (*idx)++, ev ? ev->model_type : NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_text(s, (*idx)++, ev ? ev->et->name : NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_bind_json(s, (*idx)++, ev ? ev->payload : NULL, err)) != ODBOX_OK ||
            (!d->stmt_now_sql && (rc = odbox_stmt_bind_timestamp(s, (*idx)++, writer_us, err)) != ODBOX_OK))
            break;
        rc = ev && ev->deliver_after_us ? odbox_stmt_bind_timestamp(s, (*idx)++, ev->deliver_after_us, err)
                                        : odbox_stmt_bind_null(s, (*idx)++, ODBOX_TYPE_TIMESTAMP, err);
    }
    return rc;
}

/* The events part as multi-row INSERTs, one unless the rows exceed the
 * dialect's parameter limit. */
static int write_events(const run *rn, odbox_conn *c, odbox_shard *shard, const part *ev, int64_t writer_us,
                        odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    size_t per = (size_t)d->max_params / event_params(d);
    int rc = ODBOX_OK;
    for (size_t off = 0; off < ev->n && rc == ODBOX_OK; off += per) {
        size_t n = ev->n - off < per ? ev->n - off : per;
        odbox_sql_key key;
        odbox_sql_key_init(&key, ODBOX_SQL_EVENTS, n);
        odbox_sql_key_add(&key, 0, odbox_shard_eventlog(shard));
        odbox_stmt *s = NULL;
        if ((rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err)) != ODBOX_OK)
            break;
        if (!s) {
            char *sql = NULL;
            if ((rc = events_sql(d, odbox_shard_eventlog(shard), n, 0, &sql, err)) == ODBOX_OK)
                rc = odbox_stmt_prepare_keyed(c, sql, &key, &s, err);
            free(sql);
        }
        int idx = 1;
        if (rc == ODBOX_OK && (rc = bind_events(s, &idx, d, rn, ev->events + off, off, n, writer_us, err)) == ODBOX_OK)
            rc = odbox_stmt_execute(s, err);
        odbox_stmt_free(&s);
    }
    if (rc != ODBOX_OK)
        odbox_error_prefix(err, rc, "writing events");
    return rc;
}

int odbox_persist_events(const run *rn, odbox_conn *c, odbox_shard *shard, const staged_event *const *rows, size_t n,
                         int64_t writer_us, odbox_error *err)
{
    part ev = {ODBOX_SQL_EVENTS, NULL, NULL, (const staged_event **)rows, n};
    return write_events(rn, c, shard, &ev, writer_us, err);
}

/* ---- the transaction ------------------------------------------------------ */

static int call_hook(const run *rn, odbox_hook_point at, odbox_shard *shard, odbox_conn *c, odbox_error *err)
{
    if (!rn->hook)
        return ODBOX_OK;
    odbox_shard_id id = odbox_shard_get_id(shard);
    int rc = rn->hook(rn->hook_ud, at, id, c);
    if (rc != ODBOX_OK && at != ODBOX_HOOK_COMMITTED)
        return odbox_fail(err, rc < 0 ? rc : ODBOX_EDB, "hook failed the transaction on shard %d.%d at point %d",
                          id.group, id.member, (int)at);
    return ODBOX_OK;
}

static int write_in_transaction(const run *rn, odbox_conn *c, odbox_shard *shard, const shard_writes *w,
                                odbox_error *err)
{
    int claimed = c == rn->key_conn; /* its transaction is open and holds the key */
    int rc = claimed ? ODBOX_OK : odbox_conn_begin(c, err);
    if (rc != ODBOX_OK)
        return rc;
    int64_t completion = odbox_now_us(); /* the models' updated_date, the event ids' millisecond */
    const part *ev = &w->parts[w->nparts - 1];
    if (claimed && rn->result_json)
        rc = odbox_idem_set_result(c, odbox_shard_eventlog(shard), rn->ns, rn->key, rn->result_json, err);
    else if (rn->key && !claimed) { /* first: a concurrent holder of the key makes this wait here */
        odbox_idem_spend sp = {rn->action->name, rn->params_sha256, rn->action_id, rn->result_json};
        rc = odbox_idem_claim(c, odbox_shard_eventlog(shard), rn->ns, rn->key, &sp, rn->key_taken, err);
    }
    for (size_t i = 0; i + 1 < w->nparts && rc == ODBOX_OK; i++) {
        const part *p = &w->parts[i];
        rc = p->op == ODBOX_SQL_INSERT ? odbox_repo_insert(c, p->t, p->models, p->n, err)
                                       : odbox_repo_update(c, p->t, p->models, p->n, completion, err);
    }
    if (rc == ODBOX_OK && (rc = call_hook(rn, ODBOX_HOOK_DOMAIN_WRITTEN, shard, c, err)) == ODBOX_OK &&
        (rc = write_events(rn, c, shard, ev, completion, err)) == ODBOX_OK &&
        (rc = call_hook(rn, ODBOX_HOOK_EVENTS_WRITTEN, shard, c, err)) == ODBOX_OK)
        rc = odbox_conn_commit(c, err);
    if (rc != ODBOX_OK && odbox_conn_in_transaction(c)) {
        odbox_error e2;
        odbox_conn_rollback(c, &e2);
    }
    if (rc == ODBOX_OK)
        call_hook(rn, ODBOX_HOOK_COMMITTED, shard, c, err);
    return rc;
}

/* ---- one statement ---------------------------------------------------------- */

/* One statement of the joined one: rows [first, first + n) of a part. */
typedef struct item {
    const part *p;
    size_t first, n;
} item;

/* The joined statement's items, or 0 when the shard must take a
 * transaction. Guarded (one UPDATE row): the UPDATE first, then every
 * domain row as its own INSERT ... SELECT, which the dialect makes depend
 * on the UPDATE (a multi-row INSERT ... SELECT would not type its
 * parameters from the columns, and a user's column may be of a type that
 * no cast in the dialect names), then the events as one INSERT ...
 * SELECT. Unguarded: a statement per part. */
static size_t plan_items(const odbox_dialect *d, const run *rn, const shard_writes *w, item *items, int *guarded)
{
    if (!d->join_writes_sql || rn->hook || w->updated_rows > 1)
        return 0;
    size_t params = ODBOX_IDEM_CLAIM_PARAMS * w->key.n, inserted = w->key.n;
    for (size_t i = 0; i < w->nparts; i++) {
        const part *p = &w->parts[i];
        size_t per = event_params(d);
        if (p->op != ODBOX_SQL_EVENTS && odbox_repo_write_params(p->t, p->op, &per, NULL) != ODBOX_OK)
            return 0;
        params += per * p->n;
        if (p->op == ODBOX_SQL_INSERT)
            inserted += p->n;
    }
    *guarded = w->updated_rows == 1;
    if (params > (size_t)d->max_params || (*guarded && 2 + inserted > MAX_GUARDED_ITEMS))
        return 0;
    size_t n = 0;
    if (!*guarded) {
        if (w->key.n)
            items[n++] = (item){&w->key, 0, 1};
        for (size_t i = 0; i < w->nparts; i++)
            items[n++] = (item){&w->parts[i], 0, w->parts[i].n};
        return n;
    }
    for (size_t i = 0; i < w->nparts; i++)
        if (w->parts[i].op == ODBOX_SQL_UPDATE)
            items[n++] = (item){&w->parts[i], 0, 1};
    if (w->key.n) /* depends on the UPDATE too: a stale version spends no key */
        items[n++] = (item){&w->key, 0, 1};
    for (size_t i = 0; i < w->nparts; i++)
        for (size_t r = 0; w->parts[i].op == ODBOX_SQL_INSERT && r < w->parts[i].n; r++)
            items[n++] = (item){&w->parts[i], r, 1};
    items[n++] = (item){&w->parts[w->nparts - 1], 0, w->parts[w->nparts - 1].n};
    return n;
}

/* What the joined SQL is built from; a part's type or eventlog is added
 * once, at its first item. */
static void joined_key(odbox_sql_key *k, odbox_shard *shard, const item *items, size_t n, int guarded)
{
    odbox_sql_key_init(k, ODBOX_SQL_JOINED, n);
    odbox_sql_key_add_count(k, guarded, 0);
    for (size_t i = 0; i < n; i++) {
        odbox_sql_key_add_count(k, items[i].p->op, items[i].n);
        if (i && items[i].p == items[i - 1].p)
            continue;
        if (items[i].p->t) {
            odbox_sql_key_add_count(k, 0, items[i].p->t->ncolumns);
            odbox_repo_key_add_type(k, items[i].p->t);
        } else {
            odbox_sql_key_add(k, 0, odbox_shard_eventlog(shard));
        }
    }
}

static int joined_sql(const odbox_dialect *d, odbox_shard *shard, const item *items, size_t n, int guarded,
                      char **out, odbox_error *err)
{
    char **stmts = calloc(n, sizeof *stmts);
    if (!stmts)
        return odbox_fail(err, ODBOX_ENOMEM, "persist: out of memory");
    int rc = ODBOX_OK;
    for (size_t i = 0; i < n && rc == ODBOX_OK; i++) {
        const part *p = items[i].p;
        int select_form = guarded && p->op != ODBOX_SQL_UPDATE;
        const char *eventlog = odbox_shard_eventlog(shard);
        if (p->op == ODBOX_SQL_EVENTS)
            rc = events_sql(d, eventlog, items[i].n, select_form, &stmts[i], err);
        else if (p->op == PART_KEY)
            rc = odbox_idem_claim_sql(d, eventlog, select_form, &stmts[i], err);
        else
            rc = odbox_repo_write_sql(d, p->t, p->op, items[i].n, select_form, &stmts[i], err);
    }
    if (rc == ODBOX_OK)
        rc = d->join_writes_sql(d, (const char *const *)stmts, n, guarded, out, err);
    for (size_t i = 0; i < n; i++)
        free(stmts[i]);
    free(stmts);
    return rc;
}

static int write_in_one_statement(const run *rn, odbox_conn *c, odbox_shard *shard, const item *items, size_t n,
                                  int guarded, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_sql_key key;
    joined_key(&key, shard, items, n, guarded);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        char *sql = NULL;
        if ((rc = joined_sql(d, shard, items, n, guarded, &sql, err)) == ODBOX_OK)
            rc = odbox_stmt_prepare_keyed(c, sql, &key, &s, err);
        free(sql);
    }
    int64_t completion = odbox_now_us(); /* the models' updated_date, the event ids' millisecond */
    int idx = 1;
    for (size_t i = 0; i < n && rc == ODBOX_OK; i++) {
        const part *p = items[i].p;
        if (p->op == ODBOX_SQL_EVENTS) {
            rc = bind_events(s, &idx, d, rn, p->events + items[i].first, items[i].first, items[i].n, completion,
                             err);
            continue;
        }
        if (p->op == PART_KEY) {
            odbox_idem_spend sp = {rn->action->name, rn->params_sha256, rn->action_id, rn->result_json};
            rc = odbox_idem_claim_bind(s, &idx, rn->ns, rn->key, &sp, err);
            continue;
        }
        odbox_model **m = p->models + items[i].first;
        if (p->op == ODBOX_SQL_UPDATE && p->t->kind == ODBOX_KIND_MODEL)
            for (size_t r = 0; r < items[i].n; r++)
                m[r]->updated_us = completion;
        rc = odbox_repo_write_bind(s, &idx, p->t, p->op, m, items[i].n, err);
    }
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) != ODBOX_OK)
        rc = odbox_commit_failed(rc, err); /* autocommit: the statement was the commit */
    if (rc == ODBOX_EUNIQUE && rn->key)
        *rn->key_taken = 1; /* or a domain row's conflict: the executor reads the key to tell */
    if (rc == ODBOX_OK) {
        /* the count of the last statement, the events INSERT: all its
         * rows, or none when the guarded UPDATE matched no row. Any other
         * count (a trigger, a driver that cannot tell) leaves unknown what
         * the statement, which was its own commit, wrote: in doubt, never
         * retried, as a lost connection at that point is. */
        int64_t got = odbox_stmt_rows_affected(s), want = (int64_t)items[n - 1].n;
        if (guarded && got == 0)
            rc = odbox_repo_stale(items[0].p->t, items[0].p->models, 1, 0, err);
        else if (got != want)
            rc = odbox_fail(err, ODBOX_EINDOUBT,
                            "IN DOUBT: the shard's write, its own commit, reported %lld event rows where %lld "
                            "were sent, so what it committed is unknown",
                            (long long)got, (long long)want);
    }
    odbox_stmt_free(&s);
    if (rc != ODBOX_OK && rc != ODBOX_ESTALE)
        odbox_error_prefix(err, rc, "writing rows and events in one statement");
    return rc;
}

/* ---- did it commit? ------------------------------------------------------- */

int odbox_action_committed(odbox_registry *registry, odbox_shard_id id, const char *action_id, int *committed,
                           odbox_error *err)
{
    if (!registry || !committed)
        return odbox_fail(err, ODBOX_EINVAL, "action committed: %s is NULL", registry ? "committed" : "registry");
    *committed = 0;
    if (!action_id || !odbox_uuid_is_valid(action_id))
        return odbox_fail(err, ODBOX_EINVAL, "action committed: the action_id is not a UUID");
    odbox_shard *shard = odbox_registry_shard(registry, id);
    if (!shard)
        return odbox_fail(err, ODBOX_ENOTFOUND, "action committed: no shard %d.%d is registered", id.group, id.member);
    odbox_pool *pool = odbox_shard_primary(shard);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    char sql[512], table[ODBOX_NAME_MAX * 2];
    odbox_dialect_eventlog_table(odbox_conn_dialect(c), odbox_shard_eventlog(shard), "events", table, sizeof table);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE action_id = %s", table,
             odbox_repo_param_form(odbox_conn_dialect(c), ODBOX_TYPE_UUID));
    odbox_stmt *s = NULL;
    int64_t n = 0;
    if ((rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_uuid(s, 1, action_id, err)) == ODBOX_OK)
        rc = odbox_stmt_query_int64(s, &n, err);
    odbox_stmt_free(&s);
    odbox_pool_release(pool, &c);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "action committed: shard %d.%d", id.group, id.member);
    *committed = n > 0;
    return ODBOX_OK;
}

int odbox_persist_shard(const run *rn, odbox_shard *shard, odbox_error *err)
{
    shard_writes w;
    int rc = collect(rn, shard, &w, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_pool *pool = odbox_shard_primary(shard);
    odbox_conn *c = rn->key_conn; /* a keyed run writes only on the default shard, whose key it holds */
    item *items = NULL;
    /* Another run's perform holds this shard's connection, in its keyed
     * transaction (odbox_pool_lend): the acquire would hand it out, and
     * the one-statement write would run inside that transaction and be
     * reported committed though the keyed action may still roll it back. */
    if (!c && odbox_pool_lending(pool))
        rc = odbox_fail(err, ODBOX_ESTATE, "action %s: executed inside a keyed action's perform, which holds this "
                                           "shard's connection and transaction (its key was claimed first: "
                                           "MySQL/MariaDB, or odbox_executor_claim_keys_first): nothing written; "
                                           "execute it outside perform", rn->action->name);
    else if (c || (rc = odbox_pool_acquire(pool, &c, err)) == ODBOX_OK) {
        size_t rows = w.key.n;
        for (size_t i = 0; i < w.nparts; i++)
            rows += w.parts[i].n;
        int guarded = 0;
        size_t n = 0;
        if ((items = malloc(rows * sizeof *items)) == NULL)
            rc = odbox_fail(err, ODBOX_ENOMEM, "persist: out of memory");
        else if (!rn->key_conn)
            n = plan_items(odbox_conn_dialect(c), rn, &w, items, &guarded);
        if (rc == ODBOX_OK)
            rc = n ? write_in_one_statement(rn, c, shard, items, n, guarded, err)
                   : write_in_transaction(rn, c, shard, &w, err);
        if (rc == ODBOX_ETIMEDOUT && rn->key) /* the write cannot tell which lock it waited for */
            odbox_error_prefix(err, rc, "idempotency key '%.80s': another transaction holds it (or a row or lock "
                                        "the action's write needs), uncommitted, past the lock wait bound (50 s "
                                        "unless the session set its own): nothing written; try again once it ended",
                               rn->key);
        if (c != rn->key_conn)
            odbox_pool_release(pool, &c);
    }
    free(items);
    writes_free(&w);
    return rc;
}
