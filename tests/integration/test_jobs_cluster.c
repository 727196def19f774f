/* odbox — integration tests of jobs run by several registries at once:
 * exclusivity between three registries in one process and between three
 * processes (tests/jobs/jobs-runner), eight registries racing for one
 * claim, and the takeover of a kill -9'd process's run after the dead
 * window and not before. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "jobs_fx.h"

/* ---- exclusivity --------------------------------------------------------------------------- */

#define EX_DELAY_MS 200
#define EX_POLL_MS 50
#define EX_WORK_MS 20
#define EX_RUN_MS 5000

/* Reads the recorded runs in start order and checks them. Exclusivity
 * with a fixed delay D means: a run is claimed only when the row is due,
 * at or after (end of the previous run + D) by the registries' common
 * clock, and a run's recorded start and end lie inside its claim and its
 * finish. So for consecutive runs start[i+1] >= end[i] + D: no overlap,
 * exactly, and a gap of at least D. Over a window of T in which the
 * registries ran, n runs of at least R = EX_WORK_MS each take
 * n R + (n - 1) D <= T, so n <= (T + D) / (R + D): 23 for T = 5 s, where
 * three registries running freely would make about 60. The lower bound
 * only shows the job kept running: a cycle takes D + R + a poll of P on
 * an idle machine (~230-270 ms, ~20 runs); 5 allows more than ten times
 * the idle overhead per cycle. Which runner wins is not checked. */
static void check_runs(jfx *f, int64_t window_ms)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT runner, started, ended FROM %s ORDER BY started", f->runs);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_stmt_prepare(f->c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    int n = 0, rc;
    int64_t prev_end = 0;
    char runners[8][64];
    int nrunners = 0;
    while ((rc = odbox_stmt_fetch(s, &e)) == 1) {
        const char *runner;
        int64_t started, ended;
        int null_end;
        ck_assert_int_eq(odbox_stmt_get_text(s, 1, &runner, NULL, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_get_int64(s, 2, &started, NULL, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_get_int64(s, 3, &ended, &null_end, &e), ODBOX_OK);
        ck_assert(!null_end);
        ck_assert_int_ge(ended - started, EX_WORK_MS * 1000);
        if (n)
            ck_assert_msg(started >= prev_end + EX_DELAY_MS * 1000,
                          "run %d by %s started %lld us after the previous run ended (overlap or gap < %d ms)", n,
                          runner, (long long)(started - prev_end), EX_DELAY_MS);
        prev_end = ended;
        int known = 0;
        for (int i = 0; i < nrunners; i++)
            known |= !strcmp(runners[i], runner);
        if (!known && nrunners < 8)
            snprintf(runners[nrunners++], sizeof runners[0], "%s", runner);
        n++;
    }
    ck_assert_int_eq(rc, 0);
    odbox_stmt_free(&s);
    int64_t max = (window_ms + EX_DELAY_MS) / (EX_WORK_MS + EX_DELAY_MS);
    ck_assert_msg(n >= 5 && n <= max, "%d runs in %lld ms, want 5..%lld", n, (long long)window_ms, (long long)max);
    fprintf(stderr, "jobs exclusivity (%s): %d runs in %lld ms by %d runner(s), bound %lld\n", itest_dialect(), n,
            (long long)window_ms, nrunners, (long long)max);
}

typedef struct recorder {
    odbox_pool *pool;
    const char *table;
    char name[16];
} recorder;

static int record_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    recorder *rc = user;
    int64_t start = odbox_job_context_now_us(ctx);
    jt_sleep_ms(EX_WORK_MS); /* not odbox_job_context_wait: stop would cut it short */
    return runs_record(rc->pool, rc->table, rc->name, start, odbox_job_context_now_us(ctx), err);
}

START_TEST(exclusive_in_one_process)
{
    jfx f;
    jfx_open(&f);
    odbox_registry *regs[3] = {0};
    odbox_jobs *jobs[3] = {0};
    recorder rec[3];
    int64_t t0 = jt_mono_ms();
    for (int i = 0; i < 3; i++) {
        odbox_error e = {0};
        ck_assert_int_eq(odbox_registry_open_dsn(itest_dsn(1), &regs[i], &e), ODBOX_OK);
        rec[i] = (recorder){odbox_shard_primary(odbox_registry_default_shard(regs[i])), f.runs, ""};
        snprintf(rec[i].name, sizeof rec[i].name, "r%d", i + 1);
        odbox_jobs_config cfg = {.poll_interval_ms = EX_POLL_MS, .heartbeat_interval_ms = 1000, .picked_by = rec[i].name};
        odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(EX_DELAY_MS), .execute = record_job,
                         .user = &rec[i]};
        jobs[i] = jt_open_jobs(regs[i], &cfg, &job);
    }
    for (int i = 0; i < 3; i++)
        jt_start(jobs[i]);
    jt_sleep_ms(EX_RUN_MS);
    for (int i = 0; i < 3; i++) {
        odbox_error e = {0};
        ck_assert_msg(odbox_jobs_stop(jobs[i], &e) == ODBOX_OK, "%s", e.message);
    }
    int64_t window = jt_mono_ms() - t0;
    for (int i = 0; i < 3; i++) {
        odbox_jobs_free(&jobs[i]);
        odbox_registry_free(&regs[i]);
    }
    check_runs(&f, window);
    jfx_close(&f);
}
END_TEST

/* Eight registries polled at the same instant (wake-ups right after the
 * manual clock makes the row due) all read it free and race to claim it:
 * exactly one run per round, and losing the race logs no warning. */
#define RACERS 8
#define ROUNDS 10

static atomic_int g_warnings;

static void count_warnings(void *ud, odbox_log_level level, const char *message)
{
    (void)ud;
    if (level >= ODBOX_LOG_WARN) {
        atomic_fetch_add(&g_warnings, 1);
        fprintf(stderr, "log: %s\n", message);
    }
}

START_TEST(claim_race_has_one_winner)
{
    jfx f;
    jfx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030, &m, NULL), ODBOX_OK);
    jt_counter k = {0};
    odbox_jobs *jobs[RACERS];
    odbox_registry *regs[RACERS];
    for (int i = 0; i < RACERS; i++) {
        ck_assert_int_eq(odbox_registry_open_dsn(itest_dsn(1), &regs[i], NULL), ODBOX_OK);
        odbox_jobs_config cfg = {.poll_interval_ms = 60000, .clock = odbox_manual_clock_clock(m)};
        odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(60000), .execute = jt_count_job,
                         .user = &k};
        jobs[i] = jt_open_jobs(regs[i], &cfg, &job);
    }
    for (int i = 0; i < RACERS; i++)
        jt_start(jobs[i]); /* the first polls: one of them runs it at once */
    jt_awaited aw = {&k, 1};
    ck_assert(jt_wait_for(jt_returned_n, &aw));
    odbox_log_set(count_warnings, NULL, ODBOX_LOG_WARN);
    for (int round = 1; round <= ROUNDS; round++) {
        jt_row_state settled = {&f, 0, JAN_2030 + round * MIN_US};
        ck_assert(jt_wait_for(jt_row_settled, &settled));
        jt_sleep_ms(50); /* a second winner of the last round would have started by now */
        ck_assert_int_eq(jt_load(&k.calls), round);
        odbox_manual_clock_advance(m, MIN_US);
        for (int i = 0; i < RACERS; i++)
            odbox_jobs_wake(jobs[i], f.job);
        aw.n = round + 1;
        ck_assert(jt_wait_for(jt_returned_n, &aw));
    }
    jt_row_state settled = {&f, 0, JAN_2030 + (ROUNDS + 1) * MIN_US};
    ck_assert(jt_wait_for(jt_row_settled, &settled));
    jt_sleep_ms(50);
    ck_assert_int_eq(jt_load(&k.calls), ROUNDS + 1);
    odbox_log_set(NULL, NULL, ODBOX_LOG_WARN);
    ck_assert_int_eq(jt_load(&g_warnings), 0);
    for (int i = 0; i < RACERS; i++) {
        odbox_jobs_free(&jobs[i]);
        odbox_registry_free(&regs[i]);
    }
    odbox_manual_clock_free(&m);
    jfx_close(&f);
}
END_TEST

START_TEST(exclusive_across_processes)
{
    jfx f;
    jfx_open(&f);
    char duration[16], delay[16], poll[16], work[16];
    snprintf(duration, sizeof duration, "%d", EX_RUN_MS);
    snprintf(delay, sizeof delay, "%d", EX_DELAY_MS);
    snprintf(poll, sizeof poll, "%d", EX_POLL_MS);
    snprintf(work, sizeof work, "%d", EX_WORK_MS);
    static const char *const names[3] = {"p1", "p2", "p3"};
    pid_t pids[3];
    int64_t t0 = jt_mono_ms();
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"--dsn", itest_dsn(1), "--job", f.job, "--runner", names[i], "--table", f.runs,
                              "--delay", delay, "--poll", poll, "--work", work, "--duration", duration, NULL};
        pids[i] = jt_spawn("tests/jobs/jobs-runner", args, NULL);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(jt_reap(pids[i], EX_RUN_MS), 0);
    check_runs(&f, jt_mono_ms() - t0);
    jfx_close(&f);
}
END_TEST

/* ---- takeover -------------------------------------------------------------------------------- */

#define TK_HEARTBEAT_MS 200
#define TK_LIMIT 5 /* dead window: 1 s */

START_TEST(takeover_after_kill_9)
{
    jfx f;
    jfx_open(&f);
    pid_t holder = jt_spawn_holder(&f, TK_HEARTBEAT_MS, TK_LIMIT);
    odbox_job_info in = jt_must_row(&f, f.job);
    ck_assert(in.picked);

    /* a second registry polls while the holder heartbeats, for 2.5 dead
     * windows: it must not take over */
    recorder rec = {f.pool, f.runs, "taker"};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = TK_HEARTBEAT_MS,
                             .missed_heartbeats_limit = TK_LIMIT, .picked_by = "taker"};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = record_job,
                     .user = &rec};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    int64_t beat0 = jt_must_row(&f, f.job).last_heartbeat_us;
    jt_sleep_ms(TK_HEARTBEAT_MS * TK_LIMIT * 5 / 2);
    jt_runs_of taken = {&f, "taker"};
    ck_assert_msg(!jt_has_run(&taken), "taken over while the holder heartbeated");
    in = jt_must_row(&f, f.job);
    ck_assert(in.picked);
    ck_assert_int_gt(in.last_heartbeat_us, beat0); /* the holder's heartbeats arrive */

    ck_assert_int_eq(kill(holder, SIGKILL), 0);
    int st;
    waitpid(holder, &st, 0);
    int64_t last_beat = jt_must_row(&f, f.job).last_heartbeat_us;
    ck_assert_msg(jt_wait_for(jt_has_run, &taken), "never taken over after kill -9");
    int64_t started = itest_count(f.c, "SELECT MIN(started) FROM %s WHERE runner = 'taker'", f.runs);
    /* after the dead window, counted from the holder's last heartbeat */
    ck_assert_int_ge(started, last_beat + (int64_t)TK_HEARTBEAT_MS * TK_LIMIT * 1000);
    odbox_jobs_free(&j);
    /* the dead run counted as a failure, the taker's run as a success */
    in = jt_must_row(&f, f.job);
    ck_assert(!in.picked);
    ck_assert_int_gt(in.last_failure_us, last_beat);
    ck_assert_int_ge(in.last_success_us, started);
    ck_assert_int_eq(in.consecutive_failures, 0);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM %s WHERE runner = 'holder' AND ended IS NULL", f.runs), 1);
    jfx_close(&f);
}
END_TEST

Suite *jobs_cluster_suite(void)
{
    Suite *s = suite_create("jobs_cluster");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, exclusive_in_one_process);
    tcase_add_test(tc, exclusive_across_processes);
    tcase_add_test(tc, claim_race_has_one_winner);
    tcase_add_test(tc, takeover_after_kill_9);
    suite_add_tcase(s, tc);
    return s;
}
