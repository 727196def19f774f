/* odbox — integration tests of jobs under the faults a review and a real
 * db-scheduler found: a poller whose clock is an hour off (neither takes
 * over a live run nor misses a dead one: the database's time decides),
 * fair turns at an always-due job across processes, a row deleted by
 * another scheduler (inserted again), db-scheduler's dead window on the
 * rows db-scheduler writes, heartbeats while the application holds every
 * pooled connection, a heartbeats' session ended while idle, and a stop
 * while another session locks the row. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "internal.h"
#include "jobs_run.h"
#include "jobs_fx.h"
#include "netfault.h"

#define HOUR_US (3600 * INT64_C(1000000))

/* Sets a timestamp column of the job's row (bound, so every dialect). */
static void set_row_time(jfx *f, const char *col, int64_t us)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE scheduled_tasks SET %s = ? WHERE task_name = ?", col);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_prepare(f->c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 1, us, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 2, f->job, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);
}

typedef struct recorder {
    odbox_pool *pool;
    const char *table;
    const char *name;
} recorder;

static int record_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    recorder *rc = user;
    int64_t start = odbox_job_context_now_us(ctx);
    return runs_record(rc->pool, rc->table, rc->name, start, odbox_job_context_now_us(ctx), err);
}

/* ---- item 1: a clock an hour off ------------------------------------------------------------------ */

#define SK_HEARTBEAT_MS 200
#define SK_LIMIT 5 /* dead window: 1 s */

/* A holder process (right clock) runs the job and heartbeats; a
 * registry of this process, whose clock is skew_us off, polls. */
static void skewed_poller(int64_t skew_us)
{
    jfx f;
    jfx_open(&f);
    pid_t holder = jt_spawn_holder(&f, SK_HEARTBEAT_MS, SK_LIMIT);
    jt_runs_of taken = {&f, "taker"};

    odbox_clock_skew_set(skew_us);
    recorder rec = {f.pool, f.runs, "taker"};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = SK_HEARTBEAT_MS,
                             .missed_heartbeats_limit = SK_LIMIT, .picked_by = "taker"};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = record_job,
                     .user = &rec};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    /* three dead windows of a live holder: no takeover */
    jt_sleep_ms(SK_HEARTBEAT_MS * SK_LIMIT * 3);
    int taken_live = jt_has_run(&taken);
    odbox_job_info in = jt_must_row(&f, f.job);

    ck_assert_int_eq(kill(holder, SIGKILL), 0);
    int st;
    waitpid(holder, &st, 0);
    int64_t killed = jt_mono_ms();
    int64_t last_beat = jt_must_row(&f, f.job).last_heartbeat_us;
    int took = jt_wait_for(jt_has_run, &taken);
    int64_t took_ms = jt_mono_ms() - killed;
    odbox_jobs_free(&j);
    odbox_clock_skew_set(0);
    ck_assert_msg(!taken_live, "a poller %+lld s off took over a live run", (long long)(skew_us / 1000000));
    ck_assert(in.picked);
    ck_assert_msg(took, "a poller %+lld s off never took over the dead run", (long long)(skew_us / 1000000));
    /* in time: the dead window and a few polls (generous for a loaded machine) */
    ck_assert_msg(took_ms < SK_HEARTBEAT_MS * SK_LIMIT + 5000, "taken over %lld ms after kill -9", (long long)took_ms);
    /* and not before the window, in the database's time */
    in = jt_must_row(&f, f.job);
    ck_assert_int_ge(in.last_failure_us, last_beat + (int64_t)SK_HEARTBEAT_MS * SK_LIMIT * 1000);
    jfx_close(&f);
}

START_TEST(a_clock_an_hour_ahead_takes_over_no_live_run)
{
    skewed_poller(HOUR_US);
}
END_TEST

START_TEST(a_clock_an_hour_behind_takes_over_a_dead_run)
{
    skewed_poller(-HOUR_US);
}
END_TEST

/* ---- item 2: turns at an always-due job ----------------------------------------------------------- */

#define FT_RUN_MS 4000

/* Three processes at a job due 1 ms after each run (as the delivery's
 * jobs are): each gets runs, none gets nearly all. */
START_TEST(an_always_due_job_takes_turns_across_processes)
{
    jfx f;
    jfx_open(&f);
    char duration[16];
    snprintf(duration, sizeof duration, "%d", FT_RUN_MS);
    static const char *const names[3] = {"p1", "p2", "p3"};
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"--dsn", itest_dsn(1), "--job", f.job, "--runner", names[i], "--table", f.runs,
                              "--delay", "1", "--poll", "50", "--work", "100", "--duration", duration, NULL};
        pids[i] = jt_spawn("tests/jobs/jobs-runner", args, NULL);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(jt_reap(pids[i], FT_RUN_MS), 0);
    int64_t n[3], all = 0;
    for (int i = 0; i < 3; i++)
        all += n[i] = jt_runs_by(&f, names[i]);
    printf("turns (%s): p1 %lld, p2 %lld, p3 %lld runs\n", itest_dialect(), (long long)n[0], (long long)n[1],
           (long long)n[2]);
    ck_assert_int_ge(all, 6);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(n[i] >= 2, "%s had %lld of %lld runs", names[i], (long long)n[i], (long long)all);
        ck_assert_msg(n[i] * 10 <= all * 7, "%s had %lld of %lld runs", names[i], (long long)n[i], (long long)all);
    }
    jfx_close(&f);
}
END_TEST

/* ---- item 3: a row deleted by someone else --------------------------------------------------------- */

START_TEST(a_deleted_row_is_inserted_again)
{
    jfx f;
    jfx_open(&f);
    jt_counter k = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 50};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(100), .execute = jt_count_job, .user = &k};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    jt_awaited a = {&k, 2};
    ck_assert(jt_wait_for(jt_returned_n, &a));
    /* what db-scheduler's deleteUnresolvedAfter does to task names it
     * does not know */
    itest_exec(f.c, "DELETE FROM scheduled_tasks WHERE task_name = '%s'", f.job);
    int before = jt_load(&k.returned);
    a.n = before + 2;
    ck_assert_msg(jt_wait_for(jt_returned_n, &a), "the job never ran again after its row was deleted");
    odbox_job_info in;
    ck_assert(jt_row(f.pool, f.job, &in));
    odbox_jobs_free(&j);
    jfx_close(&f);
}
END_TEST

/* A process that waited for a turn and then exited (stopped, killed, or
 * restarted under another host:pid) leaves its row in odbox_job_waiters;
 * an expired row is read by no one, so a claim deletes it: the table
 * holds the live waiters, not every process that ever waited. */
START_TEST(expired_waiters_are_deleted)
{
    jfx f;
    jfx_open(&f);
    itest_exec(f.c,
               "INSERT INTO odbox_job_waiters (task_name, picked_by, waiting_until) VALUES "
               "('%s', 'gone:1', '2020-01-01 00:00:00'), ('%s', 'alive:2', '2999-01-01 00:00:00')",
               f.job, f.job);
    jt_counter k = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 50};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job,
                     .user = &k};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    jt_awaited a = {&k, 1};
    ck_assert(jt_wait_for(jt_returned_n, &a));
    odbox_jobs_free(&j);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM odbox_job_waiters WHERE task_name = '%s' AND "
                                      "picked_by = 'gone:1'",
                                 f.job),
                     0);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM odbox_job_waiters WHERE task_name = '%s' AND "
                                      "picked_by = 'alive:2'",
                                 f.job),
                     1);
    jfx_close(&f);
}
END_TEST

/* ---- item 4: db-scheduler's dead window, on db-scheduler's rows ------------------------------------ */

/* A row as db-scheduler's JdbcTaskRepository leaves it while its
 * scheduler runs the task: picked by its scheduler name, heartbeats
 * every 5 minutes (its default), task_data and priority set. */
static void insert_db_scheduler_run(jfx *f, int64_t heartbeat_us)
{
    itest_exec(f->c,
               "INSERT INTO scheduled_tasks (task_name, task_instance, task_data, execution_time, picked, picked_by, "
               "consecutive_failures, version, priority) VALUES ('%s', 'recurring', NULL, '2030-01-01 00:00:00', "
               "TRUE, 'db-scheduler-host-1', 0, 7, 0)",
               f->job);
    set_row_time(f, "execution_time", heartbeat_us - 60 * INT64_C(1000000));
    set_row_time(f, "last_heartbeat", heartbeat_us);
}

START_TEST(db_schedulers_window_leaves_its_live_run_alone)
{
    jfx f;
    jfx_open(&f);
    /* last heartbeat 4 minutes ago: live for db-scheduler (5 min beats) */
    int64_t now = itest_db_now(f.c);
    insert_db_scheduler_run(&f, now - 4 * 60 * INT64_C(1000000));
    jt_counter k = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = 100, .missed_heartbeats_limit = 6,
                             .dead_after_ms = ODBOX_JOBS_DB_SCHEDULER_DEAD_AFTER_MS};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job,
                     .user = &k};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    jt_sleep_ms(1000);
    odbox_job_info in = jt_must_row(&f, f.job);
    ck_assert_int_eq(jt_load(&k.calls), 0);
    ck_assert(in.picked);
    ck_assert_int_eq(itest_count(f.c, "SELECT version FROM scheduled_tasks WHERE task_name = '%s'", f.job), 7);
    /* 31 minutes without one: dead for db-scheduler too, taken over */
    set_row_time(&f, "last_heartbeat", itest_db_now(f.c) - 31 * 60 * INT64_C(1000000));
    jt_awaited a = {&k, 1};
    ck_assert_msg(jt_wait_for(jt_called_n, &a), "a run dead by db-scheduler's rule was not taken over");
    odbox_jobs_free(&j);
    jfx_close(&f);
}
END_TEST

START_TEST(dead_window_settings_checked)
{
    odbox_jobs *j = NULL;
    odbox_error e = {0};
    jfx f;
    jfx_open(&f);
    odbox_jobs_config cfg = {.heartbeat_interval_ms = 1000, .dead_after_ms = 1500};
    ck_assert_int_eq(odbox_jobs_open(f.r, &cfg, &j, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "two heartbeat intervals"), "%s", e.message);
    cfg = (odbox_jobs_config){.dead_after_ms = -1};
    ck_assert_int_eq(odbox_jobs_open(f.r, &cfg, &j, &e), ODBOX_EINVAL);
    cfg = (odbox_jobs_config){.statement_timeout_ms = -5};
    ck_assert_int_eq(odbox_jobs_open(f.r, &cfg, &j, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(j);
    /* a limit whose window, with the default heartbeat interval, does
     * not fit in an int: refused as too large, not wrapped into a
     * negative window (or a short one) */
    cfg = (odbox_jobs_config){.missed_heartbeats_limit = 300000};
    ck_assert_int_eq(odbox_jobs_open(f.r, &cfg, &j, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "too large"), "%s", e.message);
    cfg = (odbox_jobs_config){.missed_heartbeats_limit = 500000};
    ck_assert_int_eq(odbox_jobs_open(f.r, &cfg, &j, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(j);
    jfx_close(&f);
}
END_TEST

/* ---- a session lost while the job ran ------------------------------------------------------- */

/* The job's session sits idle while a long callback runs; a proxy's
 * idle timeout, a failover or a DBA may end it meanwhile. The run that
 * succeeded must still be recorded, not left held until the dead
 * window (then counted as a failure and run again). */
typedef struct session_killer {
    odbox_conn *admin;
    atomic_int returned;
} session_killer;

static int killer_returned(void *arg) { return atomic_load(&((session_killer *)arg)->returned); }

static int kill_own_session(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)err;
    session_killer *k = user;
    /* the job thread is in this callback: its session is idle */
    itest_kill_session(k->admin, itest_session_id(ctx->job->conn));
    atomic_store(&k->returned, 1);
    return ODBOX_OK;
}

START_TEST(a_run_whose_session_was_lost_meanwhile_is_recorded)
{
    jfx f;
    jfx_open(&f);
    session_killer k = {f.c, 0};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = 10000};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = kill_own_session,
                     .user = &k};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    ck_assert(jt_wait_for(killer_returned, &k));
    jt_row_state settled = {&f, 0, 0};
    int ok = jt_wait_for(jt_row_settled, &settled);
    odbox_job_info in = jt_must_row(&f, f.job);
    odbox_jobs_free(&j);
    ck_assert_msg(ok && in.last_success_us != 0,
                  "the run's outcome was not recorded: picked %d, last success %lld (held until the dead window)",
                  in.picked, (long long)in.last_success_us);
    jfx_close(&f);
}
END_TEST

/* ---- item 5: heartbeats while the pool is exhausted ------------------------------------------------ */

typedef struct waiter_job {
    atomic_int running;
} waiter_job;

static int wait_for_stop(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)err;
    waiter_job *w = user;
    atomic_store(&w->running, 1);
    while (odbox_job_context_wait(ctx, 60000) != ODBOX_JOB_WAIT_STOP)
        ;
    atomic_store(&w->running, 0);
    return ODBOX_OK;
}

static int job_running(void *arg) { return atomic_load(&((waiter_job *)arg)->running); }

START_TEST(heartbeats_go_on_while_the_application_holds_every_connection)
{
    jfx f;
    jfx_open(&f);
    odbox_pool *small = NULL;
    odbox_error e = {0};
    odbox_pool_config pc = {.size = 2, .acquire_timeout_ms = 60000};
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &pc, &small, &e), ODBOX_OK);
    waiter_job w = {0};
    odbox_jobs_config cfg = {.pool = small, .poll_interval_ms = 50, .heartbeat_interval_ms = 100,
                             .missed_heartbeats_limit = 5, .picked_by = "holder"};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = wait_for_stop,
                     .user = &w};
    odbox_jobs *j = jt_open_jobs(NULL, &cfg, &job);
    jt_start(j);
    ck_assert(jt_wait_for(job_running, &w));
    /* the application takes every connection of the pool, for 4 dead
     * windows */
    odbox_conn *held[2] = {0};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(odbox_pool_acquire(small, &held[i], &e), ODBOX_OK);
    int64_t beat0 = jt_must_row(&f, f.job).last_heartbeat_us;
    jt_counter k = {0};
    odbox_jobs_config tc = {.poll_interval_ms = 50, .heartbeat_interval_ms = 100, .missed_heartbeats_limit = 5,
                            .picked_by = "taker"};
    odbox_job tj = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = jt_count_job,
                    .user = &k};
    odbox_jobs *taker = jt_open_jobs(f.r, &tc, &tj);
    jt_start(taker);
    jt_sleep_ms(2000);
    odbox_job_info in = jt_must_row(&f, f.job);
    int taker_calls = jt_load(&k.calls);
    odbox_jobs_free(&taker);
    for (int i = 0; i < 2; i++)
        odbox_pool_release(small, &held[i]);
    ck_assert_msg(taker_calls == 0, "taken over while the holder's pool was exhausted");
    ck_assert_int_gt(in.last_heartbeat_us, beat0);
    ck_assert(in.picked);
    ck_assert_msg(odbox_jobs_stop(j, &e) == ODBOX_OK, "%s", e.message);
    odbox_jobs_free(&j);
    odbox_pool_free(&small);
    jfx_close(&f);
}
END_TEST

/* A load balancer or server whose idle timeout is shorter than the
 * heartbeat interval ends the heartbeats' session between two beats: the
 * next beat must open another at once, not an interval later, or every
 * other beat is lost and a dead window of two beats sees the run dead. */
#define LB_HEARTBEAT_MS 1000

START_TEST(a_heartbeat_session_ended_while_idle_is_replaced_at_once)
{
    jfx f;
    jfx_open(&f);
    netfault *proxy = netfault_proxy_to(itest_dsn(1));
    char *dsn = netfault_dsn(itest_dsn(1), netfault_port(proxy), NULL);
    odbox_pool *via = NULL;
    odbox_error e = {0};
    odbox_pool_config pc = {.size = 2};
    ck_assert_int_eq(odbox_pool_open(dsn, &pc, &via, &e), ODBOX_OK);
    waiter_job w = {0};
    odbox_jobs_config cfg = {.pool = via, .poll_interval_ms = 50, .heartbeat_interval_ms = LB_HEARTBEAT_MS,
                             .missed_heartbeats_limit = 5, .picked_by = "holder"};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = wait_for_stop,
                     .user = &w};
    odbox_jobs *j = jt_open_jobs(NULL, &cfg, &job);
    int heartbeats_session = netfault_accepted(proxy); /* the start opens it first */
    jt_start(j);
    ck_assert(jt_wait_for(job_running, &w));
    /* right after a beat lands, its session is ended */
    int64_t beat0 = jt_must_row(&f, f.job).last_heartbeat_us, beat1 = beat0;
    for (int i = 0; i < 300 && beat1 == beat0; i++) {
        jt_sleep_ms(10);
        beat1 = jt_must_row(&f, f.job).last_heartbeat_us;
    }
    ck_assert_msg(beat1 != beat0, "no heartbeat in 3 s");
    netfault_close(proxy, heartbeats_session);
    jt_sleep_ms(LB_HEARTBEAT_MS * 3 / 2);
    int64_t beat2 = jt_must_row(&f, f.job).last_heartbeat_us;
    ck_assert_msg(odbox_jobs_stop(j, &e) == ODBOX_OK, "%s", e.message);
    odbox_jobs_free(&j);
    odbox_pool_free(&via);
    netfault_free(&proxy);
    free(dsn);
    ck_assert_msg(beat2 > beat1, "the beat after the session's end was lost: no heartbeat for %d ms",
                  LB_HEARTBEAT_MS * 3 / 2);
    jfx_close(&f);
}
END_TEST

/* ---- item 6: a stop while another session locks the row ------------------------------------------- */

typedef struct stopper {
    odbox_jobs *j;
    atomic_int done;
    int rc;
} stopper;

static void *stop_main(void *arg)
{
    stopper *s = arg;
    odbox_error e = {0};
    s->rc = odbox_jobs_stop(s->j, &e);
    atomic_store(&s->done, 1);
    return NULL;
}

#define LS_STATEMENT_MS 1000
#define LS_SHUTDOWN_MS 500

START_TEST(a_stop_is_bounded_while_another_session_locks_the_row)
{
    jfx f;
    jfx_open(&f);
    waiter_job w = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = 100,
                             .shutdown_max_wait_ms = LS_SHUTDOWN_MS, .statement_timeout_ms = LS_STATEMENT_MS};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = wait_for_stop,
                     .user = &w};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    ck_assert(jt_wait_for(job_running, &w));
    /* another session holds the row (SQLite: the file) in a transaction */
    odbox_conn *locker = itest_connect(1);
    odbox_error e = {0};
    ck_assert_msg(odbox_conn_begin(locker, &e) == ODBOX_OK, "%s", e.message);
    itest_exec(locker, "UPDATE scheduled_tasks SET priority = 3 WHERE task_name = '%s'", f.job);
    stopper s = {j, 0, 0};
    pthread_t t;
    int64_t t0 = jt_mono_ms();
    ck_assert_int_eq(pthread_create(&t, NULL, stop_main, &s), 0);
    /* shutdown wait + three statement bounds + slack */
    int64_t bound = LS_SHUTDOWN_MS + 3 * LS_STATEMENT_MS + 3000;
    while (!atomic_load(&s.done) && jt_mono_ms() - t0 < bound + 10000)
        jt_sleep_ms(20);
    int64_t took = jt_mono_ms() - t0;
    odbox_conn_rollback(locker, &e);
    pthread_join(t, NULL);
    odbox_conn_close(&locker);
    odbox_jobs_free(&j);
    ck_assert_msg(took <= bound, "stop took %lld ms with the row locked (bound %lld)", (long long)took,
                  (long long)bound);
    jfx_close(&f);
}
END_TEST

Suite *jobs_faults_suite(void)
{
    Suite *s = suite_create("jobs_faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, a_clock_an_hour_ahead_takes_over_no_live_run);
    tcase_add_test(tc, a_clock_an_hour_behind_takes_over_a_dead_run);
    tcase_add_test(tc, an_always_due_job_takes_turns_across_processes);
    tcase_add_test(tc, a_deleted_row_is_inserted_again);
    tcase_add_test(tc, expired_waiters_are_deleted);
    tcase_add_test(tc, db_schedulers_window_leaves_its_live_run_alone);
    tcase_add_test(tc, dead_window_settings_checked);
    tcase_add_test(tc, heartbeats_go_on_while_the_application_holds_every_connection);
    tcase_add_test(tc, a_stop_is_bounded_while_another_session_locks_the_row);
    tcase_add_test(tc, a_run_whose_session_was_lost_meanwhile_is_recorded);
    tcase_add_test(tc, a_heartbeat_session_ended_while_idle_is_replaced_at_once);
    suite_add_tcase(s, tc);
    return s;
}
