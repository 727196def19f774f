/* odbox — helpers of the handler suites; see test_handlers.h. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "delivery_internal.h"
#include "jobs_fx.h"
#include "test_handlers.h"

int64_t mono_ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- recorded calls ---------------------------------------------------------- */

void hrec_init(hrec *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

void hrec_destroy(hrec *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static void copy(char *dst, size_t cap, const char *src, int *is_null)
{
    if (is_null)
        *is_null = !src;
    snprintf(dst, cap, "%s", src ? src : "");
}

static void record(hbeh *b, const odbox_envelope *env)
{
    hrec *r = b->rec;
    pthread_mutex_lock(&r->mu);
    if (r->n < HREC_MAX) {
        hcall *c = &r->calls[r->n++];
        memset(c, 0, sizeof *c);
        copy(c->handler, sizeof c->handler, b->name, NULL);
        copy(c->row_handler, sizeof c->row_handler, env->handler_name, NULL);
        copy(c->notification_id, sizeof c->notification_id, env->notification_id, NULL);
        copy(c->event_id, sizeof c->event_id, env->event_id, NULL);
        copy(c->action_id, sizeof c->action_id, env->action_id, NULL);
        copy(c->ns, sizeof c->ns, env->ns, NULL);
        copy(c->action_name, sizeof c->action_name, env->action_name, NULL);
        copy(c->event_type, sizeof c->event_type, env->event_type, NULL);
        copy(c->model_id, sizeof c->model_id, env->model_id, &c->model_null);
        copy(c->model_type, sizeof c->model_type, env->model_type, NULL);
        copy(c->params, sizeof c->params,
             env->action_params ? json_object_to_json_string_ext(env->action_params, JSON_C_TO_STRING_PLAIN) : NULL,
             NULL);
        copy(c->payload, sizeof c->payload,
             env->payload ? json_object_to_json_string_ext(env->payload, JSON_C_TO_STRING_PLAIN) : NULL,
             &c->payload_null);
        c->started = env->started_us;
        c->completion = env->completion_us;
        c->event_us = env->event_us;
        c->shard = env->shard;
        c->attempt = env->attempt;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

typedef struct chain_job {
    const odbox_envelope *env;
    const odbox_event_type *type;
} chain_job;

static int chain_perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    (void)params;
    const chain_job *j = user;
    odbox_model *m = dfx_dummy_in(j->env->shard, "chained", 1);
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "source", json_object_new_string(j->env->event_id));
    int rc = odbox_plan_emit(plan, m, j->type, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

int hb_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    hbeh *b = user;
    int k = atomic_fetch_add(&b->calls, 1);
    record(b, env);
    atomic_fetch_add(&b->blocked, 1);
    for (int i = 0; i < 3000 && atomic_load(&b->block); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_sub(&b->blocked, 1);
    if (b->chain_exe) {
        chain_job j = {env, b->chain_type};
        odbox_action a = {"ChainedAction", chain_perform, &j};
        json_object *params = json_object_new_object();
        json_object_object_add(params, "source", json_object_new_string(env->event_id));
        odbox_result res;
        int rc = odbox_execute(b->chain_exe, &a, params, NULL, &res, err);
        json_object_put(params);
        odbox_result_clear(&res);
        if (rc != ODBOX_OK) {
            atomic_fetch_add(&b->finished, 1);
            return rc;
        }
    }
    int rc = 0;
    if (b->fail_always || k < b->fail_first) {
        if (b->fail_message)
            snprintf(err->message, sizeof err->message, "%s", b->fail_message);
        else
            snprintf(err->message, sizeof err->message, "%s: scripted failure of call %d", b->name, k + 1);
        rc = b->fail_code ? b->fail_code : ODBOX_EDB;
    }
    atomic_fetch_add(&b->finished, 1);
    return rc;
}

int hrec_count(hrec *r, const char *handler)
{
    pthread_mutex_lock(&r->mu);
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += !handler || !strcmp(r->calls[i].handler, handler);
    pthread_mutex_unlock(&r->mu);
    return n;
}

int hrec_find(hrec *r, const char *handler, const char *event_id)
{
    pthread_mutex_lock(&r->mu);
    int at = -1;
    for (int i = 0; i < r->n && at < 0; i++)
        if (!strcmp(r->calls[i].handler, handler) && !strcmp(r->calls[i].event_id, event_id))
            at = i;
    pthread_mutex_unlock(&r->mu);
    return at;
}

int hrec_wait(hrec *r, const char *handler, int n, int bound_ms)
{
    int64_t end = mono_ms_now() + bound_ms;
    while (hrec_count(r, handler) < n) {
        if (mono_ms_now() >= end)
            return 0;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return 1;
}

void hbeh_init(hbeh *b, hrec *rec, const char *name)
{
    memset(b, 0, sizeof *b);
    b->rec = rec;
    b->name = name;
    atomic_init(&b->calls, 0);
    atomic_init(&b->block, 0);
    atomic_init(&b->blocked, 0);
    atomic_init(&b->finished, 0);
}

odbox_handlers *handlers_of(int n, const char *const *names, const char *const *types, hbeh *const *behs)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    for (int i = 0; i < n; i++) {
        behs[i]->name = names[i];
        odbox_handler hd = {.name = names[i], .event_type = types[i], .handle = hb_handle, .user = behs[i]};
        ck_assert_msg(odbox_handlers_add(h, &hd, &e) == ODBOX_OK, "%s", e.message);
    }
    return h;
}

odbox_handlers *one_handler_on(const char *name, const char *event_type, odbox_handler_fn fn, void *user,
                               const odbox_handler_options *o)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    odbox_handler hd = {.name = name, .event_type = event_type, .handle = fn, .user = user};
    ck_assert_msg(odbox_handlers_add(h, &hd, &e) == ODBOX_OK, "%s", e.message);
    if (o)
        ck_assert_msg(odbox_handlers_set_options(h, name, o, &e) == ODBOX_OK, "%s", e.message);
    return h;
}

/* ---- events ------------------------------------------------------------------------ */

typedef struct emit_one {
    odbox_model *m;
    const odbox_event_type *et;
} emit_one;

static int emit_perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    (void)params;
    emit_one *o = user;
    if (!o->et)
        return 0;
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "n", json_object_new_int(7));
    json_object_object_add(payload, "text", json_object_new_string("caf\xc3\xa9 'q'"));
    int rc = odbox_plan_emit(plan, o->m, o->et, payload, err);
    json_object_put(payload);
    return rc;
}

void event_of_action(dfx *f, int member, const char *action_id, char out[37])
{
    const odbox_dialect *d = odbox_conn_dialect(f->c[member]);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT id FROM %s WHERE action_id = %s", etab(f, member), d->uuid_param);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    const char *v = NULL;
    ck_assert_msg(odbox_stmt_prepare(f->c[member], sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, action_id, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &v, NULL, &e), ODBOX_OK);
    snprintf(out, 37, "%s", v);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 0);
    odbox_stmt_free(&s);
}

static void emit_action(dfx *f, odbox_executor *exe, int member, const odbox_event_type *et, char *id_out)
{
    emit_one o = {dfx_dummy_in((odbox_shard_id){0, member}, "emitter", 1), et};
    odbox_action a = {"EmitAction", emit_perform, &o};
    json_object *params = json_object_new_object();
    json_object_object_add(params, "who", json_object_new_string("test"));
    odbox_result res;
    odbox_error e = {0};
    int rc = odbox_execute(exe, &a, params, NULL, &res, &e);
    json_object_put(params);
    ck_assert_msg(rc == ODBOX_OK, "emit: %s", e.message);
    if (id_out)
        event_of_action(f, member, res.action_id, id_out);
    odbox_result_clear(&res);
    odbox_model_free(&o.m);
}

void emit_none(dfx *f, odbox_executor *exe) { emit_action(f, exe, 0, NULL, NULL); }

void emit_n(dfx *f, odbox_executor *exe, int member, const odbox_event_type *et, int n, char (*ids)[37])
{
    for (int i = 0; i < n; i++)
        emit_action(f, exe, member, et, ids ? ids[i] : NULL);
}

/* ---- rows ------------------------------------------------------------------------------ */

const char *ntab(dfx *f, int member) { return itest_evt(f->ev[member], "event_notifications"); }
const char *etab(dfx *f, int member) { return itest_evt(f->ev[member], "events"); }

int64_t nrows(dfx *f, int member, const char *where)
{
    return itest_count(f->c[member], "SELECT COUNT(*) FROM %s WHERE %s", ntab(f, member), where ? where : "1 = 1");
}

static odbox_stmt *ncol(dfx *f, int member, const char *event_id, const char *handler, const char *col)
{
    const odbox_dialect *d = odbox_conn_dialect(f->c[member]);
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT %s%s%s FROM %s WHERE event_id = %s AND handler_name = ?",
             strstr(col, "date") || strstr(col, "retry") ? (d->timestamp_read_open ? d->timestamp_read_open : "")
                                                          : "",
             col,
             strstr(col, "date") || strstr(col, "retry") ? (d->timestamp_read_close ? d->timestamp_read_close : "")
                                                          : "",
             ntab(f, member), d->uuid_param);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_prepare(f->c[member], sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, event_id, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 2, handler, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_stmt_fetch(s, &e) == 1, "no notification of %s for event %s", handler, event_id);
    return s;
}

int64_t ncol_ts(dfx *f, int member, const char *event_id, const char *handler, const char *col)
{
    odbox_stmt *s = ncol(f, member, event_id, handler, col);
    int64_t v = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_get_timestamp(s, 1, &v, NULL, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);
    return v;
}

int64_t ncol_int(dfx *f, int member, const char *event_id, const char *handler, const char *col)
{
    odbox_stmt *s = ncol(f, member, event_id, handler, col);
    int64_t v = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_get_int64(s, 1, &v, NULL, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);
    return v;
}

const char *nstate(dfx *f, int member, const char *event_id, const char *handler)
{
    static _Thread_local char out[32];
    odbox_stmt *s = ncol(f, member, event_id, handler, "state");
    const char *v = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_get_text(s, 1, &v, NULL, &e) == ODBOX_OK, "%s", e.message);
    snprintf(out, sizeof out, "%s", v);
    odbox_stmt_free(&s);
    return out;
}

/* ---- rounds ------------------------------------------------------------------------------ */

void round_ok(int rc, const odbox_error *e)
{
    ck_assert_msg(rc == ODBOX_OK, "round: %s: %s", odbox_errname(rc), e->message);
}

static void add_round(odbox_delivery_round *sum, const odbox_delivery_round *r)
{
    sum->read += r->read;
    sum->delivered += r->delivered;
    sum->notifications += r->notifications;
    sum->succeeded += r->succeeded;
    sum->failed += r->failed;
    sum->expired_preflight += r->expired_preflight;
    sum->expired_postfailure += r->expired_postfailure;
    sum->timed_out += r->timed_out;
    sum->unwritten += r->unwritten;
    sum->stale += r->stale;
    sum->statements += r->statements;
    sum->updates += r->updates;
}

static void until_idle(odbox_delivery *d, dfx *f, odbox_delivery_round *sum, int handling)
{
    if (sum)
        memset(sum, 0, sizeof *sum);
    for (int i = 0; i < f->nshards; i++) {
        odbox_shard *s = odbox_registry_shard_at(f->r, (size_t)i);
        for (int k = 0;; k++) {
            ck_assert_int_lt(k, 50);
            odbox_delivery_round r;
            odbox_error e = {0};
            round_ok(handling ? odbox_delivery_handling_round(d, s, &r, &e) : odbox_delivery_fanout_round(d, s, &r, &e),
                     &e);
            if (sum)
                add_round(sum, &r);
            if (r.read == 0)
                break;
        }
    }
}

void fanout_until_idle(odbox_delivery *d, dfx *f, odbox_delivery_round *sum) { until_idle(d, f, sum, 0); }
void handle_until_idle(odbox_delivery *d, dfx *f, odbox_delivery_round *sum) { until_idle(d, f, sum, 1); }

/* ---- one delivery on a manual clock ------------------------------------------------ */

void hx_open(hx *x, int nshards)
{
    memset(x, 0, sizeof *x);
    dfx_open(&x->f, nshards, 0);
    x->exe = open_exe(&x->f);
    hrec_init(&x->rec);
    ck_assert_int_eq(odbox_manual_clock_new(EPOCH_2030, &x->clk, NULL), ODBOX_OK);
}

/* A delivery of h (taken) with cfg (NULL: defaults) on the manual clock. */
void hx_deliver(hx *x, odbox_handlers *h, odbox_delivery_config *cfg)
{
    odbox_delivery_config c = cfg ? *cfg : (odbox_delivery_config){0};
    c.clock = odbox_manual_clock_clock(x->clk);
    odbox_delivery_free(&x->d);
    odbox_handlers_free(&x->h);
    x->h = h;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x->f.r, h, &c, &x->d, &e) == ODBOX_OK, "%s", e.message);
}

void hx_close(hx *x)
{
    odbox_delivery_free(&x->d);
    odbox_handlers_free(&x->h);
    odbox_executor_free(&x->exe);
    odbox_manual_clock_free(&x->clk);
    dfx_close(&x->f);
    hrec_destroy(&x->rec);
}

odbox_shard *hx_shard(hx *x, int member) { return odbox_registry_shard_at(x->f.r, (size_t)member); }

odbox_delivery_round hx_fanout(hx *x, int member)
{
    odbox_delivery_round r;
    odbox_error e = {0};
    round_ok(odbox_delivery_fanout_round(x->d, hx_shard(x, member), &r, &e), &e);
    return r;
}

odbox_delivery_round hx_handle(hx *x, int member)
{
    odbox_delivery_round r;
    odbox_error e = {0};
    round_ok(odbox_delivery_handling_round(x->d, hx_shard(x, member), &r, &e), &e);
    return r;
}

/* ---- the delivery as jobs (jx) ------------------------------------------------ */

int jx_count_rounds(void *ud, odbox_delivery_point at, odbox_shard *s, odbox_conn *conn,
                        const odbox_delivery_round *r)
{
    (void)s, (void)conn;
    jx *x = ud;
    if (at == ODBOX_DELIVERY_ROUND_DONE)
        atomic_fetch_add(&x->rounds[r->job == ODBOX_DELIVERY_HANDLING][r->shard.member], 1);
    if (at == ODBOX_DELIVERY_CALLS_DONE && atomic_load(&x->fail_rounds) > 0 &&
        atomic_fetch_sub(&x->fail_rounds, 1) > 0)
        return ODBOX_EDB;
    return 0;
}

static void jx_log(void *ud, odbox_log_level level, const char *message)
{
    (void)level;
    jx *x = ud;
    pthread_mutex_lock(&x->log_mu);
    size_t n = strlen(x->warnings);
    snprintf(x->warnings + n, sizeof x->warnings - n, "%s\n", message);
    pthread_mutex_unlock(&x->log_mu);
}

const char *jx_warnings(jx *x)
{
    return x->warnings;
}

const char *jx_describe(jx *x)
{
    size_t n = 0;
    for (int m = 0; m < x->f.nshards; m++) {
        const char *ev = itest_evt(x->f.ev[m], "events");
        int64_t events = itest_count(x->f.c[m], "SELECT COUNT(*) FROM %s", ev);
        int64_t undelivered = itest_count(x->f.c[m], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE", ev);
        int64_t due = nrows(&x->f, m, "state IN ('PENDING', 'FAILED')");
        int64_t leased = nrows(&x->f, m, "state IN ('PENDING', 'FAILED') AND lease_until IS NOT NULL");
        n += (size_t)snprintf(x->described + n, sizeof x->described - n,
                              "shard 0.%d: %lld events (%lld undelivered), %lld notifications (%lld PENDING or "
                              "FAILED, %lld of them leased), rounds fan-out %d, handling %d; ",
                              m, (long long)events, (long long)undelivered, (long long)nrows(&x->f, m, NULL),
                              (long long)due, (long long)leased, atomic_load(&x->rounds[0][m]),
                              atomic_load(&x->rounds[1][m]));
        if (n >= sizeof x->described)
            break;
    }
    return x->described;
}

/* The delivery's jobs are named per eventlog (odbox_delivery_job_name),
 * and each test has an eventlog of its own. */
void jx_clear_job_rows(odbox_conn *c)
{
    itest_exec(c, "DELETE FROM scheduled_tasks WHERE task_name LIKE 'odbox-event-%%'");
    itest_exec(c, "DELETE FROM odbox_job_state WHERE task_name LIKE 'odbox-event-%%'");
    itest_exec(c, "DELETE FROM odbox_job_waiters WHERE task_name LIKE 'odbox-event-%%'");
}

void jx_open(jx *x, int nshards)
{
    memset(x, 0, sizeof *x);
    dfx_open(&x->f, nshards, 0);
    x->exe = open_exe(&x->f);
    hrec_init(&x->rec);
    for (int j = 0; j < 2; j++)
        for (int s = 0; s < 2; s++)
            atomic_init(&x->rounds[j][s], 0);
    atomic_init(&x->fail_rounds, 0);
    pthread_mutex_init(&x->log_mu, NULL);
    odbox_log_set(jx_log, x, ODBOX_LOG_WARN);
    jx_clear_job_rows(x->f.c[0]);
}

/* Delivery of h on x's registry, its jobs (which) on a job registry of
 * their own, started; commits of x->exe attached. */
void jx_run_polling(jx *x, odbox_handlers *h, odbox_delivery_config *cfg, int which, int poll_ms)
{
    x->h = h;
    cfg->hook = jx_count_rounds;
    cfg->hook_ud = x;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x->f.r, h, cfg, &x->d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_delivery_attach(x->d, x->exe, &e), ODBOX_OK);
    odbox_jobs_config jc = {.poll_interval_ms = poll_ms, .shutdown_max_wait_ms = 20000};
    ck_assert_int_eq(odbox_jobs_open(x->f.r, &jc, &x->jobs, &e), ODBOX_OK);
    ck_assert_msg(odbox_delivery_add_jobs(x->d, x->jobs, which, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_jobs_start(x->jobs, &e) == ODBOX_OK, "%s", e.message);
}

void jx_run(jx *x, odbox_handlers *h, odbox_delivery_config *cfg, int which)
{
    jx_run_polling(x, h, cfg, which, 200);
}

/* Until each job of which has finished a round on every shard: its
 * execution runs, and what comes next can only come by a wake-up. */
void jx_wait_rounds(jx *x, int which)
{
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    for (int j = 0; j < 2; j++)
        for (int s = 0; s < x->f.nshards; s++)
            while ((which & (1 << j)) && atomic_load(&x->rounds[j][s]) == 0) {
                ck_assert_msg(mono_ms_now() < end, "job %d made no round on shard 0.%d", j, s);
                jt_sleep_ms(5);
            }
}

void jx_close(jx *x)
{
    odbox_error e = {0};
    if (x->jobs)
        ck_assert_msg(odbox_jobs_stop(x->jobs, &e) == ODBOX_OK, "%s", e.message);
    odbox_delivery_free(&x->d);
    odbox_jobs_free(&x->jobs);
    odbox_handlers_free(&x->h);
    odbox_executor_free(&x->exe);
    jx_clear_job_rows(x->f.c[0]);
    dfx_close(&x->f);
    hrec_destroy(&x->rec);
    odbox_log_set(NULL, NULL, ODBOX_LOG_WARN);
    pthread_mutex_destroy(&x->log_mu);
}

/* Counts the handling rounds a delivery finished (ud: an atomic_int). */
static int count_handling(void *ud, odbox_delivery_point at, odbox_shard *s, odbox_conn *conn,
                          const odbox_delivery_round *r)
{
    (void)s, (void)conn;
    if (at == ODBOX_DELIVERY_ROUND_DONE && r->job == ODBOX_DELIVERY_HANDLING)
        atomic_fetch_add((atomic_int *)ud, 1);
    return 0;
}

void other_open(other_proc *o, jx *x, hbeh *b, const char *event_type, int listen, int poll_ms)
{
    memset(o, 0, sizeof *o);
    atomic_init(&o->rounds, 0);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = x->f.ev[0]};
    odbox_registry_config rc = {.shards = &sc, .nshards = 1};
    o->h = handlers_of(1, (const char *[]){"h"}, (const char *[]){event_type}, (hbeh *[]){b});
    enum { LOOPS = 2 };
    odbox_delivery_config cfg = {.fanout_poll_ms = poll_ms, .handling_poll_ms = poll_ms, .handling_loops = LOOPS,
                                 .cross_process_wakeup = listen ? 0 : -1, .hook = count_handling,
                                 .hook_ud = &o->rounds};
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open(&rc, &o->r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_open(o->r, o->h, &cfg, &o->d, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_open(o->r, &(odbox_jobs_config){.poll_interval_ms = 200}, &o->j, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_delivery_add_jobs(o->d, o->j, ODBOX_DELIVERY_HANDLING, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_start(o->j, &e), ODBOX_OK);
    int64_t end = mono_ms_now() + 20000;
    while (listen && !odbox_wake_listening(o->d->wake, (odbox_shard_id){0, 0}))
        ck_assert_msg(mono_ms_now() < end, "no LISTEN"), jt_sleep_ms(10);
    /* every loop's first round, which polls at its start: a loop slow to
     * start (under ASan) found a row emitted after this and took it */
    while (atomic_load(&o->rounds) < LOOPS)
        ck_assert_msg(mono_ms_now() < end, "no handling round"), jt_sleep_ms(10);
}

void other_close(other_proc *o)
{
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_stop(o->j, &e), ODBOX_OK);
    odbox_delivery_free(&o->d);
    odbox_jobs_free(&o->j);
    odbox_handlers_free(&o->h);
    odbox_registry_free(&o->r);
}

/* The last error of subscription name on shard member (at: when, 0: none). */
char *last_error_of(hx *x, int member, const char *name, int64_t *at)
{
    odbox_subscription *s = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_subscriptions_list(x->f.r, hx_shard(x, member), 0, &s, &n, &e) == ODBOX_OK, "%s",
                  e.message);
    char *msg = NULL;
    *at = -1;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, name)) {
            msg = s[i].last_error ? strdup(s[i].last_error) : NULL;
            *at = s[i].last_error_us;
        }
    odbox_subscriptions_free(&s, n);
    ck_assert_int_ge(*at, 0);
    return msg;
}
