/* odbox — integration tests of distributed jobs against a real server,
 * one registry at a time: rows inserted at start (and refusal without the
 * tables), failures counted and reset, fixed-delay and cron times and
 * fraction_dead on a manual clock, wake-ups, a run whose row is taken
 * over, the bounded shutdown, operations on unknown names, and pause /
 * resume / run-now from the CLI on a running registry. Several
 * registries and processes: test_jobs_cluster.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#include "jobs_fx.h"

/* ---- start ------------------------------------------------------------------------- */

START_TEST(start_inserts_rows_or_refuses)
{
    jfx f;
    jfx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030 + 7 * MIN_US + 123456, &m, NULL), ODBOX_OK);
    jt_counter k = {0};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job, .user = &k};
    char cron_name[80];
    snprintf(cron_name, sizeof cron_name, "%s_cron", f.job);
    odbox_schedule quarter;
    ck_assert_int_eq(odbox_schedule_cron("*/15 * * * *", &quarter, NULL), ODBOX_OK);
    odbox_job cron_job = {.name = cron_name, .schedule = quarter, .execute = jt_count_job, .user = &k};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .clock = odbox_manual_clock_clock(m), .picked_by = "t"};

    /* without odbox_job_state (V4 not applied): refused, nothing runs */
    itest_exec(f.c, "ALTER TABLE odbox_job_state RENAME TO odbox_job_state_away");
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    odbox_error e = {0};
    int rc = odbox_jobs_start(j, &e);
    itest_exec(f.c, "ALTER TABLE odbox_job_state_away RENAME TO odbox_job_state");
    ck_assert_int_eq(rc, ODBOX_EDB);
    ck_assert_msg(strstr(e.message, "run odbox migrate") && strstr(e.message, f.job), "%s", e.message);
    jt_sleep_ms(200);
    ck_assert_int_eq(jt_load(&k.calls), 0);
    odbox_jobs_free(&j);

    /* with the tables: each row inserted at the schedule's first time */
    j = jt_open_jobs(f.r, &cfg, &job);
    ck_assert_int_eq(odbox_jobs_add(j, &cron_job, &e), ODBOX_OK);
    jt_start(j);
    jt_awaited one = {&k, 1};
    ck_assert(jt_wait_for(jt_returned_n, &one));
    odbox_jobs_free(&j);
    odbox_job_info in = jt_must_row(&f, cron_name);
    ck_assert_int_eq(in.next_execution_us, JAN_2030 + 15 * MIN_US); /* first match after 00:07:00.123456 */
    ck_assert(!in.picked);
    ck_assert_int_eq(in.last_success_us, 0);
    ck_assert_int_eq(in.consecutive_failures, 0);
    ck_assert(!in.paused);
    /* the fixed-delay job was due at once and ran once, on the clock's time */
    ck_assert_int_eq(jt_load(&k.calls), 1);
    in = jt_must_row(&f, f.job);
    ck_assert_int_eq(in.last_success_us, JAN_2030 + 7 * MIN_US + 123456);
    ck_assert_int_eq(in.next_execution_us, JAN_2030 + 67 * MIN_US + 123456);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "task_instance = 'recurring' AND task_data IS NULL AND version = 3",
                                 f.job),
                     1); /* inserted at 1, claimed, finished */
    odbox_manual_clock_free(&m);
    jfx_close(&f);
}
END_TEST

/* ---- fixed delay, failures, cron: on a manual clock -------------------------------------- */

START_TEST(failures_count_up_and_reset)
{
    jfx f;
    jfx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030, &m, NULL), ODBOX_OK);
    jt_counter k = {.fail_first = 2};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(60000), .execute = jt_count_job, .user = &k};
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .clock = odbox_manual_clock_clock(m)};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);

    /* run 1 fails at T: next T + 60 s */
    jt_row_state s = {&f, 1, JAN_2030 + MIN_US};
    ck_assert(jt_wait_for(jt_row_settled, &s));
    odbox_job_info in = jt_must_row(&f, f.job);
    ck_assert_int_eq(in.last_failure_us, JAN_2030);
    ck_assert_int_eq(in.last_success_us, 0);
    /* not due before its time */
    odbox_manual_clock_advance(m, MIN_US - 1);
    jt_sleep_ms(300);
    ck_assert_int_eq(jt_load(&k.calls), 1);
    /* run 2 fails at T + 60 s */
    odbox_manual_clock_advance(m, 1);
    s = (jt_row_state){&f, 2, JAN_2030 + 2 * MIN_US};
    ck_assert(jt_wait_for(jt_row_settled, &s));
    in = jt_must_row(&f, f.job);
    ck_assert_int_eq(in.last_failure_us, JAN_2030 + MIN_US);
    /* run 3 succeeds at T + 120 s: failures back to 0, last failure kept */
    odbox_manual_clock_advance(m, MIN_US);
    s = (jt_row_state){&f, 0, JAN_2030 + 3 * MIN_US};
    ck_assert(jt_wait_for(jt_row_settled, &s));
    in = jt_must_row(&f, f.job);
    ck_assert_int_eq(in.last_success_us, JAN_2030 + 2 * MIN_US);
    ck_assert_int_eq(in.last_failure_us, JAN_2030 + MIN_US);
    ck_assert_int_eq(jt_load(&k.calls), 3);
    odbox_jobs_free(&j);
    odbox_manual_clock_free(&m);
    jfx_close(&f);
}
END_TEST

/* Starts job with schedule s, expects its row at want, stops. */
static void restart_with(jfx *f, const odbox_jobs_config *cfg, odbox_job *job, odbox_schedule s, int64_t want)
{
    job->schedule = s;
    odbox_jobs *j = jt_open_jobs(f->r, cfg, job);
    jt_start(j);
    ck_assert_int_eq(jt_must_row(f, f->job).next_execution_us, want);
    odbox_jobs_free(&j);
}

START_TEST(cron_times_on_a_manual_clock)
{
    jfx f;
    jfx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030 + 7 * MIN_US, &m, NULL), ODBOX_OK);
    jt_counter k = {0};
    odbox_schedule quarter, hourly;
    ck_assert_int_eq(odbox_schedule_cron("*/15 * * * *", &quarter, NULL), ODBOX_OK);
    ck_assert_int_eq(odbox_schedule_cron("0 * * * *", &hourly, NULL), ODBOX_OK);
    odbox_job job = {.name = f.job, .schedule = quarter, .execute = jt_count_job, .user = &k};
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .clock = odbox_manual_clock_clock(m)};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    ck_assert_int_eq(jt_must_row(&f, f.job).next_execution_us, JAN_2030 + 15 * MIN_US);
    jt_sleep_ms(300);
    ck_assert_int_eq(jt_load(&k.calls), 0);
    /* at 00:15 it runs; next is 00:30 */
    odbox_manual_clock_set(m, JAN_2030 + 15 * MIN_US);
    jt_row_state s = {&f, 0, JAN_2030 + 30 * MIN_US};
    ck_assert(jt_wait_for(jt_row_settled, &s));
    ck_assert_int_eq(jt_load(&k.calls), 1);
    ck_assert_int_eq(jt_must_row(&f, f.job).last_success_us, JAN_2030 + 15 * MIN_US);
    /* a run that ends off the minute: the next match after it */
    odbox_manual_clock_set(m, JAN_2030 + 30 * MIN_US - 1);
    jt_sleep_ms(300);
    ck_assert_int_eq(jt_load(&k.calls), 1);
    odbox_manual_clock_set(m, JAN_2030 + 44 * MIN_US + 59999999);
    s = (jt_row_state){&f, 0, JAN_2030 + 45 * MIN_US};
    ck_assert(jt_wait_for(jt_row_settled, &s));
    ck_assert_int_eq(jt_load(&k.calls), 2);
    odbox_jobs_free(&j);

    /* started again at 00:44:30 with an hourly schedule: the row due at
     * 00:45 is further than 10 s away and off by more than 1 s from the
     * new schedule's 01:00, so it moves (db-scheduler's rule) */
    odbox_manual_clock_set(m, JAN_2030 + 44 * MIN_US + 30000000);
    restart_with(&f, &cfg, &job, hourly, JAN_2030 + 60 * MIN_US);
    /* within 10 s of its time it is left alone */
    odbox_manual_clock_set(m, JAN_2030 + 59 * MIN_US + 55000000);
    restart_with(&f, &cfg, &job, quarter, JAN_2030 + 60 * MIN_US);
    ck_assert_int_eq(jt_load(&k.calls), 2);
    odbox_manual_clock_free(&m);
    jfx_close(&f);
}
END_TEST

/* ---- a run whose row is taken over; heartbeat health; wake-ups ---------------------------------- */

typedef struct watcher {
    atomic_int phase;      /* 1: running */
    atomic_int woken;      /* ODBOX_JOB_WAIT_WOKEN seen */
    atomic_int stop_seen;  /* ODBOX_JOB_WAIT_STOP seen */
    double fraction[4];
    atomic_int nfractions;
    atomic_int go;         /* the test asks for a fraction (then wakes the job) */
} watcher;

/* Waits in rounds; on each wake records fraction_dead; returns on STOP. */
static int watch_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)err;
    watcher *w = user;
    atomic_store(&w->phase, 1);
    for (;;) {
        int r = odbox_job_context_wait(ctx, 60000);
        if (r == ODBOX_JOB_WAIT_STOP) {
            w->fraction[3] = odbox_job_context_fraction_dead(ctx);
            atomic_store(&w->stop_seen, 1);
            return ODBOX_OK;
        }
        if (r == ODBOX_JOB_WAIT_WOKEN) {
            int i = atomic_load(&w->nfractions);
            if (i < 3)
                w->fraction[i] = odbox_job_context_fraction_dead(ctx);
            atomic_store(&w->nfractions, i + 1);
            atomic_fetch_add(&w->woken, 1);
        }
    }
}

static int is_running(void *arg) { return atomic_load(&((watcher *)arg)->phase) == 1; }
static int stop_seen(void *arg) { return atomic_load(&((watcher *)arg)->stop_seen); }

typedef struct nwoken {
    watcher *w;
    int n;
} nwoken;

static int woken_n(void *arg)
{
    nwoken *x = arg;
    return atomic_load(&x->w->nfractions) >= x->n;
}

START_TEST(fraction_dead_and_wake)
{
    jfx f;
    jfx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030, &m, NULL), ODBOX_OK);
    watcher w = {0};
    /* heartbeats every 60 s of real time (none during the test); the dead
     * window is 60 s x 5 = 300 s of the manual clock */
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .heartbeat_interval_ms = 60000, .missed_heartbeats_limit = 5,
                             .clock = odbox_manual_clock_clock(m)};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(1000), .execute = watch_job, .user = &w};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    ck_assert(jt_wait_for(is_running, &w));
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    nwoken x = {&w, 1};
    ck_assert(jt_wait_for(woken_n, &x));
    odbox_manual_clock_advance(m, 150 * INT64_C(1000000));
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    x.n = 2;
    ck_assert(jt_wait_for(woken_n, &x));
    odbox_manual_clock_advance(m, 300 * INT64_C(1000000));
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    x.n = 3;
    ck_assert(jt_wait_for(woken_n, &x));
    ck_assert(w.fraction[0] == 0.0);
    ck_assert_msg(w.fraction[1] == 0.5, "%f", w.fraction[1]);
    ck_assert_msg(w.fraction[2] == 1.5, "%f", w.fraction[2]);
    ck_assert_int_eq(jt_load(&w.stop_seen), 0);
    /* stop: the wait says STOP, the run returns and is recorded */
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_stop(j, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(jt_load(&w.stop_seen), 1);
    odbox_job_info in = jt_must_row(&f, f.job);
    ck_assert(!in.picked);
    ck_assert_int_eq(in.last_success_us, JAN_2030 + 450 * INT64_C(1000000));
    ck_assert_int_eq(in.next_execution_us, JAN_2030 + 451 * INT64_C(1000000));
    odbox_jobs_free(&j);
    odbox_manual_clock_free(&m);
    jfx_close(&f);
}
END_TEST

START_TEST(row_taken_over_while_running)
{
    jfx f;
    jfx_open(&f);
    watcher w = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .heartbeat_interval_ms = 100, .missed_heartbeats_limit = 50};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(1000), .execute = watch_job, .user = &w};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    ck_assert(jt_wait_for(is_running, &w));
    int64_t beat0 = jt_must_row(&f, f.job).last_heartbeat_us;
    jt_sleep_ms(400);
    ck_assert_int_gt(jt_must_row(&f, f.job).last_heartbeat_us, beat0);
    /* as if another process had revived and claimed the row */
    itest_exec(f.c, "UPDATE scheduled_tasks SET version = version + 100, picked_by = 'other' WHERE task_name = '%s'",
               f.job);
    ck_assert_msg(jt_wait_for(stop_seen, &w), "the run never learnt that its row was taken over");
    ck_assert_msg(w.fraction[3] >= 1.0, "%f", w.fraction[3]);
    ck_assert_int_eq(jt_load(&w.woken), 0);
    odbox_jobs_free(&j);
    /* its outcome was dropped: the other holder's row is untouched */
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "picked = TRUE AND picked_by = 'other' AND last_success IS NULL",
                                 f.job),
                     1);
    jfx_close(&f);
}
END_TEST

/* ---- graceful shutdown ---------------------------------------------------------------------- */

static atomic_int g_coop_running, g_stub_running, g_stub_release, g_stub_returned;

static int coop_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)user, (void)err;
    atomic_store(&g_coop_running, 1);
    while (odbox_job_context_wait(ctx, 60000) != ODBOX_JOB_WAIT_STOP)
        ;
    jt_sleep_ms(200); /* a little tidying up, well within the bound */
    return ODBOX_OK;
}

/* Ignores the shutdown until the test releases it. */
static int stubborn_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)ctx, (void)user, (void)err;
    atomic_store(&g_stub_running, 1);
    int64_t until = jt_mono_ms() + 30000;
    while (!atomic_load(&g_stub_release) && jt_mono_ms() < until)
        jt_sleep_ms(10);
    atomic_store(&g_stub_returned, 1);
    return ODBOX_OK;
}

static int flag_set(void *arg) { return atomic_load((atomic_int *)arg); }

#define SHUTDOWN_MS 1500

START_TEST(shutdown_waits_up_to_its_bound)
{
    jfx f;
    jfx_open(&f);
    char coop[80], stub[80];
    snprintf(coop, sizeof coop, "%s_coop", f.job);
    snprintf(stub, sizeof stub, "%s_stub", f.job);
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .heartbeat_interval_ms = 100, .shutdown_max_wait_ms = SHUTDOWN_MS};
    odbox_job a = {.name = coop, .schedule = odbox_schedule_fixed_delay(3600000), .execute = coop_job};
    odbox_job b = {.name = stub, .schedule = odbox_schedule_fixed_delay(3600000), .execute = stubborn_job};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &a);
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_add(j, &b, &e), ODBOX_OK);
    jt_start(j);
    ck_assert(jt_wait_for(flag_set, &g_coop_running));
    ck_assert(jt_wait_for(flag_set, &g_stub_running));
    int64_t t0 = jt_mono_ms();
    int rc = odbox_jobs_stop(j, &e);
    int64_t took = jt_mono_ms() - t0;
    ck_assert_int_eq(rc, ODBOX_ETIMEDOUT);
    ck_assert_msg(strstr(e.message, stub) && !strstr(e.message, coop), "%s", e.message);
    ck_assert_int_ge(took, SHUTDOWN_MS);
    ck_assert_int_lt(took, SHUTDOWN_MS + JT_BOUND_MS);
    ck_assert_int_eq(jt_load(&g_stub_returned), 0);
    /* the cooperative job returned within the bound and was recorded */
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "picked = FALSE AND last_success IS NOT NULL",
                                 coop),
                     1);
    ck_assert_int_eq(odbox_jobs_stop(j, &e), ODBOX_OK); /* once reported, not waited on again */
    /* free the job registry and the database registry (its pools) while
     * the stubborn callback still runs: when it returns, its thread must
     * touch neither (ASan and valgrind would tell) */
    odbox_jobs_free(&j);
    odbox_registry_free(&f.r);
    atomic_store(&g_stub_release, 1);
    ck_assert(jt_wait_for(flag_set, &g_stub_returned));
    jt_sleep_ms(200);
    /* its outcome is dropped: the row stays held until it is dead */
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "picked = TRUE AND last_success IS NULL",
                                 stub),
                     1);
    jfx_close(&f);
}
END_TEST

/* A very long bound ("wait as long as it takes": INT_MAX ms) is still a
 * bound to wait for: the callback that finishes in a second is waited
 * for and recorded, not abandoned at once. */
static atomic_int g_slow_running, g_slow_returned;

static int slow_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)user, (void)err;
    atomic_store(&g_slow_running, 1);
    while (odbox_job_context_wait(ctx, 60000) != ODBOX_JOB_WAIT_STOP)
        ;
    jt_sleep_ms(1000); /* finishing its work */
    atomic_store(&g_slow_returned, 1);
    return ODBOX_OK;
}

START_TEST(shutdown_with_the_longest_bound_waits)
{
    jfx f;
    jfx_open(&f);
    odbox_jobs_config cfg = {.poll_interval_ms = 20,
                             .heartbeat_interval_ms = 100,
                             .shutdown_max_wait_ms = INT_MAX};
    odbox_job a = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = slow_job};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &a);
    jt_start(j);
    ck_assert(jt_wait_for(flag_set, &g_slow_running));
    odbox_error e = {0};
    int rc = odbox_jobs_stop(j, &e);
    ck_assert_msg(rc == ODBOX_OK, "%d %s", rc, e.message);
    ck_assert_int_eq(jt_load(&g_slow_returned), 1);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "picked = FALSE AND last_success IS NOT NULL",
                                 f.job),
                     1);
    odbox_jobs_free(&j);
    jfx_close(&f);
}
END_TEST

/* A stop before start (a shutdown path that ran first) ends the
 * registry: a start after it is refused, not "started" with threads
 * that exit at once and a job that never runs. */
START_TEST(start_after_stop_is_refused)
{
    jfx f;
    jfx_open(&f);
    jt_counter k = {0};
    odbox_job job = {
        .name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job, .user = &k};
    odbox_jobs *j = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_open(f.r, &(odbox_jobs_config){.poll_interval_ms = 20}, &j, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_add(j, &job, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_stop(j, &e), ODBOX_OK);
    int rc = odbox_jobs_start(j, &e);
    jt_sleep_ms(300);
    ck_assert_msg(rc == ODBOX_ESTATE, "start after stop: %d, and the job ran %d time(s)", rc, jt_load(&k.calls));
    ck_assert_msg(strstr(e.message, "stopped"), "%s", e.message);
    odbox_jobs_free(&j);
    jfx_close(&f);
}
END_TEST

/* ---- operations: unknown names, list, wake, run now while running --------------------------------- */

START_TEST(operations_and_wake)
{
    jfx f;
    jfx_open(&f);
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_pause(f.pool, f.job, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "no job named") && strstr(e.message, f.job), "%s", e.message);
    ck_assert_int_eq(odbox_jobs_resume(f.pool, f.job, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_jobs_run_now(f.pool, f.job, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM odbox_job_state WHERE task_name = '%s'", f.job), 0);

    /* polls once a minute: only wake-ups make it poll during the test */
    jt_counter k = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 60000, .heartbeat_interval_ms = 100, .picked_by = "ops"};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job, .user = &k};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    jt_awaited aw = {&k, 1};
    ck_assert(jt_wait_for(jt_returned_n, &aw)); /* the first poll comes at start */
    jt_row_state settled = {&f, 0, 0};
    ck_assert(jt_wait_for(jt_row_settled, &settled));

    ck_assert_int_eq(odbox_jobs_run_now(f.pool, f.job, &e), ODBOX_OK);
    jt_sleep_ms(300);
    ck_assert_int_eq(jt_load(&k.calls), 1); /* due, but nobody polled */
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    aw.n = 2;
    ck_assert(jt_wait_for(jt_returned_n, &aw));

    /* run now while it runs: once more right after it finishes */
    ck_assert(jt_wait_for(jt_row_settled, &settled));
    atomic_store(&k.block, 1);
    ck_assert_int_eq(odbox_jobs_run_now(f.pool, f.job, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    aw.n = 3;
    ck_assert(jt_wait_for(jt_called_n, &aw));
    odbox_job_info in = jt_must_row(&f, f.job);
    ck_assert(in.picked);
    ck_assert_int_gt(in.last_heartbeat_us, 0);
    odbox_job_info *list = NULL;
    size_t n = 0;
    ck_assert_int_eq(odbox_jobs_list(f.pool, &list, &n, &e), ODBOX_OK);
    int seen = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i].name, f.job))
            seen = list[i].picked_by && !strcmp(list[i].picked_by, "ops");
    odbox_job_infos_free(&list, n);
    ck_assert(seen);
    ck_assert_int_eq(odbox_jobs_run_now(f.pool, f.job, &e), ODBOX_OK);
    atomic_store(&k.block, 0);
    aw.n = 4;
    ck_assert_msg(jt_wait_for(jt_returned_n, &aw), "run-now during a run did not run it again");
    ck_assert(jt_wait_for(jt_row_settled, &settled));
    jt_sleep_ms(300);
    ck_assert_int_eq(jt_load(&k.calls), 4);
    ck_assert_int_eq(itest_count(f.c, "SELECT run_requests FROM odbox_job_state WHERE task_name = '%s'", f.job), 3);
    odbox_jobs_free(&j);
    jfx_close(&f);
}
END_TEST

/* A heartbeat's age is measured in the database's time: listed by a
 * process whose clock is an hour fast, a heartbeat the database wrote a
 * moment ago is seconds old (before, `odbox jobs list` subtracted it
 * from its own clock: an hour). A row without one has age 0. */
START_TEST(heartbeat_age_in_the_database_time)
{
    jfx f;
    jfx_open(&f);
    const char *now = odbox_conn_dialect(f.c)->now_sql;
    itest_exec(f.c,
               "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, picked_by, "
               "last_heartbeat, version) VALUES ('%s', 'recurring', %s, TRUE, 'ops', %s, 1)",
               f.job, now, now);
    itest_exec(f.c,
               "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version) "
               "VALUES ('%s_idle', 'recurring', %s, FALSE, 1)",
               f.job, now);
    odbox_job_info in, idle;
    odbox_clock_skew_set(3600 * INT64_C(1000000));
    char idle_name[80];
    snprintf(idle_name, sizeof idle_name, "%s_idle", f.job);
    int found = jt_row(f.pool, f.job, &in), found_idle = jt_row(f.pool, idle_name, &idle);
    int64_t age = in.heartbeat_age_us;
    odbox_clock_skew_set(0);
    ck_assert(found && found_idle);
    ck_assert_int_gt(in.last_heartbeat_us, 0);
    ck_assert_msg(age >= 0 && age < 60 * INT64_C(1000000), "a heartbeat of a moment ago is %lld s old",
                  (long long)(age / 1000000));
    ck_assert_int_eq(idle.last_heartbeat_us, 0);
    ck_assert_int_eq(idle.heartbeat_age_us, 0);
    jfx_close(&f);
}
END_TEST

/* ---- the CLI ------------------------------------------------------------------------------------- */

static char g_cli_out[16384];

/* Runs odbox with args (NULL-terminated); its exit code; output (stdout
 * and stderr) in g_cli_out. */
static int cli(const char *const *args)
{
    char out[64];
    snprintf(out, sizeof out, "/tmp/odbox-jobs-cli-%ld.out", (long)getpid());
    int rc = jt_reap(jt_spawn("odbox", args, out), 0);
    FILE *fp = fopen(out, "r");
    size_t len = fp ? fread(g_cli_out, 1, sizeof g_cli_out - 1, fp) : 0;
    g_cli_out[len] = '\0';
    if (fp)
        fclose(fp);
    unlink(out);
    return rc;
}

static void cli_ok(const char *verb, const char *name)
{
    const char *args[] = {"jobs", verb, name, "--dsn", itest_dsn(1), NULL};
    ck_assert_msg(cli(args) == 0, "odbox jobs %s: %s", verb, g_cli_out);
}

START_TEST(cli_pause_resume_run_now)
{
    jfx f;
    jfx_open(&f);
    jt_counter k = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = 100};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job, .user = &k};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    jt_awaited aw = {&k, 1};
    ck_assert(jt_wait_for(jt_returned_n, &aw));
    jt_row_state settled = {&f, 0, 0};
    ck_assert(jt_wait_for(jt_row_settled, &settled));

    /* paused: run-now makes it due, but it is not claimed */
    cli_ok("pause", f.job);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "paused"));
    cli_ok("run", f.job);
    jt_sleep_ms(500); /* ten polls */
    ck_assert_int_eq(jt_load(&k.calls), 1);
    const char *list_json[] = {"jobs", "--json", "--dsn", itest_dsn(1), NULL};
    ck_assert_msg(cli(list_json) == 0, "%s", g_cli_out);
    char *at = strstr(g_cli_out, f.job);
    ck_assert_msg(at, "%s", g_cli_out);
    char *next = strstr(at, "\"paused\": ");
    ck_assert_ptr_nonnull(next);
    ck_assert_msg(!strncmp(next, "\"paused\": true", 14), "%s", at);
    const char *list_text[] = {"jobs", "--dsn", itest_dsn(1), NULL};
    ck_assert_msg(cli(list_text) == 0, "%s", g_cli_out);
    ck_assert_ptr_nonnull(strstr(g_cli_out, f.job));

    /* resumed: the pending run-now runs */
    cli_ok("resume", f.job);
    aw.n = 2;
    ck_assert(jt_wait_for(jt_returned_n, &aw));
    ck_assert(jt_wait_for(jt_row_settled, &settled));
    cli_ok("run", f.job);
    aw.n = 3;
    ck_assert(jt_wait_for(jt_returned_n, &aw));
    ck_assert(jt_wait_for(jt_row_settled, &settled));

    /* run-now while it runs: once more right after */
    atomic_store(&k.block, 1);
    cli_ok("run", f.job);
    aw.n = 4;
    ck_assert(jt_wait_for(jt_called_n, &aw));
    cli_ok("run", f.job);
    atomic_store(&k.block, 0);
    aw.n = 5;
    ck_assert(jt_wait_for(jt_returned_n, &aw));
    ck_assert(jt_wait_for(jt_row_settled, &settled));
    jt_sleep_ms(300);
    ck_assert_int_eq(jt_load(&k.calls), 5);

    /* an unknown name: a clear error and exit 1, nothing written */
    const char *unknown[] = {"jobs", "pause", "no_such_job_here", "--dsn", itest_dsn(1), NULL};
    ck_assert_int_eq(cli(unknown), 1);
    ck_assert_msg(strstr(g_cli_out, "no job named 'no_such_job_here'"), "%s", g_cli_out);
    const char *unknown_json[] = {"jobs", "run", "no_such_job_here", "--json", "--dsn", itest_dsn(1), NULL};
    ck_assert_int_eq(cli(unknown_json), 1);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "\"error\": \"ODBOX_ENOTFOUND\""));
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM odbox_job_state WHERE task_name = 'no_such_job_here'"), 0);
    odbox_jobs_free(&j);
    jfx_close(&f);
}
END_TEST

Suite *jobs_suite(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("jobs");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, start_inserts_rows_or_refuses);
    tcase_add_test(tc, failures_count_up_and_reset);
    tcase_add_test(tc, cron_times_on_a_manual_clock);
    tcase_add_test(tc, fraction_dead_and_wake);
    tcase_add_test(tc, row_taken_over_while_running);
    tcase_add_test(tc, shutdown_waits_up_to_its_bound);
    tcase_add_test(tc, shutdown_with_the_longest_bound_waits);
    tcase_add_test(tc, start_after_stop_is_refused);
    tcase_add_test(tc, operations_and_wake);
    tcase_add_test(tc, heartbeat_age_in_the_database_time);
    tcase_add_test(tc, cli_pause_resume_run_now);
    suite_add_tcase(s, tc);
    return s;
}
