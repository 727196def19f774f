/* odbox — integration tests of the order leases (V18), part of the
 * handlers_order suite (test_handlers_order.c), on every dialect: a row of
 * an ordered subscription that becomes visible after a newer row of its
 * model was claimed waits while that row's call runs, and a call past its
 * timeout or cut off by a stop keeps its claim, so two calls of one model
 * never run at once. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "jobs_fx.h"
#include "test_handlers.h"

static const odbox_event_type EV_L = {"LedgerLeased"};

/* An action emitting one EV_L event on a model. */
static int one_perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    json_object *payload = json_object_new_object();
    int rc = odbox_plan_emit(plan, user, &EV_L, payload, err);
    json_object_put(payload);
    return rc;
}

/* Emits one event on m through exe; its id into out. */
static void emit_one(dfx *f, odbox_executor *exe, odbox_model *m, char out[37])
{
    odbox_action a = {"PostLeased", one_perform, m};
    odbox_result res;
    odbox_error e = {0};
    ck_assert_msg(odbox_execute(exe, &a, NULL, NULL, &res, &e) == ODBOX_OK, "%s", e.message);
    event_of_action(f, 0, res.action_id, out);
    odbox_result_clear(&res);
}

/* The calls of one model: the first blocks while block is set; calls
 * running at once are counted. */
typedef struct model_calls {
    pthread_mutex_t mu;
    int calls, running, overlapping;
    char events[4][37];
    atomic_int block, blocked;
} model_calls;

static void model_calls_init(model_calls *mc)
{
    memset(mc, 0, sizeof *mc);
    pthread_mutex_init(&mc->mu, NULL);
    atomic_init(&mc->block, 1);
    atomic_init(&mc->blocked, 0);
}

/* Lets the blocked first call return, and waits until it has (and its
 * outcome is recorded). */
static void release_and_wait(model_calls *mc)
{
    atomic_store(&mc->block, 0);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    for (int running = 1; running; jt_sleep_ms(5)) {
        pthread_mutex_lock(&mc->mu);
        running = mc->running;
        pthread_mutex_unlock(&mc->mu);
        ck_assert_msg(mono_ms_now() < end, "the call never returned");
    }
    jt_sleep_ms(50);
}

static int model_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)err;
    model_calls *mc = user;
    pthread_mutex_lock(&mc->mu);
    int first = mc->calls == 0;
    if (mc->calls < 4)
        snprintf(mc->events[mc->calls], sizeof mc->events[0], "%s", env->event_id);
    mc->calls++;
    mc->overlapping += ++mc->running > 1;
    pthread_mutex_unlock(&mc->mu);
    if (first) {
        atomic_store(&mc->blocked, 1);
        for (int i = 0; i < 3000 && atomic_load(&mc->block); i++)
            jt_sleep_ms(10);
    }
    pthread_mutex_lock(&mc->mu);
    mc->running--;
    pthread_mutex_unlock(&mc->mu);
    return 0;
}

static void *handle_round(void *arg)
{
    hx_handle(arg, 0);
    return NULL;
}

/* Event O, older than event N of the same model, reaches the fan-out only
 * after N's row was claimed (as an action whose INSERT ran first and that
 * committed later: here O is kept out of the first fan-out by its
 * delivered flag). O's row has no older unfinished row, but N's call
 * runs: O's row is not claimed until it ends, then called. Before, O was
 * called while N's call ran. */
START_TEST(a_row_visible_late_waits_for_the_call_of_its_model)
{
    hx x;
    hx_open(&x, 1);
    static model_calls mc;
    model_calls_init(&mc);
    odbox_handlers *h = one_handler_on("ord", EV_L.name, model_handle, &mc, &(odbox_handler_options){.ordered = 1});
    hx_deliver(&x, h, &(odbox_delivery_config){.workers = 2, .cross_process_wakeup = -1});
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "ordered", 1);
    char older[37], newer[37];
    emit_one(&x.f, x.exe, m, older);
    emit_one(&x.f, x.exe, m, newer);
    itest_exec(x.f.c[0], "UPDATE %s SET delivered = TRUE WHERE id = '%s'", etab(&x.f, 0), older);
    hx_fanout(&x, 0);
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'ord'"), 1);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, handle_round, &x), 0);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (!atomic_load(&mc.blocked))
        ck_assert_msg(mono_ms_now() < end, "the newer row's call never started"), jt_sleep_ms(5);
    /* the older event becomes visible while the newer one's call runs */
    itest_exec(x.f.c[0], "UPDATE %s SET delivered = FALSE WHERE id = '%s'", etab(&x.f, 0), older);
    hx_fanout(&x, 0);
    ck_assert_int_eq(nrows(&x.f, 0, "handler_name = 'ord'"), 2);
    odbox_delivery_round r = hx_handle(&x, 0);
    pthread_mutex_lock(&mc.mu);
    int calls = mc.calls;
    pthread_mutex_unlock(&mc.mu);
    printf("handlers_order: a row visible late, while its model's newer row is called: %zu read, %d call(s)\n",
           r.read, calls);
    ck_assert_int_eq(r.read, 0);
    ck_assert_int_eq(calls, 1);
    atomic_store(&mc.block, 0);
    pthread_join(t, NULL);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.succeeded, 1);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED'"), 2);
    ck_assert_int_eq(nrows(&x.f, 0, "order_lease_until IS NOT NULL"), 0);
    ck_assert_int_eq(mc.calls, 2);
    ck_assert_str_eq(mc.events[0], newer);
    ck_assert_str_eq(mc.events[1], older);
    ck_assert_int_eq(mc.overlapping, 0);
    odbox_model_free(&m);
    hx_close(&x);
    pthread_mutex_destroy(&mc.mu);
}
END_TEST

/* The kept claims' tests: a 200 ms timeout in a 1 s lease, 10 ms backoffs. */
static const odbox_delivery_config kept_cfg = {.workers = 2, .handler_timeout_ms = 200, .lease_ms = 1000,
                                               .backoff_base_ms = 10, .backoff_cap_ms = 10,
                                               .cross_process_wakeup = -1};

/* x opened with handler "ord" (ordered, on mc) under kept_cfg (with
 * retention_ms), n events emitted on one model (returned; ids into ids)
 * and fanned out, and a first round (into *r) whose call of the oldest
 * timed out. */
static odbox_model *kept_round(hx *x, model_calls *mc, int n, char (*ids)[37], int64_t retention_ms,
                               odbox_delivery_round *r)
{
    hx_open(x, 1);
    model_calls_init(mc);
    odbox_delivery_config cfg = kept_cfg;
    cfg.retention_ms = retention_ms;
    hx_deliver(x, one_handler_on("ord", EV_L.name, model_handle, mc, &(odbox_handler_options){.ordered = 1}), &cfg);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "ordered", 1);
    for (int i = 0; i < n; i++)
        emit_one(&x->f, x->exe, m, ids[i]);
    hx_fanout(x, 0);
    *r = hx_handle(x, 0);
    ck_assert_int_eq(r->read, 1);
    ck_assert_int_eq(r->timed_out, 1);
    return m;
}

/* Ends what kept_round opened. */
static void kept_close(hx *x, model_calls *mc, odbox_model **m)
{
    odbox_model_free(m);
    hx_close(x);
    pthread_mutex_destroy(&mc->mu);
}

/* Rounds of each delivery of ds[0..n) on shard 0, in turn, every 100 ms
 * for ms: the rows they read. */
static size_t rounds_for(jx *x, odbox_delivery *const *ds, size_t n, int64_t ms)
{
    odbox_shard *s0 = odbox_registry_shard_at(x->f.r, 0);
    odbox_delivery_round r;
    odbox_error e = {0};
    size_t read = 0;
    for (int64_t end = mono_ms_now() + ms; mono_ms_now() < end; jt_sleep_ms(100))
        for (size_t i = 0; i < n; i++) {
            round_ok(odbox_delivery_handling_round(ds[i], s0, &r, &e), &e);
            read += r.read;
        }
    return read;
}

/* Rounds of each delivery of ds[0..n) on shard 0, in turn, until shard 0
 * has want SUCCEEDED rows (bounded: JT_BOUND_MS); what names the wait in
 * a failure. */
static void rounds_until_succeeded(jx *x, odbox_delivery *const *ds, size_t n, int64_t want, const char *what)
{
    odbox_shard *s0 = odbox_registry_shard_at(x->f.r, 0);
    odbox_delivery_round r;
    odbox_error e = {0};
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (nrows(&x->f, 0, "state = 'SUCCEEDED'") < want) {
        ck_assert_msg(mono_ms_now() < end, "%s", what);
        for (size_t i = 0; i < n; i++)
            round_ok(odbox_delivery_handling_round(ds[i], s0, &r, &e), &e);
        jt_sleep_ms(5);
    }
}

/* A call of an ordered subscription still running at handler_timeout_ms
 * is abandoned, but its row stays claimed (its lease renewed by the
 * rounds) until the call returns: neither that row nor its model's next
 * row is called meanwhile, however many leases and backoffs pass; once
 * it returns, its outcome is written under its claim and the next row
 * goes. Before, the row was written FAILED and called again after its
 * backoff while the first call still ran, then the next row. */
START_TEST(a_call_past_its_timeout_keeps_its_models_order_until_it_returns)
{
    hx x;
    static model_calls mc;
    char ids[2][37];
    odbox_delivery_round r;
    odbox_model *m = kept_round(&x, &mc, 2, ids, 0, &r);
    const char *first = ids[0], *second = ids[1];
    int64_t claimed = nrows(&x.f, 0, "state = 'PENDING' AND attempts = 0 AND lease_owner IS NOT NULL AND "
                                     "order_lease_until IS NOT NULL");
    /* ten leases (and many backoffs) pass in the delivery's time while
     * the call runs; each round renews the claim */
    size_t read = 0;
    for (int i = 0; i < 20; i++) {
        odbox_manual_clock_advance(x.clk, 500000);
        read += hx_handle(&x, 0).read;
    }
    pthread_mutex_lock(&mc.mu);
    int calls = mc.calls, overlapping = mc.overlapping;
    pthread_mutex_unlock(&mc.mu);
    printf("handlers_order: a call past its timeout, 10 leases on: %zu row(s) read, %d call(s), %d overlapping\n",
           read, calls, overlapping);
    ck_assert_int_eq(read, 0);
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(r.failed, 0);
    ck_assert_int_eq(claimed, 1);
    ck_assert_int_eq(ncol_int(&x.f, 0, first, "ord", "attempts"), 0);
    atomic_store(&mc.block, 0);
    size_t succeeded = 0;
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (succeeded < 2) {
        ck_assert_msg(mono_ms_now() < end, "%zu of 2 rows succeeded once the call returned", succeeded);
        succeeded += hx_handle(&x, 0).succeeded;
        if (succeeded < 2)
            jt_sleep_ms(10);
    }
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED'"), 2);
    ck_assert_int_eq(ncol_int(&x.f, 0, first, "ord", "attempts"), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "lease_owner IS NOT NULL OR order_lease_until IS NOT NULL"), 0);
    ck_assert_int_eq(mc.calls, 2);
    ck_assert_str_eq(mc.events[0], first);
    ck_assert_str_eq(mc.events[1], second);
    ck_assert_int_eq(mc.overlapping, 0);
    kept_close(&x, &mc, &m);
}
END_TEST

/* A kept claim that another round took over (its lease ran out while
 * this process could not renew it) is let go at the next renewal: the
 * call's late outcome writes nothing over the other round's claim. */
START_TEST(a_kept_claim_taken_over_is_let_go)
{
    hx x;
    static model_calls mc;
    char ids[1][37];
    odbox_delivery_round r;
    odbox_model *m = kept_round(&x, &mc, 1, ids, 0, &r);
    itest_exec(x.f.c[0], "UPDATE %s SET lease_owner = 'another-round' WHERE event_id = '%s'", ntab(&x.f, 0), ids[0]);
    odbox_manual_clock_advance(x.clk, 500000);
    ck_assert_int_eq(hx_handle(&x, 0).read, 0); /* the renewal finds the claim gone */
    release_and_wait(&mc);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.succeeded + r.stale + r.read, 0);
    ck_assert_int_eq(nrows(&x.f, 0, "lease_owner = 'another-round' AND state = 'PENDING' AND attempts = 0"), 1);
    kept_close(&x, &mc, &m);
}
END_TEST

/* The same in the database's time (no clock given), with a second
 * delivery on the shard as another process: the kept claim's lease (1 s)
 * is renewed by its own delivery's rounds; through 2.5 leases of rounds
 * of both, neither reads a row of the model, and once the call returns
 * both rows are called, in order, one call each. */
START_TEST(a_kept_claim_holds_its_model_in_every_process)
{
    jx x;
    jx_open(&x, 1);
    static model_calls mc;
    model_calls_init(&mc);
    const odbox_handler_options ordered = {.ordered = 1};
    odbox_handlers *h = one_handler_on("ord", EV_L.name, model_handle, &mc, &ordered);
    odbox_handlers *h2 = one_handler_on("ord", EV_L.name, model_handle, &mc, &ordered);
    odbox_error e = {0};
    odbox_delivery_config cfg = kept_cfg;
    odbox_delivery *d = NULL, *d2 = NULL;
    ck_assert_msg(odbox_delivery_open(x.f.r, h, &cfg, &d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_delivery_open(x.f.r, h2, &cfg, &d2, &e) == ODBOX_OK, "%s", e.message);
    odbox_shard *s0 = odbox_registry_shard_at(x.f.r, 0);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "ordered", 1);
    char first[37], second[37];
    emit_one(&x.f, x.exe, m, first);
    emit_one(&x.f, x.exe, m, second);
    fanout_until_idle(d, &x.f, NULL);
    odbox_delivery_round r;
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_eq(r.timed_out, 1);
    size_t read = rounds_for(&x, (odbox_delivery *[]){d, d2}, 2, 2500);
    pthread_mutex_lock(&mc.mu);
    int calls = mc.calls;
    pthread_mutex_unlock(&mc.mu);
    printf("handlers_order: a call past its timeout, 2.5 leases of two deliveries' rounds in the database's time: "
           "%zu row(s) read, %d call(s)\n", read, calls);
    ck_assert_int_eq(read, 0);
    ck_assert_int_eq(calls, 1);
    atomic_store(&mc.block, 0);
    rounds_until_succeeded(&x, (odbox_delivery *[]){d2, d}, 2, 2,
                           "the model's rows were not called after the call returned");
    ck_assert_int_eq(mc.calls, 2);
    ck_assert_str_eq(mc.events[0], first);
    ck_assert_str_eq(mc.events[1], second);
    ck_assert_int_eq(mc.overlapping, 0);
    ck_assert_int_eq(ncol_int(&x.f, 0, first, "ord", "attempts"), 1);
    odbox_model_free(&m);
    odbox_delivery_free(&d2);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h2);
    odbox_handlers_free(&h);
    jx_close(&x);
    pthread_mutex_destroy(&mc.mu);
}
END_TEST

/* The call's return and its row's retention bound a kept claim. This
 * call does not return while its row's retention (3 s) lasts: the claim
 * is renewed until then, then let go; once its lease has run out, claims
 * expire the row and its model's next row, as any rows past their
 * retention, without a call. */
START_TEST(a_kept_claim_ends_with_its_rows_retention)
{
    hx x;
    static model_calls mc;
    char ids[2][37];
    odbox_delivery_round r;
    odbox_model *m = kept_round(&x, &mc, 2, ids, 3000, &r);
    size_t read = 0, expired = 0;
    for (int i = 0; i < 5; i++) { /* 2.5 s: renewed */
        odbox_manual_clock_advance(x.clk, 500000);
        read += hx_handle(&x, 0).read;
    }
    ck_assert_int_eq(read, 0);
    for (int i = 0; i < 8 && expired < 2; i++) { /* past the retention, then the last lease */
        odbox_manual_clock_advance(x.clk, 500000);
        r = hx_handle(&x, 0);
        expired += r.expired_preflight;
    }
    pthread_mutex_lock(&mc.mu);
    int calls = mc.calls;
    pthread_mutex_unlock(&mc.mu);
    printf("handlers_order: a kept call past its row's retention: %zu row(s) expired, %d call(s)\n", expired, calls);
    ck_assert_int_eq(expired, 2);
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'EXPIRED' AND attempts = 0"), 2);
    release_and_wait(&mc);
    r = hx_handle(&x, 0);
    ck_assert_int_eq(r.succeeded + r.stale + r.read, 0);
    ck_assert_int_eq(mc.calls, 1);
    kept_close(&x, &mc, &m);
}
END_TEST

/* At a stop, a call of an ordered subscription still running after
 * stop_wait_ms is abandoned, but its row stays claimed until its lease
 * (3 s) ends: a second delivery on the shard (another process) calls
 * neither that row nor its model's next row meanwhile, then both, in
 * order, none beside the cut-off call. Before, the row was given back at
 * the stop and called again at once while the cut-off call still ran
 * (then the next row). */
START_TEST(a_call_cut_off_by_a_stop_keeps_its_models_order_until_its_lease_ends)
{
    jx x;
    jx_open(&x, 1);
    static model_calls mc;
    model_calls_init(&mc);
    const odbox_handler_options ordered = {.ordered = 1};
    odbox_delivery_config cfg = {.workers = 2, .handler_timeout_ms = 1000, .lease_ms = 3000, .stop_wait_ms = 100,
                                 .cross_process_wakeup = -1};
    jx_run(&x, one_handler_on("ord", EV_L.name, model_handle, &mc, &ordered), &cfg,
           ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 0}, "ordered", 1);
    char first[37], second[37];
    emit_one(&x.f, x.exe, m, first);
    emit_one(&x.f, x.exe, m, second);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (!atomic_load(&mc.blocked))
        ck_assert_msg(mono_ms_now() < end, "the first call never started: %s", jx_describe(&x)), jt_sleep_ms(5);
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_stop(x.jobs, &e) == ODBOX_OK, "%s", e.message);
    int64_t claimed = nrows(&x.f, 0, "state = 'PENDING' AND attempts = 0 AND lease_owner IS NOT NULL AND "
                                     "order_lease_until IS NOT NULL");
    odbox_handlers *h2 = one_handler_on("ord", EV_L.name, model_handle, &mc, &ordered);
    odbox_delivery_config cfg2 = {.workers = 2, .handler_timeout_ms = 1000, .lease_ms = 3000,
                                  .cross_process_wakeup = -1};
    odbox_delivery *d2 = NULL;
    ck_assert_msg(odbox_delivery_open(x.f.r, h2, &cfg2, &d2, &e) == ODBOX_OK, "%s", e.message);
    size_t read = rounds_for(&x, &d2, 1, 1000);
    pthread_mutex_lock(&mc.mu);
    int calls = mc.calls, overlapping = mc.overlapping;
    pthread_mutex_unlock(&mc.mu);
    printf("handlers_order: a call cut off by a stop, 1 s of another delivery's rounds: %zu row(s) read, %d call(s), "
           "%d overlapping\n", read, calls, overlapping);
    ck_assert_int_eq(claimed, 1);
    ck_assert_int_eq(read, 0);
    ck_assert_int_eq(calls, 1);
    release_and_wait(&mc);
    rounds_until_succeeded(&x, &d2, 1, 2, "the model's rows were not called once the lease ended");
    ck_assert_int_eq(mc.calls, 3);
    ck_assert_str_eq(mc.events[0], first);
    ck_assert_str_eq(mc.events[1], first);
    ck_assert_str_eq(mc.events[2], second);
    ck_assert_int_eq(mc.overlapping, 0);
    odbox_model_free(&m);
    odbox_delivery_free(&d2);
    odbox_handlers_free(&h2);
    jx_close(&x);
    pthread_mutex_destroy(&mc.mu);
}
END_TEST

void handlers_order_add_lease_tests(TCase *tc)
{
    tcase_add_test(tc, a_call_cut_off_by_a_stop_keeps_its_models_order_until_its_lease_ends);
    tcase_add_test(tc, a_kept_claim_ends_with_its_rows_retention);
    tcase_add_test(tc, a_kept_claim_holds_its_model_in_every_process);
    tcase_add_test(tc, a_kept_claim_taken_over_is_let_go);
    tcase_add_test(tc, a_row_visible_late_waits_for_the_call_of_its_model);
    tcase_add_test(tc, a_call_past_its_timeout_keeps_its_models_order_until_it_returns);
}
