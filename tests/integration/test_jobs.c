/* odbox — integration tests of distributed jobs against a real server:
 * rows inserted at start (and refusal without the tables), exclusivity
 * between three registries in one process and three processes, takeover
 * of a killed process's run after the dead window and not before,
 * heartbeats and a run whose row was taken over, failures counted and
 * reset, fixed-delay and cron times on a manual clock, the bounded
 * shutdown, wake-ups, and pause / resume / run-now from the CLI. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../jobs/runs.h"
#include "itest.h"

#define JAN_2030 INT64_C(1893456000000000) /* 2030-01-01 00:00:00 UTC */
#define MIN_US INT64_C(60000000)
#define BOUND_MS 15000 /* how long a test waits for something that takes ~100 ms */

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

/* An atomic's value, as a plain int for ck_assert's messages. */
static int load(atomic_int *a) { return atomic_load(a); }

/* Polls cond(arg) every 10 ms for up to BOUND_MS; 1 when it came true. */
static int wait_for(int (*cond)(void *), void *arg)
{
    int64_t until = mono_ms() + BOUND_MS;
    while (!cond(arg)) {
        if (mono_ms() > until)
            return 0;
        sleep_ms(10);
    }
    return 1;
}

/* ---- fixture ------------------------------------------------------------------ */

typedef struct fx {
    odbox_registry *r;
    odbox_pool *pool;
    odbox_conn *c;
    char job[64];
    char runs[64];
    char ev[64]; /* a private eventlog: MySQL and MariaDB share "eventlog" server-wide */
} fx;

static void fx_open(fx *f)
{
    memset(f, 0, sizeof *f);
    odbox_error e = {0};
    itest_name(f->ev, sizeof f->ev, "ev_jobs");
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = f->ev};
    odbox_registry_config rc = {.shards = &sc, .nshards = 1};
    ck_assert_msg(odbox_registry_open(&rc, &f->r, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_migrate_registry(f->r, NULL, &e) == ODBOX_OK, "migrate: %s", e.message);
    f->pool = odbox_shard_primary(odbox_registry_default_shard(f->r));
    f->c = itest_connect(1);
    itest_name(f->job, sizeof f->job, "job");
    itest_name(f->runs, sizeof f->runs, "job_runs");
    ck_assert_int_eq(runs_create(f->c, f->runs, &e), ODBOX_OK);
}

static void fx_close(fx *f)
{
    itest_exec(f->c, "DELETE FROM scheduled_tasks WHERE task_name LIKE '%s%%'", f->job);
    itest_exec(f->c, "DELETE FROM odbox_job_state WHERE task_name LIKE '%s%%'", f->job);
    itest_exec(f->c, "DROP TABLE %s", f->runs);
    itest_drop_eventlog(f->c, f->ev);
    odbox_conn_close(&f->c);
    odbox_registry_free(&f->r);
}

/* The row of job `name` as odbox_jobs_list shows it; 0 when there is none. */
static int job_row(odbox_pool *pool, const char *name, odbox_job_info *out)
{
    odbox_job_info *list = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_list(pool, &list, &n, &e) == ODBOX_OK, "%s", e.message);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(list[i].name, name) && !strcmp(list[i].instance, "recurring")) {
            *out = list[i];
            out->name = out->instance = NULL;
            out->picked_by = NULL;
            found = 1;
        }
    }
    odbox_job_infos_free(&list, n);
    return found;
}

static odbox_job_info must_row(fx *f, const char *name)
{
    odbox_job_info in;
    ck_assert_msg(job_row(f->pool, name, &in), "no row for %s", name);
    return in;
}

static odbox_jobs *open_jobs(odbox_registry *r, const odbox_jobs_config *cfg, const odbox_job *job)
{
    odbox_jobs *j = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_open(r, cfg, &j, &e) == ODBOX_OK, "%s", e.message);
    if (job)
        ck_assert_msg(odbox_jobs_add(j, job, &e) == ODBOX_OK, "%s", e.message);
    return j;
}

static void start_jobs(odbox_jobs *j)
{
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_start(j, &e) == ODBOX_OK, "%s", e.message);
}

/* ---- a counting job ----------------------------------------------------------------- */

typedef struct counter {
    atomic_int calls;      /* callbacks entered */
    atomic_int returned;   /* callbacks returned */
    atomic_int fail_first; /* the first this many calls fail */
    atomic_int block;      /* while set, a call waits (wait()) until it is cleared */
    atomic_int running;
} counter;

static int count_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    counter *k = user;
    int n = atomic_fetch_add(&k->calls, 1) + 1;
    atomic_store(&k->running, 1);
    while (atomic_load(&k->block))
        odbox_job_context_wait(ctx, 5);
    atomic_store(&k->running, 0);
    atomic_fetch_add(&k->returned, 1);
    if (n <= atomic_load(&k->fail_first)) {
        snprintf(err->message, sizeof err->message, "call %d fails on purpose", n);
        return ODBOX_EDB;
    }
    return ODBOX_OK;
}

typedef struct awaited {
    counter *k;
    int n;
} awaited;

static int returned_n(void *arg)
{
    awaited *a = arg;
    return atomic_load(&a->k->returned) >= a->n;
}

static int called_n(void *arg)
{
    awaited *a = arg;
    return atomic_load(&a->k->calls) >= a->n;
}

/* The row is free again with n failures (the run was recorded). */
typedef struct row_state {
    fx *f;
    int failures;
    int64_t next_us;
} row_state;

static int row_settled(void *arg)
{
    row_state *s = arg;
    odbox_job_info in;
    return job_row(s->f->pool, s->f->job, &in) && !in.picked && in.consecutive_failures == s->failures &&
           (!s->next_us || in.next_execution_us == s->next_us);
}

/* ---- start ------------------------------------------------------------------------- */

START_TEST(start_inserts_rows_or_refuses)
{
    fx f;
    fx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030 + 7 * MIN_US + 123456, &m, NULL), ODBOX_OK);
    counter k = {0};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = count_job, .user = &k};
    char cron_name[80];
    snprintf(cron_name, sizeof cron_name, "%s_cron", f.job);
    odbox_schedule quarter;
    ck_assert_int_eq(odbox_schedule_cron("*/15 * * * *", &quarter, NULL), ODBOX_OK);
    odbox_job cron_job = {.name = cron_name, .schedule = quarter, .execute = count_job, .user = &k};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .clock = odbox_manual_clock_clock(m), .picked_by = "t"};

    /* without odbox_job_state (V4 not applied): refused, nothing runs */
    itest_exec(f.c, "ALTER TABLE odbox_job_state RENAME TO odbox_job_state_away");
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    odbox_error e = {0};
    int rc = odbox_jobs_start(j, &e);
    itest_exec(f.c, "ALTER TABLE odbox_job_state_away RENAME TO odbox_job_state");
    ck_assert_int_eq(rc, ODBOX_EDB);
    ck_assert_msg(strstr(e.message, "run odbox migrate") && strstr(e.message, f.job), "%s", e.message);
    sleep_ms(200);
    ck_assert_int_eq(load(&k.calls), 0);
    odbox_jobs_free(&j);

    /* with the tables: each row inserted at the schedule's first time */
    j = open_jobs(f.r, &cfg, &job);
    ck_assert_int_eq(odbox_jobs_add(j, &cron_job, &e), ODBOX_OK);
    start_jobs(j);
    awaited one = {&k, 1};
    ck_assert(wait_for(returned_n, &one));
    odbox_jobs_free(&j);
    odbox_job_info in = must_row(&f, cron_name);
    ck_assert_int_eq(in.next_execution_us, JAN_2030 + 15 * MIN_US); /* first match after 00:07:00.123456 */
    ck_assert(!in.picked);
    ck_assert_int_eq(in.last_success_us, 0);
    ck_assert_int_eq(in.consecutive_failures, 0);
    ck_assert(!in.paused);
    /* the fixed-delay job was due at once and ran once, on the clock's time */
    ck_assert_int_eq(load(&k.calls), 1);
    in = must_row(&f, f.job);
    ck_assert_int_eq(in.last_success_us, JAN_2030 + 7 * MIN_US + 123456);
    ck_assert_int_eq(in.next_execution_us, JAN_2030 + 67 * MIN_US + 123456);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "task_instance = 'recurring' AND task_data IS NULL AND version = 3",
                                 f.job),
                     1); /* inserted at 1, claimed, finished */
    odbox_manual_clock_free(&m);
    fx_close(&f);
}
END_TEST

/* ---- fixed delay, failures, cron: on a manual clock -------------------------------------- */

START_TEST(failures_count_up_and_reset)
{
    fx f;
    fx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030, &m, NULL), ODBOX_OK);
    counter k = {.fail_first = 2};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(60000), .execute = count_job, .user = &k};
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .clock = odbox_manual_clock_clock(m)};
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);

    /* run 1 fails at T: next T + 60 s */
    row_state s = {&f, 1, JAN_2030 + MIN_US};
    ck_assert(wait_for(row_settled, &s));
    odbox_job_info in = must_row(&f, f.job);
    ck_assert_int_eq(in.last_failure_us, JAN_2030);
    ck_assert_int_eq(in.last_success_us, 0);
    /* not due before its time */
    odbox_manual_clock_advance(m, MIN_US - 1);
    sleep_ms(300);
    ck_assert_int_eq(load(&k.calls), 1);
    /* run 2 fails at T + 60 s */
    odbox_manual_clock_advance(m, 1);
    s = (row_state){&f, 2, JAN_2030 + 2 * MIN_US};
    ck_assert(wait_for(row_settled, &s));
    in = must_row(&f, f.job);
    ck_assert_int_eq(in.last_failure_us, JAN_2030 + MIN_US);
    /* run 3 succeeds at T + 120 s: failures back to 0, last failure kept */
    odbox_manual_clock_advance(m, MIN_US);
    s = (row_state){&f, 0, JAN_2030 + 3 * MIN_US};
    ck_assert(wait_for(row_settled, &s));
    in = must_row(&f, f.job);
    ck_assert_int_eq(in.last_success_us, JAN_2030 + 2 * MIN_US);
    ck_assert_int_eq(in.last_failure_us, JAN_2030 + MIN_US);
    ck_assert_int_eq(load(&k.calls), 3);
    odbox_jobs_free(&j);
    odbox_manual_clock_free(&m);
    fx_close(&f);
}
END_TEST

START_TEST(cron_times_on_a_manual_clock)
{
    fx f;
    fx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030 + 7 * MIN_US, &m, NULL), ODBOX_OK);
    counter k = {0};
    odbox_schedule quarter, hourly;
    ck_assert_int_eq(odbox_schedule_cron("*/15 * * * *", &quarter, NULL), ODBOX_OK);
    ck_assert_int_eq(odbox_schedule_cron("0 * * * *", &hourly, NULL), ODBOX_OK);
    odbox_job job = {.name = f.job, .schedule = quarter, .execute = count_job, .user = &k};
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .clock = odbox_manual_clock_clock(m)};
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    ck_assert_int_eq(must_row(&f, f.job).next_execution_us, JAN_2030 + 15 * MIN_US);
    sleep_ms(300);
    ck_assert_int_eq(load(&k.calls), 0);
    /* at 00:15 it runs; next is 00:30 */
    odbox_manual_clock_set(m, JAN_2030 + 15 * MIN_US);
    row_state s = {&f, 0, JAN_2030 + 30 * MIN_US};
    ck_assert(wait_for(row_settled, &s));
    ck_assert_int_eq(load(&k.calls), 1);
    ck_assert_int_eq(must_row(&f, f.job).last_success_us, JAN_2030 + 15 * MIN_US);
    /* a run that ends off the minute: the next match after it */
    odbox_manual_clock_set(m, JAN_2030 + 30 * MIN_US - 1);
    sleep_ms(300);
    ck_assert_int_eq(load(&k.calls), 1);
    odbox_manual_clock_set(m, JAN_2030 + 44 * MIN_US + 59999999);
    s = (row_state){&f, 0, JAN_2030 + 45 * MIN_US};
    ck_assert(wait_for(row_settled, &s));
    ck_assert_int_eq(load(&k.calls), 2);
    odbox_jobs_free(&j);

    /* started again at 00:44:59 with an hourly schedule: the row due at
     * 00:45 is further than 10 s away and off by more than 1 s from the
     * new schedule's 01:00, so it moves (db-scheduler's rule) */
    odbox_manual_clock_set(m, JAN_2030 + 44 * MIN_US + 30000000);
    job.schedule = hourly;
    j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    ck_assert_int_eq(must_row(&f, f.job).next_execution_us, JAN_2030 + 60 * MIN_US);
    odbox_jobs_free(&j);
    /* within 10 s of its time it is left alone */
    odbox_manual_clock_set(m, JAN_2030 + 59 * MIN_US + 55000000);
    job.schedule = quarter;
    j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    ck_assert_int_eq(must_row(&f, f.job).next_execution_us, JAN_2030 + 60 * MIN_US);
    odbox_jobs_free(&j);
    ck_assert_int_eq(load(&k.calls), 2);
    odbox_manual_clock_free(&m);
    fx_close(&f);
}
END_TEST

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
 * an idle machine (~270 ms, ~18 runs); 5 allows ten times the idle
 * overhead per cycle. */
static void check_runs(fx *f, int64_t window_ms, int min_runners)
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
    ck_assert_int_ge(nrunners, min_runners);
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
    sleep_ms(EX_WORK_MS); /* not odbox_job_context_wait: stop would cut it short */
    return runs_record(rc->pool, rc->table, rc->name, start, odbox_job_context_now_us(ctx), err);
}

START_TEST(exclusive_in_one_process)
{
    fx f;
    fx_open(&f);
    odbox_registry *regs[3] = {0};
    odbox_jobs *jobs[3] = {0};
    recorder rec[3];
    int64_t t0 = mono_ms();
    for (int i = 0; i < 3; i++) {
        odbox_error e = {0};
        ck_assert_int_eq(odbox_registry_open_dsn(itest_dsn(1), &regs[i], &e), ODBOX_OK);
        rec[i] = (recorder){odbox_shard_primary(odbox_registry_default_shard(regs[i])), f.runs, ""};
        snprintf(rec[i].name, sizeof rec[i].name, "r%d", i + 1);
        odbox_jobs_config cfg = {.poll_interval_ms = EX_POLL_MS, .heartbeat_interval_ms = 1000, .picked_by = rec[i].name};
        odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(EX_DELAY_MS), .execute = record_job,
                         .user = &rec[i]};
        jobs[i] = open_jobs(regs[i], &cfg, &job);
    }
    for (int i = 0; i < 3; i++)
        start_jobs(jobs[i]);
    sleep_ms(EX_RUN_MS);
    for (int i = 0; i < 3; i++) {
        odbox_error e = {0};
        ck_assert_msg(odbox_jobs_stop(jobs[i], &e) == ODBOX_OK, "%s", e.message);
    }
    int64_t window = mono_ms() - t0;
    for (int i = 0; i < 3; i++) {
        odbox_jobs_free(&jobs[i]);
        odbox_registry_free(&regs[i]);
    }
    check_runs(&f, window, 1);
    fx_close(&f);
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
    fx f;
    fx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030, &m, NULL), ODBOX_OK);
    counter k = {0};
    odbox_jobs *jobs[RACERS];
    odbox_registry *regs[RACERS];
    for (int i = 0; i < RACERS; i++) {
        ck_assert_int_eq(odbox_registry_open_dsn(itest_dsn(1), &regs[i], NULL), ODBOX_OK);
        odbox_jobs_config cfg = {.poll_interval_ms = 60000, .clock = odbox_manual_clock_clock(m)};
        odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(60000), .execute = count_job,
                         .user = &k};
        jobs[i] = open_jobs(regs[i], &cfg, &job);
    }
    for (int i = 0; i < RACERS; i++)
        start_jobs(jobs[i]); /* the first polls: one of them runs it at once */
    awaited aw = {&k, 1};
    ck_assert(wait_for(returned_n, &aw));
    odbox_log_set(count_warnings, NULL, ODBOX_LOG_WARN);
    for (int round = 1; round <= ROUNDS; round++) {
        row_state settled = {&f, 0, JAN_2030 + round * MIN_US};
        ck_assert(wait_for(row_settled, &settled));
        sleep_ms(50); /* a second winner of the last round would have started by now */
        ck_assert_int_eq(load(&k.calls), round);
        odbox_manual_clock_advance(m, MIN_US);
        for (int i = 0; i < RACERS; i++)
            odbox_jobs_wake(jobs[i], f.job);
        aw.n = round + 1;
        ck_assert(wait_for(returned_n, &aw));
    }
    row_state settled = {&f, 0, JAN_2030 + (ROUNDS + 1) * MIN_US};
    ck_assert(wait_for(row_settled, &settled));
    sleep_ms(50);
    ck_assert_int_eq(load(&k.calls), ROUNDS + 1);
    odbox_log_set(NULL, NULL, ODBOX_LOG_WARN);
    ck_assert_int_eq(load(&g_warnings), 0);
    for (int i = 0; i < RACERS; i++) {
        odbox_jobs_free(&jobs[i]);
        odbox_registry_free(&regs[i]);
    }
    odbox_manual_clock_free(&m);
    fx_close(&f);
}
END_TEST

/* ---- processes ------------------------------------------------------------------------------ */

/* Starts tests/jobs/jobs-runner with args (NULL-terminated). */
static pid_t spawn_runner(const char *const *args)
{
    const char *build = getenv("ODBOX_BUILDDIR");
    ck_assert_msg(build, "ODBOX_BUILDDIR is not set (the jobs runner is found there)");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/jobs/jobs-runner", build);
    const char *argv[32] = {path};
    int n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits up to BOUND_MS + extra_ms for pid; its exit status, or -1 after
 * killing it. */
static int reap(pid_t pid, int extra_ms)
{
    int64_t until = mono_ms() + BOUND_MS + extra_ms;
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (mono_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_ms(10);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(exclusive_across_processes)
{
    fx f;
    fx_open(&f);
    char duration[16], delay[16], poll[16], work[16];
    snprintf(duration, sizeof duration, "%d", EX_RUN_MS);
    snprintf(delay, sizeof delay, "%d", EX_DELAY_MS);
    snprintf(poll, sizeof poll, "%d", EX_POLL_MS);
    snprintf(work, sizeof work, "%d", EX_WORK_MS);
    static const char *const names[3] = {"p1", "p2", "p3"};
    pid_t pids[3];
    int64_t t0 = mono_ms();
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"--dsn", itest_dsn(1), "--job", f.job, "--runner", names[i], "--table", f.runs,
                              "--delay", delay, "--poll", poll, "--work", work, "--duration", duration, NULL};
        pids[i] = spawn_runner(args);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(reap(pids[i], EX_RUN_MS), 0);
    check_runs(&f, mono_ms() - t0, 1);
    fx_close(&f);
}
END_TEST

/* ---- takeover -------------------------------------------------------------------------------- */

typedef struct runs_of {
    fx *f;
    const char *runner;
} runs_of;

static int has_run(void *arg)
{
    runs_of *r = arg;
    return itest_count(r->f->c, "SELECT COUNT(*) FROM %s WHERE runner = '%s'", r->f->runs, r->runner) > 0;
}

#define TK_HEARTBEAT_MS 200
#define TK_LIMIT 5 /* dead window: 1 s */

START_TEST(takeover_after_kill_9)
{
    fx f;
    fx_open(&f);
    char hb[16], limit[16];
    snprintf(hb, sizeof hb, "%d", TK_HEARTBEAT_MS);
    snprintf(limit, sizeof limit, "%d", TK_LIMIT);
    const char *args[] = {"--dsn", itest_dsn(1), "--job", f.job, "--runner", "holder", "--table", f.runs,
                          "--mode", "hold", "--poll", "50", "--heartbeat", hb, "--limit", limit,
                          "--duration", "60000", NULL};
    pid_t holder = spawn_runner(args);
    runs_of held = {&f, "holder"};
    ck_assert_msg(wait_for(has_run, &held), "the holder process never ran the job");
    odbox_job_info in = must_row(&f, f.job);
    ck_assert(in.picked);

    /* a second registry polls while the holder heartbeats, for 2.5 dead
     * windows: it must not take over */
    recorder rec = {f.pool, f.runs, "taker"};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = TK_HEARTBEAT_MS,
                             .missed_heartbeats_limit = TK_LIMIT, .picked_by = "taker"};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = record_job,
                     .user = &rec};
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    int64_t beat0 = must_row(&f, f.job).last_heartbeat_us;
    sleep_ms(TK_HEARTBEAT_MS * TK_LIMIT * 5 / 2);
    runs_of taken = {&f, "taker"};
    ck_assert_msg(!has_run(&taken), "taken over while the holder heartbeated");
    in = must_row(&f, f.job);
    ck_assert(in.picked);
    ck_assert_int_gt(in.last_heartbeat_us, beat0); /* the holder's heartbeats arrive */

    ck_assert_int_eq(kill(holder, SIGKILL), 0);
    int st;
    waitpid(holder, &st, 0);
    int64_t last_beat = must_row(&f, f.job).last_heartbeat_us;
    ck_assert_msg(wait_for(has_run, &taken), "never taken over after kill -9");
    int64_t started = itest_count(f.c, "SELECT MIN(started) FROM %s WHERE runner = 'taker'", f.runs);
    /* after the dead window, counted from the holder's last heartbeat */
    ck_assert_int_ge(started, last_beat + (int64_t)TK_HEARTBEAT_MS * TK_LIMIT * 1000);
    odbox_jobs_free(&j);
    /* the dead run counted as a failure, the taker's run as a success */
    in = must_row(&f, f.job);
    ck_assert(!in.picked);
    ck_assert_int_gt(in.last_failure_us, last_beat);
    ck_assert_int_ge(in.last_success_us, started);
    ck_assert_int_eq(in.consecutive_failures, 0);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM %s WHERE runner = 'holder' AND ended IS NULL", f.runs), 1);
    fx_close(&f);
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
    fx f;
    fx_open(&f);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(JAN_2030, &m, NULL), ODBOX_OK);
    watcher w = {0};
    /* heartbeats every 60 s of real time (none during the test); the dead
     * window is 60 s x 5 = 300 s of the manual clock */
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .heartbeat_interval_ms = 60000, .missed_heartbeats_limit = 5,
                             .clock = odbox_manual_clock_clock(m)};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(1000), .execute = watch_job, .user = &w};
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    ck_assert(wait_for(is_running, &w));
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    nwoken x = {&w, 1};
    ck_assert(wait_for(woken_n, &x));
    odbox_manual_clock_advance(m, 150 * INT64_C(1000000));
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    x.n = 2;
    ck_assert(wait_for(woken_n, &x));
    odbox_manual_clock_advance(m, 300 * INT64_C(1000000));
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    x.n = 3;
    ck_assert(wait_for(woken_n, &x));
    ck_assert(w.fraction[0] == 0.0);
    ck_assert_msg(w.fraction[1] == 0.5, "%f", w.fraction[1]);
    ck_assert_msg(w.fraction[2] == 1.5, "%f", w.fraction[2]);
    ck_assert_int_eq(load(&w.stop_seen), 0);
    /* stop: the wait says STOP, the run returns and is recorded */
    odbox_error e = {0};
    ck_assert_msg(odbox_jobs_stop(j, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(load(&w.stop_seen), 1);
    odbox_job_info in = must_row(&f, f.job);
    ck_assert(!in.picked);
    ck_assert_int_eq(in.last_success_us, JAN_2030 + 450 * INT64_C(1000000));
    ck_assert_int_eq(in.next_execution_us, JAN_2030 + 451 * INT64_C(1000000));
    odbox_jobs_free(&j);
    odbox_manual_clock_free(&m);
    fx_close(&f);
}
END_TEST

START_TEST(row_taken_over_while_running)
{
    fx f;
    fx_open(&f);
    watcher w = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .heartbeat_interval_ms = 100, .missed_heartbeats_limit = 50};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(1000), .execute = watch_job, .user = &w};
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    ck_assert(wait_for(is_running, &w));
    int64_t beat0 = must_row(&f, f.job).last_heartbeat_us;
    sleep_ms(400);
    ck_assert_int_gt(must_row(&f, f.job).last_heartbeat_us, beat0);
    /* as if another process had revived and claimed the row */
    itest_exec(f.c, "UPDATE scheduled_tasks SET version = version + 100, picked_by = 'other' WHERE task_name = '%s'",
               f.job);
    ck_assert_msg(wait_for(stop_seen, &w), "the run never learnt that its row was taken over");
    ck_assert_msg(w.fraction[3] >= 1.0, "%f", w.fraction[3]);
    ck_assert_int_eq(load(&w.woken), 0);
    odbox_jobs_free(&j);
    /* its outcome was dropped: the other holder's row is untouched */
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "picked = TRUE AND picked_by = 'other' AND last_success IS NULL",
                                 f.job),
                     1);
    fx_close(&f);
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
    sleep_ms(200); /* a little tidying up, well within the bound */
    return ODBOX_OK;
}

/* Ignores the shutdown until the test releases it. */
static int stubborn_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)ctx, (void)user, (void)err;
    atomic_store(&g_stub_running, 1);
    int64_t until = mono_ms() + 30000;
    while (!atomic_load(&g_stub_release) && mono_ms() < until)
        sleep_ms(10);
    atomic_store(&g_stub_returned, 1);
    return ODBOX_OK;
}

static int flag_set(void *arg) { return atomic_load((atomic_int *)arg); }

#define SHUTDOWN_MS 1500

START_TEST(shutdown_waits_up_to_its_bound)
{
    fx f;
    fx_open(&f);
    char coop[80], stub[80];
    snprintf(coop, sizeof coop, "%s_coop", f.job);
    snprintf(stub, sizeof stub, "%s_stub", f.job);
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .heartbeat_interval_ms = 100, .shutdown_max_wait_ms = SHUTDOWN_MS};
    odbox_job a = {.name = coop, .schedule = odbox_schedule_fixed_delay(3600000), .execute = coop_job};
    odbox_job b = {.name = stub, .schedule = odbox_schedule_fixed_delay(3600000), .execute = stubborn_job};
    odbox_jobs *j = open_jobs(f.r, &cfg, &a);
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_add(j, &b, &e), ODBOX_OK);
    start_jobs(j);
    ck_assert(wait_for(flag_set, &g_coop_running));
    ck_assert(wait_for(flag_set, &g_stub_running));
    int64_t t0 = mono_ms();
    int rc = odbox_jobs_stop(j, &e);
    int64_t took = mono_ms() - t0;
    ck_assert_int_eq(rc, ODBOX_ETIMEDOUT);
    ck_assert_msg(strstr(e.message, stub) && !strstr(e.message, coop), "%s", e.message);
    ck_assert_int_ge(took, SHUTDOWN_MS);
    ck_assert_int_lt(took, SHUTDOWN_MS + BOUND_MS);
    ck_assert_int_eq(load(&g_stub_returned), 0);
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
    ck_assert(wait_for(flag_set, &g_stub_returned));
    sleep_ms(200);
    /* its outcome is dropped: the row stays held until it is dead */
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = '%s' AND "
                                      "picked = TRUE AND last_success IS NULL",
                                 stub),
                     1);
    fx_close(&f);
}
END_TEST

/* ---- operations: unknown names, list, wake, run now while running --------------------------------- */

START_TEST(operations_and_wake)
{
    fx f;
    fx_open(&f);
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_pause(f.pool, f.job, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "no job named") && strstr(e.message, f.job), "%s", e.message);
    ck_assert_int_eq(odbox_jobs_resume(f.pool, f.job, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_jobs_run_now(f.pool, f.job, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM odbox_job_state WHERE task_name = '%s'", f.job), 0);

    /* polls once a minute: only wake-ups make it poll during the test */
    counter k = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 60000, .heartbeat_interval_ms = 100, .picked_by = "ops"};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = count_job, .user = &k};
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    awaited aw = {&k, 1};
    ck_assert(wait_for(returned_n, &aw)); /* the first poll comes at start */
    row_state settled = {&f, 0, 0};
    ck_assert(wait_for(row_settled, &settled));

    ck_assert_int_eq(odbox_jobs_run_now(f.pool, f.job, &e), ODBOX_OK);
    sleep_ms(300);
    ck_assert_int_eq(load(&k.calls), 1); /* due, but nobody polled */
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    aw.n = 2;
    ck_assert(wait_for(returned_n, &aw));

    /* run now while it runs: once more right after it finishes */
    ck_assert(wait_for(row_settled, &settled));
    atomic_store(&k.block, 1);
    ck_assert_int_eq(odbox_jobs_run_now(f.pool, f.job, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_wake(j, f.job), ODBOX_OK);
    aw.n = 3;
    ck_assert(wait_for(called_n, &aw));
    odbox_job_info in = must_row(&f, f.job);
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
    ck_assert_msg(wait_for(returned_n, &aw), "run-now during a run did not run it again");
    ck_assert(wait_for(row_settled, &settled));
    sleep_ms(300);
    ck_assert_int_eq(load(&k.calls), 4);
    ck_assert_int_eq(itest_count(f.c, "SELECT run_requests FROM odbox_job_state WHERE task_name = '%s'", f.job), 3);
    odbox_jobs_free(&j);
    fx_close(&f);
}
END_TEST

/* ---- the CLI ------------------------------------------------------------------------------------- */

static char g_cli_out[16384];

/* Runs odbox with args (NULL-terminated); its exit code; output (stdout
 * and stderr) in g_cli_out. */
static int cli(const char *const *args)
{
    const char *build = getenv("ODBOX_BUILDDIR");
    ck_assert_msg(build, "ODBOX_BUILDDIR is not set (the odbox CLI is found there)");
    char path[1024], out[64];
    snprintf(path, sizeof path, "%s/odbox", build);
    snprintf(out, sizeof out, "/tmp/odbox-jobs-cli-%ld.out", (long)getpid());
    const char *argv[32] = {path};
    int n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    int rc = reap(pid, 0);
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
    fx f;
    fx_open(&f);
    counter k = {0};
    odbox_jobs_config cfg = {.poll_interval_ms = 50, .heartbeat_interval_ms = 100};
    odbox_job job = {.name = f.job, .schedule = odbox_schedule_fixed_delay(3600000), .execute = count_job, .user = &k};
    odbox_jobs *j = open_jobs(f.r, &cfg, &job);
    start_jobs(j);
    awaited aw = {&k, 1};
    ck_assert(wait_for(returned_n, &aw));
    row_state settled = {&f, 0, 0};
    ck_assert(wait_for(row_settled, &settled));

    /* paused: run-now makes it due, but it is not claimed */
    cli_ok("pause", f.job);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "paused"));
    cli_ok("run", f.job);
    sleep_ms(500); /* ten polls */
    ck_assert_int_eq(load(&k.calls), 1);
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
    ck_assert(wait_for(returned_n, &aw));
    ck_assert(wait_for(row_settled, &settled));
    cli_ok("run", f.job);
    aw.n = 3;
    ck_assert(wait_for(returned_n, &aw));
    ck_assert(wait_for(row_settled, &settled));

    /* run-now while it runs: once more right after */
    atomic_store(&k.block, 1);
    cli_ok("run", f.job);
    aw.n = 4;
    ck_assert(wait_for(called_n, &aw));
    cli_ok("run", f.job);
    atomic_store(&k.block, 0);
    aw.n = 5;
    ck_assert(wait_for(returned_n, &aw));
    ck_assert(wait_for(row_settled, &settled));
    sleep_ms(300);
    ck_assert_int_eq(load(&k.calls), 5);

    /* an unknown name: a clear error and exit 1, nothing written */
    const char *unknown[] = {"jobs", "pause", "no_such_job_here", "--dsn", itest_dsn(1), NULL};
    ck_assert_int_eq(cli(unknown), 1);
    ck_assert_msg(strstr(g_cli_out, "no job named 'no_such_job_here'"), "%s", g_cli_out);
    const char *unknown_json[] = {"jobs", "run", "no_such_job_here", "--json", "--dsn", itest_dsn(1), NULL};
    ck_assert_int_eq(cli(unknown_json), 1);
    ck_assert_ptr_nonnull(strstr(g_cli_out, "\"error\": \"ODBOX_ENOTFOUND\""));
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM odbox_job_state WHERE task_name = 'no_such_job_here'"), 0);
    odbox_jobs_free(&j);
    fx_close(&f);
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
    tcase_add_test(tc, exclusive_in_one_process);
    tcase_add_test(tc, exclusive_across_processes);
    tcase_add_test(tc, claim_race_has_one_winner);
    tcase_add_test(tc, takeover_after_kill_9);
    tcase_add_test(tc, fraction_dead_and_wake);
    tcase_add_test(tc, row_taken_over_while_running);
    tcase_add_test(tc, shutdown_waits_up_to_its_bound);
    tcase_add_test(tc, operations_and_wake);
    tcase_add_test(tc, cli_pause_resume_run_now);
    suite_add_tcase(s, tc);
    return s;
}
