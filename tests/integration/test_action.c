/* odbox — integration tests of the executor: the outbox guarantee.
 *
 * Domain rows and event rows land together or not at all (failures
 * injected after the domain write, after the event write, inside the
 * events INSERT, in perform, in staging); every row of an execution shares
 * its action id, namespace, name, params and dates; sentinel rows; JSON
 * objects only; event-name collisions; optimistic-lock races between
 * threads with and without retries; batch updates; per-code retry
 * counters; cross-shard refusal, cross-shard commits and partial commits;
 * routing to the default shard; connections lost before and after the
 * commit was sent (ODBOX_EINDOUBT); bad input.
 *
 * Uses the "dummies" fixture defined in test_repo.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "dummies.h"


#define NS "com.example.odbox_test"
#define SLACK_US 5000000 /* "within a few seconds of now" */

static const odbox_event_type EV_CREATED = {"DummyCreated"};
static const odbox_event_type EV_CHANGED = {"DummyChanged"};
static const odbox_event_type EV_POISON = {"PoisonEvent"};

static odbox_executor *open_exe(dfx *f)
{
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_executor_open(NS, f->r, NULL, &exe, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_executor_register_model(exe, &DUMMY_T, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_executor_register_model(exe, &TAG_T, &e) == ODBOX_OK, "%s", e.message);
    return exe;
}

/* ---- a scripted perform ------------------------------------------------- */

#define MAXS 8

typedef struct emit_spec {
    const odbox_model *m;
    const odbox_event_type *et;
    const char *payload; /* JSON text, parsed per call */
} emit_spec;

typedef struct script {
    const odbox_model *add[MAXS];
    size_t nadd;
    const odbox_model *upd[MAXS];
    size_t nupd;
    emit_spec emit[MAXS];
    size_t nemit;
    int codes[MAXS];       /* perform's return on attempt k (0: go on) */
    const char *result;    /* JSON handed to odbox_plan_set_result */
    /* observed */
    int calls;
    int attempts_seen[MAXS];
    char action_ids[MAXS][37];
    odbox_registry *registry_seen;
    int stage_rc;          /* the first failing staging call's code */
    int stage_step;        /* 1-based index of that call (adds, updates, emits) */
    int64_t next_version[MAXS];
} script;

static int scripted(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
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

static int run(odbox_executor *exe, const char *name, script *s, const char *params_json,
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
static void run_ok(odbox_executor *exe, const char *name, script *s, const char *params_json, odbox_result *res)
{
    odbox_error e = {0};
    int rc = run(exe, name, s, params_json, NULL, res, &e);
    ck_assert_msg(rc == ODBOX_OK, "execute %s: %s %s", name, odbox_errname(rc), e.message);
}

/* ---- event rows ---------------------------------------------------------- */

typedef struct evrow {
    char id[64], ns[256], action_id[64], action_name[256];
    char params[8192];
    int64_t started, completion, event_date;
    char model_id[256], model_type[256], event_type[256], payload[8192];
    int model_id_null, model_type_null, event_type_null, payload_null;
    int delivered, delivered_null;
} evrow;

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
static int read_events(dfx *f, int shard, evrow *rows, int cap)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT id, namespace, action_id, action_name, action_params, started_date, completion_date, "
             "model_id, model_type, event_type, payload, event_date, delivered FROM %s.events "
             "ORDER BY COALESCE(event_type, ''), COALESCE(model_id, '')",
             f->ev[shard]);
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
static void check_rows(const evrow *rows, int n, const char *action_id, const char *action_name,
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

static void assert_sentinel(const evrow *r)
{
    ck_assert(r->model_id_null && r->model_type_null && r->event_type_null && r->payload_null);
}

static void assert_event(const evrow *r, const odbox_model *m, const char *type, const char *payload)
{
    ck_assert(!r->model_id_null && !r->event_type_null && !r->payload_null && !r->model_type_null);
    ck_assert_str_eq(r->model_id, odbox_model_id(m));
    ck_assert_str_eq(r->model_type, odbox_model_get_type(m)->name);
    ck_assert_str_eq(r->event_type, type);
    ck_assert_msg(dfx_json_same(r->payload, payload), "payload %s, want %s", r->payload, payload);
}

static odbox_model *find_dummy(dfx *f, const char *id)
{
    odbox_model *m = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_repo_find(f->r, &DUMMY_T, id, ODBOX_READ_PRIMARY, &m, &e) == ODBOX_OK, "find %s: %s", id,
                  e.message);
    return m;
}

static int64_t amount_of(dfx *f, const char *id)
{
    odbox_model *m = find_dummy(f, id);
    int64_t v = 0;
    ck_assert_int_eq(odbox_model_get_int64(m, "amount", &v, NULL), ODBOX_OK);
    odbox_model_free(&m);
    return v;
}

/* Nothing at all on the shard: no domain rows, no events. */
static void assert_empty(dfx *f, int shard)
{
    ck_assert_int_eq(dfx_rows(f, shard, "dummies"), 0);
    ck_assert_int_eq(dfx_rows(f, shard, "tags"), 0);
    ck_assert_int_eq(dfx_events(f, shard), 0);
}

/* ---- hooks --------------------------------------------------------------- */

typedef struct hookrec {
    int fail_at;                 /* hook point that fails (0: none) */
    int fail_group, fail_member; /* -1: any shard */
    int fail_code;
    int n;
    int at[16];
    odbox_shard_id shard[16];
    /* visibility probes at DOMAIN_WRITTEN / EVENTS_WRITTEN */
    dfx *f;
    int64_t dummies_inside, events_inside, dummies_outside;
} hookrec;

static int hook(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
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
        h->events_inside = itest_count(conn, "SELECT COUNT(*) FROM %s.events", h->f->ev[shard.member]);
    if ((int)at == h->fail_at && (h->fail_group < 0 || h->fail_group == shard.group) &&
        (h->fail_member < 0 || h->fail_member == shard.member))
        return h->fail_code;
    return 0;
}

/* ======================================================================== */

START_TEST(execute_writes_rows_and_events)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "alice", 5);
    script s = {.add = {d},
                .nadd = 1,
                .emit = {{d, &EV_CREATED, "{\"amount\": 5, \"who\": \"alice\"}"},
                         {d, &EV_CHANGED, "{\"note\": \"x\", \"list\": [1, {\"a\": null}]}"}},
                .nemit = 2,
                .result = "{\"ok\": true, \"id\": 7}"};
    const char *params = "{\"amount\": 5, \"who\": \"alice\", \"nested\": {\"k\": [1, 2]}}";
    odbox_result res;
    int64_t t0 = dfx_now_us();
    run_ok(exe, "shop.CreateDummy", &s, params, &res);
    int64_t t1 = dfx_now_us();

    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(s.attempts_seen[0], 0);
    ck_assert_ptr_eq(s.registry_seen, f.r);
    ck_assert(odbox_uuid_is_valid(s.action_ids[0]));
    ck_assert_str_eq(res.action_id, s.action_ids[0]);
    ck_assert_int_eq(res.attempts, 1);
    ck_assert_int_eq(res.retries[0], 0);
    ck_assert_ptr_nonnull(res.value);
    ck_assert_int_eq(json_object_get_int(json_object_object_get(res.value, "id")), 7);
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    ck_assert_int_eq(res.has_failed_shard, 0);

    /* the domain row, as staged */
    odbox_model *got = find_dummy(&f, odbox_model_id(d));
    dfx_assert_same(d, got);
    odbox_model_free(&got);

    /* two event rows, one per emit, sharing the execution's context */
    evrow rows[4];
    ck_assert_int_eq(read_events(&f, 0, rows, 4), 2);
    check_rows(rows, 2, res.action_id, "shop.CreateDummy", params, t0, t1);
    assert_event(&rows[0], d, "DummyChanged", "{\"note\": \"x\", \"list\": [1, {\"a\": null}]}");
    assert_event(&rows[1], d, "DummyCreated", "{\"amount\": 5, \"who\": \"alice\"}");
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(DISTINCT action_id) FROM %s.events", f.ev[0]), 1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE delivered = FALSE", f.ev[0]), 2);

    odbox_result_clear(&res);
    ck_assert_ptr_null(res.value);
    ck_assert_int_eq(res.attempts, 0);
    ck_assert_str_eq(res.action_id, "");
    /* and a second execution gets its own action id */
    script s2 = {0};
    run_ok(exe, "shop.Noop", &s2, NULL, &res);
    ck_assert_str_ne(res.action_id, rows[0].action_id);
    ck_assert_ptr_null(res.value);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(DISTINCT action_id) FROM %s.events", f.ev[0]), 2);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    ck_assert_ptr_null(exe);
    dfx_close(&f);
}
END_TEST

START_TEST(hooks_run_inside_the_transaction)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    hookrec h = {.fail_group = -1, .fail_member = -1, .f = &f};
    odbox_executor_set_hook(exe, hook, &h);
    odbox_model *d = dfx_dummy(NULL, "h", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}, {d, &EV_CHANGED, "{}"}}, .nemit = 2};
    odbox_result res;
    run_ok(exe, "HookedCreate", &s, NULL, &res);
    ck_assert_int_eq(h.n, 3);
    ck_assert_int_eq(h.at[0], ODBOX_HOOK_DOMAIN_WRITTEN);
    ck_assert_int_eq(h.at[1], ODBOX_HOOK_EVENTS_WRITTEN);
    ck_assert_int_eq(h.at[2], ODBOX_HOOK_COMMITTED);
    for (int i = 0; i < 3; i++)
        ck_assert(h.shard[i].group == 0 && h.shard[i].member == 0);
    /* the hook's connection is the transaction's: it sees the row that
     * nobody else sees before the commit */
    ck_assert_int_eq(h.dummies_inside, 1);
    ck_assert_int_eq(h.dummies_outside, 0);
    ck_assert_int_eq(h.events_inside, 2);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    /* a failure reported after the commit does not undo it */
    hookrec late = {.fail_at = ODBOX_HOOK_COMMITTED, .fail_group = -1, .fail_member = -1, .fail_code = ODBOX_EDB};
    odbox_executor_set_hook(exe, hook, &late);
    script s2 = {0};
    odbox_error e;
    int rc = run(exe, "AfterCommit", &s2, NULL, NULL, &res, &e);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    ck_assert_msg(rc == ODBOX_OK, "a committed action reported %s: %s", odbox_errname(rc), e.message);
    odbox_result_clear(&res);
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(sentinel_row_for_an_empty_plan)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    script s = {0};
    odbox_result res;
    int64_t t0 = dfx_now_us();
    run_ok(exe, "DoNothing", &s, NULL, &res);
    int64_t t1 = dfx_now_us();
    evrow rows[2];
    ck_assert_int_eq(read_events(&f, 0, rows, 2), 1);
    check_rows(rows, 1, res.action_id, "DoNothing", "{}", t0, t1); /* params NULL: {} */
    assert_sentinel(&rows[0]);
    ck_assert_int_eq(dfx_events(&f, 1), 0); /* on the default shard only */
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE event_type IS NULL AND model_id IS NULL "
                                         "AND model_type IS NULL AND payload IS NULL AND delivered = FALSE",
                                 f.ev[0]),
                     1);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(sentinel_row_for_rows_without_events)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *t = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(t, "label", "vip", &e), ODBOX_OK);
    script s = {.add = {t}, .nadd = 1};
    odbox_result res;
    int64_t t0 = dfx_now_us();
    run_ok(exe, "AddTag", &s, "{\"label\": \"vip\"}", &res);
    int64_t t1 = dfx_now_us();
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM tags WHERE label = 'vip' AND version = 1 "
                                         "AND state = 'ACTIVE' AND id = '%s'",
                                 odbox_model_id(t)),
                     1);
    evrow rows[4];
    ck_assert_int_eq(read_events(&f, 0, rows, 4), 1);
    check_rows(rows, 1, res.action_id, "AddTag", "{\"label\": \"vip\"}", t0, t1);
    assert_sentinel(&rows[0]);
    odbox_result_clear(&res);

    /* a model added without an event: one sentinel row too */
    odbox_model *d = dfx_dummy(NULL, "quiet", 1);
    script s2 = {.add = {d}, .nadd = 1};
    run_ok(exe, "AddQuietly", &s2, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s' AND event_type IS NULL",
                                 f.ev[0], res.action_id),
                     1);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    /* a model updated without an event: the sentinel row beside the update */
    odbox_model *cur = find_dummy(&f, odbox_model_id(d));
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 2, &e), ODBOX_OK);
    script s4 = {.upd = {cur}, .nupd = 1};
    run_ok(exe, "UpdateQuietly", &s4, NULL, &res);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(d)), 2);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s' AND event_type IS NULL "
                                         "AND model_id IS NULL AND payload IS NULL",
                                 f.ev[0], res.action_id),
                     1);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_result_clear(&res);
    odbox_model_free(&cur);
    /* entities cannot emit */
    script s3 = {.emit = {{t, &EV_CREATED, "{}"}}, .nemit = 1};
    int rc = run(exe, "EmitOnEntity", &s3, NULL, NULL, &res, &e);
    ck_assert_int_eq(s3.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_result_clear(&res);
    odbox_model_free(&t);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(update_advances_version_and_updated_date)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "u", 10);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    run_ok(exe, "Create", &s, NULL, &res);
    odbox_result_clear(&res);
    odbox_model *v1 = find_dummy(&f, odbox_model_id(d));
    ck_assert_int_eq(odbox_model_version(v1), 1);
    const int64_t created = odbox_model_created(v1);
    ck_assert_int_eq(odbox_model_updated(v1), created);

    for (int round = 2; round <= 3; round++) {
        odbox_model *cur = find_dummy(&f, odbox_model_id(d));
        int64_t before_upd = odbox_model_updated(cur);
        ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 10 * round, NULL), ODBOX_OK);
        script u = {.upd = {cur}, .nupd = 1, .emit = {{cur, &EV_CHANGED, "{\"round\": 1}"}}, .nemit = 1};
        int64_t t0 = dfx_now_us();
        run_ok(exe, "Update", &u, NULL, &res);
        int64_t t1 = dfx_now_us();
        ck_assert_int_eq(u.next_version[0], round);
        odbox_model *after = find_dummy(&f, odbox_model_id(d));
        ck_assert_int_eq(odbox_model_version(after), round);
        ck_assert_int_eq(odbox_model_created(after), created);
        ck_assert_msg(odbox_model_updated(after) > before_upd, "updated_date %lld did not advance past %lld",
                      (long long)odbox_model_updated(after), (long long)before_upd);
        ck_assert(odbox_model_updated(after) >= t0 - SLACK_US && odbox_model_updated(after) <= t1 + SLACK_US);
        dfx_assert_columns(cur, after);
        /* the update's event is this execution's */
        ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s' AND model_id = '%s' "
                                             "AND event_type = 'DummyChanged'",
                                     f.ev[0], res.action_id, odbox_model_id(d)),
                         1);
        odbox_result_clear(&res);
        odbox_model_free(&cur);
        odbox_model_free(&after);
    }
    /* staging an update of a version that is no longer current is stale */
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    cfg.nretries = 0;
    ck_assert_int_eq(odbox_model_set_int64(v1, "amount", 999, NULL), ODBOX_OK);
    script stale = {.upd = {v1}, .nupd = 1, .emit = {{v1, &EV_CHANGED, "{}"}}, .nemit = 1};
    odbox_error e;
    ck_assert_int_eq(run(exe, "StaleUpdate", &stale, NULL, &cfg, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(d)), 30);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_result_clear(&res);
    /* a soft delete through an action: reads no longer see the row */
    odbox_model *cur = find_dummy(&f, odbox_model_id(d));
    ck_assert_int_eq(odbox_model_set_state(cur, "DELETED", NULL), ODBOX_OK);
    script del = {.upd = {cur}, .nupd = 1, .emit = {{cur, &EV_CHANGED, "{\"deleted\": true}"}}, .nemit = 1};
    run_ok(exe, "Delete", &del, NULL, &res);
    odbox_result_clear(&res);
    odbox_model *gone = NULL;
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, odbox_model_id(d), ODBOX_READ_PRIMARY, &gone, &e), ODBOX_ENOTFOUND);
    ck_assert_ptr_null(gone);
    int64_t n = -1;
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE state = 'DELETED' AND version = 4"), 1);
    odbox_model_free(&cur);
    odbox_model_free(&v1);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(batch_update_of_five_in_one_plan)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    enum { N = 5 };
    odbox_model *d[N];
    const int64_t base = 1767225600000000LL;
    script s = {0};
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", i);
        d[i] = dfx_dummy(NULL, name, i);
        ck_assert_int_eq(odbox_model_set_timestamp(d[i], "seen_at", base + i * 1000003LL + 123456, NULL), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_double(d[i], "ratio", 0.25 * i, NULL), ODBOX_OK);
        s.add[s.nadd++] = d[i];
    }
    odbox_result res;
    run_ok(exe, "CreateFive", &s, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), N);
    ck_assert_int_eq(dfx_events(&f, 0), 1); /* one sentinel */

    /* one plan updating all five: new microsecond timestamps, NULLs kept
     * (reward_points, flag, aliases NULL in every row), ratio NULL in all */
    odbox_model *cur[N];
    script u = {0};
    char payloads[N][64];
    for (int i = 0; i < N; i++) {
        cur[i] = find_dummy(&f, odbox_model_id(d[i]));
        ck_assert_int_eq(odbox_model_set_int64(cur[i], "amount", 100 + i, NULL), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_timestamp(cur[i], "seen_at", base + 86400000000LL + i * 11 + 654321, NULL),
                         ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_null(cur[i], "ratio", NULL), ODBOX_OK);
        u.upd[u.nupd++] = cur[i];
        snprintf(payloads[i], sizeof payloads[i], "{\"i\": %d}", i);
        u.emit[u.nemit++] = (emit_spec){cur[i], &EV_CHANGED, payloads[i]};
    }
    run_ok(exe, "UpdateFive", &u, NULL, &res);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(u.next_version[i], 2);
        odbox_model *got = find_dummy(&f, odbox_model_id(d[i]));
        ck_assert_int_eq(odbox_model_version(got), 2);
        ck_assert_int_eq(odbox_model_created(got), odbox_model_created(d[i]));
        ck_assert(odbox_model_updated(got) > odbox_model_created(got));
        dfx_assert_columns(cur[i], got);
        ck_assert(odbox_model_is_null(got, "reward_points") && odbox_model_is_null(got, "flag") &&
                  odbox_model_is_null(got, "aliases") && odbox_model_is_null(got, "ratio"));
        int64_t ts = 0;
        ck_assert_int_eq(odbox_model_get_timestamp(got, "seen_at", &ts, NULL), ODBOX_OK);
        ck_assert(ts == base + 86400000000LL + i * 11 + 654321);
        odbox_model_free(&got);
    }
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s' AND event_type = "
                                         "'DummyChanged' AND model_type = 'Dummy'",
                                 f.ev[0], res.action_id),
                     N);
    ck_assert_int_eq(dfx_events(&f, 0), 1 + N);
    odbox_result_clear(&res);
    for (int i = 0; i < N; i++) {
        odbox_model_free(&d[i]);
        odbox_model_free(&cur[i]);
    }
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(injected_failures_write_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *base = dfx_dummy(NULL, "existing", 1);
    script s0 = {.add = {base}, .nadd = 1, .emit = {{base, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    run_ok(exe, "Seed", &s0, NULL, &res);
    odbox_result_clear(&res);

    const int points[] = {ODBOX_HOOK_DOMAIN_WRITTEN, ODBOX_HOOK_EVENTS_WRITTEN};
    for (int p = 0; p < 2; p++) {
        hookrec h = {.fail_at = points[p], .fail_group = -1, .fail_member = -1, .fail_code = ODBOX_EDB};
        odbox_executor_set_hook(exe, hook, &h);
        /* an add, an update of the existing row and events */
        odbox_model *d = dfx_dummy(NULL, "doomed", 2);
        odbox_model *cur = find_dummy(&f, odbox_model_id(base));
        ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 77, NULL), ODBOX_OK);
        script s = {.add = {d},
                    .nadd = 1,
                    .upd = {cur},
                    .nupd = 1,
                    .emit = {{d, &EV_CREATED, "{}"}, {cur, &EV_CHANGED, "{}"}},
                    .nemit = 2};
        odbox_error e;
        int rc = run(exe, "Doomed", &s, NULL, NULL, &res, &e);
        ck_assert_msg(rc == ODBOX_EDB, "hook at %d: %s %s", points[p], odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(h.n, p + 1); /* no COMMITTED call */
        ck_assert_int_eq(res.ncommitted, 0);
        ck_assert_int_eq(res.has_failed_shard, 1);
        ck_assert(res.failed_shard.group == 0 && res.failed_shard.member == 0);
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
        ck_assert_int_eq(dfx_events(&f, 0), 1);
        odbox_model *after = find_dummy(&f, odbox_model_id(base));
        ck_assert_int_eq(odbox_model_version(after), 1);
        ck_assert_int_eq(amount_of(&f, odbox_model_id(base)), 1);
        odbox_model_free(&after);
        odbox_result_clear(&res);
        odbox_model_free(&d);
        odbox_model_free(&cur);
    }
    odbox_executor_set_hook(exe, NULL, NULL);
    /* the executor is still usable and the connections were cleaned */
    script s2 = {0};
    run_ok(exe, "After", &s2, NULL, &res);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    odbox_model_free(&base);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(failing_events_insert_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    itest_exec(f.c[0],
               "ALTER TABLE %s.events ADD CONSTRAINT no_poison CHECK (event_type IS NULL OR event_type <> 'PoisonEvent')",
               f.ev[0]);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "poisoned", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}, {d, &EV_POISON, "{}"}}, .nemit = 2};
    odbox_result res;
    odbox_error e;
    int rc = run(exe, "Poison", &s, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_EDB, "%s %s", odbox_errname(rc), e.message);
    ck_assert(e.message[0]);
    ck_assert_int_eq(strlen(e.sqlstate), 5);
    assert_empty(&f, 0);
    odbox_result_clear(&res);
    /* the constraint blocks only the poison */
    script ok = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    run_ok(exe, "Antidote", &ok, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(perform_failure_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "never", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1, .codes = {ODBOX_ENOTFOUND}};
    odbox_result res;
    odbox_error e;
    int rc = run(exe, "Fails", &s, "{\"x\": 1}", NULL, &res, &e);
    ck_assert_int_eq(rc, ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "scripted failure") != NULL, "perform's message lost: %s", e.message);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(res.attempts, 1);
    ck_assert_str_eq(res.action_id, s.action_ids[0]);
    ck_assert_int_eq(res.ncommitted, 0);
    assert_empty(&f, 0);
    odbox_result_clear(&res);
    /* a failing perform's result is not leaked either */
    script s2 = {.result = "{\"partial\": 1}", .codes = {ODBOX_EINVAL}};
    ck_assert_int_eq(run(exe, "FailsWithResult", &s2, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    assert_empty(&f, 0);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(params_and_payloads_must_be_objects)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_result res;
    odbox_error e;
    const char *bad_params[] = {"[1, 2]", "42", "\"text\"", "true"};
    for (size_t i = 0; i < sizeof bad_params / sizeof bad_params[0]; i++) {
        script s = {0};
        int rc = run(exe, "Params", &s, bad_params[i], NULL, &res, &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "params %s: %s", bad_params[i], odbox_errname(rc));
        ck_assert_int_eq(s.calls, 0);
        ck_assert_str_eq(res.action_id, "");
        odbox_result_clear(&res);
    }
    assert_empty(&f, 0);

    odbox_model *d = dfx_dummy(NULL, "p", 1);
    const char *bad_payloads[] = {"[1, 2]", "42", "\"text\"", "null"};
    for (size_t i = 0; i < sizeof bad_payloads / sizeof bad_payloads[0]; i++) {
        script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, bad_payloads[i]}}, .nemit = 1};
        int rc = run(exe, "Payload", &s, NULL, NULL, &res, &e);
        ck_assert_msg(s.stage_rc == ODBOX_EINVAL, "payload %s: emit said %s", bad_payloads[i],
                      odbox_errname(s.stage_rc));
        ck_assert_int_eq(s.stage_step, 2); /* the emit, not the add */
        ck_assert_int_eq(rc, ODBOX_EINVAL);
        odbox_result_clear(&res);
    }
    assert_empty(&f, 0);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(event_name_collisions_are_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_error e;
    static const odbox_event_type a1 = {"Collide"}, a2 = {"Collide"};
    ck_assert_int_eq(odbox_executor_register_event(exe, &a1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_event(exe, &a1, &e), ODBOX_OK); /* the same descriptor again */
    ck_assert_int_eq(odbox_executor_register_event(exe, &a2, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "Collide") != NULL, "%s", e.message);

    /* registered by emitting: the first descriptor wins, the second fails */
    static const odbox_event_type t1 = {"Twin"}, t2 = {"Twin"};
    odbox_model *d1 = dfx_dummy(NULL, "one", 1), *d2 = dfx_dummy(NULL, "two", 2);
    script s1 = {.add = {d1}, .nadd = 1, .emit = {{d1, &t1, "{}"}}, .nemit = 1};
    odbox_result res;
    run_ok(exe, "First", &s1, NULL, &res);
    odbox_result_clear(&res);
    script s2 = {.add = {d2}, .nadd = 1, .emit = {{d2, &t2, "{}"}}, .nemit = 1};
    int rc = run(exe, "Second", &s2, NULL, NULL, &res, &e);
    ck_assert_int_eq(s2.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    /* two same-named descriptors in one plan */
    static const odbox_event_type u1 = {"Triplet"}, u2 = {"Triplet"};
    script s3 = {.add = {d2}, .nadd = 1, .emit = {{d2, &u1, "{}"}, {d2, &u2, "{}"}}, .nemit = 2};
    rc = run(exe, "Third", &s3, NULL, NULL, &res, &e);
    ck_assert_int_eq(s3.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(s3.stage_step, 3);
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_model_free(&d1);
    odbox_model_free(&d2);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(staging_an_id_twice_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "twice", 1);
    odbox_model *same = odbox_model_copy(d); /* another object, the same id */
    ck_assert_ptr_nonnull(same);
    struct {
        const char *what;
        int nadd, nupd;
    } cases[] = {{"add+add", 2, 0}, {"add+update", 1, 1}, {"update+update", 0, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        script s = {0};
        const odbox_model *pair[2] = {d, same};
        int k = 0;
        for (int j = 0; j < cases[i].nadd; j++)
            s.add[s.nadd++] = pair[k++];
        for (int j = 0; j < cases[i].nupd; j++)
            s.upd[s.nupd++] = pair[k++];
        s.emit[s.nemit++] = (emit_spec){d, &EV_CREATED, "{}"};
        odbox_result res;
        odbox_error e;
        int rc = run(exe, "Twice", &s, NULL, NULL, &res, &e);
        ck_assert_msg(s.stage_rc == ODBOX_EINVAL, "%s: staging said %s", cases[i].what, odbox_errname(s.stage_rc));
        ck_assert_msg(s.stage_step == 2, "%s: refused at step %d", cases[i].what, s.stage_step);
        ck_assert_int_eq(rc, ODBOX_EINVAL);
        odbox_result_clear(&res);
        assert_empty(&f, 0);
    }
    /* the very same object added twice */
    script s = {.add = {d, d}, .nadd = 2};
    odbox_result res;
    odbox_error e;
    ck_assert_int_eq(run(exe, "Twice", &s, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    assert_empty(&f, 0);
    odbox_model_free(&d);
    odbox_model_free(&same);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(unregistered_model_type_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_executor_open(NS, f.r, NULL, &exe, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_model(exe, &TAG_T, &e), ODBOX_OK);
    /* DUMMY_T is not registered with this executor */
    odbox_model *d = dfx_dummy(NULL, "stranger", 1);
    odbox_model *t = NULL;
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(t, "label", "ok", &e), ODBOX_OK);
    odbox_result res;
    int rc;
    script s = {.add = {t, d}, .nadd = 2};
    ck_assert_int_eq(run(exe, "AddStranger", &s, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_step, 2);
    odbox_result_clear(&res);
    script s2 = {.upd = {d}, .nupd = 1};
    ck_assert_int_eq(run(exe, "UpdateStranger", &s2, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s2.stage_rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    assert_empty(&f, 0);
    /* registering a type that fails its check */
    const odbox_column dup[] = {{"label", ODBOX_TYPE_TEXT, 1, 0}, {"label", ODBOX_TYPE_TEXT, 1, 0}};
    const odbox_model_type bad = {"Bad", "tags", ODBOX_KIND_ENTITY, dup, 2};
    ck_assert_int_eq(odbox_executor_register_model(exe, &bad, &e), ODBOX_EINVAL);
    const odbox_model_type quoted = {"Quoted", "ta'gs", ODBOX_KIND_ENTITY, dup, 1};
    ck_assert_int_eq(odbox_executor_register_model(exe, &quoted, &e), ODBOX_EINVAL);
    /* registering makes it work */
    ck_assert_int_eq(odbox_executor_register_model(exe, &DUMMY_T, &e), ODBOX_OK);
    script s3 = {.add = {t, d}, .nadd = 2};
    run_ok(exe, "AddKnown", &s3, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), 1);
    odbox_result_clear(&res);
    /* emitting on a model of an unregistered type is using that type too */
    static const odbox_column other_cols[] = {{"name", ODBOX_TYPE_TEXT, 1, 0}};
    static const odbox_model_type OTHER_T = {"Other", "others", ODBOX_KIND_MODEL, other_cols, 1};
    odbox_model *o = NULL;
    ck_assert_int_eq(odbox_model_new(&OTHER_T, NULL, &o, &e), ODBOX_OK);
    script s4 = {.emit = {{o, &EV_CREATED, "{}"}}, .nemit = 1};
    rc = run(exe, "EmitOnStranger", &s4, NULL, NULL, &res, &e);
    ck_assert_msg(s4.stage_rc == ODBOX_EINVAL, "emit on unregistered type %s: %s", OTHER_T.name,
                  odbox_errname(s4.stage_rc));
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&o);
    odbox_model_free(&d);
    odbox_model_free(&t);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(not_null_column_left_null_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = NULL, *ok = dfx_dummy(NULL, "fine", 1);
    odbox_error e;
    ck_assert_int_eq(odbox_model_new(&DUMMY_T, NULL, &d, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(d, "amount", 1, &e), ODBOX_OK); /* name stays NULL */
    script s = {.add = {ok, d}, .nadd = 2, .emit = {{ok, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    int rc = run(exe, "Unnamed", &s, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_EDB, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(res.ncommitted, 0);
    assert_empty(&f, 0);
    odbox_result_clear(&res);
    script s2 = {.add = {ok}, .nadd = 1};
    run_ok(exe, "Named", &s2, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_model_free(&ok);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- a shard in one statement ----------------------------------------------
 * Where the dialect joins writes (PostgreSQL), a shard whose plan updates
 * at most one row is written by one statement in autocommit, the other
 * rows and the events depending on that update; elsewhere, and for larger
 * updates, in a transaction. The outcome must not differ. */

static odbox_model *typed_dummy(const char *name)
{
    odbox_model *m = dfx_dummy(NULL, name, 9007199254740993LL);
    odbox_error e;
    ck_assert_int_eq(odbox_model_set_int64(m, "reward_points", -5, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_double(m, "ratio", 1234.5678, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m, "flag", 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", "{\"nick\": [\"a\", \"b\"]}", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_timestamp(m, "seen_at", 1767225600123456LL, &e), ODBOX_OK);
    return m;
}

static odbox_model *new_tag(const char *label)
{
    odbox_model *t = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(t, "label", label, &e), ODBOX_OK);
    return t;
}

/* Seeds a dummy and moves it to version 2 behind the back of a copy read
 * at version 1, which the caller gets in *stale. */
static odbox_model *seed_moved(dfx *f, odbox_executor *exe, odbox_model **stale)
{
    odbox_model *x = dfx_dummy(NULL, "x", 1);
    script seed = {.add = {x}, .nadd = 1};
    odbox_result res;
    run_ok(exe, "Seed", &seed, NULL, &res);
    odbox_result_clear(&res);
    *stale = find_dummy(f, odbox_model_id(x));
    odbox_model *other = find_dummy(f, odbox_model_id(x));
    ck_assert_int_eq(odbox_model_set_int64(other, "amount", 2, NULL), ODBOX_OK);
    script bump = {.upd = {other}, .nupd = 1};
    run_ok(exe, "Elsewhere", &bump, NULL, &res);
    odbox_result_clear(&res);
    odbox_model_free(&other);
    return x;
}

/* Adds two dummies and a tag, updates upd, and emits on both dummies and
 * on upd: one update beside every other kind of row. */
static script beside(const odbox_model *n1, const odbox_model *n2, const odbox_model *tag, const odbox_model *upd)
{
    return (script){.add = {n1, n2, tag},
                    .nadd = 3,
                    .upd = {upd},
                    .nupd = 1,
                    .emit = {{n1, &EV_CREATED, "{\"k\": 1}"}, {n2, &EV_CREATED, "{}"}, {upd, &EV_CHANGED, "{}"}},
                    .nemit = 3};
}

START_TEST(one_update_beside_adds_and_events_is_all_or_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *stale = NULL, *x = seed_moved(&f, exe, &stale);
    const char *xid = odbox_model_id(x);
    int64_t events0 = dfx_events(&f, 0);
    odbox_model *n1 = typed_dummy("n1"), *n2 = dfx_dummy(NULL, "n2", 0), *tag1 = new_tag("t1");
    ck_assert_int_eq(odbox_model_set_int64(stale, "amount", 99, NULL), ODBOX_OK);
    script s = beside(n1, n2, tag1, stale);
    odbox_result res;
    odbox_error e;
    /* stale on both attempts (the default: one retry): nothing of it lands */
    int rc = run(exe, "StaleBeside", &s, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_ESTALE, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, xid) != NULL, "the message names the stale row: %s", e.message);
    ck_assert_int_eq(s.calls, 2);
    ck_assert_int_eq(res.retries[0], 1);
    ck_assert_int_eq(res.ncommitted, 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), 0);
    ck_assert_int_eq(dfx_events(&f, 0), events0);
    ck_assert_int_eq(amount_of(&f, xid), 2);
    odbox_result_clear(&res);

    /* read again: the same plan lands whole, every value as staged */
    odbox_model *cur = find_dummy(&f, xid);
    int64_t before_upd = odbox_model_updated(cur);
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 3, NULL), ODBOX_OK);
    script ok = beside(n1, n2, tag1, cur);
    int64_t t0 = dfx_now_us();
    run_ok(exe, "FreshBeside", &ok, NULL, &res);
    int64_t t1 = dfx_now_us();
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 3);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), 1);
    odbox_model *const staged[] = {n1, n2};
    for (int i = 0; i < 2; i++) {
        odbox_model *got = find_dummy(&f, odbox_model_id(staged[i]));
        dfx_assert_same(staged[i], got);
        odbox_model_free(&got);
    }
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM tags WHERE id = '%s' AND label = 't1'",
                                 odbox_model_id(tag1)),
                     1);
    odbox_model *after = find_dummy(&f, xid);
    ck_assert_int_eq(odbox_model_version(after), 3);
    ck_assert_int_eq(amount_of(&f, xid), 3);
    ck_assert(odbox_model_updated(after) > before_upd && odbox_model_updated(after) <= t1 + SLACK_US);
    evrow rows[8];
    ck_assert_int_eq(read_events(&f, 0, rows, 8), (int)events0 + 3);
    int mine = 0;
    for (int i = 0; i < (int)events0 + 3; i++)
        if (!strcmp(rows[i].action_id, res.action_id))
            rows[mine++] = rows[i];
    ck_assert_int_eq(mine, 3);
    check_rows(rows, 3, res.action_id, "FreshBeside", "{}", t0, t1);
    assert_event(&rows[0], cur, "DummyChanged", "{}");
    odbox_result_clear(&res);
    odbox_model_free(&after);
    odbox_model_free(&cur);
    odbox_model_free(&n1);
    odbox_model_free(&n2);
    odbox_model_free(&tag1);
    odbox_model_free(&stale);
    odbox_model_free(&x);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(unique_conflict_beside_an_update_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *x = dfx_dummy(NULL, "x", 1), *y = dfx_dummy(NULL, "y", 1);
    script seed = {.add = {x, y}, .nadd = 2};
    odbox_result res;
    run_ok(exe, "Seed", &seed, NULL, &res);
    odbox_result_clear(&res);
    odbox_model *cur = find_dummy(&f, odbox_model_id(x));
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 5, NULL), ODBOX_OK);
    odbox_model *dup = dfx_dummy(odbox_model_id(y), "y again", 7);
    script s = {.add = {dup}, .nadd = 1, .upd = {cur}, .nupd = 1, .emit = {{cur, &EV_CHANGED, "{}"}}, .nemit = 1};
    odbox_error e;
    int rc = run(exe, "Duplicate", &s, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_EUNIQUE, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(s.calls, 1);
    odbox_model *after = find_dummy(&f, odbox_model_id(x));
    ck_assert_int_eq(odbox_model_version(after), 1);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(x)), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&after);
    odbox_model_free(&dup);
    odbox_model_free(&cur);
    odbox_model_free(&x);
    odbox_model_free(&y);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

static int noop_hook(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
{
    (void)ud, (void)at, (void)shard, (void)conn;
    return 0;
}

/* Every write to dummies and to the events table records its statement's
 * start and its transaction in the table stamps, by trigger fn. */
static void stamps_on(dfx *f, char stamps[64], char fn[64])
{
    itest_name(stamps, 64, "stamps");
    itest_name(fn, 64, "stamp");
    itest_exec(f->c[0], "CREATE TABLE %s (tbl TEXT, ts TIMESTAMPTZ, tx BIGINT)", stamps);
    itest_exec(f->c[0],
               "CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO %s VALUES "
               "(TG_TABLE_NAME, statement_timestamp(), txid_current()); RETURN NULL; END $$",
               fn, stamps);
    itest_exec(f->c[0], "CREATE TRIGGER stamp_dummies AFTER INSERT OR UPDATE ON dummies FOR EACH ROW EXECUTE FUNCTION %s()",
               fn);
    itest_exec(f->c[0], "CREATE TRIGGER stamp_events AFTER INSERT ON %s.events FOR EACH ROW EXECUTE FUNCTION %s()",
               f->ev[0], fn);
}

static void stamps_off(dfx *f, const char *stamps, const char *fn)
{
    itest_exec(f->c[0], "DROP TRIGGER stamp_events ON %s.events", f->ev[0]);
    itest_exec(f->c[0], "DROP TRIGGER stamp_dummies ON dummies");
    itest_exec(f->c[0], "DROP FUNCTION %s()", fn);
    itest_exec(f->c[0], "DROP TABLE %s", stamps);
}

/* The last execution wrote rows rows with stmts statements in one
 * transaction (see stamps_on). */
static void assert_written_by(dfx *f, const char *stamps, int64_t rows, int64_t stmts)
{
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(*) FROM %s", stamps), rows);
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(DISTINCT ts) FROM %s", stamps), stmts);
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(DISTINCT tx) FROM %s", stamps), 1);
    itest_exec(f->c[0], "DELETE FROM %s", stamps);
}

START_TEST(postgresql_writes_such_a_shard_in_one_statement)
{
    if (strcmp(itest_dialect(), "pg"))
        return; /* no data-modifying WITH: always a transaction, tested above */
    dfx f;
    dfx_open(&f, 1, 0);
    char stamps[64], fn[64];
    stamps_on(&f, stamps, fn);
    odbox_executor *exe = open_exe(&f);
    odbox_model *a = dfx_dummy(NULL, "a", 1), *b = dfx_dummy(NULL, "b", 1);
    odbox_result res;
    /* inserts and events, no update: one statement */
    script add = {.add = {a, b}, .nadd = 2, .emit = {{a, &EV_CREATED, "{}"}, {b, &EV_CREATED, "{}"}}, .nemit = 2};
    run_ok(exe, "AddTwo", &add, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 4, 1);
    /* one update, an insert and two events: one statement */
    odbox_model *ca = find_dummy(&f, odbox_model_id(a)), *c = dfx_dummy(NULL, "c", 1);
    script one = {.add = {c}, .nadd = 1, .upd = {ca}, .nupd = 1,
                  .emit = {{ca, &EV_CHANGED, "{}"}, {c, &EV_CREATED, "{}"}}, .nemit = 2};
    run_ok(exe, "UpdateOne", &one, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 4, 1);
    /* two updates: a transaction of several statements */
    odbox_model *ca2 = find_dummy(&f, odbox_model_id(a)), *cb = find_dummy(&f, odbox_model_id(b));
    script two = {.upd = {ca2, cb}, .nupd = 2, .emit = {{ca2, &EV_CHANGED, "{}"}}, .nemit = 1};
    run_ok(exe, "UpdateTwo", &two, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 3, 2);
    /* a hook needs the transaction it runs in */
    odbox_executor_set_hook(exe, noop_hook, NULL);
    odbox_model *d = dfx_dummy(NULL, "d", 1);
    script hooked = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    run_ok(exe, "Hooked", &hooked, NULL, &res);
    odbox_result_clear(&res);
    assert_written_by(&f, stamps, 2, 2);
    odbox_executor_set_hook(exe, NULL, NULL);
    stamps_off(&f, stamps, fn);
    odbox_model *all[] = {a, b, c, d, ca, ca2, cb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        odbox_model_free(&all[i]);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- connections lost at the commit --------------------------------------- */

/* Ends the shard's session just before its COMMIT is sent. */
static int kill_before_commit(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn)
{
    (void)shard;
    if (at == ODBOX_HOOK_EVENTS_WRITTEN)
        itest_kill_session(((dfx *)ud)->c[0], itest_session_id(conn));
    return 0;
}

/* The default rules and 3 retries for ODBOX_ECONNLOST (rule 1). */
static void retry_lost_connections(odbox_exec_config *cfg)
{
    odbox_exec_config_default(cfg);
    cfg->retries[cfg->nretries++] = (odbox_retry_rule){ODBOX_ECONNLOST, 3, 0};
}

static int committed(dfx *f, const char *action_id)
{
    int yes = -1;
    odbox_error e;
    int rc = odbox_action_committed(f->r, (odbox_shard_id){0, 0}, action_id, &yes, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    return yes;
}

/* The client cannot know whether a COMMIT whose connection was lost
 * committed: ODBOX_EINDOUBT, never retried (a retry could write the
 * action twice), and odbox_action_committed tells. */
START_TEST(commit_lost_is_in_doubt_and_never_retried)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config cfg;
    retry_lost_connections(&cfg);
    odbox_executor_set_hook(exe, kill_before_commit, &f);
    odbox_model *d = dfx_dummy(NULL, "lost", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    odbox_error e;
    int rc = run(exe, "LostCommit", &s, NULL, &cfg, &res, &e);
    ck_assert_msg(rc == ODBOX_EINDOUBT, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(e.code, ODBOX_EINDOUBT);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(res.retries[1], 0);
    ck_assert_int_eq(res.ncommitted, 0);
    ck_assert(res.has_failed_shard && res.failed_shard.group == 0 && res.failed_shard.member == 0);
    ck_assert_msg(strstr(e.message, "IN DOUBT") && strstr(e.message, res.action_id) && strstr(e.message, "0.0"),
                  "message: %s", e.message);
    /* the session died before its COMMIT: it did not commit */
    ck_assert_int_eq(committed(&f, res.action_id), 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    odbox_result_clear(&res);

    /* the pool replaces the dead connection; a commit is found */
    odbox_executor_set_hook(exe, NULL, NULL);
    run_ok(exe, "Landed", &s, NULL, &res);
    ck_assert_int_eq(committed(&f, res.action_id), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    odbox_result_clear(&res);

    /* no rule may retry what has or may have committed */
    const int never[] = {ODBOX_EINDOUBT, ODBOX_EPARTIAL};
    for (int i = 0; i < 2; i++) {
        odbox_exec_config bad;
        odbox_exec_config_default(&bad);
        bad.retries[bad.nretries++] = (odbox_retry_rule){never[i], 1, 0};
        script none = {0};
        rc = run(exe, "BadRule", &none, NULL, &bad, &res, &e);
        ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, odbox_errname(never[i])), "%s: %s",
                      odbox_errname(rc), e.message);
        ck_assert_int_eq(none.calls, 0);
        odbox_result_clear(&res);
    }

    /* odbox_action_committed's own errors */
    int yes = 7;
    char v4[37];
    odbox_uuid_v4(v4);
    ck_assert_int_eq(odbox_action_committed(NULL, (odbox_shard_id){0, 0}, v4, &yes, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){0, 0}, v4, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){0, 0}, "not-a-uuid", &yes, &e), ODBOX_EINVAL);
    ck_assert_int_eq(yes, 0);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){0, 0}, NULL, &yes, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){9, 9}, v4, &yes, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "9.9"), "message: %s", e.message);
    ck_assert_int_eq(committed(&f, v4), 0);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A connection that died while idle in the pool: where the shard takes a
 * transaction, the loss shows before the COMMIT and the action is retried
 * under an ODBOX_ECONNLOST rule; where it is one statement in autocommit
 * (PostgreSQL), that statement was the commit: in doubt. */
START_TEST(connection_lost_while_idle)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config cfg;
    retry_lost_connections(&cfg);
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(f.r));
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
    int64_t id = itest_session_id(c);
    int one_statement = odbox_conn_dialect(c)->join_writes_sql != NULL;
    odbox_pool_release(pool, &c);
    itest_kill_session(f.c[0], id); /* well within the pool's 1 s without a ping */
    odbox_model *d = dfx_dummy(NULL, "idle", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    int rc = run(exe, "AfterIdle", &s, NULL, &cfg, &res, &e);
    if (one_statement) {
        ck_assert_msg(rc == ODBOX_EINDOUBT, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(committed(&f, res.action_id), 0);
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    } else {
        ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 2);
        ck_assert_int_eq(res.retries[1], 1);
        ck_assert_int_eq(committed(&f, s.action_ids[0]), 0);
        ck_assert_int_eq(committed(&f, res.action_id), 1);
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
        ck_assert_int_eq(dfx_events(&f, 0), 1);
    }
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- optimistic-lock races ------------------------------------------------ */

typedef struct racer {
    odbox_executor *exe;
    const char *id;
    int64_t delta;
    pthread_barrier_t *barrier;
    const odbox_exec_config *cfg;
    int rc;
    odbox_result res;
    char message[ODBOX_ERROR_MESSAGE_MAX];
    int calls;
} racer;

static int bump(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    racer *r = user;
    r->calls++;
    odbox_model *m = NULL;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &DUMMY_T, r->id, ODBOX_READ_PRIMARY, &m, err);
    if (odbox_context_attempt(ctx) == 0)
        pthread_barrier_wait(r->barrier); /* both have read before either writes */
    if (rc)
        return rc;
    int64_t amount = 0;
    char payload[64];
    snprintf(payload, sizeof payload, "{\"delta\": %lld}", (long long)r->delta);
    json_object *p = json_tokener_parse(payload);
    if (!(rc = odbox_model_get_int64(m, "amount", &amount, err)) &&
        !(rc = odbox_model_set_int64(m, "amount", amount + r->delta, err)) &&
        !(rc = odbox_plan_update(plan, m, NULL, err)))
        rc = odbox_plan_emit(plan, m, &EV_CHANGED, p, err);
    json_object_put(p);
    odbox_model_free(&m);
    return rc;
}

static void *race(void *ud)
{
    racer *r = ud;
    odbox_action a = {.name = "Bump", .perform = bump, .user = r};
    odbox_error e = {0};
    r->rc = odbox_execute(r->exe, &a, NULL, r->cfg, &r->res, &e);
    snprintf(r->message, sizeof r->message, "%s", e.message);
    return NULL;
}

static void race_rounds(int with_retry)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    if (!with_retry)
        cfg.nretries = 0;
    for (int round = 0; round < 4; round++) {
        odbox_model *d = dfx_dummy(NULL, "raced", 100);
        script s = {.add = {d}, .nadd = 1};
        odbox_result res;
        run_ok(exe, "Seed", &s, NULL, &res);
        odbox_result_clear(&res);
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, 2);
        racer r[2] = {{.exe = exe, .id = odbox_model_id(d), .delta = 1, .barrier = &barrier, .cfg = &cfg},
                      {.exe = exe, .id = odbox_model_id(d), .delta = 10, .barrier = &barrier, .cfg = &cfg}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&barrier);
        int64_t amount = amount_of(&f, odbox_model_id(d));
        odbox_model *final = find_dummy(&f, odbox_model_id(d));
        int64_t updates = itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE model_id = '%s'", f.ev[0],
                                      odbox_model_id(d));
        if (!with_retry) {
            int winners = (r[0].rc == ODBOX_OK) + (r[1].rc == ODBOX_OK);
            ck_assert_msg(winners == 1, "round %d: rc %s / %s (%s / %s)", round, odbox_errname(r[0].rc),
                          odbox_errname(r[1].rc), r[0].message, r[1].message);
            racer *w = r[0].rc == ODBOX_OK ? &r[0] : &r[1], *l = w == &r[0] ? &r[1] : &r[0];
            ck_assert_msg(l->rc == ODBOX_ESTALE, "round %d: loser got %s: %s", round, odbox_errname(l->rc), l->message);
            ck_assert_int_eq(l->calls, 1);
            ck_assert_int_eq(l->res.attempts, 1);
            ck_assert_int_eq(amount, 100 + w->delta);
            ck_assert_int_eq(odbox_model_version(final), 2);
            ck_assert_int_eq(updates, 1);
            /* the loser's action left no rows */
            ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s'", f.ev[0],
                                         l->res.action_id),
                             0);
        } else {
            ck_assert_msg(r[0].rc == ODBOX_OK && r[1].rc == ODBOX_OK, "round %d: rc %s / %s (%s / %s)", round,
                          odbox_errname(r[0].rc), odbox_errname(r[1].rc), r[0].message, r[1].message);
            ck_assert_int_eq(amount, 111);
            ck_assert_int_eq(odbox_model_version(final), 3);
            ck_assert_int_eq(updates, 2);
            int retried = (r[0].res.attempts == 2) + (r[1].res.attempts == 2);
            ck_assert_msg(retried == 1, "round %d: attempts %d / %d", round, r[0].res.attempts, r[1].res.attempts);
            racer *l = r[0].res.attempts == 2 ? &r[0] : &r[1], *w = l == &r[0] ? &r[1] : &r[0];
            ck_assert_int_eq(l->res.retries[0], 1);
            ck_assert_int_eq(l->calls, 2);
            ck_assert_int_eq(w->res.attempts, 1);
            ck_assert_int_eq(w->res.retries[0], 0);
            ck_assert_str_ne(l->res.action_id, w->res.action_id);
        }
        odbox_result_clear(&r[0].res);
        odbox_result_clear(&r[1].res);
        odbox_model_free(&final);
        odbox_model_free(&d);
    }
    odbox_executor_free(&exe);
    dfx_close(&f);
}

START_TEST(optimistic_race_without_retries)
{
    race_rounds(0);
}
END_TEST

START_TEST(optimistic_race_with_default_retry)
{
    race_rounds(1);
}
END_TEST

/* ---- retry rules ---------------------------------------------------------- */

START_TEST(retry_counters_are_per_code)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config def;
    odbox_exec_config_default(&def);
    ck_assert_int_eq(def.nretries, 1);
    ck_assert_int_eq(def.retries[0].code, ODBOX_ESTALE);
    ck_assert_int_eq(def.retries[0].max_retries, 1);
    ck_assert_int_eq(def.retries[0].delay_ms, 100);
    ck_assert_int_eq(def.allow_cross_shard, 0);

    odbox_exec_config cfg = {.retries = {{ODBOX_ESTALE, 2, 0}, {ODBOX_EDEADLOCK, 1, 0}}, .nretries = 2};
    odbox_result res;
    odbox_error e;

    /* deadlock once, stale twice, then through: each rule has its budget */
    odbox_model *d = dfx_dummy(NULL, "retried", 1);
    script a = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1,
                .codes = {ODBOX_EDEADLOCK, ODBOX_ESTALE, ODBOX_ESTALE, 0}};
    int rc = run(exe, "Retried", &a, NULL, &cfg, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(a.calls, 4);
    ck_assert_int_eq(res.attempts, 4);
    ck_assert_int_eq(res.retries[0], 2);
    ck_assert_int_eq(res.retries[1], 1);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(a.attempts_seen[k], k);
        for (int j = 0; j < k; j++)
            ck_assert_str_ne(a.action_ids[j], a.action_ids[k]); /* a new action id per attempt */
    }
    ck_assert_str_eq(res.action_id, a.action_ids[3]);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s'", f.ev[0],
                                 res.action_id),
                     1);
    odbox_result_clear(&res);

    /* stale three times: two retries, then the error */
    script b = {.codes = {ODBOX_ESTALE, ODBOX_ESTALE, ODBOX_ESTALE, ODBOX_ESTALE}};
    ck_assert_int_eq(run(exe, "Stale", &b, NULL, &cfg, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(b.calls, 3);
    ck_assert_int_eq(res.attempts, 3);
    ck_assert_int_eq(res.retries[0], 2);
    ck_assert_int_eq(res.retries[1], 0);
    ck_assert_str_eq(res.action_id, b.action_ids[2]);
    odbox_result_clear(&res);

    /* deadlock twice: one retry */
    script c = {.codes = {ODBOX_EDEADLOCK, ODBOX_EDEADLOCK, ODBOX_EDEADLOCK}};
    ck_assert_int_eq(run(exe, "Deadlock", &c, NULL, &cfg, &res, &e), ODBOX_EDEADLOCK);
    ck_assert_int_eq(c.calls, 2);
    ck_assert_int_eq(res.attempts, 2);
    ck_assert_int_eq(res.retries[0], 0);
    ck_assert_int_eq(res.retries[1], 1);
    odbox_result_clear(&res);

    /* a code without a rule is not retried */
    script g = {.codes = {ODBOX_EUNIQUE, 0}};
    ck_assert_int_eq(run(exe, "Unique", &g, NULL, &cfg, &res, &e), ODBOX_EUNIQUE);
    ck_assert_int_eq(g.calls, 1);
    odbox_result_clear(&res);

    /* no rules */
    odbox_exec_config none = {.nretries = 0};
    script h = {.codes = {ODBOX_ESTALE, 0}};
    ck_assert_int_eq(run(exe, "NoRetry", &h, NULL, &none, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(h.calls, 1);
    ck_assert_int_eq(res.attempts, 1);
    odbox_result_clear(&res);

    /* defaults (cfg NULL): one stale retry after 100 ms */
    script i = {.codes = {ODBOX_ESTALE, 0}};
    int64_t t0 = dfx_now_us();
    ck_assert_int_eq(run(exe, "DefaultRetry", &i, NULL, NULL, &res, &e), ODBOX_OK);
    int64_t took = dfx_now_us() - t0;
    ck_assert_int_eq(i.calls, 2);
    ck_assert_int_eq(res.attempts, 2);
    ck_assert_int_eq(res.retries[0], 1);
    ck_assert_msg(took >= 95000, "retried after %lld us, not 100 ms", (long long)took);
    odbox_result_clear(&res);
    script j = {.codes = {ODBOX_ESTALE, ODBOX_ESTALE, 0}};
    ck_assert_int_eq(run(exe, "DefaultRetry", &j, NULL, NULL, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(j.calls, 2);
    odbox_result_clear(&res);

    /* the rule's delay is honoured */
    odbox_exec_config slow = {.retries = {{ODBOX_EDEADLOCK, 1, 250}}, .nretries = 1};
    script k = {.codes = {ODBOX_EDEADLOCK, 0}};
    t0 = dfx_now_us();
    ck_assert_int_eq(run(exe, "Slow", &k, NULL, &slow, &res, &e), ODBOX_OK);
    took = dfx_now_us() - t0;
    ck_assert_msg(took >= 240000, "retried after %lld us, not 250 ms", (long long)took);
    odbox_result_clear(&res);

    /* malformed configurations are refused before perform runs */
    odbox_exec_config too_many = {.nretries = ODBOX_MAX_RETRY_RULES + 1};
    script l = {0};
    ck_assert_int_eq(run(exe, "Bad", &l, NULL, &too_many, &res, &e), ODBOX_EINVAL);
    odbox_exec_config negative = {.retries = {{ODBOX_ESTALE, -1, 0}}, .nretries = 1};
    ck_assert_int_eq(run(exe, "Bad", &l, NULL, &negative, &res, &e), ODBOX_EINVAL);
    odbox_exec_config neg_n = {.nretries = -1};
    ck_assert_int_eq(run(exe, "Bad", &l, NULL, &neg_n, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(l.calls, 0);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    /* only the successful executions left rows */
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- shards --------------------------------------------------------------- */

START_TEST(cross_shard_plan_is_refused)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    hookrec h = {.fail_group = -1, .fail_member = -1};
    odbox_executor_set_hook(exe, hook, &h);
    odbox_model *d0 = dfx_dummy_in((odbox_shard_id){0, 0}, "zero", 1);
    odbox_model *d1 = dfx_dummy_in((odbox_shard_id){0, 1}, "one", 2);
    odbox_result res;
    odbox_error e;
    /* two adds on two shards */
    script s = {.add = {d0, d1}, .nadd = 2, .emit = {{d0, &EV_CREATED, "{}"}, {d1, &EV_CREATED, "{}"}}, .nemit = 2};
    ck_assert_int_eq(run(exe, "Cross", &s, NULL, NULL, &res, &e), ODBOX_ECROSSSHARD);
    ck_assert(e.message[0]);
    ck_assert_int_eq(res.ncommitted, 0);
    odbox_result_clear(&res);
    /* an add on one shard and an event on a model of the other */
    script s2 = {.add = {d0}, .nadd = 1, .emit = {{d1, &EV_CHANGED, "{}"}}, .nemit = 1};
    ck_assert_int_eq(run(exe, "CrossEmit", &s2, NULL, NULL, &res, &e), ODBOX_ECROSSSHARD);
    odbox_result_clear(&res);
    /* updates on two shards */
    script s3 = {.upd = {d0, d1}, .nupd = 2};
    ck_assert_int_eq(run(exe, "CrossUpdate", &s3, NULL, NULL, &res, &e), ODBOX_ECROSSSHARD);
    odbox_result_clear(&res);
    ck_assert_int_eq(h.n, 0); /* no shard transaction was even opened */
    assert_empty(&f, 0);
    assert_empty(&f, 1);
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_model_free(&d0);
    odbox_model_free(&d1);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(cross_shard_plan_when_allowed)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d0 = dfx_dummy_in((odbox_shard_id){0, 0}, "zero", 1);
    odbox_model *d1 = dfx_dummy_in((odbox_shard_id){0, 1}, "one", 2);
    odbox_model *d1b = dfx_dummy_in((odbox_shard_id){0, 1}, "one-b", 3);
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    cfg.allow_cross_shard = 1;
    script s = {.add = {d0, d1, d1b},
                .nadd = 3,
                .emit = {{d0, &EV_CREATED, "{\"s\": 0}"}, {d1, &EV_CREATED, "{\"s\": 1}"}, {d1b, &EV_CREATED, "{}"}},
                .nemit = 3};
    odbox_result res;
    odbox_error e;
    int64_t t0 = dfx_now_us();
    int rc = run(exe, "CrossAllowed", &s, "{\"x\": 1}", &cfg, &res, &e);
    int64_t t1 = dfx_now_us();
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(res.ncommitted, 2);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    ck_assert(res.committed[1].group == 0 && res.committed[1].member == 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_rows(&f, 1, "dummies"), 2);
    evrow r0[4], r1[4];
    ck_assert_int_eq(read_events(&f, 0, r0, 4), 1);
    ck_assert_int_eq(read_events(&f, 1, r1, 4), 2);
    check_rows(r0, 1, res.action_id, "CrossAllowed", "{\"x\": 1}", t0, t1);
    check_rows(r1, 2, res.action_id, "CrossAllowed", "{\"x\": 1}", t0, t1);
    assert_event(&r0[0], d0, "DummyCreated", "{\"s\": 0}");
    /* the same action id on both databases, and only that one */
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(DISTINCT action_id) FROM %s.events", f.ev[0]), 1);
    ck_assert_int_eq(itest_count(f.c[1], "SELECT COUNT(DISTINCT action_id) FROM %s.events", f.ev[1]), 1);
    ck_assert_int_eq(itest_count(f.c[1], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s'", f.ev[1], r0[0].action_id), 2);
    ck_assert_str_eq(r0[0].action_id, r1[0].action_id);
    /* the rows are found by id on their own shard */
    odbox_model *got = find_dummy(&f, odbox_model_id(d1));
    dfx_assert_same(d1, got);
    odbox_model_free(&got);
    odbox_result_clear(&res);

    /* a shard with rows but no events of its own gets a sentinel row */
    odbox_model *e0 = dfx_dummy_in((odbox_shard_id){0, 0}, "zero-2", 4);
    odbox_model *e1 = dfx_dummy_in((odbox_shard_id){0, 1}, "one-2", 5);
    script s2 = {.add = {e0, e1}, .nadd = 2, .emit = {{e0, &EV_CREATED, "{}"}}, .nemit = 1};
    rc = run(exe, "CrossQuiet", &s2, NULL, &cfg, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(itest_count(f.c[1], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s' AND event_type IS NULL "
                                         "AND model_id IS NULL",
                                 f.ev[1], res.action_id),
                     1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s' AND event_type IS NOT NULL",
                                 f.ev[0], res.action_id),
                     1);
    odbox_result_clear(&res);
    odbox_model_free(&d0);
    odbox_model_free(&d1);
    odbox_model_free(&d1b);
    odbox_model_free(&e0);
    odbox_model_free(&e1);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

typedef struct logrec {
    pthread_mutex_t mu;
    int errors, warnings;
    char last_error[1024];
} logrec;

static void capture_log(void *ud, odbox_log_level level, const char *message)
{
    logrec *l = ud;
    pthread_mutex_lock(&l->mu);
    if (level == ODBOX_LOG_ERROR) {
        l->errors++;
        snprintf(l->last_error, sizeof l->last_error, "%s", message);
    } else if (level == ODBOX_LOG_WARN) {
        l->warnings++;
    }
    pthread_mutex_unlock(&l->mu);
}

START_TEST(partial_commit_is_reported_and_not_retried)
{
    logrec lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_log_set(capture_log, &lg, ODBOX_LOG_WARN);
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    hookrec h = {.fail_at = ODBOX_HOOK_DOMAIN_WRITTEN, .fail_group = 0, .fail_member = 1, .fail_code = ODBOX_EDB};
    odbox_executor_set_hook(exe, hook, &h);
    odbox_exec_config cfg = {.nretries = 0, .allow_cross_shard = 1};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            /* a rule for the very code that fails, and the default stale
             * rule (one for ODBOX_EPARTIAL is refused) */
            cfg.retries[0] = (odbox_retry_rule){ODBOX_EDB, 3, 0};
            cfg.retries[1] = (odbox_retry_rule){ODBOX_ESTALE, 3, 0};
            cfg.nretries = 2;
        }
        odbox_model *d0 = dfx_dummy_in((odbox_shard_id){0, 0}, "kept", 1);
        odbox_model *d1 = dfx_dummy_in((odbox_shard_id){0, 1}, "lost", 2);
        script s = {.add = {d0, d1}, .nadd = 2, .emit = {{d0, &EV_CREATED, "{}"}, {d1, &EV_CREATED, "{}"}}, .nemit = 2};
        odbox_result res;
        odbox_error e;
        h.n = 0;
        int rc = run(exe, "Partial", &s, NULL, &cfg, &res, &e);
        ck_assert_msg(rc == ODBOX_EPARTIAL, "pass %d: %s: %s", pass, odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(res.attempts, 1);
        for (int i = 0; i < cfg.nretries; i++)
            ck_assert_int_eq(res.retries[i], 0);
        ck_assert_int_eq(res.ncommitted, 1);
        ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
        ck_assert_int_eq(res.has_failed_shard, 1);
        ck_assert(res.failed_shard.group == 0 && res.failed_shard.member == 1);
        ck_assert_str_eq(res.action_id, s.action_ids[0]);
        ck_assert_msg(strstr(e.message, "0.0") && strstr(e.message, "0.1"), "message: %s", e.message);
        /* the partial commit is logged as an error, naming both shards */
        ck_assert_int_eq(lg.errors, pass + 1);
        ck_assert_msg(strstr(lg.last_error, "CRITICAL") && strstr(lg.last_error, "PARTIALLY COMMITTED") &&
                          strstr(lg.last_error, res.action_id),
                      "logged: %s", lg.last_error);
        ck_assert_int_ge(lg.warnings, pass + 1); /* "spans 2 shards" */
        /* hook calls: 0.0 domain, events, committed; 0.1 domain (failed) */
        ck_assert_int_eq(h.n, 4);
        ck_assert(h.at[2] == ODBOX_HOOK_COMMITTED && h.shard[2].member == 0);
        ck_assert(h.at[3] == ODBOX_HOOK_DOMAIN_WRITTEN && h.shard[3].member == 1);
        /* shard 0.0 keeps its rows; shard 0.1 has nothing */
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), pass + 1);
        ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_id = '%s'", f.ev[0],
                                     res.action_id),
                         1);
        ck_assert_int_eq(dfx_events(&f, 0), pass + 1);
        assert_empty(&f, 1);
        odbox_result_clear(&res);
        odbox_model_free(&d0);
        odbox_model_free(&d1);
    }
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_log_set(NULL, NULL, ODBOX_LOG_INFO);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(ids_route_to_their_shard_or_the_default)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    /* a v4 id and a v7 id naming an unregistered shard: both default (0.0),
     * so the plan is single-shard */
    odbox_model *v4 = dfx_dummy(NULL, "v4", 1);
    odbox_model *stray = dfx_dummy_in((odbox_shard_id){9, 9}, "stray", 2);
    script s = {.add = {v4, stray}, .nadd = 2, .emit = {{v4, &EV_CREATED, "{}"}, {stray, &EV_CREATED, "{}"}}, .nemit = 2};
    odbox_result res;
    run_ok(exe, "Defaults", &s, NULL, &res);
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    assert_empty(&f, 1);
    /* a 0.1 id: rows and events on 0.1 only, no sentinel on the default */
    odbox_model *on1 = dfx_dummy_in((odbox_shard_id){0, 1}, "on1", 3);
    script s2 = {.add = {on1}, .nadd = 1, .emit = {{on1, &EV_CREATED, "{}"}}, .nemit = 1};
    run_ok(exe, "OnOne", &s2, NULL, &res);
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 1);
    ck_assert_int_eq(dfx_rows(&f, 1, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 1), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    /* and an update read and staged inside perform goes back there */
    odbox_model *cur = find_dummy(&f, odbox_model_id(on1));
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 33, NULL), ODBOX_OK);
    script s3 = {.upd = {cur}, .nupd = 1};
    run_ok(exe, "UpdateOnOne", &s3, NULL, &res);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(on1)), 33);
    ck_assert_int_eq(dfx_events(&f, 1), 2); /* a sentinel on 0.1 */
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    odbox_model_free(&cur);
    odbox_model_free(&v4);
    odbox_model_free(&stray);
    odbox_model_free(&on1);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(replica_reads_inside_perform)
{
    dfx f;
    dfx_open(&f, 1, 1);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "replicated", 1);
    dfx_insert(&f, 0, &d, 1);
    odbox_model *m = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, odbox_model_id(d), ODBOX_READ_REPLICA, &m, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(m, "amount", 2, &e), ODBOX_OK);
    script s = {.upd = {m}, .nupd = 1, .emit = {{m, &EV_CHANGED, "{}"}}, .nemit = 1};
    odbox_result res;
    run_ok(exe, "FromReplica", &s, NULL, &res);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(d)), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&m);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

static int count_calls(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    ++*(int *)user;
    return 0;
}

START_TEST(bad_input_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e;
    odbox_executor *exe = NULL;
    char long_name[300];

    /* namespaces: dotted identifiers, no hyphens, <= 255 */
    memset(long_name, 'n', 256);
    long_name[256] = '\0';
    const char *bad_ns[] = {"com.example-shop", "", ".com", "com.", "com..x", "1com", "com.1x", "a b", long_name, NULL};
    for (size_t i = 0; i < sizeof bad_ns / sizeof bad_ns[0]; i++) {
        ck_assert_msg(odbox_executor_open(bad_ns[i], f.r, NULL, &exe, &e) == ODBOX_EINVAL, "namespace '%s' accepted",
                      bad_ns[i] ? bad_ns[i] : "(null)");
        ck_assert_ptr_null(exe);
    }
    long_name[255] = '\0';
    const char *good_ns[] = {"default", "com.example.shop", "_a._b1", long_name};
    for (size_t i = 0; i < sizeof good_ns / sizeof good_ns[0]; i++) {
        ck_assert_msg(odbox_executor_open(good_ns[i], f.r, NULL, &exe, &e) == ODBOX_OK, "namespace %s: %s",
                      good_ns[i], e.message);
        odbox_executor_free(&exe);
    }
    ck_assert_int_eq(odbox_executor_open(NS, NULL, NULL, &exe, &e), ODBOX_EINVAL);
    odbox_executor_free(&exe); /* NULL-safe */
    exe = open_exe(&f);

    /* action names */
    int calls = 0;
    memset(long_name, 'A', 256);
    long_name[256] = '\0';
    const char *bad_names[] = {NULL, "", "Bad-Name", "1Action", "with space", ".Leading", long_name};
    odbox_result res;
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        odbox_action a = {.name = bad_names[i], .perform = count_calls, .user = &calls};
        memset(&res, 0, sizeof res);
        ck_assert_msg(odbox_execute(exe, &a, NULL, NULL, &res, &e) == ODBOX_EINVAL, "action name '%s' accepted",
                      bad_names[i] ? bad_names[i] : "(null)");
        ck_assert_str_eq(res.action_id, "");
        odbox_result_clear(&res);
    }
    odbox_action no_perform = {.name = "NoPerform", .perform = NULL};
    ck_assert_int_eq(odbox_execute(exe, &no_perform, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(odbox_execute(exe, NULL, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(calls, 0);
    assert_empty(&f, 0);
    /* valid: dots and a 255-character name; res may be NULL */
    long_name[255] = '\0';
    odbox_action dotted = {.name = "shop.v2.Deposit_1", .perform = count_calls, .user = &calls};
    ck_assert_int_eq(odbox_execute(exe, &dotted, NULL, NULL, NULL, &e), ODBOX_OK);
    odbox_action longest = {.name = long_name, .perform = count_calls, .user = &calls};
    ck_assert_msg(odbox_execute(exe, &longest, NULL, NULL, NULL, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(calls, 2);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE action_name = 'shop.v2.Deposit_1'",
                                 f.ev[0]),
                     1);

    /* event type names */
    memset(long_name, 'E', 256);
    long_name[256] = '\0';
    const odbox_event_type bad_et[] = {{long_name}, {""}, {"Bad-Event"}, {NULL}, {"9Lives"}};
    for (size_t i = 0; i < sizeof bad_et / sizeof bad_et[0]; i++)
        ck_assert_msg(odbox_executor_register_event(exe, &bad_et[i], &e) == ODBOX_EINVAL, "event %zu accepted", i);
    ck_assert_int_eq(odbox_executor_register_event(exe, NULL, &e), ODBOX_EINVAL);
    odbox_model *d = dfx_dummy(NULL, "long", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &bad_et[0], "{}"}}, .nemit = 1};
    ck_assert_int_eq(run(exe, "LongEvent", &s, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_step, 2);
    odbox_result_clear(&res);
    long_name[255] = '\0';
    const odbox_event_type longest_et = {long_name};
    script s2 = {.add = {d}, .nadd = 1, .emit = {{d, &longest_et, "{}"}}, .nemit = 1};
    run_ok(exe, "LongestEvent", &s2, NULL, &res);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s.events WHERE event_type = '%s'", f.ev[0], long_name),
                     1);
    odbox_result_clear(&res);
    /* NULL model / event type / plan arguments inside perform */
    script s3 = {.emit = {{d, NULL, "{}"}}, .nemit = 1};
    ck_assert_int_eq(run(exe, "NullEvent", &s3, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    script s4 = {.add = {NULL}, .nadd = 1};
    ck_assert_int_eq(run(exe, "NullModel", &s4, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* perform's contract is "a negative code with err filled": the executor
 * must hand perform an error to fill even when its own caller passed none. */
START_TEST(execute_without_an_error_struct)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "no-err", 1);
    script s = {.add = {d}, .nadd = 1, .codes = {ODBOX_ENOTFOUND}};
    odbox_action a = {.name = "NoErr", .perform = scripted, .user = &s};
    ck_assert_int_eq(odbox_execute(exe, &a, NULL, NULL, NULL, NULL), ODBOX_ENOTFOUND);
    assert_empty(&f, 0);
    script ok = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_action b = {.name = "NoErrOk", .perform = scripted, .user = &ok};
    ck_assert_int_eq(odbox_execute(exe, &b, NULL, NULL, NULL, NULL), ODBOX_OK);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A perform that logs its params (json_object_to_json_string re-serialises
 * the object into its own buffer) must not change what is written as
 * action_params. */
static int log_params(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    const char *pretty = json_object_to_json_string_ext(params, JSON_C_TO_STRING_PRETTY);
    const char *spaced = json_object_to_json_string(params);
    ++*(int *)user;
    return pretty && spaced ? 0 : ODBOX_ENOMEM;
}

START_TEST(perform_may_serialise_its_params)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    json_object *params = json_object_new_object();
    for (int i = 0; i < 40; i++) {
        char k[16];
        snprintf(k, sizeof k, "key_%02d", i);
        json_object *arr = json_object_new_array();
        for (int j = 0; j < 4; j++)
            json_object_array_add(arr, json_object_new_int(i * 10 + j));
        json_object_object_add(params, k, arr);
    }
    char *want = strdup(json_object_to_json_string_ext(params, JSON_C_TO_STRING_PLAIN));
    int calls = 0;
    odbox_action a = {.name = "LogsParams", .perform = log_params, .user = &calls};
    odbox_result res;
    odbox_error e;
    int rc = odbox_execute(exe, &a, params, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(calls, 1);
    evrow rows[2];
    ck_assert_int_eq(read_events(&f, 0, rows, 2), 1);
    ck_assert_msg(dfx_json_same(rows[0].params, want), "stored %s, want %s", rows[0].params, want);
    odbox_result_clear(&res);
    free(want);
    json_object_put(params);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

typedef struct bulk {
    odbox_model **m;
    int n, emit, update;
    odbox_model *beside; /* updated before the n rows are staged */
} bulk;

static int bulk_perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    bulk *b = user;
    json_object *p = json_object_new_object();
    int rc = b->beside ? odbox_plan_update(plan, b->beside, NULL, err) : 0;
    for (int i = 0; i < b->n && !rc; i++) {
        rc = b->update ? odbox_plan_update(plan, b->m[i], NULL, err) : odbox_plan_add(plan, b->m[i], err);
        if (!rc && b->emit)
            rc = odbox_plan_emit(plan, b->m[i], &EV_CREATED, p, err);
    }
    json_object_put(p);
    return rc;
}

static odbox_model **bulk_dummies(int n)
{
    odbox_model **d = calloc((size_t)n, sizeof *d);
    ck_assert_ptr_nonnull(d);
    for (int i = 0; i < n; i++)
        d[i] = dfx_dummy(NULL, "bulk", i);
    return d;
}

static void bulk_free(odbox_model **m, int n)
{
    for (int i = 0; i < n; i++)
        odbox_model_free(&m[i]);
    free(m);
}

/* Plans bigger than a few hundred rows: the headers promise one multi-row
 * INSERT per table and shard and state no limit (Ekbatan has none). */
START_TEST(many_events_in_one_action)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    const int sizes[] = {600, 2100};
    int64_t total = 0;
    for (size_t k = 0; k < 2; k++) {
        int n = sizes[k];
        odbox_model **d = bulk_dummies(n);
        bulk b = {.m = d, .n = n, .emit = 1};
        odbox_action a = {.name = "BulkEmit", .perform = bulk_perform, .user = &b};
        odbox_error e;
        int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
        ck_assert_msg(rc == ODBOX_OK, "%d models with one event each: %s: %s", n, odbox_errname(rc), e.message);
        total += n;
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), total);
        ck_assert_int_eq(dfx_events(&f, 0), total);
        bulk_free(d, n);
    }
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(many_rows_in_one_plan)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_error e;
    /* 700 models added, then all 700 updated, in one plan each */
    enum { ND = 700, NT = 4200 };
    odbox_model **d = bulk_dummies(ND);
    bulk b = {.m = d, .n = ND};
    odbox_action a = {.name = "BulkAdd", .perform = bulk_perform, .user = &b};
    int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%d models added: %s: %s", ND, odbox_errname(rc), e.message);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), ND);
    for (int i = 0; i < ND; i++)
        ck_assert_int_eq(odbox_model_set_int64(d[i], "amount", -i, &e), ODBOX_OK);
    b.update = 1;
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%d models updated: %s: %s", ND, odbox_errname(rc), e.message);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE version = 2 AND amount <= 0"), ND);
    bulk_free(d, ND);
    /* 4200 entities */
    odbox_model **t = calloc(NT, sizeof *t);
    for (int i = 0; i < NT; i++) {
        ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t[i], &e), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_text(t[i], "label", "bulk", &e), ODBOX_OK);
    }
    bulk bt = {.m = t, .n = NT};
    a.user = &bt;
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%d entities added: %s: %s", NT, odbox_errname(rc), e.message);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), NT);
    bulk_free(t, NT);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* On PostgreSQL one UPDATE and up to 30 inserted rows are one statement
 * (32 WITH items with the events, however many events); one more inserted
 * row takes a transaction. Both write all or nothing. */
START_TEST(postgresql_joins_at_most_32_items)
{
    if (strcmp(itest_dialect(), "pg"))
        return;
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *stale = NULL, *x = seed_moved(&f, exe, &stale);
    const char *xid = odbox_model_id(x);
    char stamps[64], fn[64];
    stamps_on(&f, stamps, fn);
    odbox_error e;
    odbox_model *cur = find_dummy(&f, xid);
    odbox_model **d = bulk_dummies(30);
    bulk b = {.m = d, .n = 30, .emit = 1, .beside = cur};
    odbox_action a = {.name = "UpdateAndAdd", .perform = bulk_perform, .user = &b};
    int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    assert_written_by(&f, stamps, 1 + 30 + 30, 1);
    bulk_free(d, 30);

    /* 31 inserted rows: a transaction; stale, so none of them lands */
    int64_t dummies = dfx_rows(&f, 0, "dummies"), events = dfx_events(&f, 0);
    d = bulk_dummies(31);
    b = (bulk){.m = d, .n = 31, .beside = stale};
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_ESTALE, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), dummies);
    ck_assert_int_eq(dfx_events(&f, 0), events);
    itest_exec(f.c[0], "DELETE FROM %s", stamps);
    odbox_model_free(&cur);
    cur = find_dummy(&f, xid);
    b.beside = cur;
    rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    assert_written_by(&f, stamps, 31 + 1 + 1, 3); /* INSERT, UPDATE, the sentinel */
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), dummies + 31);
    bulk_free(d, 31);
    stamps_off(&f, stamps, fn);
    odbox_model_free(&cur);
    odbox_model_free(&stale);
    odbox_model_free(&x);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* model.h / action.h: action_name matches [A-Za-z_][A-Za-z0-9_.]* (<= 255). */
START_TEST(action_names_follow_the_header_pattern)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    const char *names[] = {"Deposit", "_x", "shop.Deposit", "shop.v2", "shop.2fa.Verify", "a..b", "trailing."};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int calls = 0;
        odbox_action a = {.name = names[i], .perform = count_calls, .user = &calls};
        odbox_error e;
        int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
        ck_assert_msg(rc == ODBOX_OK, "action name '%s' refused: %s", names[i], e.message);
        ck_assert_int_eq(calls, 1);
    }
    ck_assert_int_eq(dfx_events(&f, 0), (int64_t)(sizeof names / sizeof names[0]));
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

Suite *action_suite(void)
{
    Suite *s = suite_create("action");
    TCase *t = tcase_create("action");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, execute_writes_rows_and_events);
    tcase_add_test(t, hooks_run_inside_the_transaction);
    tcase_add_test(t, sentinel_row_for_an_empty_plan);
    tcase_add_test(t, sentinel_row_for_rows_without_events);
    tcase_add_test(t, update_advances_version_and_updated_date);
    tcase_add_test(t, batch_update_of_five_in_one_plan);
    tcase_add_test(t, injected_failures_write_nothing);
    tcase_add_test(t, failing_events_insert_writes_nothing);
    tcase_add_test(t, perform_failure_writes_nothing);
    tcase_add_test(t, params_and_payloads_must_be_objects);
    tcase_add_test(t, event_name_collisions_are_refused);
    tcase_add_test(t, staging_an_id_twice_is_refused);
    tcase_add_test(t, unregistered_model_type_is_refused);
    tcase_add_test(t, not_null_column_left_null_writes_nothing);
    tcase_add_test(t, one_update_beside_adds_and_events_is_all_or_nothing);
    tcase_add_test(t, unique_conflict_beside_an_update_writes_nothing);
    tcase_add_test(t, postgresql_writes_such_a_shard_in_one_statement);
    tcase_add_test(t, postgresql_joins_at_most_32_items);
    tcase_add_test(t, optimistic_race_without_retries);
    tcase_add_test(t, optimistic_race_with_default_retry);
    tcase_add_test(t, retry_counters_are_per_code);
    tcase_add_test(t, cross_shard_plan_is_refused);
    tcase_add_test(t, cross_shard_plan_when_allowed);
    tcase_add_test(t, partial_commit_is_reported_and_not_retried);
    tcase_add_test(t, commit_lost_is_in_doubt_and_never_retried);
    tcase_add_test(t, connection_lost_while_idle);
    tcase_add_test(t, ids_route_to_their_shard_or_the_default);
    tcase_add_test(t, replica_reads_inside_perform);
    tcase_add_test(t, bad_input_is_refused);
    tcase_add_test(t, execute_without_an_error_struct);
    tcase_add_test(t, perform_may_serialise_its_params);
    tcase_add_test(t, many_events_in_one_action);
    tcase_add_test(t, many_rows_in_one_plan);
    tcase_add_test(t, action_names_follow_the_header_pattern);
    suite_add_tcase(s, t);
    return s;
}
