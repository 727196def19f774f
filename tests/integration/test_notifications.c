/* odbox — integration tests of the operations on event_notifications,
 * against rows the tests write, on two shards: counts by handler and
 * state with the due rows and their oldest age, each filter, rows in due
 * order, requeue in each form and each error, the metrics (delivery lag
 * quantiles, the window) and their Prometheus text read back by the
 * strict parser, and an unreachable shard; without a clock, all of it in
 * the database's time; requeue leaves the rows a round holds. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "../prom/promparse.h"
#include "internal.h"
#include "ops_fx.h"

#define NOW (T0 + DAY)
#define HOUR (3600 * SEC)

static odbox_manual_clock *clock_at(int64_t t)
{
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(t, &m, NULL), ODBOX_OK);
    return m;
}

/* The value of a sample that must be in text. */
static double value_of(const char *text, const char *series)
{
    double v = 0;
    ck_assert_msg(prom_value(text, series, &v) == 0, "no sample %s", series);
    return v;
}

/* The entry of (shard, handler) in st, which must be there. */
static const odbox_notification_stats *entry(const odbox_notification_stats *st, size_t n, int member,
                                             const char *handler)
{
    for (size_t i = 0; i < n; i++)
        if (st[i].shard.group == 0 && st[i].shard.member == member && !strcmp(st[i].handler, handler))
            return &st[i];
    ck_abort_msg("no entry for shard 0.%d handler %s", member, handler);
    return NULL;
}

static void assert_counts(const odbox_notification_stats *e, int64_t pending, int64_t failed, int64_t succeeded,
                          int64_t expired, int64_t due, int64_t oldest_us)
{
    ck_assert_int_eq(e->pending, pending);
    ck_assert_int_eq(e->failed, failed);
    ck_assert_int_eq(e->succeeded, succeeded);
    ck_assert_int_eq(e->expired, expired);
    ck_assert_int_eq(e->backlog, pending + failed);
    ck_assert_int_eq(e->due, due);
    ck_assert_int_eq(e->oldest_due_age_us, oldest_us);
}

/* shard 0.0: audit 2 PENDING (one due 30 s ago, one due in 60 s), 1
 * FAILED due 90 s ago (type Deposited), 3 SUCCEEDED, 1 EXPIRED; statement
 * 1 PENDING due 10 s ago (type Withdrawn). shard 0.1: audit 1 FAILED due
 * 5 s ago, 1 SUCCEEDED due a day before everything else. */
static void fill(ofx *f)
{
    ofx_notification(f, 0, &(nrow){"audit", "PENDING", NULL, 0, .next_retry = NOW - 30 * SEC}, NULL);
    ofx_notification(f, 0, &(nrow){"audit", "PENDING", NULL, 0, .next_retry = NOW + 60 * SEC}, NULL);
    ofx_notification(f, 0, &(nrow){"audit", "FAILED", "Deposited", 2, .next_retry = NOW - 90 * SEC}, NULL);
    for (int k = 1; k <= 3; k++)
        ofx_notification(f, 0, &(nrow){"audit", "SUCCEEDED", NULL, 1, .next_retry = T0 + k * SEC}, NULL);
    ofx_notification(f, 0, &(nrow){"audit", "EXPIRED", NULL, 5, .next_retry = T0 + 10 * SEC}, NULL);
    ofx_notification(f, 0, &(nrow){"statement", "PENDING", "Withdrawn", 0, .next_retry = NOW - 10 * SEC}, NULL);
    ofx_notification(f, 1, &(nrow){"audit", "FAILED", NULL, 1, .next_retry = NOW - 5 * SEC}, NULL);
    ofx_notification(f, 1, &(nrow){"audit", "SUCCEEDED", NULL, 1, .next_retry = T0 - DAY}, NULL);
}

START_TEST(counts_by_handler_and_state)
{
    ofx f;
    ofx_open(&f, 2);
    fill(&f);
    odbox_manual_clock *m = clock_at(NOW);
    odbox_notification_filter flt = {.clock = odbox_manual_clock_clock(m)};
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_notifications_count(f.r, &flt, &st, &n, &e) == ODBOX_OK, "%s", e.message);
    /* shard order, then handler */
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(st[0].handler, "audit");
    ck_assert_int_eq(st[0].shard.member, 0);
    ck_assert_str_eq(st[1].handler, "statement");
    ck_assert_int_eq(st[2].shard.member, 1);
    assert_counts(&st[0], 2, 1, 3, 1, 2, 90 * SEC);
    assert_counts(&st[1], 1, 0, 0, 0, 1, 10 * SEC);
    assert_counts(&st[2], 0, 1, 1, 0, 1, 5 * SEC);
    ck_assert_int_eq(st[0].lag_count, 0); /* the lag is the metrics' */
    odbox_notification_stats_free(&st, n);
    ck_assert_ptr_null(st);

    /* a later now: more is due, and longer */
    odbox_manual_clock_set(m, NOW + 100 * SEC);
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_OK);
    assert_counts(entry(st, n, 0, "audit"), 2, 1, 3, 1, 3, 190 * SEC);
    odbox_notification_stats_free(&st, n);
    odbox_manual_clock_set(m, NOW);

    /* by state (any case) */
    flt.state = "failed";
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 2);
    assert_counts(entry(st, n, 0, "audit"), 0, 1, 0, 0, 1, 90 * SEC);
    assert_counts(entry(st, n, 1, "audit"), 0, 1, 0, 0, 1, 5 * SEC);
    odbox_notification_stats_free(&st, n);
    /* finished rows are never due */
    flt.state = "SUCCEEDED";
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 2);
    assert_counts(entry(st, n, 0, "audit"), 0, 0, 3, 0, 0, 0);
    assert_counts(entry(st, n, 1, "audit"), 0, 0, 1, 0, 0, 0);
    odbox_notification_stats_free(&st, n);
    /* by handler */
    flt.state = NULL;
    flt.handler = "statement";
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 1);
    assert_counts(&st[0], 1, 0, 0, 0, 1, 10 * SEC);
    odbox_notification_stats_free(&st, n);
    /* by event type */
    flt.handler = NULL;
    flt.event_type = "Deposited";
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 1);
    assert_counts(&st[0], 0, 1, 0, 0, 1, 90 * SEC);
    odbox_notification_stats_free(&st, n);
    /* one shard */
    flt.event_type = NULL;
    flt.shard = ofx_shard(&f, 1);
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(st[0].shard.member, 1);
    odbox_notification_stats_free(&st, n);
    /* nothing selected */
    flt.shard = NULL;
    flt.handler = "nobody";
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 0);
    odbox_notification_stats_free(&st, n);
    /* an unknown state is refused */
    flt.handler = NULL;
    flt.state = "RUNNING";
    ck_assert_int_eq(odbox_notifications_count(f.r, &flt, &st, &n, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown state 'RUNNING'"));
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

START_TEST(list_in_due_order)
{
    ofx f;
    ofx_open(&f, 2);
    fill(&f);
    odbox_notification_row *rows = NULL;
    size_t n = 0;
    odbox_error e = {0};
    odbox_notification_filter flt = {.state = "FAILED"};
    ck_assert_msg(odbox_notifications_list(f.r, &flt, 10, &rows, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(rows[0].shard.member, 0);
    ck_assert_str_eq(rows[0].handler, "audit");
    ck_assert_str_eq(rows[0].state, "FAILED");
    ck_assert_int_eq(rows[0].attempts, 2);
    ck_assert_int_eq(rows[0].next_retry_us, NOW - 90 * SEC);
    ck_assert_str_eq(rows[0].event_type, "Deposited");
    ck_assert(odbox_uuid_is_valid(rows[0].id) && odbox_uuid_is_valid(rows[0].event_id));
    ck_assert_str_ne(rows[0].id, rows[0].event_id);
    ck_assert_int_eq(rows[1].shard.member, 1);
    ck_assert_int_eq(rows[1].attempts, 1);
    ck_assert_int_eq(rows[1].next_retry_us, NOW - 5 * SEC);
    ck_assert_str_eq(rows[1].event_type, "Thing");
    odbox_notification_rows_free(&rows, n);
    ck_assert_ptr_null(rows);
    /* the first of both shards: shard 0.1's row is due first */
    ck_assert_int_eq(odbox_notifications_list(f.r, NULL, 1, &rows, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(rows[0].shard.member, 1);
    ck_assert_str_eq(rows[0].state, "SUCCEEDED");
    ck_assert_int_eq(rows[0].next_retry_us, T0 - DAY);
    odbox_notification_rows_free(&rows, n);
    /* all ten, in order */
    ck_assert_int_eq(odbox_notifications_list(f.r, NULL, 100, &rows, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 10);
    for (size_t i = 1; i < n; i++)
        ck_assert_int_le(rows[i - 1].next_retry_us, rows[i].next_retry_us);
    ck_assert_int_eq(rows[9].next_retry_us, NOW + 60 * SEC);
    odbox_notification_rows_free(&rows, n);
    /* filters: handler and event type */
    flt = (odbox_notification_filter){.handler = "statement", .event_type = "Withdrawn"};
    ck_assert_int_eq(odbox_notifications_list(f.r, &flt, 5, &rows, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(rows[0].handler, "statement");
    odbox_notification_rows_free(&rows, n);
    flt = (odbox_notification_filter){.handler = "statement", .event_type = "Deposited"};
    ck_assert_int_eq(odbox_notifications_list(f.r, &flt, 5, &rows, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 0);
    odbox_notification_rows_free(&rows, n);
    ofx_close(&f);
}
END_TEST

static void assert_requeued(ofx *f, int i, const char *id, int64_t now)
{
    ck_assert_str_eq(ofx_notification_state(f, i, id), "PENDING");
    ck_assert_int_eq(ofx_notification_int(f, i, id, "attempts"), 0);
    ck_assert_int_eq(ofx_notification_ts(f, i, id, "next_retry_at"), now);
    ck_assert_int_eq(ofx_notification_ts(f, i, id, "updated_date"), now);
    ck_assert_int_eq(ofx_notification_ts(f, i, id, "created_date"), now);
}

START_TEST(requeue_each_form_and_error)
{
    ofx f;
    ofx_open(&f, 2);
    char f1[37], x1[37], f2[37], p1[37], s1[37], x2[37], f3[37], none[37];
    ofx_notification(&f, 0, &(nrow){"audit", "FAILED", NULL, 3, .next_retry = T0 + SEC}, f1);
    ofx_notification(&f, 0, &(nrow){"audit", "EXPIRED", NULL, 7, .next_retry = T0 + SEC}, x1);
    ofx_notification(&f, 0, &(nrow){"statement", "FAILED", NULL, 2, .next_retry = T0 + SEC}, f2);
    ofx_notification(&f, 0, &(nrow){"audit", "PENDING", NULL, 1, .next_retry = T0 + SEC}, p1);
    ofx_notification(&f, 0, &(nrow){"audit", "SUCCEEDED", NULL, 1, .next_retry = T0 + SEC}, s1);
    ofx_notification(&f, 1, &(nrow){"audit", "EXPIRED", NULL, 4, .next_retry = T0 + SEC}, x2);
    ofx_notification(&f, 1, &(nrow){"statement", "FAILED", NULL, 1, .next_retry = T0 + SEC}, f3);
    odbox_uuid_v4(none);
    odbox_manual_clock *m = clock_at(NOW + 123456);
    const odbox_clock *clk = odbox_manual_clock_clock(m);
    int64_t moved = -1;
    odbox_error e = {0};

    /* errors change nothing */
    odbox_requeue_spec q = {.state = "PENDING", .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_EINVAL);
    q = (odbox_requeue_spec){.state = "nonsense", .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_EINVAL);
    q = (odbox_requeue_spec){.id = "1234", .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_EINVAL);
    q = (odbox_requeue_spec){.id = f1, .handler = "audit", .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_EINVAL);
    q = (odbox_requeue_spec){.id = s1, .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "is SUCCEEDED, not FAILED or EXPIRED"), "%s", e.message);
    ck_assert_int_eq(moved, 0);
    q = (odbox_requeue_spec){.id = x1, .state = "FAILED", .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "is EXPIRED, not FAILED"), "%s", e.message);
    q = (odbox_requeue_spec){.id = none, .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "no notification"), "%s", e.message);
    ck_assert_int_eq(ofx_count(&f, 0, "event_notifications", "state = 'PENDING'"), 1);
    ck_assert_int_eq(ofx_count(&f, 1, "event_notifications", "state = 'PENDING'"), 0);
    ck_assert_int_eq(ofx_notification_int(&f, 0, f1, "attempts"), 3);

    /* one id (upper case is the same id) */
    char upper[37];
    for (int k = 0; k < 37; k++)
        upper[k] = (char)(f2[k] >= 'a' && f2[k] <= 'f' ? f2[k] - 32 : f2[k]);
    q = (odbox_requeue_spec){.id = upper, .clock = clk};
    ck_assert_msg(odbox_notifications_requeue(f.r, &q, &moved, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(moved, 1);
    assert_requeued(&f, 0, f2, NOW + 123456);
    ck_assert_str_eq(ofx_notification_state(&f, 0, f1), "FAILED");
    /* one handler's EXPIRED rows, on both shards */
    q = (odbox_requeue_spec){.handler = "audit", .state = "expired", .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_OK);
    ck_assert_int_eq(moved, 2);
    assert_requeued(&f, 0, x1, NOW + 123456);
    assert_requeued(&f, 1, x2, NOW + 123456);
    ck_assert_str_eq(ofx_notification_state(&f, 0, f1), "FAILED");
    /* every one on one shard */
    odbox_manual_clock_advance(m, SEC);
    q = (odbox_requeue_spec){.shard = ofx_shard(&f, 1), .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_OK);
    ck_assert_int_eq(moved, 1);
    assert_requeued(&f, 1, f3, NOW + 123456 + SEC);
    /* every one: f1 is left */
    q = (odbox_requeue_spec){.clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_OK);
    ck_assert_int_eq(moved, 1);
    assert_requeued(&f, 0, f1, NOW + 123456 + SEC);
    /* PENDING and SUCCEEDED rows were never touched */
    ck_assert_int_eq(ofx_notification_int(&f, 0, p1, "attempts"), 1);
    ck_assert_int_eq(ofx_notification_ts(&f, 0, p1, "next_retry_at"), T0 + SEC);
    ck_assert_str_eq(ofx_notification_state(&f, 0, s1), "SUCCEEDED");
    ck_assert_int_eq(ofx_notification_ts(&f, 0, s1, "updated_date"), T0);
    /* nothing left: 0 moved is no error; NULL spec and moved are fine */
    ck_assert_int_eq(odbox_notifications_requeue(f.r, NULL, &moved, &e), ODBOX_OK);
    ck_assert_int_eq(moved, 0);
    ck_assert_int_eq(odbox_notifications_requeue(f.r, NULL, NULL, &e), ODBOX_OK);
    q = (odbox_requeue_spec){.id = f1, .clock = clk};
    ck_assert_int_eq(odbox_notifications_requeue(f.r, &q, &moved, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "is PENDING"), "%s", e.message);
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

/* shard 0.0: audit 20 successes updated 30 s ago with lags k s + k us
 * (k = 1..20), one updated 300 s ago with a lag of 2000 s, one updated
 * 700 s ago (outside the default 600 s window), one updated 10 s from
 * now (after the window) and an EXPIRED row (never a lag); statement 3
 * successes with lags 10, 20, 30 ms. shard 0.1: audit one success with a
 * lag of 5 s and a PENDING row due 30 s ago. */
/* A notification of handler on shard i in state, committed at completion
 * and last updated at updated. */
static void finished(ofx *f, int i, const char *handler, const char *state, int64_t completion, int64_t updated)
{
    ofx_notification(f, i, &(nrow){handler, state, NULL, 1, .completion = completion, .updated = updated}, NULL);
}

static void fill_lags(ofx *f)
{
    for (int k = 1; k <= 20; k++)
        finished(f, 0, "audit", "SUCCEEDED", NOW - 30 * SEC - k * SEC - k, NOW - 30 * SEC);
    finished(f, 0, "audit", "SUCCEEDED", NOW - 2300 * SEC, NOW - 300 * SEC);
    finished(f, 0, "audit", "SUCCEEDED", NOW - 9000 * SEC, NOW - 700 * SEC);
    finished(f, 0, "audit", "SUCCEEDED", NOW - 9000 * SEC, NOW + 10 * SEC);
    finished(f, 0, "audit", "EXPIRED", NOW - 9000 * SEC, NOW - 20 * SEC);
    for (int k = 1; k <= 3; k++)
        finished(f, 0, "statement", "SUCCEEDED", NOW - k * 10000, NOW);
    finished(f, 1, "audit", "SUCCEEDED", NOW - 65 * SEC, NOW - 60 * SEC);
    ofx_notification(f, 1, &(nrow){"audit", "PENDING", NULL, 0, .next_retry = NOW - 30 * SEC}, NULL);
}

static void assert_lag(const odbox_notification_stats *e, int64_t count, int64_t sum, int64_t p50, int64_t p99,
                       int64_t max)
{
    ck_assert_int_eq(e->lag_count, count);
    ck_assert_int_eq(e->lag_sum_us, sum);
    ck_assert_int_eq(e->lag_p50_us, p50);
    ck_assert_int_eq(e->lag_p99_us, p99);
    ck_assert_int_eq(e->lag_max_us, max);
}

START_TEST(metrics_against_known_rows)
{
    ofx f;
    ofx_open(&f, 2);
    fill_lags(&f);
    odbox_manual_clock *m = clock_at(NOW);
    odbox_notification_metrics_options o = {.clock = odbox_manual_clock_clock(m)};
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_notifications_metrics(f.r, &o, &st, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(n, 3);
    const odbox_notification_stats *a0 = entry(st, n, 0, "audit"), *s0 = entry(st, n, 0, "statement"),
                              *a1 = entry(st, n, 1, "audit");
    assert_counts(a0, 0, 0, 23, 1, 0, 0);
    /* 21 in the window: rank 11 is p50, rank 21 p99 and the max */
    assert_lag(a0, 21, 210 * SEC + 210 + 2000 * SEC, 11 * SEC + 11, 2000 * SEC, 2000 * SEC);
    assert_lag(s0, 3, 60000, 20000, 30000, 30000);
    assert_counts(a1, 1, 0, 1, 0, 1, 30 * SEC);
    assert_lag(a1, 1, 5 * SEC, 5 * SEC, 5 * SEC, 5 * SEC);

    char *text = NULL;
    ck_assert_int_eq(odbox_notifications_prometheus(st, n, &text, &e), ODBOX_OK);
    char msg[512];
    size_t samples = 0;
    ck_assert_msg(prom_check(text, &samples, msg, sizeof msg) == 0, "%s\n%s", msg, text);
    ck_assert_uint_eq(samples, 3 * 12);
    ck_assert(value_of(text, "odbox_notifications{shard=\"0.0\",handler=\"audit\",state=\"SUCCEEDED\"}") == 23);
    ck_assert(value_of(text, "odbox_notifications_backlog{shard=\"0.1\",handler=\"audit\"}") == 1);
    ck_assert(value_of(text, "odbox_notifications_oldest_due_age_seconds{shard=\"0.1\",handler=\"audit\"}") == 30);
    ck_assert(value_of(text, "odbox_delivery_lag_seconds{shard=\"0.0\",handler=\"audit\",quantile=\"0.5\"}") ==
              11.000011);
    ck_assert(value_of(text, "odbox_delivery_lag_seconds{shard=\"0.0\",handler=\"statement\",quantile=\"0.99\"}") ==
              0.03);
    ck_assert(value_of(text, "odbox_delivery_lag_max_seconds{shard=\"0.0\",handler=\"audit\"}") == 2000);
    free(text);
    odbox_notification_stats_free(&st, n);

    /* a 60 s window: the 20 recent ones only */
    o.lag_window_s = 60;
    ck_assert_int_eq(odbox_notifications_metrics(f.r, &o, &st, &n, &e), ODBOX_OK);
    assert_lag(entry(st, n, 0, "audit"), 20, 210 * SEC + 210, 10 * SEC + 10, 20 * SEC + 20, 20 * SEC + 20);
    assert_lag(entry(st, n, 1, "audit"), 1, 5 * SEC, 5 * SEC, 5 * SEC, 5 * SEC);
    odbox_notification_stats_free(&st, n);
    /* one shard */
    o.shard = ofx_shard(&f, 1);
    ck_assert_int_eq(odbox_notifications_metrics(f.r, &o, &st, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 1);
    odbox_notification_stats_free(&st, n);
    /* the window passed: no lag, the counts stay */
    o.shard = NULL;
    odbox_manual_clock_advance(m, 3600 * SEC);
    ck_assert_int_eq(odbox_notifications_metrics(f.r, &o, &st, &n, &e), ODBOX_OK);
    assert_lag(entry(st, n, 0, "audit"), 0, 0, 0, 0, 0);
    ck_assert_int_eq(entry(st, n, 0, "audit")->succeeded, 23);
    odbox_notification_stats_free(&st, n);
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

/* Without a clock, what is due, how long it has waited and the lag
 * window are measured in the database's time, not this process's clock.
 * The clock an hour fast: the row due in 10 minutes is not due, the one
 * due 30 s ago has waited 30 s, and the success of 30 s ago is in the
 * 10-minute lag window (before: both due, the oldest for an hour and
 * 30 s, and the window an hour ahead: no lag). An hour slow: the same
 * (before: nothing due, no lag). */
START_TEST(counts_and_lag_in_the_database_time)
{
    ofx f;
    ofx_open(&f, 1);
    int64_t now = ofx_db_now(&f, 0);
    ofx_notification(&f, 0, &(nrow){"audit", "FAILED", NULL, 1, .next_retry = now - 30 * SEC}, NULL);
    ofx_notification(&f, 0, &(nrow){"audit", "PENDING", NULL, 0, .next_retry = now + 600 * SEC}, NULL);
    ofx_notification(&f, 0,
                     &(nrow){"audit", "SUCCEEDED", NULL, 1, .completion = now - 35 * SEC, .updated = now - 30 * SEC},
                     NULL);
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    odbox_error e = {0};
    for (int off = 1; off >= -1; off -= 2) {
        odbox_clock_skew_set(off * HOUR);
        int rc = odbox_notifications_metrics(f.r, NULL, &st, &n, &e);
        odbox_clock_skew_set(0);
        ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
        ck_assert_uint_eq(n, 1);
        ck_assert_msg(st[0].due == 1, "a clock %+d h off: %lld due, want 1", off, (long long)st[0].due);
        ck_assert_msg(st[0].oldest_due_age_us >= 30 * SEC && st[0].oldest_due_age_us < 90 * SEC,
                      "a clock %+d h off: the oldest due waited %lld us, want 30 s", off,
                      (long long)st[0].oldest_due_age_us);
        ck_assert_msg(st[0].lag_count == 1, "a clock %+d h off: %lld successes in the lag window, want 1", off,
                      (long long)st[0].lag_count);
        ck_assert_int_eq(st[0].lag_max_us, 5 * SEC);
        odbox_notification_stats_free(&st, n);
        /* the counts alone */
        odbox_clock_skew_set(off * HOUR);
        rc = odbox_notifications_count(f.r, NULL, &st, &n, &e);
        odbox_clock_skew_set(0);
        ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
        ck_assert_uint_eq(n, 1);
        ck_assert_msg(st[0].due == 1, "count, a clock %+d h off: %lld due, want 1", off, (long long)st[0].due);
        ck_assert_msg(st[0].oldest_due_age_us < 90 * SEC, "count, a clock %+d h off: waited %lld us", off,
                      (long long)st[0].oldest_due_age_us);
        odbox_notification_stats_free(&st, n);
    }
    ofx_close(&f);
}
END_TEST

/* Without a clock, a requeued row is due now by the database's time. An
 * operator's host 10 minutes fast: before, the row was told due now and
 * written due in 10 minutes (next_retry_at, and its dates, the host's
 * clock), so nothing retried it until then. */
START_TEST(requeue_in_the_database_time)
{
    ofx f;
    ofx_open(&f, 1);
    char id[37];
    ofx_notification(&f, 0, &(nrow){"audit", "FAILED", NULL, 3, .next_retry = T0}, id);
    int64_t before = ofx_db_now(&f, 0);
    odbox_requeue_spec q = {.id = id};
    int64_t moved = 0;
    odbox_error e = {0};
    odbox_clock_skew_set(600 * SEC);
    int rc = odbox_notifications_requeue(f.r, &q, &moved, &e);
    odbox_clock_skew_set(0);
    ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(moved, 1);
    int64_t after = ofx_db_now(&f, 0);
    const char *const cols[] = {"next_retry_at", "updated_date", "created_date"};
    for (int k = 0; k < 3; k++) {
        int64_t t = ofx_notification_ts(&f, 0, id, cols[k]);
        ck_assert_msg(t >= before - SEC && t <= after, "%s is %lld s after the database's now", cols[k],
                      (long long)((t - after) / SEC));
    }
    odbox_notification_stats *st = NULL;
    size_t n = 0;
    ck_assert_msg(odbox_notifications_count(f.r, NULL, &st, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(st[0].due, 1);
    odbox_notification_stats_free(&st, n);
    ofx_close(&f);
}
END_TEST

/* A FAILED row that a round holds (its lease runs: it is being retried)
 * is not requeued: the round's outcome, guarded by the attempts it read,
 * would be lost and the row called again after the lease. One whose
 * lease has passed (its round died) is. Before, both moved. */
START_TEST(requeue_skips_rows_in_flight)
{
    ofx f;
    ofx_open(&f, 1);
    int64_t now = ofx_db_now(&f, 0);
    char held[37], lapsed[37];
    ofx_notification(&f, 0, &(nrow){"audit", "FAILED", NULL, 1, .next_retry = now + 600 * SEC,
                                    .lease_until = now + 600 * SEC}, held);
    ofx_notification(&f, 0, &(nrow){"audit", "FAILED", NULL, 2, .next_retry = now - 60 * SEC,
                                    .lease_until = now - 60 * SEC}, lapsed);
    odbox_requeue_spec q = {.handler = "audit"};
    int64_t moved = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_notifications_requeue(f.r, &q, &moved, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(moved, 1);
    ck_assert_str_eq(ofx_notification_state(&f, 0, lapsed), "PENDING");
    ck_assert_str_eq(ofx_notification_state(&f, 0, held), "FAILED");
    ck_assert_int_eq(ofx_notification_int(&f, 0, held, "attempts"), 1);
    /* by its id: not moved, said to be in flight, and no error (it is
     * FAILED: its round decides) */
    q = (odbox_requeue_spec){.id = held};
    odbox_requeue_result res = {-1, -1};
    ck_assert_msg(odbox_notifications_requeue_run(f.r, &q, &res, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res.moved, 0);
    ck_assert_int_eq(res.in_flight, 1);
    ck_assert_int_eq(ofx_notification_int(&f, 0, held, "attempts"), 1);
    q = (odbox_requeue_spec){0};
    ck_assert_msg(odbox_notifications_requeue_run(f.r, &q, &res, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res.moved, 0);
    ck_assert_int_eq(res.in_flight, 1);
    q = (odbox_requeue_spec){.id = held, .state = "EXPIRED"}; /* not what it is */
    ck_assert_int_eq(odbox_notifications_requeue_run(f.r, &q, &res, &e), ODBOX_ENOTFOUND);
    ck_assert_int_eq(res.in_flight, 0);
    q = (odbox_requeue_spec){.id = held};
    /* a clock past the lease decides so */
    odbox_manual_clock *m = clock_at(now + 601 * SEC);
    q.clock = odbox_manual_clock_clock(m);
    ck_assert_msg(odbox_notifications_requeue_run(f.r, &q, &res, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res.moved, 1);
    ck_assert_int_eq(res.in_flight, 0);
    ck_assert_str_eq(ofx_notification_state(&f, 0, held), "PENDING");
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

/* A requeue that loses a deadlock to another transaction (MySQL and
 * MariaDB lock the rows it scans; a handling round or a purge writes the
 * same rows in another order) is one UPDATE rolled back whole: it goes
 * again rather than failing the operator's command with "try restarting
 * transaction". Here the other transaction holds one row, the requeue
 * locks those it scans before it and waits for it, and the other then
 * asks for all the others: one of the two is the victim (unless the
 * requeue happened to scan the held row first). */
typedef struct requeue_call {
    ofx *f;
    int rc;
    odbox_requeue_result res;
    odbox_error e;
} requeue_call;

static void *requeue_thread(void *arg)
{
    requeue_call *q = arg;
    odbox_requeue_spec s = {.handler = "audit"};
    q->rc = odbox_notifications_requeue_run(q->f->r, &s, &q->res, &q->e);
    return NULL;
}

START_TEST(requeue_survives_a_deadlock)
{
    if (itest_is("sqlite"))
        return; /* one writer at a time: no deadlock */
    ofx f;
    ofx_open(&f, 1);
    int64_t now = ofx_db_now(&f, 0);
    char id[8][37];
    for (int i = 0; i < 8; i++)
        ofx_notification(&f, 0, &(nrow){.handler = "audit", .state = "FAILED", .attempts = 1, .next_retry = now - (60 - i) * SEC}, id[i]);
    const char *t = itest_evt(f.ev[0], "event_notifications");
    char table[256];
    snprintf(table, sizeof table, "%s", t);
    odbox_error e = {0};
    ck_assert_int_eq(odbox_conn_begin(f.c[0], &e), ODBOX_OK);
    /* heavier than the requeue, so that InnoDB picks the requeue as the
     * victim (PostgreSQL: the requeue waits first, so its check runs first) */
    itest_exec(f.c[0], "UPDATE %s SET attempts = attempts + 1 WHERE handler_name = 'audit' AND id = '%s'", table,
               id[4]);
    for (int i = 0; i < 40; i++)
        ofx_notification(&f, 0, &(nrow){.handler = "other", .state = "SUCCEEDED", .attempts = 1}, NULL);
    requeue_call q = {.f = &f};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, requeue_thread, &q), 0);
    usleep(1500 * 1000); /* the requeue waits for the middle row */
    odbox_stmt *s = NULL;
    char sql[512];
    snprintf(sql, sizeof sql, "UPDATE %s SET attempts = attempts + 1 WHERE handler_name = 'audit' AND id <> '%s'",
             table, id[4]);
    int rc = odbox_stmt_prepare(f.c[0], sql, &s, &e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, &e);
    odbox_stmt_free(&s);
    if (rc == ODBOX_OK)
        ck_assert_int_eq(odbox_conn_commit(f.c[0], &e), ODBOX_OK);
    else
        odbox_conn_rollback(f.c[0], NULL);
    pthread_join(th, NULL);
    ck_assert_msg(q.rc == ODBOX_OK, "requeue: %s (the other transaction: %s)", q.e.message,
                  rc == ODBOX_OK ? "committed" : e.message);
    ck_assert_int_eq(q.res.moved, 8);
    for (int i = 0; i < 8; i++)
        ck_assert_str_eq(ofx_notification_state(&f, 0, id[i]), "PENDING");
    ofx_close(&f);
}
END_TEST

START_TEST(unreachable_or_unmigrated_shard)
{
    odbox_registry *r = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn(itest_unreachable_dsn("S3cretPw"), &r, &e), ODBOX_OK);
    odbox_notification_stats *st = NULL;
    odbox_notification_row *rows = NULL;
    size_t n = 0;
    ck_assert_int_eq(odbox_notifications_count(r, NULL, &st, &n, &e), ODBOX_ECONNECT);
    ck_assert_msg(strstr(e.message, "shard 0.0") && !strstr(e.message, "S3cretPw"), "%s", e.message);
    ck_assert_int_eq(odbox_notifications_metrics(r, NULL, &st, &n, &e), ODBOX_ECONNECT);
    ck_assert_int_eq(odbox_notifications_list(r, NULL, 5, &rows, &n, &e), ODBOX_ECONNECT);
    ck_assert_int_eq(odbox_notifications_requeue(r, NULL, NULL, &e), ODBOX_ECONNECT);
    ck_assert_ptr_null(st);
    ck_assert_ptr_null(rows);
    odbox_registry_free(&r);

    /* an eventlog that was never migrated: the database's error */
    char ev[64], dsn[512];
    itest_name(ev, sizeof ev, "ev_never");
    snprintf(dsn, sizeof dsn, "%s%seventlog=%s", itest_dsn(1), strchr(itest_dsn(1), '?') ? "&" : "?", ev);
    ck_assert_int_eq(odbox_registry_open_dsn(dsn, &r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_notifications_count(r, NULL, &st, &n, &e), ODBOX_EDB);
    ck_assert_msg(strstr(e.message, "shard 0.0"), "%s", e.message);
    odbox_registry_free(&r);
}
END_TEST

Suite *notifications_suite(void)
{
    Suite *s = suite_create("notifications");
    TCase *tc = tcase_create("notifications");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, counts_by_handler_and_state);
    tcase_add_test(tc, list_in_due_order);
    tcase_add_test(tc, requeue_each_form_and_error);
    tcase_add_test(tc, metrics_against_known_rows);
    tcase_add_test(tc, counts_and_lag_in_the_database_time);
    tcase_add_test(tc, requeue_in_the_database_time);
    tcase_add_test(tc, requeue_skips_rows_in_flight);
    tcase_add_test(tc, requeue_survives_a_deadlock);
    tcase_add_test(tc, unreachable_or_unmigrated_shard);
    suite_add_tcase(s, tc);
    return s;
}
