/* odbox — integration tests of the delivery as jobs, part of the
 * handlers_jobs suite (test_handlers_jobs.c): the cut-off and leased
 * claims (issue 19). A call longer than an execution is not cut off and
 * called again; a claim whose lease has passed is taken by another
 * delivery, and the first call's late outcome writes nothing; a call
 * queued behind slow ones does not start once its timeout no longer
 * fits in the lease; two deliveries of one eventlog handle one backlog
 * together, each row once; two handling loops of one delivery overlap;
 * a process whose clock is an hour off decides nothing by it; a requeue
 * during a retry leaves the row to its round; a hung call counts against
 * its handler's limit in its process. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "internal.h"
#include "jobs_fx.h"
#include "test_handlers.h"

static const odbox_event_type EV_A = {"TicketOpened"};

/* ---- the cut-off (issue 19) ------------------------------------------------- */

/* A handler that takes 3 s (or sleep_ms): calls counted, overlapping
 * calls too. */
typedef struct slow3 {
    atomic_int calls, running, most_running, finished;
    int sleep_ms;         /* 0: 3000 */
} slow3;

static int slow3_handle(const odbox_envelope *env, void *user, odbox_error *err);

/* Handlers of one handler, "slow", on EV_A, calling s (reset, sleeping
 * sleep_ms). */
static odbox_handlers *slow_handlers(slow3 *s, int sleep_ms)
{
    memset(s, 0, sizeof *s);
    s->sleep_ms = sleep_ms;
    return one_handler_on("slow", EV_A.name, slow3_handle, s, NULL);
}

static int slow3_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)err;
    slow3 *s = user;
    atomic_fetch_add(&s->calls, 1);
    int now = atomic_fetch_add(&s->running, 1) + 1;
    int most = atomic_load(&s->most_running);
    while (now > most && !atomic_compare_exchange_weak(&s->most_running, &most, now))
        ;
    jt_sleep_ms(s->sleep_ms ? s->sleep_ms : 3000);
    atomic_fetch_sub(&s->running, 1);
    atomic_fetch_add(&s->finished, 1);
    return 0;
}

/* With small execution settings (executions of 500 ms, a stop wait of
 * 200 ms), a 3 s call is not cut off at an execution's end and called
 * again: it is called once, and its success is recorded. */
START_TEST(a_slow_call_is_not_cut_off_by_the_execution_length)
{
    jx x;
    jx_open(&x, 1);
    static slow3 sl;
    odbox_handlers *h = slow_handlers(&sl, 0);
    odbox_delivery_config cfg = {.fanout_poll_ms = 100, .handling_poll_ms = 100, .execution_max_ms = 500,
                                 .stop_wait_ms = 200, .cross_process_wakeup = -1};
    jx_run(&x, h, &cfg, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 1, a);
    int64_t end = mono_ms_now() + 20000;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < 1 && mono_ms_now() < end)
        jt_sleep_ms(50);
    jt_sleep_ms(1000); /* a second call, had there been one, shows by now */
    int64_t succeeded = nrows(&x.f, 0, "state = 'SUCCEEDED'");
    int calls = atomic_load(&sl.calls), most = atomic_load(&sl.most_running);
    printf("handlers: a 3 s handler with executions of 500 ms: %d call(s), at most %d at once, %lld SUCCEEDED\n",
           calls, most, (long long)succeeded);
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(succeeded, 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "slow"), "SUCCEEDED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "slow", "attempts"), 1);
    jx_close(&x);
    end = mono_ms_now() + 10000;
    while (atomic_load(&sl.finished) < calls && mono_ms_now() < end)
        jt_sleep_ms(20);
}
END_TEST

/* ---- leased claims (issue 19) ------------------------------------------------ */

/* A handler whose k-th call (0-based, in call order) waits until gate[k]
 * opens, then returns 0; it records which delivery made each call. */
typedef struct gated {
    atomic_int calls, returned;
    atomic_int gate[4];
    atomic_int by[2];     /* calls per delivery (user of the second: by + 1) */
} gated;

typedef struct gated_user {
    gated *g;
    int who;
    int sleep_ms;         /* a call takes this long (no gate then) */
} gated_user;

static int gated_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)err;
    gated_user *u = user;
    gated *g = u->g;
    int k = atomic_fetch_add(&g->calls, 1);
    atomic_fetch_add(&g->by[u->who], 1);
    if (u->sleep_ms)
        jt_sleep_ms(u->sleep_ms);
    else
        for (int64_t end = mono_ms_now() + 30000; k < 4 && !atomic_load(&g->gate[k]) && mono_ms_now() < end;)
            jt_sleep_ms(5);
    atomic_fetch_add(&g->returned, 1);
    return 0;
}

static odbox_handlers *gated_handlers(gated_user *u)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    odbox_handler hd = {.name = "g", .event_type = EV_A.name, .handle = gated_handle, .user = u};
    ck_assert_int_eq(odbox_handlers_add(h, &hd, &e), ODBOX_OK);
    return h;
}

typedef struct round_arg {
    odbox_delivery *d;
    odbox_shard *s;
    odbox_delivery_round r;
    int rc;
    atomic_int done;
} round_arg;

static void *round_thread(void *arg)
{
    round_arg *a = arg;
    odbox_error e = {0};
    a->rc = odbox_delivery_handling_round(a->d, a->s, &a->r, &e);
    atomic_store(&a->done, 1);
    return NULL;
}

static void wait_calls(gated *g, int n)
{
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (atomic_load(&g->calls) < n)
        ck_assert_msg(mono_ms_now() < end, "%d of %d calls", atomic_load(&g->calls), n), jt_sleep_ms(5);
}

/* A claim whose lease (300 ms, the database's time) has passed is taken
 * by another delivery's round while the first call still runs; the first
 * call's outcome then comes late and writes nothing (its claim is gone),
 * and the second round's outcome is the one recorded. */
START_TEST(a_late_outcome_after_the_lease_was_lost_writes_nothing)
{
    jx x;
    jx_open(&x, 1);
    static gated g;
    memset(&g, 0, sizeof g);
    gated_user u[2] = {{&g, 0, 0}, {&g, 1, 0}};
    odbox_handlers *h[2] = {gated_handlers(&u[0]), gated_handlers(&u[1])};
    odbox_delivery *d[2] = {NULL, NULL};
    odbox_delivery_config cfg = {.lease_ms = 300, .cross_process_wakeup = -1};
    odbox_error e = {0};
    for (int i = 0; i < 2; i++)
        ck_assert_msg(odbox_delivery_open(x.f.r, h[i], &cfg, &d[i], &e) == ODBOX_OK, "%s", e.message);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 1, a);
    fanout_until_idle(d[0], &x.f, NULL);
    odbox_shard *s0 = odbox_registry_shard_at(x.f.r, 0);
    round_arg ra[2] = {{.d = d[0], .s = s0}, {.d = d[1], .s = s0}};
    pthread_t t[2];
    atomic_init(&ra[0].done, 0), atomic_init(&ra[1].done, 0);
    ck_assert_int_eq(pthread_create(&t[0], NULL, round_thread, &ra[0]), 0);
    wait_calls(&g, 1);
    /* claimed: another round finds nothing while the lease holds */
    odbox_delivery_round r;
    round_ok(odbox_delivery_handling_round(d[1], s0, &r, &e), &e);
    ck_assert_int_eq(r.read, 0);
    ck_assert_int_eq(nrows(&x.f, 0, "lease_owner IS NOT NULL AND lease_until IS NOT NULL"), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "next_retry_at = lease_until"), 1); /* out of the due order until then */
    jt_sleep_ms(600); /* the lease ends: the row is due again */
    ck_assert_int_eq(pthread_create(&t[1], NULL, round_thread, &ra[1]), 0);
    wait_calls(&g, 2);
    atomic_store(&g.gate[0], 1); /* the first call returns, late */
    pthread_join(t[0], NULL);
    ck_assert_int_eq(ra[0].rc, ODBOX_OK);
    ck_assert_int_eq(ra[0].r.stale, 1);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "g"), "PENDING");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "g", "attempts"), 0);
    atomic_store(&g.gate[1], 1);
    pthread_join(t[1], NULL);
    ck_assert_int_eq(ra[1].rc, ODBOX_OK);
    ck_assert_int_eq(ra[1].r.succeeded, 1);
    ck_assert_int_eq(ra[1].r.stale, 0);
    ck_assert_str_eq(nstate(&x.f, 0, a[0], "g"), "SUCCEEDED");
    ck_assert_int_eq(ncol_int(&x.f, 0, a[0], "g", "attempts"), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "lease_owner IS NULL AND lease_until IS NULL"), 1);
    ck_assert_int_eq(atomic_load(&g.by[0]), 1);
    ck_assert_int_eq(atomic_load(&g.by[1]), 1);
    for (int i = 0; i < 2; i++) {
        odbox_delivery_free(&d[i]);
        odbox_handlers_free(&h[i]);
    }
    jx_close(&x);
}
END_TEST

/* One worker thread, calls of 300 ms, a timeout of 500 ms and a lease of
 * 1 s: a call may start only in the lease's first 500 ms, so that it ends
 * within the lease. Of a claim of 4, the first two run; the others find
 * no thread in time and their rows are due again at once (not run, no
 * attempt counted, no lease), and the next round calls them: each row
 * called once. Before, the fourth call started 900 ms in and ran past
 * the lease, where another round could have claimed and called its row. */
START_TEST(a_call_that_would_outlive_its_lease_does_not_start)
{
    jx x;
    jx_open(&x, 1);
    static slow3 sl;
    odbox_handlers *h = slow_handlers(&sl, 300);
    odbox_delivery_config cfg = {.workers = 1, .handling_batch = 4, .handler_timeout_ms = 500, .lease_ms = 1000,
                                 .cross_process_wakeup = -1};
    odbox_delivery *d = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x.f.r, h, &cfg, &d, &e) == ODBOX_OK, "%s", e.message);
    emit_n(&x.f, x.exe, 0, &EV_A, 4, NULL);
    fanout_until_idle(d, &x.f, NULL);
    odbox_shard *s0 = odbox_registry_shard_at(x.f.r, 0);
    odbox_delivery_round r;
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    ck_assert_int_eq(r.read, 4);
    ck_assert_int_eq(r.succeeded, 2);
    ck_assert_int_eq(atomic_load(&sl.calls), 2);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'PENDING' AND attempts = 0 AND lease_owner IS NULL"), 2);
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    ck_assert_int_eq(r.read, 2);
    ck_assert_int_eq(r.succeeded, 2);
    ck_assert_int_eq(atomic_load(&sl.calls), 4);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED' AND attempts = 1"), 4);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    jx_close(&x);
}
END_TEST

/* A handler whose first call hangs; the others return at once. */
typedef struct first_hangs {
    atomic_int calls, release, returned;
} first_hangs;

static int first_hangs_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    first_hangs *f = user;
    (void)env, (void)err;
    if (atomic_fetch_add(&f->calls, 1) == 0)
        for (int i = 0; i < 3000 && !atomic_load(&f->release); i++)
            jt_sleep_ms(10);
    atomic_fetch_add(&f->returned, 1);
    return 0;
}

/* max_in_flight 3 on 2 workers: the first call hangs and is abandoned at
 * the timeout; its row's outcome ended its limited lease, but its thread
 * still runs it, so this process's next claim takes 2 rows, not 3, until
 * it returns. */
START_TEST(a_hung_call_counts_against_its_handlers_limit_here)
{
    jx x;
    jx_open(&x, 1);
    static first_hangs f;
    atomic_init(&f.calls, 0), atomic_init(&f.release, 0), atomic_init(&f.returned, 0);
    odbox_handlers *h =
        one_handler_on("lim", EV_A.name, first_hangs_handle, &f, &(odbox_handler_options){.max_in_flight = 3});
    odbox_error e = {0};
    odbox_delivery_config cfg = {.workers = 2, .handler_timeout_ms = 200, .cross_process_wakeup = -1};
    odbox_delivery *d = NULL;
    ck_assert_msg(odbox_delivery_open(x.f.r, h, &cfg, &d, &e) == ODBOX_OK, "%s", e.message);
    odbox_shard *s0 = odbox_registry_shard_at(x.f.r, 0);
    odbox_delivery_round r;
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    fanout_until_idle(d, &x.f, NULL);
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    ck_assert_int_eq(r.timed_out, 1);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'FAILED' AND limit_lease_until IS NULL"), 1);
    emit_n(&x.f, x.exe, 0, &EV_A, 5, NULL);
    fanout_until_idle(d, &x.f, NULL);
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    printf("handlers_jobs: max_in_flight 3 with a hung call: the next claim took %zu row(s)\n", r.read);
    ck_assert_int_eq(r.read, 2);
    ck_assert_int_eq(r.succeeded, 2);
    atomic_store(&f.release, 1);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < 5) {
        ck_assert_msg(mono_ms_now() < end, "the limited handler's rows were not called after its hung call returned");
        round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
        jt_sleep_ms(5);
    }
    while (atomic_load(&f.returned) < 6 && mono_ms_now() < end)
        jt_sleep_ms(5);
    ck_assert_int_eq(atomic_load(&f.returned), 6);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    jx_close(&x);
}
END_TEST

/* A delivery with no clock decides in the database's time. This
 * process's clock an hour slow: the row due now is due for it too (before,
 * not for an hour), and a failed call's retry is a backoff (60 s)
 * after the database's now, so a round with the right clock finds the
 * row not due (before, it was an hour in the past, due at once: no
 * backoff). Then an hour fast: the row is still not due for it (before,
 * it claimed and called it 59 minutes early). One call in all. */
START_TEST(a_process_whose_clock_is_an_hour_off_decides_nothing)
{
    const int64_t hour_us = 3600 * INT64_C(1000000);
    odbox_clock_skew_set(0);
    jx x;
    jx_open(&x, 1);
    hbeh b;
    hbeh_init(&b, &x.rec, NULL);
    b.fail_always = 1;
    odbox_handlers *h = handlers_of(1, (const char *[]){"skewed"}, (const char *[]){EV_A.name}, (hbeh *[]){&b});
    odbox_delivery_config cfg = {.backoff_base_ms = 60000, .cross_process_wakeup = -1};
    odbox_delivery *d = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x.f.r, h, &cfg, &d, &e) == ODBOX_OK, "%s", e.message);
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    fanout_until_idle(d, &x.f, NULL);
    odbox_shard *s0 = odbox_registry_shard_at(x.f.r, 0);
    odbox_delivery_round r[3];
    odbox_clock_skew_set(-hour_us);
    int rc = odbox_delivery_handling_round(d, s0, &r[0], &e);
    odbox_clock_skew_set(0);
    round_ok(rc, &e);
    int rc1 = odbox_delivery_handling_round(d, s0, &r[1], &e);
    odbox_clock_skew_set(hour_us);
    int rc2 = rc1 == ODBOX_OK ? odbox_delivery_handling_round(d, s0, &r[2], &e) : rc1;
    odbox_clock_skew_set(0);
    round_ok(rc2, &e);
    ck_assert_msg(r[0].read == 1, "a clock an hour slow found no row due"); /* before: not due for it */
    ck_assert_int_eq(r[0].failed, 1);
    ck_assert_msg(r[1].read == 0, "the row written by a clock an hour slow was due at once");
    ck_assert_msg(r[2].read == 0, "a clock an hour fast claimed a row due in a minute");
    ck_assert_int_eq(atomic_load(&b.calls), 1);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'FAILED' AND attempts = 1"), 1);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    jx_close(&x);
}
END_TEST

/* Two deliveries of one eventlog, each with a job registry of its own (as
 * two processes would have), handle one backlog together: every row
 * SUCCEEDED once, each called once, and both handled some. */
START_TEST(two_deliveries_handle_one_backlog_together)
{
    jx x;
    jx_open(&x, 1);
    static gated g;
    memset(&g, 0, sizeof g);
    gated_user u[2] = {{&g, 0, 5}, {&g, 1, 5}};
    odbox_handlers *h2 = gated_handlers(&u[1]);
    odbox_delivery_config cfg = {.handling_batch = 10, .workers = 2, .fanout_poll_ms = 50, .handling_poll_ms = 50,
                                 .cross_process_wakeup = -1};
    enum { N = 300 };
    emit_n(&x.f, x.exe, 0, &EV_A, N, NULL);
    /* the second: handling only, on a job registry of its own */
    odbox_delivery *d2 = NULL;
    odbox_jobs *j2 = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_delivery_open(x.f.r, h2, &cfg, &d2, &e) == ODBOX_OK, "%s", e.message);
    odbox_jobs_config jc = {.poll_interval_ms = 200, .shutdown_max_wait_ms = 20000};
    ck_assert_int_eq(odbox_jobs_open(x.f.r, &jc, &j2, &e), ODBOX_OK);
    ck_assert_msg(odbox_delivery_add_jobs(d2, j2, ODBOX_DELIVERY_HANDLING, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_jobs_start(j2, &e) == ODBOX_OK, "%s", e.message);
    jx_run(&x, gated_handlers(&u[0]), &cfg, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    int64_t t0 = mono_ms_now(), end = t0 + 60000;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < N && mono_ms_now() < end)
        jt_sleep_ms(20);
    int64_t took = mono_ms_now() - t0;
    ck_assert_int_eq(odbox_jobs_stop(j2, &e), ODBOX_OK);
    printf("handlers: two deliveries, one backlog of %d: %d + %d calls, all SUCCEEDED in %lld ms\n", N,
           atomic_load(&g.by[0]), atomic_load(&g.by[1]), (long long)took);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED' AND attempts = 1"), N);
    ck_assert_int_eq(atomic_load(&g.calls), N);
    ck_assert_int_gt(atomic_load(&g.by[0]), 0);
    ck_assert_int_gt(atomic_load(&g.by[1]), 0);
    odbox_delivery_free(&d2);
    odbox_jobs_free(&j2);
    odbox_handlers_free(&h2);
    jx_close(&x);
}
END_TEST

/* The handling loops of one process overlap on a backlog: with batches of
 * 4 and 8 worker threads, one loop has at most 4 calls in flight (it
 * waits for its batch), two loops more (the second claims while the
 * first calls); every row is called once either way. */
START_TEST(two_handling_loops_overlap_and_call_each_row_once)
{
    enum { N = 32, BATCH = 4 };
    int most[2] = {0};
    for (int loops = 1; loops <= 2; loops++) {
        jx x;
        jx_open(&x, 1);
        static slow3 sl;
        odbox_handlers *h = slow_handlers(&sl, 100);
        emit_n(&x.f, x.exe, 0, &EV_A, N, NULL);
        odbox_delivery_config cfg = {.handling_batch = BATCH, .workers = 8, .handling_loops = loops,
                                     .fanout_poll_ms = 50, .handling_poll_ms = 50, .cross_process_wakeup = -1};
        jx_run(&x, h, &cfg, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
        int64_t end = mono_ms_now() + 30000;
        while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < N && mono_ms_now() < end)
            jt_sleep_ms(20);
        most[loops - 1] = atomic_load(&sl.most_running);
        printf("handlers: %d handling loop(s), batches of %d: %d calls, at most %d at once\n", loops, BATCH,
               atomic_load(&sl.calls), most[loops - 1]);
        ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED' AND attempts = 1"), N);
        ck_assert_int_eq(atomic_load(&sl.calls), N);
        jx_close(&x);
    }
    ck_assert_int_le(most[0], BATCH);
    ck_assert_int_gt(most[1], BATCH);
}
END_TEST

/* The handlers_jobs suite's tests, added to its tcase where they were listed. */
/* ---- a requeue while the retry runs ---------------------------------------- */

/* Fails its first call; its second requeues its own row (by id, without
 * a clock, as `odbox notifications requeue --id` would), then succeeds. */
typedef struct self_requeue {
    odbox_registry *r;
    atomic_int calls;
    int rc;
    odbox_requeue_result res;
} self_requeue;

static int self_requeue_handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    self_requeue *q = user;
    if (atomic_fetch_add(&q->calls, 1) == 0)
        return odbox_fail(err, ODBOX_EINVAL, "the first call fails");
    odbox_requeue_spec spec = {.id = env->notification_id};
    odbox_error e = {0};
    q->rc = odbox_notifications_requeue_run(q->r, &spec, &q->res, &e);
    return 0;
}

/* An operator requeues a FAILED row while its retry runs: the row is
 * left to the round (the requeue moves 0 and says 1 is in flight), and
 * the call's success is written: SUCCEEDED after two calls, none after.
 * Before, the requeue moved it (attempts 0), the round's outcome, guarded
 * by the attempts it had read, wrote nothing (stale), and the row was
 * called again once the lease ended. */
START_TEST(a_requeue_during_the_retry_leaves_the_row_to_its_round)
{
    jx x;
    jx_open(&x, 1);
    static self_requeue q;
    memset(&q, 0, sizeof q);
    q.r = x.f.r;
    q.rc = -1;
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    odbox_handler hd = {.name = "requeued", .event_type = EV_A.name, .handle = self_requeue_handle, .user = &q};
    ck_assert_int_eq(odbox_handlers_add(h, &hd, &e), ODBOX_OK);
    odbox_delivery_config cfg = {.backoff_base_ms = 50, .cross_process_wakeup = -1};
    odbox_delivery *d = NULL;
    ck_assert_msg(odbox_delivery_open(x.f.r, h, &cfg, &d, &e) == ODBOX_OK, "%s", e.message);
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    fanout_until_idle(d, &x.f, NULL);
    odbox_shard *s0 = odbox_registry_shard_at(x.f.r, 0);
    odbox_delivery_round r;
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    ck_assert_int_eq(r.failed, 1);
    jt_sleep_ms(300); /* the backoff (50 ms) passes */
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    ck_assert_int_eq(r.read, 1);
    ck_assert_int_eq(atomic_load(&q.calls), 2);
    ck_assert_int_eq(q.rc, ODBOX_OK);
    ck_assert_msg(r.stale == 0 && r.succeeded == 1, "the call's success was lost: %zu stale", r.stale);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED' AND attempts = 2 AND lease_owner IS NULL"), 1);
    ck_assert_msg(q.res.moved == 0 && q.res.in_flight == 1, "the requeue moved %lld, left %lld in flight",
                  (long long)q.res.moved, (long long)q.res.in_flight);
    round_ok(odbox_delivery_handling_round(d, s0, &r, &e), &e);
    ck_assert_int_eq(r.read, 0);
    ck_assert_int_eq(atomic_load(&q.calls), 2);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    jx_close(&x);
}
END_TEST

void handlers_jobs_add_lease_tests(TCase *tc)
{
    tcase_add_test(tc, a_slow_call_is_not_cut_off_by_the_execution_length);
    tcase_add_test(tc, a_late_outcome_after_the_lease_was_lost_writes_nothing);
    tcase_add_test(tc, a_call_that_would_outlive_its_lease_does_not_start);
    tcase_add_test(tc, a_hung_call_counts_against_its_handlers_limit_here);
    tcase_add_test(tc, a_process_whose_clock_is_an_hour_off_decides_nothing);
    tcase_add_test(tc, a_requeue_during_the_retry_leaves_the_row_to_its_round);
    tcase_add_test(tc, two_deliveries_handle_one_backlog_together);
    tcase_add_test(tc, two_handling_loops_overlap_and_call_each_row_once);
}
