/* odbox — unit tests of the operations that need no server: the
 * Prometheus writer (read back by the tests' strict parser, which must
 * also refuse broken expositions), durations, the rendering of handler
 * stats, and the bad input that notifications, requeue and purge refuse
 * before they connect. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "odbox/odbox.h"
#include "prometheus.h"
#include "../prom/promparse.h"
#include "unit.h"

static char *take(odbox_prom *p)
{
    char *text = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_prom_take(p, &text, &e) == ODBOX_OK, "%s", e.message);
    return text;
}

static void assert_valid(const char *text, size_t want_samples)
{
    char msg[512];
    size_t n = 0;
    ck_assert_msg(prom_check(text, &n, msg, sizeof msg) == 0, "%s\n%s", msg, text);
    ck_assert_uint_eq(n, want_samples);
}

static void assert_invalid(const char *text, const char *why)
{
    char msg[512];
    ck_assert_msg(prom_check(text, NULL, msg, sizeof msg) != 0, "accepted: %s", text);
    ck_assert_msg(strstr(msg, why), "'%s' lacks '%s'", msg, why);
}

/* The value of a sample that must be in text. */
static double value_of(const char *text, const char *series)
{
    double v = 0;
    ck_assert_msg(prom_value(text, series, &v) == 0, "no sample %s", series);
    return v;
}

START_TEST(prometheus_writes_what_the_format_says)
{
    odbox_prom p;
    odbox_prom_init(&p);
    ck_assert_int_eq(odbox_prom_family(&p, "odbox_test_things", ODBOX_PROM_GAUGE, "Things.\nWith a \\ and a newline."),
                     0);
    ck_assert_int_eq(odbox_prom_sample(&p, (const char *const[]){"handler", "a\"b\\c\nd", NULL}, 3), 0);
    ck_assert_int_eq(odbox_prom_sample(&p, (const char *const[]){"handler", "\xff bad", NULL}, 0.1), 0);
    ck_assert_int_eq(odbox_prom_sample(&p, NULL, NAN), 0);
    ck_assert_int_eq(odbox_prom_family(&p, "odbox_test_calls_total", ODBOX_PROM_COUNTER, "Calls."), 0);
    ck_assert_int_eq(odbox_prom_sample(&p, (const char *const[]){"outcome", "ok", NULL}, 12345678901234.0), 0);
    ck_assert_int_eq(odbox_prom_family(&p, "odbox_test_duration_seconds", ODBOX_PROM_HISTOGRAM, "Durations."), 0);
    const double bounds[] = {0.005, 0.1, 1};
    const uint64_t counts[] = {2, 0, 5, 1};
    ck_assert_int_eq(odbox_prom_histogram(&p, (const char *const[]){"handler", "h", NULL}, bounds, counts, 3, 4.25), 0);
    ck_assert_int_eq(odbox_prom_family(&p, "odbox_test_lag_seconds", ODBOX_PROM_SUMMARY, "Lag."), 0);
    const double q[] = {0.5, 0.99}, v[] = {0.25, INFINITY};
    ck_assert_int_eq(odbox_prom_summary(&p, NULL, q, v, 2, 7.5, 9), 0);
    char *text = take(&p);
    const char *want =
        "# HELP odbox_test_things Things.\\nWith a \\\\ and a newline.\n"
        "# TYPE odbox_test_things gauge\n"
        "odbox_test_things{handler=\"a\\\"b\\\\c\\nd\"} 3\n"
        "odbox_test_things{handler=\"\xef\xbf\xbd bad\"} 0.1\n"
        "odbox_test_things NaN\n"
        "# HELP odbox_test_calls_total Calls.\n"
        "# TYPE odbox_test_calls_total counter\n"
        "odbox_test_calls_total{outcome=\"ok\"} 12345678901234\n"
        "# HELP odbox_test_duration_seconds Durations.\n"
        "# TYPE odbox_test_duration_seconds histogram\n"
        "odbox_test_duration_seconds_bucket{handler=\"h\",le=\"0.005\"} 2\n"
        "odbox_test_duration_seconds_bucket{handler=\"h\",le=\"0.1\"} 2\n"
        "odbox_test_duration_seconds_bucket{handler=\"h\",le=\"1\"} 7\n"
        "odbox_test_duration_seconds_bucket{handler=\"h\",le=\"+Inf\"} 8\n"
        "odbox_test_duration_seconds_sum{handler=\"h\"} 4.25\n"
        "odbox_test_duration_seconds_count{handler=\"h\"} 8\n"
        "# HELP odbox_test_lag_seconds Lag.\n"
        "# TYPE odbox_test_lag_seconds summary\n"
        "odbox_test_lag_seconds{quantile=\"0.5\"} 0.25\n"
        "odbox_test_lag_seconds{quantile=\"0.99\"} +Inf\n"
        "odbox_test_lag_seconds_sum 7.5\n"
        "odbox_test_lag_seconds_count 9\n";
    ck_assert_str_eq(text, want);
    assert_valid(text, 14);
    ck_assert(value_of(text, "odbox_test_duration_seconds_count{handler=\"h\"}") == 8);
    free(text);
    /* nothing written: an empty exposition */
    odbox_prom_init(&p);
    text = take(&p);
    ck_assert_str_eq(text, "");
    free(text);
}
END_TEST

/* Each mistake is refused, names itself, and leaves nothing half-written. */
static void refused(void (*write)(odbox_prom *), const char *why)
{
    odbox_prom p;
    odbox_prom_init(&p);
    write(&p);
    char *text = (char *)"unset";
    odbox_error e = {0};
    ck_assert_int_eq(odbox_prom_take(&p, &text, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(text);
    ck_assert_msg(strstr(e.message, why), "'%s' lacks '%s'", e.message, why);
}

static void bad_name(odbox_prom *p) { odbox_prom_family(p, "odbox-things", ODBOX_PROM_GAUGE, "x"); }
static void twice(odbox_prom *p)
{
    odbox_prom_family(p, "a", ODBOX_PROM_GAUGE, "x");
    odbox_prom_family(p, "b", ODBOX_PROM_GAUGE, "x");
    odbox_prom_family(p, "a", ODBOX_PROM_GAUGE, "x");
}
static void no_family(odbox_prom *p) { odbox_prom_sample(p, NULL, 1); }
static void bad_label(odbox_prom *p)
{
    odbox_prom_family(p, "a", ODBOX_PROM_GAUGE, "x");
    odbox_prom_sample(p, (const char *const[]){"1abc", "v", NULL}, 1);
}
static void reserved_label(odbox_prom *p)
{
    odbox_prom_family(p, "a", ODBOX_PROM_GAUGE, "x");
    odbox_prom_sample(p, (const char *const[]){"le", "v", NULL}, 1);
}
static void label_twice(odbox_prom *p)
{
    odbox_prom_family(p, "a", ODBOX_PROM_GAUGE, "x");
    odbox_prom_sample(p, (const char *const[]){"k", "v", "k", "w", NULL}, 1);
}
static void negative_counter(odbox_prom *p)
{
    odbox_prom_family(p, "a_total", ODBOX_PROM_COUNTER, "x");
    odbox_prom_sample(p, NULL, -1);
}
static void sample_in_histogram(odbox_prom *p)
{
    odbox_prom_family(p, "a", ODBOX_PROM_HISTOGRAM, "x");
    odbox_prom_sample(p, NULL, 1);
}
static void unsorted_buckets(odbox_prom *p)
{
    odbox_prom_family(p, "a", ODBOX_PROM_HISTOGRAM, "x");
    const double b[] = {1, 0.5};
    const uint64_t c[] = {1, 1, 1};
    odbox_prom_histogram(p, NULL, b, c, 2, 1);
}
static void bad_quantile(odbox_prom *p)
{
    odbox_prom_family(p, "a", ODBOX_PROM_SUMMARY, "x");
    const double q[] = {1.5}, v[] = {1};
    odbox_prom_summary(p, NULL, q, v, 1, 1, 1);
}

START_TEST(prometheus_refuses_mistakes)
{
    refused(bad_name, "not a metric name");
    refused(twice, "family a written twice");
    refused(no_family, "before any family");
    refused(bad_label, "'1abc' is not a label name");
    refused(reserved_label, "'le' is not a label name here");
    refused(label_twice, "label k given twice");
    refused(negative_counter, "cannot be negative");
    refused(sample_in_histogram, "family of another type");
    refused(unsorted_buckets, "increasing");
    refused(bad_quantile, "0..1");
}
END_TEST

/* The parser the tests rely on fails where the format says so. */
START_TEST(strict_parser_refuses_broken_text)
{
    const char *head = "# HELP a x\n# TYPE a gauge\n";
    char t[512];
    assert_invalid("a 1\n", "outside its family");
    snprintf(t, sizeof t, "%sa 1", head);
    assert_invalid(t, "newline");
    snprintf(t, sizeof t, "%sa{b=\"1\",} 1\n", head);
    assert_invalid(t, "trailing comma");
    snprintf(t, sizeof t, "%sa{b=\"\\t\"} 1\n", head);
    assert_invalid(t, "bad label");
    snprintf(t, sizeof t, "%sa one\n", head);
    assert_invalid(t, "bad value");
    snprintf(t, sizeof t, "%sa 1\na 2\n", head);
    assert_invalid(t, "written twice");
    snprintf(t, sizeof t, "%sa 1\n# HELP b x\n# TYPE b gauge\nb 1\na 2\n", head);
    assert_invalid(t, "outside its family");
    snprintf(t, sizeof t, "%sa 1\n# HELP a x\n", head);
    assert_invalid(t, "HELP twice");
    assert_invalid("# HELP a x\na 1\n", "before TYPE");
    assert_invalid("# TYPE h histogram\n# HELP h x\n"
                   "h_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                   "cumulative");
    assert_invalid("# TYPE h histogram\n# HELP h x\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n", "+Inf");
    assert_invalid("# TYPE h histogram\n# HELP h x\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "_count 3");
    assert_invalid("# TYPE s summary\n# HELP s x\ns{quantile=\"2\"} 1\ns_sum 1\ns_count 1\n", "quantile in 0..1");
    assert_invalid("# TYPE s summary\n# HELP s x\ns{quantile=\"0.5\"} 1\ns_sum 1\n", "lacks _sum or _count");
    assert_invalid("# TYPE c counter\n# HELP c x\nc -1\n", "a counter of -1");
    assert_invalid("# TYPE g gauge\ng 1\n", "HELP and TYPE are both required");
    assert_invalid("# a comment\n", "comment");
    snprintf(t, sizeof t, "%s\na 1\n", head);
    assert_invalid(t, "blank line");
    snprintf(t, sizeof t, "%sa{b=\"\xff\"} 1\n", head);
    assert_invalid(t, "not UTF-8");
}
END_TEST

START_TEST(handler_stats_render)
{
    odbox_notification_stats st[2] = {
        {.shard = {0, 0}, .handler = (char *)"audit", .pending = 1, .failed = 2, .succeeded = 3, .expired = 4,
         .backlog = 3, .due = 2, .oldest_due_age_us = 1500000, .lag_count = 3, .lag_sum_us = 600000,
         .lag_p50_us = 200000, .lag_p99_us = 300000, .lag_max_us = 300000},
        {.shard = {0, 1}, .handler = (char *)"we\"ird", .pending = 5},
    };
    char *text = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_notifications_prometheus(st, 2, &text, &e), ODBOX_OK);
    assert_valid(text, 2 * (4 + 1 + 1 + 1 + 4 + 1));
    ck_assert(value_of(text, "odbox_notifications{shard=\"0.0\",handler=\"audit\",state=\"EXPIRED\"}") == 4);
    ck_assert(value_of(text, "odbox_notifications_oldest_due_age_seconds{shard=\"0.0\",handler=\"audit\"}") == 1.5);
    ck_assert(value_of(text, "odbox_delivery_lag_seconds{shard=\"0.0\",handler=\"audit\",quantile=\"0.99\"}") == 0.3);
    ck_assert(value_of(text, "odbox_delivery_lag_seconds_count{shard=\"0.0\",handler=\"audit\"}") == 3);
    /* no success in the window: quantiles and the max are NaN, not 0 */
    ck_assert(isnan(value_of(text, "odbox_delivery_lag_max_seconds{shard=\"0.1\",handler=\"we\\\"ird\"}")));
    free(text);
    /* no handler at all: the families and no sample */
    ck_assert_int_eq(odbox_notifications_prometheus(NULL, 0, &text, &e), ODBOX_OK);
    assert_valid(text, 0);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE odbox_delivery_lag_seconds summary\n"));
    free(text);
    ck_assert_int_eq(odbox_notifications_prometheus(NULL, 1, &text, &e), ODBOX_EINVAL);
}
END_TEST

START_TEST(durations)
{
    int64_t us = 0;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_duration_parse("30d", &us, &e), ODBOX_OK);
    ck_assert_int_eq(us, INT64_C(30) * 86400 * 1000000);
    ck_assert_int_eq(odbox_duration_parse("12h", &us, &e), ODBOX_OK);
    ck_assert_int_eq(us, INT64_C(12) * 3600 * 1000000);
    ck_assert_int_eq(odbox_duration_parse("90m", &us, &e), ODBOX_OK);
    ck_assert_int_eq(us, INT64_C(5400) * 1000000);
    ck_assert_int_eq(odbox_duration_parse("3600s", &us, &e), ODBOX_OK);
    ck_assert_int_eq(us, INT64_C(3600) * 1000000);
    ck_assert_int_eq(odbox_duration_parse("36600d", &us, &e), ODBOX_OK); /* 100 years and a bit under */
    us = 7;
    const char *bad[] = {"", "30", "d", "0d", "-1d", "1.5h", "1w", "1 d", "1d ", "1h30m", "36700d",
                         "99999999999999999999s", NULL};
    for (const char **b = bad; *b; b++) {
        ck_assert_msg(odbox_duration_parse(*b, &us, &e) == ODBOX_EINVAL, "'%s' accepted", *b);
        ck_assert(e.message[0]);
    }
    ck_assert_int_eq(us, 7);
    ck_assert_int_eq(odbox_duration_parse(NULL, &us, &e), ODBOX_EINVAL);
}
END_TEST

/* Bad input is refused before anything connects (the registry's DSN
 * points at nothing). */
START_TEST(bad_input_refused_before_connecting)
{
    odbox_registry *r = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn("postgresql://u:Sup3r@127.0.0.1:1/db", &r, &e), ODBOX_OK);
    odbox_notification_stats *st = (odbox_notification_stats *)1;
    size_t n = 9;
    odbox_notification_filter f = {.state = "DONE"};
    ck_assert_int_eq(odbox_notifications_count(r, &f, &st, &n, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown state 'DONE'"));
    ck_assert_ptr_null(st);
    ck_assert_uint_eq(n, 0);
    f = (odbox_notification_filter){.handler = ""};
    ck_assert_int_eq(odbox_notifications_count(r, &f, &st, &n, &e), ODBOX_EINVAL);
    f = (odbox_notification_filter){.event_type = ""};
    ck_assert_int_eq(odbox_notifications_count(r, &f, &st, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_notifications_count(NULL, NULL, &st, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_notifications_count(r, NULL, NULL, &n, &e), ODBOX_EINVAL);
    odbox_notification_metrics_options mo = {.lag_window_s = -1};
    ck_assert_int_eq(odbox_notifications_metrics(r, &mo, &st, &n, &e), ODBOX_EINVAL);

    odbox_notification_row *rows = (odbox_notification_row *)1;
    ck_assert_int_eq(odbox_notifications_list(r, NULL, 0, &rows, &n, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(rows);
    ck_assert_int_eq(odbox_notifications_list(r, NULL, 100001, &rows, &n, &e), ODBOX_EINVAL);
    f = (odbox_notification_filter){.state = "pend"};
    ck_assert_int_eq(odbox_notifications_list(r, &f, 10, &rows, &n, &e), ODBOX_EINVAL);

    int64_t moved = 5;
    odbox_requeue_spec q = {.state = "SUCCEEDED"};
    ck_assert_int_eq(odbox_notifications_requeue(r, &q, &moved, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "FAILED or EXPIRED"));
    ck_assert_int_eq(moved, 0);
    q = (odbox_requeue_spec){.id = "not-a-uuid"};
    ck_assert_int_eq(odbox_notifications_requeue(r, &q, &moved, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "not a notification id"));
    q = (odbox_requeue_spec){.id = "0190a5a4-7d0e-7c9b-8f00-000000000001", .handler = "h"};
    ck_assert_int_eq(odbox_notifications_requeue(r, &q, &moved, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "not both"));
    q = (odbox_requeue_spec){.handler = ""};
    ck_assert_int_eq(odbox_notifications_requeue(r, &q, &moved, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_notifications_requeue(NULL, NULL, &moved, &e), ODBOX_EINVAL);

    odbox_purge_result *res = (odbox_purge_result *)1;
    ck_assert_int_eq(odbox_purge_run(r, NULL, &res, &n, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(res);
    odbox_purge_options po = {.older_than_us = 0};
    ck_assert_int_eq(odbox_purge_run(r, &po, &res, &n, &e), ODBOX_EINVAL);
    po = (odbox_purge_options){.older_than_us = 1000000, .batch_size = -1};
    ck_assert_int_eq(odbox_purge_run(r, &po, &res, &n, &e), ODBOX_EINVAL);
    po.batch_size = 100001;
    ck_assert_int_eq(odbox_purge_run(r, &po, &res, &n, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(res);
    ck_assert_int_eq(odbox_purge_unsubscribed_run(r, &po, &res, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_purge_unsubscribed_run(r, NULL, &res, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_purge_unsubscribed_run(r, &(odbox_purge_options){0}, &res, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_purge_unsubscribed_run(NULL, &po, &res, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_purge_unsubscribed_run(r, &po, NULL, &n, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(res);

    odbox_job job;
    po.batch_size = 0;
    odbox_schedule none = {0};
    ck_assert_int_eq(odbox_purge_job(r, &po, none, &job, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(job.user);
    ck_assert_int_eq(odbox_purge_job(r, &po, odbox_schedule_fixed_delay(0), &job, &e), ODBOX_EINVAL);
    po.older_than_us = -5;
    ck_assert_int_eq(odbox_purge_job(r, &po, odbox_schedule_fixed_delay(1000), &job, &e), ODBOX_EINVAL);
    po.older_than_us = 1000000;
    ck_assert_int_eq(odbox_purge_job(r, &po, odbox_schedule_fixed_delay(1000), &job, &e), ODBOX_OK);
    ck_assert_str_eq(job.name, ODBOX_PURGE_JOB_NAME);
    ck_assert_ptr_nonnull(job.execute);
    ck_assert_ptr_nonnull(job.user);
    /* the unsubscribed events' age: of a purge job only, 0 .. 100 years */
    ck_assert_int_eq(odbox_purge_job_unsubscribed(&job, -1, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "older_than_us -1 is not in 0 (none) .. 100 years"));
    ck_assert_int_eq(odbox_purge_job_unsubscribed(&job, INT64_C(101) * 366 * 86400 * 1000000, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_purge_job_unsubscribed(&job, 86400 * INT64_C(1000000), &e), ODBOX_OK);
    ck_assert_int_eq(odbox_purge_job_unsubscribed(&job, 0, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_purge_job_unsubscribed(NULL, 1, &e), ODBOX_EINVAL);
    odbox_job other = {.name = "x", .user = &job};
    ck_assert_int_eq(odbox_purge_job_unsubscribed(&other, 1, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "not a job odbox_purge_job filled"));
    odbox_purge_job_free(&job);
    ck_assert_ptr_null(job.user);
    odbox_purge_job_free(&job);
    odbox_purge_job_free(NULL);
    odbox_registry_free(&r);
}
END_TEST

/* What the operations need from every dialect. */
START_TEST(dialect_fields)
{
    for (const odbox_dialect *const *d = odbox_dialects(); *d; d++) {
        ck_assert_msg((*d)->delete_batch_fmt && strstr((*d)->delete_batch_fmt, "LIMIT ?") &&
                          strstr((*d)->delete_batch_fmt, "%4$s"),
                      "%s", (*d)->name);
        ck_assert_msg((*d)->interval_us_fmt && strstr((*d)->interval_us_fmt, "%1$s") &&
                          strstr((*d)->interval_us_fmt, "%2$s"),
                      "%s", (*d)->name);
    }
}
END_TEST

Suite *ops_suite(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, prometheus_writes_what_the_format_says);
    tcase_add_test(tc, prometheus_refuses_mistakes);
    tcase_add_test(tc, strict_parser_refuses_broken_text);
    tcase_add_test(tc, handler_stats_render);
    tcase_add_test(tc, durations);
    tcase_add_test(tc, bad_input_refused_before_connecting);
    tcase_add_test(tc, dialect_fields);
    suite_add_tcase(s, tc);
    return s;
}
