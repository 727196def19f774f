/* odbox — unit tests of jobs without a server: cron parsing and next
 * times, fixed delays, the clocks, and the job registry's refusals of bad
 * input (a registry opens without connecting). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "odbox/odbox.h"
#include "unit.h"

/* UTC microseconds of a date and time. */
static int64_t at(int y, int mo, int d, int h, int mi, int s)
{
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = s};
    return (int64_t)timegm(&tm) * 1000000;
}

static odbox_schedule cron(const char *expr)
{
    odbox_schedule s;
    odbox_error e = {0};
    ck_assert_msg(odbox_schedule_cron(expr, &s, &e) == ODBOX_OK, "%s: %s", expr, e.message);
    return s;
}

static int64_t next_of(const odbox_schedule *s, int64_t after)
{
    int64_t t = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_schedule_next(s, after, &t, &e) == ODBOX_OK, "%s", e.message);
    return t;
}

/* next after `after` is `want`, for the expression */
static void expect_next(const char *expr, int64_t after, int64_t want)
{
    odbox_schedule s = cron(expr);
    int64_t got = next_of(&s, after);
    ck_assert_msg(got == want, "%s after %lld: got %lld, want %lld", expr, (long long)after, (long long)got,
                  (long long)want);
}

START_TEST(cron_next_times)
{
    int64_t t0 = at(2030, 1, 1, 0, 7, 30); /* a Tuesday */
    expect_next("*/5 * * * *", t0, at(2030, 1, 1, 0, 10, 0));
    /* strictly after: a time on a match goes to the following one */
    expect_next("*/5 * * * *", at(2030, 1, 1, 0, 10, 0), at(2030, 1, 1, 0, 15, 0));
    expect_next("*/5 * * * *", at(2030, 1, 1, 0, 10, 0) + 1, at(2030, 1, 1, 0, 15, 0));
    expect_next("* * * * *", at(2030, 1, 1, 0, 10, 0) - 1, at(2030, 1, 1, 0, 10, 0));
    expect_next("0 0 * * *", at(2030, 1, 1, 0, 0, 0), at(2030, 1, 2, 0, 0, 0));
    expect_next("5/20 * * * *", t0, at(2030, 1, 1, 0, 25, 0));
    expect_next("10-30/10 * * * *", at(2030, 1, 1, 0, 30, 0), at(2030, 1, 1, 1, 10, 0));
    expect_next("1,2,58 3 * * *", t0, at(2030, 1, 1, 3, 1, 0));
    expect_next("0 12 1 JAN,jul *", t0, at(2030, 1, 1, 12, 0, 0));
    expect_next("0 12 1 JAN,jul *", at(2030, 1, 1, 12, 0, 0), at(2030, 7, 1, 12, 0, 0));
    expect_next("30 9 * * MON-FRI", at(2030, 1, 4, 10, 0, 0), at(2030, 1, 7, 9, 30, 0)); /* Fri -> Mon */
    expect_next("0 0 * * 7", t0, at(2030, 1, 6, 0, 0, 0));                               /* 7 = Sunday */
    expect_next("0 0 * * sun", t0, at(2030, 1, 6, 0, 0, 0));
    /* both day fields restricted: either matches (Vixie cron) */
    expect_next("0 0 13 * FRI", t0, at(2030, 1, 4, 0, 0, 0));
    /* day-of-month begins with '*': both must match */
    expect_next("0 0 */10 * MON", t0, at(2030, 1, 21, 0, 0, 0));
    expect_next("0 0 29 2 *", at(2030, 3, 1, 0, 0, 0), at(2032, 2, 29, 0, 0, 0));
    expect_next("0 0 31 * *", at(2030, 4, 15, 0, 0, 0), at(2030, 5, 31, 0, 0, 0));
    expect_next("59 23 31 12 *", t0, at(2030, 12, 31, 23, 59, 0));
    expect_next("59 23 31 12 *", at(2030, 12, 31, 23, 59, 0), at(2031, 12, 31, 23, 59, 0));
    expect_next("  0   6 * * *  ", t0, at(2030, 1, 1, 6, 0, 0));
    /* before 1970 */
    expect_next("* * * * *", at(1969, 12, 31, 23, 59, 30), at(1970, 1, 1, 0, 0, 0));
    /* macros */
    expect_next("@hourly", t0, at(2030, 1, 1, 1, 0, 0));
    expect_next("@daily", t0, at(2030, 1, 2, 0, 0, 0));
    expect_next("@midnight", t0, at(2030, 1, 2, 0, 0, 0));
    expect_next("@weekly", t0, at(2030, 1, 6, 0, 0, 0));
    expect_next("@monthly", t0, at(2030, 2, 1, 0, 0, 0));
    expect_next("@yearly", t0, at(2031, 1, 1, 0, 0, 0));
    expect_next("@ANNUALLY", t0, at(2031, 1, 1, 0, 0, 0));
}
END_TEST

START_TEST(cron_initial_time)
{
    odbox_schedule s = cron("*/15 * * * *");
    int64_t t = 0;
    ck_assert_int_eq(odbox_schedule_initial(&s, at(2030, 1, 1, 0, 7, 0), &t, NULL), ODBOX_OK);
    ck_assert_int_eq(t, at(2030, 1, 1, 0, 15, 0));
    odbox_schedule f = odbox_schedule_fixed_delay(200);
    ck_assert_int_eq(odbox_schedule_initial(&f, at(2030, 1, 1, 0, 7, 0) + 3, &t, NULL), ODBOX_OK);
    ck_assert_int_eq(t, at(2030, 1, 1, 0, 7, 0) + 3);
}
END_TEST

/* expr is refused, naming want in the message */
static void expect_bad(const char *expr, const char *want)
{
    odbox_schedule s = {.kind = ODBOX_SCHEDULE_FIXED_DELAY};
    odbox_error e = {0};
    ck_assert_msg(odbox_schedule_cron(expr, &s, &e) == ODBOX_EINVAL, "%s was accepted", expr ? expr : "NULL");
    ck_assert_int_eq(e.code, ODBOX_EINVAL);
    ck_assert_int_eq(s.kind, ODBOX_SCHEDULE_NONE); /* nothing half-written */
    ck_assert_msg(strstr(e.message, want), "%s: message '%s' lacks '%s'", expr ? expr : "NULL", e.message, want);
}

START_TEST(cron_bad_expressions)
{
    expect_bad(NULL, "NULL");
    expect_bad("", "expected 5 fields");
    expect_bad("* * * *", "found 4");
    expect_bad("* * * * * *", "found 6");
    expect_bad("60 * * * *", "minute field '60': 60 is out of range 0..59");
    expect_bad("* 24 * * *", "hour field '24'");
    expect_bad("* * 0 * *", "day-of-month field '0': 0 is out of range 1..31");
    expect_bad("* * 32 * *", "day-of-month field");
    expect_bad("* * * 13 *", "month field '13'");
    expect_bad("* * * 0 *", "month field '0'");
    expect_bad("* * * * 8", "day-of-week field '8'");
    expect_bad("5-1 * * * *", "range 5-1 is backwards");
    expect_bad("1-70 * * * *", "70 is out of range");
    expect_bad("*/0 * * * *", "step 0 is not in 1..60");
    expect_bad("*/61 * * * *", "step 61");
    expect_bad("a * * * *", "minute field 'a' is not a list");
    expect_bad("1,,2 * * * *", "minute field '1,,2'");
    expect_bad("1, * * * *", "minute field '1,'");
    expect_bad("1-/2 * * * *", "minute field");
    expect_bad("*/ * * * *", "minute field");
    expect_bad("* * * FOO *", "month field 'FOO'");
    expect_bad("* * * * MON-", "day-of-week field");
    expect_bad("* * * * 1-2x", "day-of-week field");
    expect_bad("0 0 30 2 *", "would never run");
    expect_bad("0 0 31 4,6,9,11 *", "would never run");
    expect_bad("@every", "unknown macro");
    expect_bad("@daily extra", "unknown macro");
    /* never on the 30th of February, but Mondays: fine */
    cron("0 0 30 2 MON");
}
END_TEST

START_TEST(fixed_delay_and_checks)
{
    odbox_schedule s = odbox_schedule_fixed_delay(200);
    ck_assert_int_eq(next_of(&s, at(2030, 1, 1, 0, 0, 0)), at(2030, 1, 1, 0, 0, 0) + 200000);
    int64_t t = 42;
    odbox_error e = {0};
    odbox_schedule zero = odbox_schedule_fixed_delay(0), neg = odbox_schedule_fixed_delay(-5), none = {0};
    ck_assert_int_eq(odbox_schedule_next(&zero, 0, &t, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "fixed delay 0 ms must be > 0"));
    ck_assert_int_eq(odbox_schedule_next(&neg, 0, &t, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_schedule_initial(&neg, 0, &t, &e), ODBOX_EINVAL);
    /* too long: the message gives the range, not "must be > 0" for a
     * positive value */
    odbox_schedule huge = odbox_schedule_fixed_delay(INT64_MAX);
    ck_assert_int_eq(odbox_schedule_next(&huge, 0, &t, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "1..") && !strstr(e.message, "must be > 0"), "%s", e.message);
    ck_assert_int_eq(odbox_schedule_next(&none, 0, &t, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "not set"));
    ck_assert_int_eq(odbox_schedule_next(NULL, 0, &t, &e), ODBOX_EINVAL);
    ck_assert_int_eq(t, 42);
    /* past the year 9999 */
    ck_assert_int_eq(odbox_schedule_next(&s, at(9999, 12, 31, 23, 59, 59) + 999999, &t, &e), ODBOX_EINVAL);
    odbox_schedule yearly = cron("0 0 1 1 *");
    ck_assert_int_eq(odbox_schedule_next(&yearly, at(9999, 6, 1, 0, 0, 0), &t, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "10000"));
    /* a hand-filled cron schedule with a bit out of range */
    odbox_schedule bad = yearly;
    bad.hours |= 1u << 24;
    ck_assert_int_eq(odbox_schedule_next(&bad, 0, &t, &e), ODBOX_EINVAL);
    ck_assert_int_eq(t, 42);
}
END_TEST

/* ---- clocks --------------------------------------------------------------- */

static void *advance_many(void *arg)
{
    for (int i = 0; i < 100000; i++)
        odbox_manual_clock_advance(arg, 1);
    return NULL;
}

START_TEST(clocks)
{
    int64_t sys = odbox_clock_now_us(odbox_clock_system());
    int64_t t = (int64_t)time(NULL) * 1000000;
    ck_assert(sys > t - 2000000 && sys < t + 2000000);
    ck_assert(odbox_clock_now_us(NULL) >= sys);

    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(at(2030, 1, 1, 0, 0, 0), &m, NULL), ODBOX_OK);
    const odbox_clock *c = odbox_manual_clock_clock(m);
    ck_assert_int_eq(odbox_clock_now_us(c), at(2030, 1, 1, 0, 0, 0));
    ck_assert_int_eq(odbox_clock_now_us(c), at(2030, 1, 1, 0, 0, 0)); /* stands still */
    odbox_manual_clock_advance(m, 1500000);
    ck_assert_int_eq(odbox_clock_now_us(c), at(2030, 1, 1, 0, 0, 1) + 500000);
    odbox_manual_clock_set(m, 7);
    ck_assert_int_eq(c->now_us(c->ud), 7);
    pthread_t a, b;
    pthread_create(&a, NULL, advance_many, m);
    pthread_create(&b, NULL, advance_many, m);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    ck_assert_int_eq(odbox_clock_now_us(c), 200007);
    odbox_manual_clock_free(&m);
    ck_assert_ptr_null(m);
    odbox_manual_clock_free(&m);
    odbox_manual_clock_free(NULL);
    ck_assert_ptr_null(odbox_manual_clock_clock(NULL));
    odbox_error e = {0};
    ck_assert_int_eq(odbox_manual_clock_new(0, NULL, &e), ODBOX_EINVAL);
}
END_TEST

/* ---- the registry's refusals ---------------------------------------------- */

static int noop(odbox_job_context *ctx, void *user, odbox_error *err)
{
    (void)ctx, (void)user, (void)err;
    return 0;
}

static odbox_registry *unreachable_registry(void)
{
    odbox_registry *r = NULL;
    ck_assert_int_eq(odbox_registry_open_dsn("postgresql://u:Sup3r-S3cret@127.0.0.1:1/db", &r, NULL), ODBOX_OK);
    return r;
}

static void expect_open_fails(odbox_registry *r, const odbox_jobs_config *cfg, const char *want)
{
    odbox_jobs *j = (odbox_jobs *)cfg; /* must be overwritten */
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_open(r, cfg, &j, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(j);
    ck_assert_msg(strstr(e.message, want), "'%s' lacks '%s'", e.message, want);
}

START_TEST(registry_bad_config)
{
    odbox_registry *r = unreachable_registry();
    expect_open_fails(NULL, NULL, "no registry and no pool");
    expect_open_fails(r, &(odbox_jobs_config){.poll_interval_ms = -1}, "poll interval (ms) -1 must be > 0");
    expect_open_fails(r, &(odbox_jobs_config){.heartbeat_interval_ms = -10}, "heartbeat interval");
    expect_open_fails(r, &(odbox_jobs_config){.missed_heartbeats_limit = -1}, "missed heartbeats limit");
    expect_open_fails(r, &(odbox_jobs_config){.shutdown_max_wait_ms = -1}, "shutdown max wait");
    expect_open_fails(r, &(odbox_jobs_config){.picked_by = ""}, "picked_by");
    char long_name[52];
    memset(long_name, 'p', 51);
    long_name[51] = '\0';
    expect_open_fails(r, &(odbox_jobs_config){.picked_by = long_name}, "must have 1..50 characters");
    long_name[50] = '\0';
    odbox_jobs *j = NULL;
    ck_assert_int_eq(odbox_jobs_open(r, &(odbox_jobs_config){.picked_by = long_name}, &j, NULL), ODBOX_OK);
    odbox_jobs_free(&j);
    ck_assert_ptr_null(j);
    ck_assert_int_eq(odbox_jobs_open(r, NULL, NULL, NULL), ODBOX_EINVAL);
    odbox_registry_free(&r);
}
END_TEST

static void expect_add_fails(odbox_jobs *j, const odbox_job *job, int code, const char *want)
{
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_add(j, job, &e), code);
    ck_assert_msg(strstr(e.message, want), "'%s' lacks '%s'", e.message, want);
}

START_TEST(registry_bad_jobs)
{
    odbox_registry *r = unreachable_registry();
    odbox_jobs *j = NULL;
    ck_assert_int_eq(odbox_jobs_open(r, NULL, &j, NULL), ODBOX_OK);
    odbox_schedule every = odbox_schedule_fixed_delay(1000);
    char name[102];
    memset(name, 'n', 101);
    name[101] = '\0';
    expect_add_fails(j, NULL, ODBOX_EINVAL, "NULL");
    expect_add_fails(j, &(odbox_job){.name = NULL, .schedule = every, .execute = noop}, ODBOX_EINVAL, "empty");
    expect_add_fails(j, &(odbox_job){.name = "", .schedule = every, .execute = noop}, ODBOX_EINVAL, "empty");
    expect_add_fails(j, &(odbox_job){.name = name, .schedule = every, .execute = noop}, ODBOX_EINVAL,
                     "longer than 100 characters");
    expect_add_fails(j, &(odbox_job){.name = "x", .schedule = every}, ODBOX_EINVAL, "no execute callback");
    expect_add_fails(j, &(odbox_job){.name = "x", .schedule = odbox_schedule_fixed_delay(0), .execute = noop},
                     ODBOX_EINVAL, "job 'x': schedule: fixed delay 0 ms must be > 0");
    expect_add_fails(j, &(odbox_job){.name = "x", .schedule = odbox_schedule_fixed_delay(-200), .execute = noop},
                     ODBOX_EINVAL, "fixed delay -200 ms");
    expect_add_fails(j, &(odbox_job){.name = "x", .execute = noop}, ODBOX_EINVAL, "not set");
    name[100] = '\0'; /* exactly 100: fine */
    ck_assert_int_eq(odbox_jobs_add(j, &(odbox_job){.name = name, .schedule = every, .execute = noop}, NULL),
                     ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_add(j, &(odbox_job){.name = "x", .schedule = cron("@hourly"), .execute = noop}, NULL),
                     ODBOX_OK);
    expect_add_fails(j, &(odbox_job){.name = "x", .schedule = every, .execute = noop}, ODBOX_EINVAL,
                     "a job named 'x' was added already");
    ck_assert_int_eq(odbox_jobs_wake(j, "x"), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_wake(j, "y"), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_jobs_wake(j, NULL), ODBOX_ENOTFOUND);
    ck_assert_int_eq(odbox_jobs_wake(NULL, "x"), ODBOX_EINVAL);

    /* the server is unreachable: start refuses, nothing runs, and the
     * registry stays refusable and freeable */
    odbox_error e = {0};
    int rc = odbox_jobs_start(j, &e);
    ck_assert_msg(rc == ODBOX_ECONNECT, "start: %s (%s)", odbox_errname(rc), e.message);
    ck_assert_ptr_null(strstr(e.message, "Sup3r-S3cret"));
    ck_assert_int_eq(odbox_jobs_start(j, &e), ODBOX_ESTATE);
    expect_add_fails(j, &(odbox_job){.name = "z", .schedule = every, .execute = noop}, ODBOX_ESTATE, "after start");
    ck_assert_int_eq(odbox_jobs_stop(j, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_jobs_stop(j, &e), ODBOX_OK);
    odbox_jobs_free(&j);
    odbox_jobs_free(&j);
    odbox_jobs_free(NULL);
    ck_assert_int_eq(odbox_jobs_start(NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_jobs_stop(NULL, &e), ODBOX_EINVAL);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(operations_bad_input)
{
    odbox_registry *r = unreachable_registry();
    odbox_pool *p = odbox_shard_primary(odbox_registry_default_shard(r));
    odbox_error e = {0};
    ck_assert_int_eq(odbox_jobs_pause(NULL, "x", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_jobs_pause(p, "", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_jobs_resume(p, NULL, &e), ODBOX_EINVAL);
    char name[102];
    memset(name, 'n', 101);
    name[101] = '\0';
    ck_assert_int_eq(odbox_jobs_run_now(p, name, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "longer than 100"));
    ck_assert_int_eq(odbox_jobs_run_now(p, "x", &e), ODBOX_ECONNECT);
    odbox_job_info *infos = (odbox_job_info *)&e;
    size_t n = 9;
    ck_assert_int_eq(odbox_jobs_list(NULL, &infos, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_jobs_list(p, &infos, &n, &e), ODBOX_ECONNECT);
    ck_assert_ptr_null(infos);
    ck_assert_uint_eq(n, 0);
    odbox_job_infos_free(&infos, 0);
    odbox_job_infos_free(NULL, 0);
    /* the context answers safely without a run */
    ck_assert_int_eq(odbox_job_context_shutting_down(NULL), 1);
    ck_assert(odbox_job_context_fraction_dead(NULL) >= 1.0);
    ck_assert_ptr_null(odbox_job_context_name(NULL));
    ck_assert_int_eq(odbox_job_context_wait(NULL, 10), ODBOX_JOB_WAIT_STOP);
    odbox_registry_free(&r);
}
END_TEST

Suite *jobs_suite(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("schedules");
    tcase_add_test(tc, cron_next_times);
    tcase_add_test(tc, cron_initial_time);
    tcase_add_test(tc, cron_bad_expressions);
    tcase_add_test(tc, fixed_delay_and_checks);
    tcase_add_test(tc, clocks);
    suite_add_tcase(s, tc);
    tc = tcase_create("registry");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, registry_bad_config);
    tcase_add_test(tc, registry_bad_jobs);
    tcase_add_test(tc, operations_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
