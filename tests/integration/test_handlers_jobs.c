/* odbox — integration tests of the delivery as jobs, in real time, on two
 * shards: with poll delays of 30 s, a commit in this process reaches its
 * handler (and a handler's action the next handler) through the wake-ups
 * in well under a second; on PostgreSQL a commit in another process, and
 * a fan-out of another delivery, do too (LISTEN), and not with listening
 * off, nor while the fan-out's own loops can take the round; an
 * execution that ends by its length is followed at once; a wake-up
 * starts one of the idle loops and they share one poll, while rows that
 * order or a concurrency limit held back follow at once; a hung handler
 * is bounded by its timeout in a round and by the stop wait at a stop;
 * the metrics count what happened, and their Prometheus text reads back.
 * The cut-off and leased claims (test_handlers_leases.c) and hand-offs
 * (test_handlers_handoff.c) are in this suite too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../prom/promparse.h"
#include "delivery_internal.h"
#include "jobs_fx.h"
#include "test_handlers.h"

static const odbox_event_type EV_A = {"TicketOpened"};
static const odbox_event_type EV_B = {"TicketRouted"};

#define LONG_POLL_MS 30000 /* the wake-ups must beat this */
#define WOKEN_MS 10000     /* what "at once" may take on a loaded machine (measured: milliseconds) */

/* Waits for the calls of a handler and returns how long they took. */
static int64_t await_calls(jx *x, const char *handler, int n, int64_t t0)
{
    if (!hrec_wait(&x->rec, handler, n, WOKEN_MS))
        ck_abort_msg("%s: %d of %d calls within %d ms; %swarnings: %s", handler, hrec_count(&x->rec, handler), n,
                     WOKEN_MS, jx_describe(x), jx_warnings(x));
    return mono_ms_now() - t0;
}

START_TEST(commits_here_are_delivered_without_the_poll_delay)
{
    jx x;
    jx_open(&x, 2);
    hbeh first, sink;
    hbeh_init(&first, &x.rec, NULL), hbeh_init(&sink, &x.rec, NULL);
    first.chain_exe = x.exe;
    first.chain_type = &EV_B;
    odbox_delivery_config cfg = {.fanout_poll_ms = LONG_POLL_MS, .handling_poll_ms = LONG_POLL_MS,
                                 .cross_process_wakeup = -1};
    jx_run(&x,
           handlers_of(2, (const char *[]){"first", "sink"}, (const char *[]){EV_A.name, EV_B.name},
                       (hbeh *[]){&first, &sink}),
           &cfg, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    jx_wait_rounds(&x, 3);
    int64_t t0 = mono_ms_now();
    char a0[1][37], a1[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 1, a0);
    emit_n(&x.f, x.exe, 1, &EV_A, 1, a1);
    int64_t first_ms = await_calls(&x, "first", 2, t0);
    /* through a handler's action: fan-out and handling twice */
    int64_t sink_ms = await_calls(&x, "sink", 2, t0);
    printf("handlers: woken delivery: first handler after %lld ms, chained handler after %lld ms (poll delay %d ms)\n",
           (long long)first_ms, (long long)sink_ms, LONG_POLL_MS);
    ck_assert_int_ge(hrec_find(&x.rec, "first", a0[0]), 0);
    ck_assert_int_ge(hrec_find(&x.rec, "first", a1[0]), 0);
    int64_t end = mono_ms_now() + WOKEN_MS;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") + nrows(&x.f, 1, "state = 'SUCCEEDED'") < 4)
        ck_assert_msg(mono_ms_now() < end, "outcomes not written"), jt_sleep_ms(5);
    jx_close(&x);
}
END_TEST

/* A round that fails (here: scripted at CALLS_DONE, as a lost connection
 * or a lock wait would) runs again soon, not after the 30 s poll: no
 * wake-up comes for rows that are already due. */
START_TEST(a_failed_round_runs_again_without_the_poll_delay)
{
    jx x;
    jx_open(&x, 1);
    hbeh h;
    hbeh_init(&h, &x.rec, NULL);
    odbox_delivery_config cfg = {.fanout_poll_ms = LONG_POLL_MS, .handling_poll_ms = LONG_POLL_MS,
                                 .cross_process_wakeup = -1};
    jx_run(&x, handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&h}), &cfg,
           ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    jx_wait_rounds(&x, 3);
    atomic_store(&x.fail_rounds, 2);
    int64_t t0 = mono_ms_now();
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    /* two failed rounds (their calls are re-deliveries), then the one that writes */
    int64_t took = await_calls(&x, "h", 3, t0);
    int64_t end = mono_ms_now() + WOKEN_MS;
    while (nrows(&x.f, 0, "state = 'SUCCEEDED'") < 1)
        ck_assert_msg(mono_ms_now() < end, "outcome not written"), jt_sleep_ms(5);
    printf("handlers: two failed rounds, then the third call after %lld ms (poll delay %d ms)\n", (long long)took,
           LONG_POLL_MS);
    ck_assert_ptr_nonnull(strstr(jx_warnings(&x), "round failed"));
    ck_assert_int_eq(atomic_load(&x.fail_rounds), 0);
    jx_close(&x);
}
END_TEST

START_TEST(an_execution_that_ends_by_its_length_is_followed_at_once)
{
    jx x;
    jx_open(&x, 1);
    hbeh h;
    hbeh_init(&h, &x.rec, NULL);
    odbox_delivery_config cfg = {.fanout_poll_ms = LONG_POLL_MS, .handling_poll_ms = LONG_POLL_MS,
                                 .execution_max_ms = 150, .cross_process_wakeup = -1};
    /* the job registry polls every 10 s (its default) and rounds wait 30
     * s: an event committed between two executions waits for the next
     * one's first round, which must come at once */
    jx_run_polling(&x, handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&h}), &cfg,
                   ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, 10000);
    jx_wait_rounds(&x, 3);
    int64_t worst = 0;
    for (int i = 0; i < 8; i++) {
        jt_sleep_ms(60);
        int64_t t0 = mono_ms_now();
        emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
        int64_t took = await_calls(&x, "h", i + 1, t0);
        worst = took > worst ? took : worst;
    }
    printf("handlers: 8 events across executions of 150 ms: slowest delivered after %lld ms\n", (long long)worst);
    ck_assert_int_lt(worst, 5000);
    jx_close(&x);
}
END_TEST

/* Two applications with eventlogs of their own in one database share
 * scheduled_tasks: their delivery jobs have names of their own, so each
 * drains (with one name, one held the row while the other starved). */
START_TEST(two_eventlogs_in_one_database_both_drain)
{
    jx x[2];
    hbeh h[2];
    for (int i = 0; i < 2; i++) {
        jx_open(&x[i], 1);
        hbeh_init(&h[i], &x[i].rec, NULL);
    }
    for (int i = 0; i < 2; i++) {
        odbox_delivery_config cfg = {.fanout_poll_ms = 100, .handling_poll_ms = 100, .cross_process_wakeup = -1};
        jx_run(&x[i], handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&h[i]}), &cfg,
               ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    }
    ck_assert_str_ne(odbox_delivery_job_name(x[0].d, ODBOX_DELIVERY_FANOUT),
                     odbox_delivery_job_name(x[1].d, ODBOX_DELIVERY_FANOUT));
    ck_assert_ptr_null(odbox_delivery_job_name(x[0].d, 3));
    int64_t t0 = mono_ms_now();
    for (int i = 0; i < 2; i++)
        emit_n(&x[i].f, x[i].exe, 0, &EV_A, 100, NULL);
    for (int i = 0; i < 2; i++)
        await_calls(&x[i], "h", 100, t0);
    printf("handlers: two eventlogs in one database: 2 x 100 events delivered in %lld ms\n",
           (long long)(mono_ms_now() - t0));
    for (int i = 1; i >= 0; i--)
        jx_close(&x[i]);
}
END_TEST

/* Attaching and detaching while other threads commit: a commit's wake-up
 * takes the delivery's lock inside the executor's listener lock, which
 * attach and detach take in turn; neither may wait for the other. */
START_TEST(attach_and_detach_while_other_threads_commit)
{
    jx x;
    jx_open(&x, 1);
    hbeh h;
    hbeh_init(&h, &x.rec, NULL);
    x.h = handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&h});
    odbox_error e = {0};
    ck_assert_int_eq(odbox_delivery_open(x.f.r, x.h, NULL, &x.d, &e), ODBOX_OK);
    many m;
    many_start(&m, x.exe, 4, 150, 0);
    int64_t t0 = mono_ms_now();
    int rounds = 0;
    while (atomic_load(&m.failures) == 0 && mono_ms_now() - t0 < 3000) {
        ck_assert_int_eq(odbox_delivery_attach(x.d, x.exe, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_delivery_detach(x.d, x.exe, &e), ODBOX_OK);
        rounds++;
    }
    many_wait(&m);
    printf("handlers: %d attach/detach pairs while 600 actions committed\n", rounds);
    jx_close(&x);
}
END_TEST

/* ---- across processes -------------------------------------------------------- */

static int can_listen(jx *x)
{
    return odbox_wake_listening(x->d->wake, (odbox_shard_id){0, 0});
}

static void wait_listening(jx *x)
{
    int64_t end = mono_ms_now() + 20000;
    while (!can_listen(x)) {
        ck_assert_msg(mono_ms_now() < end, "the delivery does not listen");
        jt_sleep_ms(10);
    }
}

START_TEST(commits_of_another_process_wake_the_fanout)
{
    jx x;
    jx_open(&x, 1);
    hbeh probe;
    hbeh_init(&probe, &x.rec, NULL);
    const odbox_dialect *d = odbox_conn_dialect(x.f.c[0]);
    int listens = d->notify_sql && d->listen_open;
    /* elsewhere the poll delay bounds the wait: a short one */
    odbox_delivery_config cfg = {.fanout_poll_ms = listens ? LONG_POLL_MS : 500,
                                 .handling_poll_ms = listens ? LONG_POLL_MS : 500};
    jx_run(&x, handlers_of(1, (const char *[]){"probe"}, (const char *[]){"WakeProbed"}, (hbeh *[]){&probe}), &cfg,
           ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    jx_wait_rounds(&x, 3);
    if (listens)
        wait_listening(&x);
    char extra[128];
    snprintf(extra, sizeof extra, "eventlog=%s", x.f.ev[0]);
    char *dsn = itest_dsn_with(1, extra);
    int64_t t0 = mono_ms_now();
    pid_t pid = jt_spawn("tests/integration/wake-writer", (const char *[]){dsn, "1", NULL}, NULL);
    ck_assert_int_eq(jt_reap(pid, 0), 0);
    int64_t took = await_calls(&x, "probe", 1, t0);
    printf("handlers: a commit of another process handled after %lld ms (%s)\n", (long long)took,
           listens ? "LISTEN, poll delay 30 s" : "no LISTEN: poll delay 500 ms");
    free(dsn);
    jx_close(&x);
}
END_TEST

START_TEST(a_fanout_wakes_the_handling_of_another_process)
{
    if (!itest_is("pg")) {
        printf("handlers: cross-process wake-ups need LISTEN (PostgreSQL): not on %s\n", itest_dialect());
        return;
    }
    for (int off = 0; off < 2; off++) {
        jx x;
        jx_open(&x, 1);
        hbeh h;
        hbeh_init(&h, &x.rec, NULL);
        odbox_delivery_config cfg = {.fanout_poll_ms = LONG_POLL_MS, .handling_poll_ms = LONG_POLL_MS};
        jx_run(&x, handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&h}), &cfg,
               ODBOX_DELIVERY_FANOUT);
        other_proc o;
        other_open(&o, &x, &h, EV_A.name, !off, LONG_POLL_MS);
        jx_wait_rounds(&x, 1);
        jt_sleep_ms(100);
        int64_t t0 = mono_ms_now();
        emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
        if (!off) {
            int64_t took = await_calls(&x, "h", 1, t0);
            printf("handlers: a fan-out woke the handling of another delivery after %lld ms\n", (long long)took);
        } else {
            /* fanned out at once, but nobody tells the handling */
            ck_assert_int_eq(hrec_wait(&x.rec, "h", 1, 2000), 0);
            ck_assert_int_eq(nrows(&x.f, 0, "state = 'PENDING'"), 1);
        }
        other_close(&o);
        jx_close(&x);
    }
}
END_TEST

/* A fan-out whose own process has a loop waiting for the round's rows
 * takes them itself and wakes nobody else: a NOTIFY would cost every
 * other process a claim that finds nothing. Once its loops are busy, the
 * others are told and take the rows. */
START_TEST(a_fanout_tells_other_processes_only_when_its_own_loops_are_busy)
{
    if (!itest_is("pg")) {
        printf("handlers: cross-process wake-ups need LISTEN (PostgreSQL): not on %s\n", itest_dialect());
        return;
    }
    jx x;
    jx_open(&x, 1);
    hbeh here, there;
    hbeh_init(&here, &x.rec, NULL), hbeh_init(&there, &x.rec, NULL);
    odbox_delivery_config cfg = {.fanout_poll_ms = LONG_POLL_MS, .handling_poll_ms = LONG_POLL_MS,
                                 .handling_loops = 1};
    jx_run(&x, handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&here}), &cfg,
           ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    other_proc o;
    other_open(&o, &x, &there, EV_A.name, 1, LONG_POLL_MS);
    jx_wait_rounds(&x, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    jt_sleep_ms(100);
    int rounds = atomic_load(&o.rounds);
    /* this process's loop waits: it takes the row, the other sleeps on */
    atomic_store(&here.block, 1);
    int64_t t0 = mono_ms_now();
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    await_calls(&x, "h", 1, t0);
    jt_sleep_ms(300);
    ck_assert_int_eq(atomic_load(&here.calls), 1);
    ck_assert_int_eq(atomic_load(&there.calls), 0);
    ck_assert_msg(atomic_load(&o.rounds) == rounds, "the other process was woken for a row taken here");
    /* now that loop is in a call: the next row is the other's, at once */
    ck_assert_int_eq(atomic_load(&here.blocked), 1);
    t0 = mono_ms_now();
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    int64_t took = await_calls(&x, "h", 2, t0);
    ck_assert_int_eq(atomic_load(&there.calls), 1);
    printf("handlers: with its loop busy, a fan-out woke another process's handling after %lld ms\n",
           (long long)took);
    atomic_store(&here.block, 0);
    other_close(&o);
    jx_close(&x);
}
END_TEST

/* ---- one loop per wake-up, one poll between the loops ---------------------------- */

/* Handler "h" of EV_A on one shard, run as which by 4 handling loops
 * polling every handling_poll_ms; returns once each loop has made its
 * first round (at its start) and waits. */
static void run_four_loops(jx *x, hbeh *h, int handling_poll_ms, int which)
{
    jx_open(x, 1);
    hbeh_init(h, &x->rec, NULL);
    odbox_delivery_config cfg = {.fanout_poll_ms = LONG_POLL_MS, .handling_poll_ms = handling_poll_ms,
                                 .handling_loops = 4, .cross_process_wakeup = -1};
    jx_run(x, handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){h}), &cfg, which);
    jx_wait_rounds(x, which);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (atomic_load(&x->rounds[1][0]) < 4) {
        ck_assert_msg(mono_ms_now() < end, "the 4 loops made %d first rounds", atomic_load(&x->rounds[1][0]));
        jt_sleep_ms(5);
    }
    jt_sleep_ms(50);
}

START_TEST(one_loop_answers_a_wakeup)
{
    jx x;
    hbeh h;
    run_four_loops(&x, &h, LONG_POLL_MS, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    int before = atomic_load(&x.rounds[1][0]);
    emit_n(&x.f, x.exe, 0, &EV_A, 1, NULL);
    await_calls(&x, "h", 1, mono_ms_now());
    jt_sleep_ms(500);
    int rounds = atomic_load(&x.rounds[1][0]) - before;
    printf("handlers: one event woke %d handling round(s) of 4 idle loops\n", rounds);
    /* not one per loop, nor a second round of the loop that found it:
     * rows that come later come with their own wake-up */
    ck_assert_int_eq(rounds, 1);
    ck_assert_int_eq(atomic_load(&h.calls), 1);
    jx_close(&x);
}
END_TEST

START_TEST(ordered_and_limited_rows_follow_without_the_poll)
{
    jx x;
    jx_open(&x, 1);
    hbeh ord, lim;
    hbeh_init(&ord, &x.rec, NULL), hbeh_init(&lim, &x.rec, NULL);
    odbox_delivery_config cfg = {.fanout_poll_ms = LONG_POLL_MS, .handling_poll_ms = LONG_POLL_MS,
                                 .handling_loops = 1, .cross_process_wakeup = -1};
    odbox_handlers *h = handlers_of(2, (const char *[]){"ord", "lim"}, (const char *[]){EV_A.name, EV_A.name},
                                    (hbeh *[]){&ord, &lim});
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_set_options(h, "ord", &(odbox_handler_options){.ordered = 1}, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_handlers_set_options(h, "lim", &(odbox_handler_options){.max_in_flight = 1}, &e),
                     ODBOX_OK);
    jx_run(&x, h, &cfg, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    jx_wait_rounds(&x, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    /* three events of one model: a claim takes one row of each handler
     * (the oldest of the model; one in flight), and the outcomes it
     * writes free the next: that round's loop goes on at once */
    int64_t t0 = mono_ms_now();
    emit_n(&x.f, x.exe, 0, &EV_A, 3, NULL);
    int64_t took = await_calls(&x, "ord", 3, t0);
    await_calls(&x, "lim", 3, t0);
    printf("handlers: 3 ordered rows of one model, and 3 rows of a handler with max_in_flight 1, handled in "
           "%lld ms (poll %d ms)\n", (long long)took, LONG_POLL_MS);
    jx_close(&x);
}
END_TEST

START_TEST(idle_loops_share_one_poll)
{
    jx x;
    hbeh h;
    run_four_loops(&x, &h, 100, ODBOX_DELIVERY_HANDLING);
    int before = atomic_load(&x.rounds[1][0]);
    int64_t t0 = mono_ms_now();
    jt_sleep_ms(1000);
    int rounds = atomic_load(&x.rounds[1][0]) - before;
    int64_t took = mono_ms_now() - t0;
    printf("handlers: 4 idle loops, poll 100 ms: %d rounds in %lld ms\n", rounds, (long long)took);
    /* about one per 100 ms between them (each on its own: 4 per 100 ms).
     * The slack: a round in flight at each end of the second, and on a
     * loaded machine (ASan, 2 cores) two loops that look at the shared
     * poll at once may both start a round (13 in 1,000 ms was seen) */
    ck_assert_int_ge(rounds, 3);
    ck_assert_int_le(rounds, (int)(took / 100) + 4);
    jx_close(&x);
}
END_TEST

/* ---- bounds ---------------------------------------------------------------------- */

static void wait_finished(hbeh *b, int n)
{
    int64_t end = mono_ms_now() + 40000;
    while (atomic_load(&b->finished) < n) {
        ck_assert_msg(mono_ms_now() < end, "abandoned calls did not return");
        jt_sleep_ms(5);
    }
}

START_TEST(a_hung_handler_is_bounded_in_a_round_and_at_a_stop)
{
    jx x;
    jx_open(&x, 2);
    hbeh hang, quick;
    hbeh_init(&hang, &x.rec, NULL), hbeh_init(&quick, &x.rec, NULL);
    atomic_store(&hang.block, 1);
    odbox_delivery_config cfg = {.handler_timeout_ms = 400, .workers = 2};
    odbox_handlers *h = handlers_of(2, (const char *[]){"hang", "quick"}, (const char *[]){EV_A.name, EV_A.name},
                                    (hbeh *[]){&hang, &quick});
    odbox_error e = {0};
    ck_assert_int_eq(odbox_delivery_open(x.f.r, h, &cfg, &x.d, &e), ODBOX_OK);
    char a[2][37];
    emit_n(&x.f, x.exe, 1, &EV_A, 2, a);
    fanout_until_idle(x.d, &x.f, NULL);
    /* two hung calls take both workers: replaced, the quick calls still run */
    int64_t t0 = mono_ms_now();
    odbox_delivery_round r;
    round_ok(odbox_delivery_handling_round(x.d, odbox_registry_shard_at(x.f.r, 1), &r, &e), &e);
    int64_t took = mono_ms_now() - t0;
    printf("handlers: a round with hung handlers (timeout 400 ms) took %lld ms\n", (long long)took);
    ck_assert_int_lt(took, 10000);
    ck_assert_int_eq(r.timed_out, 2);
    ck_assert_int_eq(r.failed, 2);
    ck_assert_int_eq(r.succeeded, 2);
    ck_assert_str_eq(nstate(&x.f, 1, a[0], "hang"), "FAILED");
    ck_assert_str_eq(nstate(&x.f, 1, a[1], "quick"), "SUCCEEDED");
    atomic_store(&hang.block, 0);
    wait_finished(&hang, 2);
    odbox_delivery_free(&x.d);

    /* at a stop: the running call gets stop_wait_ms, its row stays due */
    atomic_store(&hang.block, 1);
    odbox_delivery_config cfg2 = {.handler_timeout_ms = 60000, .stop_wait_ms = 200, .cross_process_wakeup = -1};
    jx_run(&x, h, &cfg2, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING);
    char b[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 1, b);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (atomic_load(&hang.blocked) == 0)
        ck_assert_msg(mono_ms_now() < end, "the hung call never started"), jt_sleep_ms(5);
    t0 = mono_ms_now();
    ck_assert_msg(odbox_jobs_stop(x.jobs, &e) == ODBOX_OK, "%s", e.message);
    took = mono_ms_now() - t0;
    printf("handlers: stop with a hung handler (stop_wait_ms 200) took %lld ms\n", (long long)took);
    ck_assert_int_lt(took, 10000);
    ck_assert_str_eq(nstate(&x.f, 0, b[0], "hang"), "PENDING");
    ck_assert_int_eq(ncol_int(&x.f, 0, b[0], "hang", "attempts"), 0);
    atomic_store(&hang.block, 0);
    wait_finished(&hang, 3);
    jx_close(&x);
}
END_TEST

static double sample(const char *text, const char *series);

/* A handler that never returns costs at most its cap of threads (the
 * workers, 2 here): its first two calls are abandoned at the timeout,
 * the round's other calls of it are not started (their rows due again at
 * once), and no round claims its rows while both still run; the other
 * handler is called all along. Once the hung calls return, its rows are
 * claimed and called again. Before, every call of it in a round took a
 * thread in turn: 6 hung calls here, and more each round. */
START_TEST(a_hung_handler_costs_at_most_its_cap_of_threads)
{
    jx x;
    jx_open(&x, 2);
    hbeh hang, quick;
    hbeh_init(&hang, &x.rec, NULL), hbeh_init(&quick, &x.rec, NULL);
    atomic_store(&hang.block, 1);
    odbox_delivery_config cfg = {.handler_timeout_ms = 200, .workers = 2};
    x.h = handlers_of(2, (const char *[]){"hang", "quick"}, (const char *[]){EV_A.name, EV_A.name},
                      (hbeh *[]){&hang, &quick});
    odbox_error e = {0};
    ck_assert_int_eq(odbox_delivery_open(x.f.r, x.h, &cfg, &x.d, &e), ODBOX_OK);
    emit_n(&x.f, x.exe, 1, &EV_A, 6, NULL);
    fanout_until_idle(x.d, &x.f, NULL);
    odbox_shard *s1 = odbox_registry_shard_at(x.f.r, 1);
    odbox_delivery_round r;
    round_ok(odbox_delivery_handling_round(x.d, s1, &r, &e), &e);
    printf("handlers: a round with a hung handler (cap 2): %d hung call(s), %zu timed out, %zu succeeded\n",
           atomic_load(&hang.blocked), r.timed_out, r.succeeded);
    ck_assert_int_eq(atomic_load(&hang.calls), 2);
    ck_assert_int_eq(atomic_load(&hang.blocked), 2);
    ck_assert_int_eq(r.timed_out, 2);
    ck_assert_int_eq(r.succeeded, 6);
    ck_assert_int_eq(nrows(&x.f, 1, "handler_name = 'hang' AND state = 'FAILED'"), 2);
    ck_assert_int_eq(nrows(&x.f, 1, "handler_name = 'hang' AND state = 'PENDING' AND lease_owner IS NULL"), 4);
    ck_assert_msg(strstr(jx_warnings(&x), "handler hang has 2 calls still running past handler_timeout_ms"),
                  "no warning of the hung handler in: %s", jx_warnings(&x));
    char *text = NULL;
    ck_assert_msg(odbox_delivery_prometheus(x.d, NULL, &text, &e) == ODBOX_OK, "%s", e.message);
    ck_assert(sample(text, "odbox_handler_calls_hung{handler=\"hang\"}") == 2);
    ck_assert(sample(text, "odbox_handler_calls_hung{handler=\"quick\"}") == 0);
    free(text);
    /* its rows are due, but not claimed here while both calls hang */
    for (int i = 0; i < 3; i++) {
        round_ok(odbox_delivery_handling_round(x.d, s1, &r, &e), &e);
        ck_assert_int_eq(r.read, 0);
    }
    ck_assert_int_eq(atomic_load(&hang.calls), 2);
    atomic_store(&hang.block, 0);
    wait_finished(&hang, 2);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (nrows(&x.f, 1, "handler_name = 'hang' AND state = 'SUCCEEDED'") < 4) {
        ck_assert_msg(mono_ms_now() < end, "the hung handler's rows were not called after its calls returned");
        round_ok(odbox_delivery_handling_round(x.d, s1, &r, &e), &e);
        jt_sleep_ms(5);
    }
    ck_assert_int_eq(atomic_load(&hang.calls), 6);
    /* the count drops once a returned call's thread is back in the pool */
    for (;;) {
        ck_assert_msg(odbox_delivery_prometheus(x.d, NULL, &text, &e) == ODBOX_OK, "%s", e.message);
        double hung = sample(text, "odbox_handler_calls_hung{handler=\"hang\"}");
        free(text);
        if (hung == 0)
            break;
        ck_assert_msg(mono_ms_now() < end, "%.0f calls still counted hung after they returned", hung);
        jt_sleep_ms(5);
    }
    jx_close(&x);
}
END_TEST

/* ---- freeing after a stop that gave up -------------------------------------------- */

/* While set, a handling round's end sleeps this long (the delivery hook
 * runs on the round's thread): a statement running past the job
 * registry's shutdown wait. */
static atomic_int round_end_sleep_ms;
static atomic_int round_end_sleeping;

static int slow_round_end(void *ud, odbox_delivery_point at, odbox_shard *s, odbox_conn *conn,
                          const odbox_delivery_round *r)
{
    jx_count_rounds(ud, at, s, conn, r);
    int ms = atomic_load(&round_end_sleep_ms);
    if (at == ODBOX_DELIVERY_ROUND_DONE && r->job == ODBOX_DELIVERY_HANDLING && ms > 0) {
        atomic_fetch_add(&round_end_sleeping, 1);
        jt_sleep_ms(ms);
        atomic_fetch_sub(&round_end_sleeping, 1);
    }
    return 0;
}

/* odbox_jobs_stop gives up (ODBOX_ETIMEDOUT) on an execution whose round
 * outlasts the registry's shutdown wait; the README's order then frees
 * the delivery, the job registry, the handlers and the registry at once.
 * The delivery's free must end the execution and wait for it: no crash,
 * nothing read after it was freed (run in build-asan too). */
START_TEST(freeing_at_once_after_a_stop_that_timed_out_is_safe)
{
    jx x;
    jx_open(&x, 1);
    hbeh hang;
    hbeh_init(&hang, &x.rec, NULL);
    atomic_store(&hang.block, 1);
    atomic_store(&round_end_sleep_ms, 0);
    atomic_store(&round_end_sleeping, 0);
    x.h = handlers_of(1, (const char *[]){"hang"}, (const char *[]){EV_A.name}, (hbeh *[]){&hang});
    odbox_error e = {0};
    odbox_jobs_config jc = {.poll_interval_ms = 200, .shutdown_max_wait_ms = 300};
    ck_assert_int_eq(odbox_jobs_open(x.f.r, &jc, &x.jobs, &e), ODBOX_OK);

    odbox_delivery_config cfg = {.handler_timeout_ms = 60000,
                                 .stop_wait_ms = 50,
                                 .cross_process_wakeup = -1,
                                 .hook = slow_round_end,
                                 .hook_ud = &x};
    ck_assert_msg(odbox_delivery_open(x.f.r, x.h, &cfg, &x.d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_delivery_attach(x.d, x.exe, &e), ODBOX_OK);
    ck_assert_msg(odbox_delivery_add_jobs(x.d, x.jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e) ==
                      ODBOX_OK,
                  "%s", e.message);
    ck_assert_msg(odbox_jobs_start(x.jobs, &e) == ODBOX_OK, "%s", e.message);
    char a[1][37];
    emit_n(&x.f, x.exe, 0, &EV_A, 1, a);
    int64_t end = mono_ms_now() + JT_BOUND_MS;
    while (atomic_load(&hang.blocked) == 0)
        ck_assert_msg(mono_ms_now() < end, "the hung call never started"), jt_sleep_ms(5);
    /* the call is cut off after 50 ms; its round then ends 1.5 s later */
    atomic_store(&round_end_sleep_ms, 1500);
    int64_t t0 = mono_ms_now();
    ck_assert_int_eq(odbox_jobs_stop(x.jobs, &e), ODBOX_ETIMEDOUT);
    printf("handlers: jobs stop gave up after %lld ms: %s\n", (long long)(mono_ms_now() - t0), e.message);
    /* the README's order, at once */
    odbox_delivery_free(&x.d);
    int64_t took = mono_ms_now() - t0;
    int still_running = atomic_load(&round_end_sleeping);
    printf("handlers: the delivery's free returned %lld ms after the stop began\n", (long long)took);
    odbox_jobs_free(&x.jobs);
    odbox_handlers_free(&x.h);
    odbox_executor_free(&x.exe);
    jx_clear_job_rows(x.f.c[0]);
    dfx_close(&x.f);
    /* had the free not waited, the round would go on now on freed memory */
    end = mono_ms_now() + JT_BOUND_MS;
    while (atomic_load(&round_end_sleeping) > 0 && mono_ms_now() < end)
        jt_sleep_ms(5);
    jt_sleep_ms(300);
    ck_assert_msg(still_running == 0, "the delivery's free returned while a round still ran");
    /* the cut-off call still runs on its abandoned thread: it needs only hang */
    atomic_store(&hang.block, 0);
    wait_finished(&hang, 1);
    hrec_destroy(&x.rec);
}
END_TEST

/* A stop wait for the calls that leaves the round's statements no room
 * inside the job registry's shutdown wait is refused when the jobs are
 * added; one that fits is taken. */
START_TEST(a_stop_wait_that_does_not_fit_the_shutdown_wait_is_refused)
{
    jx x;
    jx_open(&x, 1);
    hbeh quick;
    hbeh_init(&quick, &x.rec, NULL);
    x.h = handlers_of(1, (const char *[]){"quick"}, (const char *[]){EV_A.name}, (hbeh *[]){&quick});
    odbox_error e = {0};
    odbox_jobs_config jc = {.shutdown_max_wait_ms = 300};
    ck_assert_int_eq(odbox_jobs_open(x.f.r, &jc, &x.jobs, &e), ODBOX_OK);
    const int stop_wait[] = {0 /* the default, 5000 */, 200, 151};
    for (size_t i = 0; i < sizeof stop_wait / sizeof *stop_wait; i++) {
        odbox_delivery_config bad = {.stop_wait_ms = stop_wait[i], .cross_process_wakeup = -1};
        ck_assert_msg(odbox_delivery_open(x.f.r, x.h, &bad, &x.d, &e) == ODBOX_OK, "%s", e.message);
        ck_assert_int_eq(odbox_delivery_add_jobs(x.d, x.jobs, ODBOX_DELIVERY_HANDLING, &e), ODBOX_EINVAL);
        ck_assert_msg(strstr(e.message, "stop_wait_ms") && strstr(e.message, "shutdown_max_wait_ms"), "%s",
                      e.message);
        odbox_delivery_free(&x.d);
    }
    odbox_delivery_config good = {.stop_wait_ms = 150, .cross_process_wakeup = -1};
    ck_assert_msg(odbox_delivery_open(x.f.r, x.h, &good, &x.d, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_delivery_add_jobs(x.d, x.jobs, ODBOX_DELIVERY_HANDLING, &e) == ODBOX_OK, "%s", e.message);
    odbox_delivery_free(&x.d);
    odbox_jobs_free(&x.jobs);
    jx_close(&x);
}
END_TEST

/* ---- metrics ---------------------------------------------------------------------- */

static double sample(const char *text, const char *series)
{
    double v = -1;
    ck_assert_msg(prom_value(text, series, &v) == 0, "no sample %s in:\n%s", series, text);
    return v;
}

START_TEST(metrics_count_calls_and_read_back_as_prometheus_text)
{
    jx x;
    jx_open(&x, 2);
    hbeh ok, bad;
    hbeh_init(&ok, &x.rec, NULL), hbeh_init(&bad, &x.rec, NULL);
    bad.fail_always = 1;
    x.h = handlers_of(2, (const char *[]){"ok", "bad"}, (const char *[]){EV_A.name, EV_B.name},
                      (hbeh *[]){&ok, &bad});
    odbox_error e = {0};
    ck_assert_int_eq(odbox_delivery_open(x.f.r, x.h, NULL, &x.d, &e), ODBOX_OK);
    emit_n(&x.f, x.exe, 0, &EV_A, 2, NULL);
    emit_n(&x.f, x.exe, 1, &EV_A, 1, NULL);
    emit_n(&x.f, x.exe, 1, &EV_B, 1, NULL);
    fanout_until_idle(x.d, &x.f, NULL);
    handle_until_idle(x.d, &x.f, NULL);
    odbox_delivery_metrics m;
    ck_assert_msg(odbox_delivery_metrics_read(x.d, NULL, &m, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(m.nhandlers, 2);
    ck_assert_str_eq(m.handlers[0].handler, "ok");
    ck_assert_str_eq(m.handlers[0].event_type, EV_A.name);
    ck_assert_int_eq(m.handlers[0].succeeded, 3);
    ck_assert_int_eq(m.handlers[0].duration_succeeded.count, 3);
    ck_assert_int_eq(m.handlers[0].lag.count, 3);
    ck_assert(m.handlers[0].lag.sum > 0);
    ck_assert_int_eq(m.handlers[1].failed_retry, 1);
    ck_assert_int_eq(m.handlers[1].duration_failed.count, 1);
    ck_assert_int_eq(m.handlers[1].lag.count, 0);
    ck_assert_int_eq(m.events_fanned_out, 4);
    ck_assert_int_eq(m.notifications_created, 4);
    ck_assert_int_eq(m.unknown_handler, 0);
    int found = 0;
    for (size_t i = 0; i < m.ndb; i++)
        if (m.db[i].shard.member == 1 && !strcmp(m.db[i].handler, "bad")) {
            ck_assert_int_eq(m.db[i].backlog, 1);
            ck_assert_int_eq(m.db[i].failed, 1);
            found = 1;
        }
    ck_assert(found);
    uint64_t in_buckets = 0;
    for (size_t i = 0; i <= m.handlers[0].lag.nbounds; i++)
        in_buckets += m.handlers[0].lag.counts[i];
    ck_assert_int_eq(in_buckets, 3);
    odbox_delivery_metrics_clear(&m);
    char *text = NULL;
    ck_assert_msg(odbox_delivery_prometheus(x.d, NULL, &text, &e) == ODBOX_OK, "%s", e.message);
    char msg[256];
    ck_assert_msg(prom_check(text, NULL, msg, sizeof msg) == 0, "%s\n%s", msg, text);
    ck_assert(sample(text, "odbox_handler_calls_total{handler=\"ok\",outcome=\"succeeded\"}") == 3);
    ck_assert(sample(text, "odbox_handler_calls_total{handler=\"bad\",outcome=\"failed_retry\"}") == 1);
    ck_assert(sample(text, "odbox_handler_lag_seconds_count{handler=\"ok\"}") == 3);
    ck_assert(sample(text, "odbox_handler_duration_seconds_count{handler=\"bad\",outcome=\"failed\"}") == 1);
    ck_assert(sample(text, "odbox_notifications_backlog{shard=\"0.1\",handler=\"bad\"}") == 1);
    ck_assert(sample(text, "odbox_fanout_events_total") == 4);
    free(text);
    ck_assert_int_eq(odbox_delivery_metrics_read(NULL, NULL, &m, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_delivery_prometheus(x.d, NULL, NULL, &e), ODBOX_EINVAL);
    jx_close(&x);
}
END_TEST

Suite *handlers_jobs_suite(void)
{
    Suite *s = suite_create("handlers_jobs");
    TCase *tc = tcase_create("handlers_jobs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, commits_here_are_delivered_without_the_poll_delay);
    handlers_jobs_add_lease_tests(tc);
    handlers_jobs_add_handoff_tests(tc);
    tcase_add_test(tc, a_failed_round_runs_again_without_the_poll_delay);
    tcase_add_test(tc, an_execution_that_ends_by_its_length_is_followed_at_once);
    tcase_add_test(tc, attach_and_detach_while_other_threads_commit);
    tcase_add_test(tc, two_eventlogs_in_one_database_both_drain);
    tcase_add_test(tc, commits_of_another_process_wake_the_fanout);
    tcase_add_test(tc, a_fanout_wakes_the_handling_of_another_process);
    tcase_add_test(tc, a_fanout_tells_other_processes_only_when_its_own_loops_are_busy);
    tcase_add_test(tc, one_loop_answers_a_wakeup);
    tcase_add_test(tc, ordered_and_limited_rows_follow_without_the_poll);
    tcase_add_test(tc, idle_loops_share_one_poll);
    tcase_add_test(tc, a_hung_handler_is_bounded_in_a_round_and_at_a_stop);
    tcase_add_test(tc, a_hung_handler_costs_at_most_its_cap_of_threads);
    tcase_add_test(tc, freeing_at_once_after_a_stop_that_timed_out_is_safe);
    tcase_add_test(tc, a_stop_wait_that_does_not_fit_the_shutdown_wait_is_refused);
    tcase_add_test(tc, metrics_count_calls_and_read_back_as_prometheus_text);
    suite_add_tcase(s, tc);
    return s;
}
