/* odbox — helpers shared by the executor's integration suites; see
 * actions.h. */
#include <stdio.h>
#include <string.h>
#include "actions.h"

const odbox_event_type EV_CREATED = {"DummyCreated"};
const odbox_event_type EV_CHANGED = {"DummyChanged"};
const odbox_event_type EV_POISON = {"PoisonEvent"};

odbox_executor *open_exe(dfx *f)
{
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_executor_open(NS, f->r, NULL, &exe, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_executor_register_model(exe, &DUMMY_T, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_executor_register_model(exe, &TAG_T, &e) == ODBOX_OK, "%s", e.message);
    return exe;
}

/* ---- a scripted perform ------------------------------------------------- */

int scripted(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    script *s = user;
    int k = s->calls++;
    if (k < MAXS) {
        s->attempts_seen[k] = odbox_context_attempt(ctx);
        const char *aid = odbox_context_action_id(ctx);
        snprintf(s->action_ids[k], sizeof s->action_ids[k], "%s", aid ? aid : "(null)");
    }
    s->registry_seen = odbox_context_registry(ctx);
    int step = 0, rc = 0;
    for (size_t i = 0; i < s->nadd && !rc; i++, step++)
        rc = odbox_plan_add(plan, s->add[i], err);
    for (size_t i = 0; i < s->nupd && !rc; i++, step++)
        rc = odbox_plan_update(plan, s->upd[i], &s->next_version[i], err);
    for (size_t i = 0; i < s->nemit && !rc; i++, step++) {
        json_object *p = s->emit[i].payload ? json_tokener_parse(s->emit[i].payload) : NULL;
        rc = odbox_plan_emit(plan, s->emit[i].m, s->emit[i].et, p, err);
        json_object_put(p); /* the caller keeps its reference */
    }
    if (rc) {
        if (!s->stage_rc) {
            s->stage_rc = rc;
            s->stage_step = step;
        }
        return rc;
    }
    if (s->result)
        odbox_plan_set_result(plan, json_tokener_parse(s->result));
    int attempt = odbox_context_attempt(ctx);
    int code = attempt < MAXS ? s->codes[attempt] : 0;
    if (code) {
        err->code = code;
        snprintf(err->message, sizeof err->message, "scripted failure %s on attempt %d", odbox_errname(code),
                 attempt);
        return code;
    }
    return 0;
}

int execute_script(odbox_executor *exe, const char *name, script *s, const char *params_json,
                   const odbox_exec_config *cfg, odbox_result *res, odbox_error *e)
{
    odbox_action a = {.name = name, .perform = scripted, .user = s};
    json_object *params = params_json ? json_tokener_parse(params_json) : NULL;
    if (params_json)
        ck_assert_ptr_nonnull(params);
    memset(res, 0, sizeof *res);
    odbox_error_clear(e);
    int rc = odbox_execute(exe, &a, params, cfg, res, e);
    json_object_put(params);
    return rc;
}

/* Runs and expects success. */
void execute_script_ok(odbox_executor *exe, const char *name, script *s, const char *params_json, odbox_result *res)
{
    odbox_error e = {0};
    int rc = execute_script(exe, name, s, params_json, NULL, res, &e);
    ck_assert_msg(rc == ODBOX_OK, "execute %s: %s %s", name, odbox_errname(rc), e.message);
}

int execute_keyed_json(odbox_executor *exe, const char *name, odbox_perform_fn perform, void *user, const char *key,
                       const char *params_json, odbox_result *res, odbox_error *e)
{
    odbox_action a = {.name = name, .perform = perform, .user = user};
    json_object *p = json_tokener_parse(params_json);
    ck_assert_ptr_nonnull(p);
    int rc = odbox_execute_keyed(exe, &a, p, key, NULL, res, e);
    json_object_put(p);
    return rc;
}

void dfx_short_lock_waits(dfx *f, int ms)
{
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(f->r));
    odbox_conn *c[4] = {NULL}; /* every idle session of the pool, and then some */
    odbox_error e;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(odbox_pool_acquire(pool, &c[i], &e), ODBOX_OK);
    if (itest_is("pg")) /* odbox's own bound, before the test shortens it */
        ck_assert_int_eq(itest_count(c[0], "SELECT CASE WHEN current_setting('lock_timeout') = '50s' THEN 1 ELSE 0 "
                                           "END"),
                         1);
    const odbox_dialect *d = odbox_conn_dialect(c[0]);
    char sql[128];
    for (int i = 0; i < 4; i++) {
        ck_assert(d->bounded_session_sql && d->bounded_session_sql(0, ms, 0, sql, sizeof sql));
        ck_assert_msg(odbox_conn_exec(c[i], sql, &e) == ODBOX_OK, "%s: %s", sql, e.message);
        odbox_pool_release(pool, &c[i]);
    }
}

int make_dummy(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    maker *mk = user;
    mk->calls++;
    if (mk->refuse)
        return odbox_error_set(err, ODBOX_EINVAL, "refused: a business rule");
    const char *name = json_object_get_string(json_object_object_get(params, "name"));
    int64_t amount = json_object_get_int64(json_object_object_get(params, "amount"));
    odbox_model *m = dfx_dummy(NULL, name, amount);
    json_object *payload = json_object_new_object();
    int rc = odbox_plan_add(plan, m, err);
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &EV_CREATED, payload, err);
    json_object_put(payload);
    if (rc == ODBOX_OK)
        odbox_plan_set_result(plan, json_tokener_parse("{\"n\":42,\"s\":\"x\"}"));
    odbox_model_free(&m);
    return rc;
}

/* ---- event rows ---------------------------------------------------------- */

static void get_str(odbox_stmt *s, int col, char *buf, size_t cap, int *is_null)
{
    const char *v = NULL;
    int null = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_get_text(s, col, &v, &null, &e) == ODBOX_OK, "col %d: %s", col, e.message);
    snprintf(buf, cap, "%s", null || !v ? "" : v);
    if (is_null)
        *is_null = null;
    else
        ck_assert_msg(!null, "column %d is NULL", col);
}

/* Reads the shard's event rows ordered by event type, then model id. */
int read_events(dfx *f, int shard, evrow *rows, int cap)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT id, namespace, action_id, action_name, action_params, started_date, completion_date, "
             "model_id, model_type, event_type, payload, event_date, delivered FROM %s "
             "ORDER BY COALESCE(event_type, ''), COALESCE(model_id, '')",
             itest_evt(f->ev[shard], "events"));
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_prepare(f->c[shard], sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    int n = 0, null;
    while (odbox_stmt_fetch(s, &e) == 1) {
        ck_assert_int_lt(n, cap);
        evrow *r = &rows[n++];
        memset(r, 0, sizeof *r);
        get_str(s, 1, r->id, sizeof r->id, NULL);
        get_str(s, 2, r->ns, sizeof r->ns, NULL);
        get_str(s, 3, r->action_id, sizeof r->action_id, NULL);
        get_str(s, 4, r->action_name, sizeof r->action_name, NULL);
        get_str(s, 5, r->params, sizeof r->params, NULL);
        ck_assert_int_eq(odbox_stmt_get_timestamp(s, 6, &r->started, &null, &e), ODBOX_OK);
        ck_assert(!null);
        ck_assert_int_eq(odbox_stmt_get_timestamp(s, 7, &r->completion, &null, &e), ODBOX_OK);
        ck_assert(!null);
        get_str(s, 8, r->model_id, sizeof r->model_id, &r->model_id_null);
        get_str(s, 9, r->model_type, sizeof r->model_type, &r->model_type_null);
        get_str(s, 10, r->event_type, sizeof r->event_type, &r->event_type_null);
        get_str(s, 11, r->payload, sizeof r->payload, &r->payload_null);
        ck_assert_int_eq(odbox_stmt_get_timestamp(s, 12, &r->event_date, &null, &e), ODBOX_OK);
        ck_assert(!null);
        ck_assert_int_eq(odbox_stmt_get_bool(s, 13, &r->delivered, &r->delivered_null, &e), ODBOX_OK);
    }
    odbox_stmt_free(&s);
    return n;
}

/* What every row of one execution shares, and what every row must be. */
void check_rows(const evrow *rows, int n, const char *action_id, const char *action_name,
                       const char *params_json, int64_t t0, int64_t t1)
{
    int sub_ms = 0;
    for (int i = 0; i < n; i++) {
        const evrow *r = &rows[i];
        ck_assert_msg(odbox_uuid_is_valid(r->id), "row id %s", r->id);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(rows[j].id, r->id);
        ck_assert_str_eq(r->ns, NS);
        ck_assert_str_eq(r->action_id, action_id);
        ck_assert_str_eq(r->action_name, action_name);
        ck_assert_msg(dfx_json_same(r->params, params_json), "params %s, want %s", r->params, params_json);
        ck_assert_msg(r->started >= t0 - SLACK_US && r->started <= t1 + SLACK_US, "started %lld not in [%lld, %lld]",
                      (long long)r->started, (long long)t0, (long long)t1);
        ck_assert_msg(r->completion >= r->started, "completion %lld < started %lld", (long long)r->completion,
                      (long long)r->started);
        ck_assert(r->completion <= t1 + SLACK_US);
        ck_assert_msg(r->event_date == r->completion, "event_date %lld != completion %lld", (long long)r->event_date,
                      (long long)r->completion);
        ck_assert(!r->delivered_null);
        ck_assert_int_eq(r->delivered, 0);
        /* one shard transaction: one pair of dates */
        ck_assert(r->started == rows[0].started && r->completion == rows[0].completion);
        if (r->started % 1000 || r->completion % 1000)
            sub_ms = 1;
        /* sentinel rows are NULL in all four, event rows in none */
        int nulls = r->model_id_null + r->model_type_null + r->event_type_null + r->payload_null;
        ck_assert_msg(nulls == 0 || nulls == 4, "row %d: %d of the model/event columns NULL", i, nulls);
    }
    /* microseconds are kept (a whole millisecond twice is a 1e-6 chance) */
    if (n)
        ck_assert_msg(sub_ms, "dates look truncated to milliseconds: %lld %lld", (long long)rows[0].started,
                      (long long)rows[0].completion);
}

void assert_sentinel(const evrow *r)
{
    ck_assert(r->model_id_null && r->model_type_null && r->event_type_null && r->payload_null);
}

void assert_event(const evrow *r, const odbox_model *m, const char *type, const char *payload)
{
    ck_assert(!r->model_id_null && !r->event_type_null && !r->payload_null && !r->model_type_null);
    ck_assert_str_eq(r->model_id, odbox_model_id(m));
    ck_assert_str_eq(r->model_type, odbox_model_get_type(m)->name);
    ck_assert_str_eq(r->event_type, type);
    ck_assert_msg(dfx_json_same(r->payload, payload), "payload %s, want %s", r->payload, payload);
}

odbox_model *find_dummy(dfx *f, const char *id)
{
    odbox_model *m = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_repo_find(f->r, &DUMMY_T, id, ODBOX_READ_PRIMARY, &m, &e) == ODBOX_OK, "find %s: %s", id,
                  e.message);
    return m;
}

int64_t amount_of(dfx *f, const char *id)
{
    odbox_model *m = find_dummy(f, id);
    int64_t v = 0;
    ck_assert_int_eq(odbox_model_get_int64(m, "amount", &v, NULL), ODBOX_OK);
    odbox_model_free(&m);
    return v;
}

/* Nothing at all on the shard: no domain rows, no events. */
void assert_empty(dfx *f, int shard)
{
    ck_assert_int_eq(dfx_rows(f, shard, "dummies"), 0);
    ck_assert_int_eq(dfx_rows(f, shard, "tags"), 0);
    ck_assert_int_eq(dfx_events(f, shard), 0);
}

/* ---- many small actions from threads -------------------------------------- */

static void *run_many(void *arg)
{
    many *m = arg;
    odbox_model *d = m->add ? NULL : dfx_dummy(NULL, "many", 1);
    for (int i = 0; i < m->per_thread; i++) {
        odbox_model *own = m->add ? dfx_dummy(NULL, "many", i) : NULL;
        script s = {.emit = {{own ? own : d, &EV_CHANGED, "{}"}}, .nemit = 1};
        if (own) {
            s.add[0] = own;
            s.nadd = 1;
        }
        odbox_result res;
        odbox_error e;
        if (execute_script(m->exe, "Many", &s, NULL, NULL, &res, &e) != ODBOX_OK)
            atomic_fetch_add(&m->failures, 1);
        odbox_result_clear(&res);
        odbox_model_free(&own);
    }
    odbox_model_free(&d);
    return NULL;
}

void many_start(many *m, odbox_executor *exe, int nthreads, int per_thread, int add)
{
    ck_assert_int_le(nthreads, MANY_MAX_THREADS);
    m->exe = exe;
    m->nthreads = nthreads;
    m->per_thread = per_thread;
    m->add = add;
    atomic_init(&m->failures, 0);
    for (int i = 0; i < nthreads; i++)
        ck_assert_int_eq(pthread_create(&m->t[i], NULL, run_many, m), 0);
}

void many_wait(many *m)
{
    for (int i = 0; i < m->nthreads; i++)
        pthread_join(m->t[i], NULL);
    ck_assert_int_eq(atomic_load(&m->failures), 0);
}

/* ---- hooks --------------------------------------------------------------- */

int kill_before_commit(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
{
    (void)shard;
    if (at == ODBOX_HOOK_EVENTS_WRITTEN)
        itest_kill_session(((dfx *)ud)->c[0], itest_session_id(conn));
    return 0;
}

int record_hook(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
{
    hookrec *h = ud;
    if (h->n < 16) {
        h->at[h->n] = at;
        h->shard[h->n] = shard;
    }
    h->n++;
    if (h->f && at == ODBOX_HOOK_DOMAIN_WRITTEN) {
        h->dummies_inside = itest_count(conn, "SELECT COUNT(*) FROM dummies");
        h->dummies_outside = dfx_rows(h->f, shard.member, "dummies");
    }
    if (h->f && at == ODBOX_HOOK_EVENTS_WRITTEN)
        h->events_inside = itest_count(conn, "SELECT COUNT(*) FROM %s", itest_evt(h->f->ev[shard.member], "events"));
    if ((int)at == h->fail_at && (h->fail_group < 0 || h->fail_group == shard.group) &&
        (h->fail_member < 0 || h->fail_member == shard.member))
        return h->fail_code;
    return 0;
}

const char *nested_json(char *buf, int depth)
{
    char *p = buf + sprintf(buf, "{\"a\": ");
    for (int i = 1; i < depth; i++)
        *p++ = '[';
    for (int i = 1; i < depth; i++)
        *p++ = ']';
    strcpy(p, "}");
    return buf;
}
