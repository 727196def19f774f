/* odbox — integration tests of the per-handler options and of delayed
 * delivery, on every dialect: a concurrency limit holds across deliveries
 * claiming at once (each claims through the database, as a process
 * would), while a handler without one runs wider; an ordered handler sees
 * each model_id's events in order through failures, retries and two
 * deliveries, while an unordered one on the same events does not; an
 * event emitted with a delivery time waits for it; two writers whose
 * clocks disagree cannot invert a model's order; bad options and times
 * are refused. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "jobs_fx.h"
#include "test_handlers.h"

static const odbox_event_type EV_O = {"LedgerPosted"};

#define MAX_WAIT_MS 60000

/* ---- emitting: k events on one model per action, payload {"seq": s} ---------- */

typedef struct seq_emit {
    odbox_model *m;
    int first, n;
    int64_t deliver_after_us;
} seq_emit;

static int seq_perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    seq_emit *o = user;
    int rc = ODBOX_OK;
    for (int i = 0; i < o->n && rc == ODBOX_OK; i++) {
        json_object *payload = json_object_new_object();
        json_object_object_add(payload, "seq", json_object_new_int(o->first + i));
        rc = odbox_plan_emit_after(plan, o->m, &EV_O, payload, o->deliver_after_us, err);
        json_object_put(payload);
    }
    return rc;
}

static void emit_seq(odbox_executor *exe, odbox_model *m, int first, int n, int64_t deliver_after_us)
{
    seq_emit o = {m, first, n, deliver_after_us};
    odbox_action a = {"PostLedger", seq_perform, &o};
    odbox_result res;
    odbox_error e = {0};
    ck_assert_msg(odbox_execute(exe, &a, NULL, NULL, &res, &e) == ODBOX_OK, "%s", e.message);
    odbox_result_clear(&res);
}

static int seq_of(const odbox_envelope *env)
{
    json_object *v;
    return json_object_object_get_ex(env->payload, "seq", &v) ? json_object_get_int(v) : -1;
}

static odbox_handlers *one_handler(const char *name, odbox_handler_fn fn, void *user, const odbox_handler_options *o)
{
    return one_handler_on(name, EV_O.name, fn, user, o);
}

static void add_handler(odbox_handlers *h, const char *name, odbox_handler_fn fn, void *user,
                        const odbox_handler_options *o)
{
    odbox_error e = {0};
    odbox_handler hd = {.name = name, .event_type = EV_O.name, .handle = fn, .user = user};
    ck_assert_int_eq(odbox_handlers_add(h, &hd, &e), ODBOX_OK);
    if (o)
        ck_assert_msg(odbox_handlers_set_options(h, name, o, &e) == ODBOX_OK, "%s", e.message);
}

/* ---- a concurrency limit --------------------------------------------------------- */

/* Calls in flight of one handler, across every delivery of the test. */
typedef struct meter {
    atomic_int now, max, calls;
} meter;

static int metered_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)err;
    meter *m = user;
    int n = atomic_fetch_add(&m->now, 1) + 1;
    for (int seen = atomic_load(&m->max); n > seen && !atomic_compare_exchange_weak(&m->max, &seen, n);)
        ;
    jt_sleep_ms(40);
    atomic_fetch_add(&m->calls, 1);
    atomic_fetch_sub(&m->now, 1);
    return 0;
}

typedef struct looper {
    odbox_delivery *d;
    odbox_shard *s;
    dfx *f;
    int64_t want;
    atomic_int failed;
} looper;

/* Handling rounds until every notification is SUCCEEDED (bounded). */
static void *handle_loop(void *arg)
{
    looper *l = arg;
    int64_t end = mono_ms_now() + MAX_WAIT_MS;
    while (mono_ms_now() < end) {
        odbox_delivery_round r;
        odbox_error e = {0};
        if (odbox_delivery_handling_round(l->d, l->s, &r, &e) != ODBOX_OK) {
            fprintf(stderr, "handlers_order: a round failed: %s\n", e.message);
            atomic_fetch_add(&l->failed, 1);
        }
        if (atomic_load(&l->failed) || r.read == 0) {
            jt_sleep_ms(10);
            odbox_conn *c = NULL;
            odbox_pool *pool = odbox_shard_primary(l->s);
            int64_t done = 0;
            if (odbox_pool_acquire(pool, &c, &e) == ODBOX_OK) {
                done = itest_count(c, "SELECT COUNT(*) FROM %s WHERE state = 'SUCCEEDED'", ntab(l->f, 0));
                odbox_pool_release(pool, &c);
            }
            if (done >= l->want)
                break;
        }
    }
    return NULL;
}

/* Three deliveries with four workers each claim at once; "lim" may have 2
 * calls in flight, "wide" any number: lim never exceeds 2 and reaches it,
 * wide goes past it (the meter sees concurrency), every row SUCCEEDED once. */
START_TEST(a_concurrency_limit_holds_across_deliveries)
{
    hx x;
    hx_open(&x, 1);
    enum { N = 24, D = 3 };
    static meter lim, wide;
    memset(&lim, 0, sizeof lim);
    memset(&wide, 0, sizeof wide);
    odbox_handler_options two = {.max_in_flight = 2};
    odbox_delivery_config cfg = {.handling_batch = 10, .workers = 4};
    odbox_handlers *h[D];
    odbox_delivery *d[D];
    odbox_error e = {0};
    for (int i = 0; i < D; i++) {
        h[i] = one_handler("lim", metered_handle, &lim, &two);
        add_handler(h[i], "wide", metered_handle, &wide, NULL);
        ck_assert_msg(odbox_delivery_open(x.f.r, h[i], &cfg, &d[i], &e) == ODBOX_OK, "%s", e.message);
    }
    for (int i = 0; i < N; i++) {
        odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "limited", 1);
        emit_seq(x.exe, m, i, 1, 0);
        odbox_model_free(&m);
    }
    odbox_delivery_round r;
    do
        round_ok(odbox_delivery_fanout_round(d[0], hx_shard(&x, 0), &r, &e), &e);
    while (r.read > 0);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 2 * N);
    looper l[D];
    pthread_t t[D];
    for (int i = 0; i < D; i++) {
        l[i] = (looper){.d = d[i], .s = hx_shard(&x, 0), .f = &x.f, .want = 2 * N};
        atomic_init(&l[i].failed, 0);
        ck_assert_int_eq(pthread_create(&t[i], NULL, handle_loop, &l[i]), 0);
    }
    for (int i = 0; i < D; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(atomic_load(&l[i].failed), 0);
    }
    printf("handlers_order: limit 2 across %d deliveries: at most %d in flight (%d calls); without a limit %d\n", D,
           atomic_load(&lim.max), atomic_load(&lim.calls), atomic_load(&wide.max));
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED' AND attempts = 1"), 2 * N);
    ck_assert_int_eq(atomic_load(&lim.calls), N);
    ck_assert_int_le(atomic_load(&lim.max), 2);
    ck_assert_int_eq(atomic_load(&lim.max), 2);
    ck_assert_int_gt(atomic_load(&wide.max), 2);
    for (int i = 0; i < D; i++) {
        odbox_delivery_free(&d[i]);
        odbox_handlers_free(&h[i]);
    }
    hx_close(&x);
}
END_TEST

/* What a limited handler's calls had left of their lease, in the
 * database's time, read on a connection of their own. */
typedef struct lease_left {
    dfx *f;
    odbox_conn *c;
    int64_t min_left_us;
    int calls;
} lease_left;

static int lease_left_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)err;
    lease_left *l = user;
    int64_t left = ncol_ts(l->f, 0, env->event_id, env->handler_name, "lease_until") - itest_db_now(l->c);
    if (!l->calls++ || left < l->min_left_us)
        l->min_left_us = left;
    return 0;
}

/* Holds the row of subscription "lim" locked for hold_ms, as a claim of
 * another process does while it counts the limit's room. */
typedef struct sub_holder {
    odbox_conn *c;
    char subs[256];
    int hold_ms;
    atomic_int ready, failed;
} sub_holder;

static void *hold_subscription(void *arg)
{
    sub_holder *h = arg;
    odbox_error e = {0};
    if (odbox_conn_begin(h->c, &e) != ODBOX_OK) {
        atomic_store(&h->failed, 1);
        atomic_store(&h->ready, 1);
        return NULL;
    }
    itest_exec(h->c, "UPDATE %s SET name = name WHERE name = 'lim'", h->subs);
    atomic_store(&h->ready, 1);
    jt_sleep_ms(h->hold_ms);
    if (odbox_conn_commit(h->c, &e) != ODBOX_OK)
        atomic_store(&h->failed, 1);
    return NULL;
}

/* A claim that waited (2.5 s here, for the limit's lock another claim
 * held) starts no call whose timeout (1 s) no longer fits in the lease the
 * database recorded (3 s, from the claim's start in PostgreSQL's
 * transaction time): the call runs once the row is claimed again, with
 * its whole timeout left. Before, the process counted its lease from the
 * end of the wait, and started the call with 0.5 s of lease left: another
 * process could have claimed the row and called it at the same time,
 * over the limit. */
START_TEST(a_claim_that_waited_starts_no_call_its_lease_cannot_hold)
{
    hx x;
    hx_open(&x, 1);
    lease_left seen = {.f = &x.f, .c = x.f.c[0]};
    odbox_handler_options one = {.max_in_flight = 1};
    odbox_handlers *h = one_handler("lim", lease_left_handle, &seen, &one);
    odbox_delivery_config cfg = {.lease_ms = 3000, .handler_timeout_ms = 1000, .workers = 1};
    odbox_delivery *d = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x.f.r, h, &cfg, &d, &e) == ODBOX_OK, "%s", e.message);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "limited", 1);
    emit_seq(x.exe, m, 0, 1, 0);
    odbox_model_free(&m);
    odbox_delivery_round r;
    round_ok(odbox_delivery_fanout_round(d, hx_shard(&x, 0), &r, &e), &e);
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'lim'"), 1);
    sub_holder hold = {.c = itest_connect(0), .hold_ms = 2500};
    snprintf(hold.subs, sizeof hold.subs, "%s", itest_evt(x.f.ev[0], "subscriptions"));
    atomic_init(&hold.ready, 0);
    atomic_init(&hold.failed, 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, hold_subscription, &hold), 0);
    while (!atomic_load(&hold.ready))
        jt_sleep_ms(5);
    int64_t end = mono_ms_now() + MAX_WAIT_MS;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < 1 && mono_ms_now() < end)
        round_ok(odbox_delivery_handling_round(d, hx_shard(&x, 0), &r, &e), &e);
    pthread_join(t, NULL);
    odbox_conn_close(&hold.c);
    ck_assert_int_eq(atomic_load(&hold.failed), 0);
    printf("handlers_order: a claim that waited 2.5 s for the limit's lock: %d call(s), the first with %lld ms of "
           "its lease left (timeout 1000 ms)\n",
           seen.calls, (long long)(seen.min_left_us / 1000));
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED'"), 1);
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_msg(seen.min_left_us >= 1000 * 1000, "a call started with %lld ms of its lease left, its timeout 1000 ms",
                  (long long)(seen.min_left_us / 1000));
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    hx_close(&x);
}
END_TEST

/* ---- ordered per model_id ------------------------------------------------------ */

/* RACE_MODELS: the models of the test beside the fan-out (below), the
 * most a test has */
enum { MODELS = 3, PER_MODEL = 8, RACE_MODELS = 40 };

/* What one handler saw: per model, the next seq it may be called with
 * (every older one has succeeded) and its calls running; calls out of
 * that order, and calls that started while another of their model ran
 * (counted by race_handle), are counted. */
typedef struct order_seen {
    pthread_mutex_t mu;
    char models[RACE_MODELS][64];
    int next[RACE_MODELS], running[RACE_MODELS];
    int out_of_order, overlapping, calls, failures;
} order_seen;

/* n new models of one shard into m */
static void new_models(odbox_model **m, int n)
{
    for (int i = 0; i < n; i++)
        m[i] = dfx_dummy_in((odbox_shard_id){0, 0}, "ordered", 1);
}

/* o emptied, for the models m[0..n-1] */
static void seen_init(order_seen *o, odbox_model *const *m, int n)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    for (int i = 0; i < n; i++)
        snprintf(o->models[i], sizeof o->models[i], "%s", odbox_model_id(m[i]));
}

/* the model's slot, -1 when it is none of o's (a slot not taken is "") */
static int model_index(order_seen *o, const char *model_id)
{
    for (int i = 0; i < RACE_MODELS; i++)
        if (model_id && !strcmp(o->models[i], model_id))
            return i;
    return -1;
}

/* Fails the first call of (model 0, seq 0) and of (model 1, seq 3). */
static int ordered_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    order_seen *o = user;
    int seq = seq_of(env);
    pthread_mutex_lock(&o->mu);
    int m = model_index(o, env->model_id);
    ck_assert_int_ge(m, 0);
    o->calls++;
    if (seq != o->next[m])
        o->out_of_order++;
    int fail = env->attempt == 1 && ((m == 0 && seq == 0) || (m == 1 && seq == 3));
    if (fail)
        o->failures++;
    else if (seq == o->next[m])
        o->next[m]++;
    pthread_mutex_unlock(&o->mu);
    if (!fail)
        return 0;
    snprintf(err->message, sizeof err->message, "scripted failure of seq %d", seq);
    return ODBOX_EINVAL;
}

typedef struct clock_loop {
    hx *x;
    odbox_delivery *d;
    atomic_int stop, failed, deadlocks;
} clock_loop;

/* Handling rounds until stopped; a round that lost a deadlock (each
 * claim tries a few times first) is what the API calls retryable, and is
 * counted apart from the failures. */
static void *rounds_until_stopped(void *arg)
{
    clock_loop *l = arg;
    while (!atomic_load(&l->stop)) {
        odbox_delivery_round r;
        odbox_error e = {0};
        int rc = odbox_delivery_handling_round(l->d, hx_shard(l->x, 0), &r, &e);
        if (rc == ODBOX_EDEADLOCK)
            atomic_fetch_add(&l->deadlocks, 1);
        else if (rc != ODBOX_OK) {
            fprintf(stderr, "handlers_order: a round failed: %s\n", e.message);
            atomic_fetch_add(&l->failed, 1);
        }
        if (r.read == 0)
            jt_sleep_ms(5);
    }
    return NULL;
}

/* Three models, eight events each, two per action (so ties on event_date
 * fall to emission order); "ord" is ordered, "free" is not, both fail
 * the same calls once. Two deliveries handle at once while the clock
 * moves past the backoffs: ord is called in order for every model and
 * succeeds on all; free is called out of order (the check notices). */
START_TEST(ordered_rows_reach_the_handler_in_event_order)
{
    hx x;
    hx_open(&x, 1);
    static order_seen ord, freed;
    order_seen *seen[2] = {&ord, &freed};
    odbox_model *m[MODELS];
    new_models(m, MODELS);
    for (int k = 0; k < 2; k++)
        seen_init(seen[k], m, MODELS);
    odbox_handler_options ordered = {.ordered = 1};
    odbox_delivery_config cfg = {.handling_batch = 20, .workers = 4};
    odbox_handlers *h2 = one_handler("ord", ordered_handle, &ord, &ordered);
    add_handler(h2, "free", ordered_handle, &freed, NULL);
    odbox_handlers *h1 = one_handler("ord", ordered_handle, &ord, &ordered);
    add_handler(h1, "free", ordered_handle, &freed, NULL);
    hx_deliver(&x, h1, &cfg);
    odbox_delivery_config c2 = cfg;
    c2.clock = odbox_manual_clock_clock(x.clk);
    odbox_delivery *d2 = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x.f.r, h2, &c2, &d2, &e) == ODBOX_OK, "%s", e.message);
    for (int r = 0; r < PER_MODEL / 2; r++)
        for (int i = 0; i < MODELS; i++)
            emit_seq(x.exe, m[i], 2 * r, 2, 0);
    odbox_delivery_round fr;
    do
        fr = hx_fanout(&x, 0);
    while (fr.read > 0);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 2 * MODELS * PER_MODEL);
    clock_loop l[2] = {{.x = &x, .d = x.d}, {.x = &x, .d = d2}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, rounds_until_stopped, &l[i]), 0);
    int64_t end = mono_ms_now() + MAX_WAIT_MS;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < 2 * MODELS * PER_MODEL && mono_ms_now() < end) {
        jt_sleep_ms(30);
        odbox_manual_clock_advance(x.clk, 60 * SEC_US); /* past any early backoff */
    }
    for (int i = 0; i < 2; i++) {
        atomic_store(&l[i].stop, 1);
        pthread_join(t[i], NULL);
        ck_assert_int_eq(atomic_load(&l[i].failed), 0);
    }
    printf("handlers_order: ordered: %d calls, %d failed, %d out of order; unordered: %d calls, %d out of order\n",
           ord.calls, ord.failures, ord.out_of_order, freed.calls, freed.out_of_order);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED'"), 2 * MODELS * PER_MODEL);
    ck_assert_int_eq(ord.failures, 2);
    ck_assert_int_eq(ord.out_of_order, 0);
    for (int i = 0; i < MODELS; i++)
        ck_assert_int_eq(ord.next[i], PER_MODEL);
    ck_assert_int_gt(freed.out_of_order, 0); /* without the option the same run is out of order */
    odbox_delivery_free(&d2);
    odbox_handlers_free(&h2);
    for (int i = 0; i < MODELS; i++)
        odbox_model_free(&m[i]);
    for (int k = 0; k < 2; k++)
        pthread_mutex_destroy(&seen[k]->mu);
    hx_close(&x);
}
END_TEST

/* ---- delayed delivery ------------------------------------------------------------ */

static int count_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)err;
    atomic_fetch_add((atomic_int *)user, 1);
    return 0;
}

/* One event at once, one an hour later: the first round calls the first
 * only; the row of the other is due at its time (events.deliver_after,
 * next_retry_at); once the clock passes it, it is called. */
START_TEST(a_delayed_event_waits_for_its_time)
{
    hx x;
    hx_open(&x, 1);
    static atomic_int calls;
    atomic_init(&calls, 0);
    hx_deliver(&x, one_handler("later", count_handle, &calls, NULL), NULL);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "delayed", 1);
    int64_t at = EPOCH_2030 + 3600 * SEC_US;
    emit_seq(x.exe, m, 0, 1, 0);
    emit_seq(x.exe, m, 1, 1, at);
    odbox_model_free(&m);
    ck_assert_int_eq(itest_count(x.f.c[0], "SELECT COUNT(*) FROM %s WHERE deliver_after IS NOT NULL",
                                 etab(&x.f, 0)), 1);
    hx_fanout(&x, 0);
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 2);
    odbox_delivery_round r = hx_handle(&x, 0);
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_eq(atomic_load(&calls), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'PENDING'"), 1);
    odbox_manual_clock_advance(x.clk, 3599 * SEC_US);
    ck_assert_int_eq(hx_handle(&x, 0).read, 0);
    odbox_manual_clock_advance(x.clk, 2 * SEC_US);
    ck_assert_int_eq(hx_handle(&x, 0).read, 1);
    ck_assert_int_eq(atomic_load(&calls), 2);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED'"), 2);
    hx_close(&x);
}
END_TEST

/* ---- writers whose clocks disagree ------------------------------------------------ */

/* An action that reads the model as committed, sets its amount to seq
 * (an optimistic update of the version it read) and emits {"seq": seq}. */
typedef struct bump {
    odbox_registry *r;
    const char *id;
    int seq;
    int64_t amount_read;
} bump;

static int bump_perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    bump *b = user;
    odbox_model *m = NULL;
    int rc = odbox_repo_find(b->r, &DUMMY_T, b->id, ODBOX_READ_PRIMARY, &m, err);
    if (rc == ODBOX_OK)
        rc = odbox_model_get_int64(m, "amount", &b->amount_read, err);
    if (rc == ODBOX_OK)
        rc = odbox_model_set_int64(m, "amount", b->seq, err);
    if (rc == ODBOX_OK)
        rc = odbox_plan_update(plan, m, NULL, err);
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "seq", json_object_new_int(b->seq));
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &EV_O, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

/* The same in a transaction of the caller's: amount = amount + 1 on the
 * row as committed (it waits for, and reads, the other's), one event. */
static void bump_in_own_tx(hx *x, const char *id, int seq)
{
    odbox_tx *tx = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_tx_begin(x->exe, (odbox_shard_id){0, 0}, NULL, &tx, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt *s = NULL;
    ck_assert_msg(odbox_stmt_prepare(odbox_tx_conn(tx), "UPDATE dummies SET amount = amount + 1 WHERE id = ?", &s,
                                     &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 1, id, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_rows_affected(s), 1);
    odbox_stmt_free(&s);
    json_object *payload = json_object_new_object();
    json_object_object_add(payload, "seq", json_object_new_int(seq));
    ck_assert_msg(odbox_tx_emit(tx, DUMMY_T.name, id, &EV_O, payload, &e) == ODBOX_OK, "%s", e.message);
    json_object_put(payload);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
}

typedef struct seq_log {
    pthread_mutex_t mu;
    int seq[8], n;
} seq_log;

static int log_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)err;
    seq_log *l = user;
    pthread_mutex_lock(&l->mu);
    if (l->n < 8)
        l->seq[l->n++] = seq_of(env);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* Process A's clock 3 s fast writes seq 1 on a model; then process B
 * (a right clock) reads A's result and writes seq 2. Both events' dates
 * are the database's, so the ordered handler gets 1, then 2 (with the
 * writers' clocks, 2 had the earlier date and came first). own_tx: the
 * writes are transactions of the caller's (odbox_tx), else actions. */
static void skewed_writers(int own_tx)
{
    hx x;
    hx_open(&x, 1);
    static seq_log log;
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.mu, NULL);
    odbox_handler_options ordered = {.ordered = 1};
    hx_deliver(&x, one_handler("ord", log_handle, &log, &ordered), NULL);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "skewed", 0);
    dfx_insert(&x.f, 0, &m, 1);
    const char *id = odbox_model_id(m);
    bump b[2] = {{x.f.r, id, 1, -1}, {x.f.r, id, 2, -1}};
    for (int k = 0; k < 2; k++) {
        odbox_clock_skew_set(k == 0 ? 3 * SEC_US : 0);
        if (own_tx) {
            bump_in_own_tx(&x, id, b[k].seq);
        } else {
            odbox_action a = {"Bump", bump_perform, &b[k]};
            odbox_result res;
            odbox_error e = {0};
            int rc = odbox_execute(x.exe, &a, NULL, NULL, &res, &e);
            odbox_result_clear(&res);
            odbox_clock_skew_set(0);
            ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
            ck_assert_int_eq(b[k].amount_read, k); /* the second read the first's result */
        }
        odbox_clock_skew_set(0);
    }
    ck_assert_int_eq(amount_of(&x.f, id), 2);
    odbox_model_free(&m);
    while (hx_fanout(&x, 0).read > 0)
        ;
    ck_assert_int_eq(nrows(&x.f, 0, NULL), 2);
    for (int k = 0; k < 10 && log.n < 2; k++)
        hx_handle(&x, 0);
    ck_assert_int_eq(log.n, 2);
    ck_assert_msg(log.seq[0] == 1 && log.seq[1] == 2, "the ordered handler got seq %d, then %d", log.seq[0],
                  log.seq[1]);
    pthread_mutex_destroy(&log.mu);
    hx_close(&x);
}

START_TEST(a_fast_writer_clock_does_not_reorder_a_model)
{
    skewed_writers(0);
}
END_TEST

START_TEST(a_fast_writer_clock_does_not_reorder_own_transactions)
{
    skewed_writers(1);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------- */

static int refuse_negative(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    json_object *payload = json_object_new_object();
    int rc = odbox_plan_emit_after(plan, user, &EV_O, payload, -1, err);
    json_object_put(payload);
    return rc;
}

/* Options of no handler, of a former name, negative limits, NULLs and
 * options after a delivery opened are refused and change nothing; a
 * negative delivery time fails the action, which writes nothing. */
START_TEST(bad_options_and_times_are_refused)
{
    hx x;
    hx_open(&x, 1);
    static atomic_int calls;
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    const char *const former[] = {"old-name", NULL};
    odbox_handler hd = {.name = "named", .former_names = former, .event_type = EV_O.name, .handle = count_handle,
                        .user = &calls};
    ck_assert_int_eq(odbox_handlers_add(h, &hd, &e), ODBOX_OK);
    odbox_handler_options ok = {.max_in_flight = 1}, bad = {.max_in_flight = -1};
    ck_assert_int_eq(odbox_handlers_set_options(h, "nobody", &ok, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "no handler is named 'nobody'"));
    ck_assert_int_eq(odbox_handlers_set_options(h, "old-name", &ok, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "former name"));
    ck_assert_int_eq(odbox_handlers_set_options(h, "named", &bad, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "negative"));
    ck_assert_int_eq(odbox_handlers_set_options(NULL, "named", &ok, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_handlers_set_options(h, NULL, &ok, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_handlers_set_options(h, "named", NULL, &e), ODBOX_EINVAL);
    hx_deliver(&x, h, NULL);
    ck_assert_int_eq(odbox_handlers_set_options(h, "named", &ok, &e), ODBOX_ESTATE);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "delayed", 1);
    odbox_action a = {"NegativeDelay", refuse_negative, m};
    odbox_result res;
    ck_assert_int_eq(odbox_execute(x.exe, &a, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "deliver_after"));
    ck_assert_int_eq(dfx_events(&x.f, 0), 0);
    odbox_model_free(&m);
    hx_close(&x);
}
END_TEST

/* A delivery of h (ordered or not) opened and registered beside x's:
 * its registration records h's order as the subscription's. */
static odbox_delivery *registered(hx *x, odbox_handlers *h)
{
    odbox_delivery_config cfg = {.clock = odbox_manual_clock_clock(x->clk)};
    odbox_delivery *d = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x->f.r, h, &cfg, &d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_delivery_register(d, &e) == ODBOX_OK, "%s", e.message);
    return d;
}

/* The order is the subscription's, recorded in the database: a process
 * that registers "ord" as ordered gives its backlog (fanned out while it
 * was not) the order at once; the fan-out and the claims of a process
 * whose own handlers say nothing of order follow it; a finished row
 * leaves the order; registering it unordered again takes the order off
 * the rows still due. */
START_TEST(the_order_is_the_subscriptions_and_reaches_its_backlog)
{
    hx x;
    hx_open(&x, 1);
    static order_seen ord;
    odbox_model *m[MODELS];
    new_models(m, MODELS);
    seen_init(&ord, m, MODELS);
    hx_deliver(&x, one_handler("ord", ordered_handle, &ord, NULL), NULL);
    for (int i = 0; i < MODELS; i++)
        emit_seq(x.exe, m[i], 0, PER_MODEL / 2, 0);
    while (hx_fanout(&x, 0).read > 0)
        ;
    int64_t half = MODELS * PER_MODEL / 2;
    ck_assert_int_eq(nrows(&x.f, 0, NULL), half);
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL"), 0);
    odbox_handler_options ordered = {.ordered = 1};
    odbox_handlers *ho = one_handler("ord", ordered_handle, &ord, &ordered);
    odbox_delivery *d2 = registered(&x, ho);
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL AND order_key = model_id"), half);
    /* fanned out by the process without the option */
    for (int i = 0; i < MODELS; i++)
        emit_seq(x.exe, m[i], PER_MODEL / 2, PER_MODEL / 2, 0);
    while (hx_fanout(&x, 0).read > 0)
        ;
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL"), 2 * half);
    /* claimed by it alone, with two failures and their retries */
    clock_loop l = {.x = &x, .d = x.d};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, rounds_until_stopped, &l), 0);
    int64_t end = mono_ms_now() + MAX_WAIT_MS;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < 2 * half && mono_ms_now() < end) {
        jt_sleep_ms(30);
        odbox_manual_clock_advance(x.clk, 60 * SEC_US);
    }
    atomic_store(&l.stop, 1);
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&l.failed), 0);
    printf("handlers_order: made ordered: %d calls, %d failed, %d out of order\n", ord.calls, ord.failures,
           ord.out_of_order);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED'"), 2 * half);
    ck_assert_int_eq(ord.failures, 2);
    ck_assert_int_eq(ord.out_of_order, 0);
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL"), 0);
    /* a requeued row (as if it had expired) takes its place again */
    itest_exec(x.f.c[0], "UPDATE %s SET state = 'EXPIRED' WHERE handler_name = 'ord'", ntab(&x.f, 0));
    odbox_requeue_spec q = {.state = "EXPIRED", .clock = odbox_manual_clock_clock(x.clk)};
    int64_t moved = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_notifications_requeue(x.f.r, &q, &moved, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(moved, 2 * half);
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL AND order_key = model_id"), 2 * half);
    itest_exec(x.f.c[0], "UPDATE %s SET state = 'SUCCEEDED', order_key = NULL", ntab(&x.f, 0));
    /* due rows lose the order when a process registers it unordered */
    emit_seq(x.exe, m[0], PER_MODEL, 2, 0);
    while (hx_fanout(&x, 0).read > 0)
        ;
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL"), 2);
    odbox_handlers *hu = one_handler("ord", ordered_handle, &ord, NULL);
    odbox_delivery *d3 = registered(&x, hu);
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL"), 0);
    odbox_delivery_free(&d3);
    odbox_handlers_free(&hu);
    odbox_delivery_free(&d2);
    odbox_handlers_free(&ho);
    for (int i = 0; i < MODELS; i++)
        odbox_model_free(&m[i]);
    pthread_mutex_destroy(&ord.mu);
    hx_close(&x);
}
END_TEST

/* A handler that fails seq 0 once, logging the seqs it was called with. */
static int fail_first_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    seq_log *l = user;
    pthread_mutex_lock(&l->mu);
    int first = l->n == 0;
    if (l->n < 8)
        l->seq[l->n++] = seq_of(env);
    pthread_mutex_unlock(&l->mu);
    return first && seq_of(env) == 0 ? odbox_fail(err, ODBOX_EINVAL, "seq 0 fails once") : 0;
}

/* An ordered subscription renamed (the new handler lists the old name in
 * former_names): the old name's backlog reaches the new handler, and a
 * newer event of a model, fanned out under the new name, waits for the
 * model's older row under the former name (a failure of it included). */
START_TEST(a_renamed_ordered_handler_keeps_the_order_of_its_former_rows)
{
    hx x;
    hx_open(&x, 1);
    static seq_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_handler_options ordered = {.ordered = 1};
    hx_deliver(&x, one_handler("ledger-v1", fail_first_handle, &log, &ordered), NULL);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "renamed", 1);
    emit_seq(x.exe, m, 0, 1, 0);
    while (hx_fanout(&x, 0).read > 0)
        ;
    odbox_handlers *h2 = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h2, &e), ODBOX_OK);
    const char *const former[] = {"ledger-v1", NULL};
    odbox_handler hd = {.name = "ledger-v2", .former_names = former, .event_type = EV_O.name,
                        .handle = fail_first_handle, .user = &log};
    ck_assert_int_eq(odbox_handlers_add(h2, &hd, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_set_options(h2, "ledger-v2", &ordered, &e), ODBOX_OK);
    odbox_delivery *d2 = registered(&x, h2);
    emit_seq(x.exe, m, 1, 1, 0);
    while (hx_fanout(&x, 0).read > 0)
        ;
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'ledger-v1'"), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'ledger-v2'"), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "order_key IS NOT NULL"), 2);
    for (int i = 0; i < 3; i++) {
        odbox_delivery_round r;
        ck_assert_msg(odbox_delivery_handling_round(d2, hx_shard(&x, 0), &r, &e) == ODBOX_OK, "%s", e.message);
    }
    /* seq 0 failed and waits for its retry: seq 1 must not have run */
    ck_assert_int_ge(log.n, 1);
    ck_assert_int_eq(log.seq[0], 0);
    ck_assert_msg(log.n == 1, "seq %d of the model ran while its seq 0 (under the former name) awaits a retry",
                  log.seq[1]);
    odbox_delivery_free(&d2);
    odbox_handlers_free(&h2);
    odbox_model_free(&m);
    hx_close(&x);
}
END_TEST

/* ---- order while the fan-out writes ------------------------------------------------ */

enum { RACE_ACTIONS = 6, RACE_LOOPS = 4 };

static int race_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)err;
    order_seen *o = user;
    int seq = seq_of(env);
    pthread_mutex_lock(&o->mu);
    int m = model_index(o, env->model_id);
    o->calls++;
    if (m >= 0) {
        o->overlapping += o->running[m]++ > 0;
        o->out_of_order += seq != o->next[m];
    }
    pthread_mutex_unlock(&o->mu);
    jt_sleep_ms(2); /* long enough for a second call of the model to start */
    pthread_mutex_lock(&o->mu);
    if (m >= 0 && seq == o->next[m])
        o->next[m]++;
    if (m >= 0)
        o->running[m]--;
    pthread_mutex_unlock(&o->mu);
    return m >= 0 ? 0 : ODBOX_EINVAL;
}

typedef struct fanout_loop {
    hx *x;
    atomic_int stop, failed;
} fanout_loop;

static void *fanouts_until_stopped(void *arg)
{
    fanout_loop *l = arg;
    while (!atomic_load(&l->stop)) {
        odbox_delivery_round r;
        odbox_error e = {0};
        if (odbox_delivery_fanout_round(l->x->d, hx_shard(l->x, 0), &r, &e) != ODBOX_OK) {
            fprintf(stderr, "handlers_order: a fan-out round failed: %s\n", e.message);
            atomic_fetch_add(&l->failed, 1);
        }
        if (r.read == 0)
            jt_sleep_ms(1);
    }
    return NULL;
}

/* Rows of one model fanned out together while claims read: each action
 * emits two events of one model, a fan-out loop writes their rows as they
 * commit, and four handling loops of two deliveries claim at once. Every
 * model's calls come in seq order, one at a time. (On MariaDB a due read
 * that a fan-out's commit overtook found both rows of a model due: see
 * claim_order_recheck.) */
START_TEST(ordered_rows_keep_their_order_while_the_fanout_writes)
{
    hx x;
    hx_open(&x, 1);
    static order_seen seen;
    odbox_model *m[RACE_MODELS];
    new_models(m, RACE_MODELS);
    seen_init(&seen, m, RACE_MODELS);
    odbox_handler_options ordered = {.ordered = 1};
    odbox_delivery_config cfg = {.handling_batch = 200, .workers = 8};
    hx_deliver(&x, one_handler("ord", race_handle, &seen, &ordered), &cfg);
    odbox_delivery_config c2 = cfg;
    c2.clock = odbox_manual_clock_clock(x.clk);
    odbox_handlers *h2 = one_handler("ord", race_handle, &seen, &ordered);
    odbox_delivery *d2 = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x.f.r, h2, &c2, &d2, &e) == ODBOX_OK, "%s", e.message);
    clock_loop l[RACE_LOOPS];
    pthread_t t[RACE_LOOPS], ft;
    fanout_loop fl = {.x = &x};
    for (int i = 0; i < RACE_LOOPS; i++) {
        memset(&l[i], 0, sizeof l[i]);
        l[i].x = &x, l[i].d = i % 2 ? d2 : x.d;
        ck_assert_int_eq(pthread_create(&t[i], NULL, rounds_until_stopped, &l[i]), 0);
    }
    ck_assert_int_eq(pthread_create(&ft, NULL, fanouts_until_stopped, &fl), 0);
    for (int r = 0; r < RACE_ACTIONS; r++)
        for (int i = 0; i < RACE_MODELS; i++)
            emit_seq(x.exe, m[i], 2 * r, 2, 0);
    int64_t want = 2 * RACE_MODELS * RACE_ACTIONS, end = mono_ms_now() + MAX_WAIT_MS;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < want && mono_ms_now() < end)
        jt_sleep_ms(30);
    atomic_store(&fl.stop, 1);
    pthread_join(ft, NULL);
    int deadlocks = 0;
    for (int i = 0; i < RACE_LOOPS; i++) {
        atomic_store(&l[i].stop, 1);
        pthread_join(t[i], NULL);
        ck_assert_int_eq(atomic_load(&l[i].failed), 0);
        deadlocks += atomic_load(&l[i].deadlocks);
    }
    printf("handlers_order: claims beside the fan-out: %d calls of %lld rows, %d out of order, %d overlapping; "
           "%d rounds lost a deadlock\n",
           seen.calls, (long long)want, seen.out_of_order, seen.overlapping, deadlocks);
    ck_assert_int_eq(atomic_load(&fl.failed), 0);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED'"), want);
    ck_assert_int_eq(seen.out_of_order, 0);
    ck_assert_int_eq(seen.overlapping, 0);
    for (int i = 0; i < RACE_MODELS; i++)
        ck_assert_int_eq(seen.next[i], 2 * RACE_ACTIONS);
    odbox_delivery_free(&d2);
    odbox_handlers_free(&h2);
    for (int i = 0; i < RACE_MODELS; i++)
        odbox_model_free(&m[i]);
    pthread_mutex_destroy(&seen.mu);
    hx_close(&x);
}
END_TEST

Suite *handlers_order_suite(void)
{
    Suite *s = suite_create("handlers_order");
    TCase *tc = tcase_create("handlers_order");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_concurrency_limit_holds_across_deliveries);
    tcase_add_test(tc, a_claim_that_waited_starts_no_call_its_lease_cannot_hold);
    tcase_add_test(tc, ordered_rows_reach_the_handler_in_event_order);
    tcase_add_test(tc, the_order_is_the_subscriptions_and_reaches_its_backlog);
    tcase_add_test(tc, ordered_rows_keep_their_order_while_the_fanout_writes);
    tcase_add_test(tc, a_delayed_event_waits_for_its_time);
    tcase_add_test(tc, a_fast_writer_clock_does_not_reorder_a_model);
    tcase_add_test(tc, a_fast_writer_clock_does_not_reorder_own_transactions);
    tcase_add_test(tc, bad_options_and_times_are_refused);
    tcase_add_test(tc, a_renamed_ordered_handler_keeps_the_order_of_its_former_rows);
    handlers_order_add_lease_tests(tc);
    suite_add_tcase(s, tc);
    return s;
}
