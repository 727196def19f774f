/* odbox — integration tests of retention: what a purge removes and what
 * it never removes (undelivered events with a type, PENDING and FAILED
 * notifications, anything not older than the age), per shard and table;
 * batches smaller than the rows; and the purge job run by a job registry
 * on a manual clock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#include "jobs_fx.h"
#include "odbox/tx.h"
#include "ops_fx.h"

#define NOW (T0 + 30 * DAY)

static void assert_result(const odbox_purge_result *r, int member, int64_t notifications, int64_t events,
                          int64_t sentinels, int64_t batches)
{
    ck_assert_int_eq(r->shard.group, 0);
    ck_assert_int_eq(r->shard.member, member);
    ck_assert_int_eq(r->notifications, notifications);
    ck_assert_int_eq(r->events, events);
    ck_assert_int_eq(r->sentinels, sentinels);
    ck_assert_int_eq(r->batches, batches);
}

START_TEST(purge_removes_only_what_is_done)
{
    ofx f;
    ofx_open(&f, 2);
    const int64_t cutoff = NOW - 7 * DAY;
    /* shard 0.0 notifications */
    ofx_notification(&f, 0, &(nrow){"a", "SUCCEEDED", .updated = NOW - 8 * DAY}, NULL);         /* goes */
    ofx_notification(&f, 0, &(nrow){"a", "EXPIRED", .updated = NOW - 10 * DAY}, NULL);          /* goes */
    ofx_notification(&f, 0, &(nrow){"a", "SUCCEEDED", .updated = NOW - 6 * DAY}, NULL);         /* too young */
    ofx_notification(&f, 0, &(nrow){"a", "SUCCEEDED", .updated = cutoff}, NULL);                /* not older */
    /* finished before V13: due long before it finished (a retry), young */
    ofx_notification(&f, 0, &(nrow){"a", "SUCCEEDED", .next_retry = NOW - 20 * DAY, .updated = NOW - 5 * DAY}, NULL);
    ofx_notification(&f, 0, &(nrow){"a", "PENDING", .updated = NOW - 20 * DAY}, NULL);          /* waits */
    ofx_notification(&f, 0, &(nrow){"a", "FAILED", .updated = NOW - 20 * DAY}, NULL);           /* waits */
    /* shard 0.0 events */
    ofx_event(&f, 0, "Deposited", NOW - 8 * DAY, 1, NULL);  /* goes */
    ofx_event(&f, 0, "Withdrawn", NOW - 9 * DAY, 1, NULL);  /* goes (read type by type on MySQL/MariaDB) */
    ofx_event(&f, 0, "Deposited", NOW - 1 * DAY, 1, NULL);  /* too young */
    ofx_event(&f, 0, "Deposited", cutoff, 1, NULL);         /* not older */
    ofx_event(&f, 0, "Deposited", NOW - 20 * DAY, 0, NULL); /* undelivered: a handler waits */
    ofx_event(&f, 0, "Unhandled", NOW - 29 * DAY, 0, NULL); /* no handler yet: backfill */
    ofx_event(&f, 0, NULL, NOW - 9 * DAY, 0, NULL);         /* old sentinel: goes */
    ofx_event(&f, 0, NULL, NOW - 1 * DAY, 0, NULL);         /* young sentinel */
    /* shard 0.1 */
    ofx_notification(&f, 1, &(nrow){"a", "SUCCEEDED", .updated = NOW - 8 * DAY}, NULL);
    ofx_event(&f, 1, "Withdrawn", NOW - 8 * DAY, 1, NULL);
    ofx_event(&f, 1, "Withdrawn", NOW - 8 * DAY - 1, 1, NULL);

    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(NOW, &m, NULL), ODBOX_OK);
    odbox_purge_options o = {.older_than_us = 7 * DAY, .clock = odbox_manual_clock_clock(m)};
    odbox_purge_result *res = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_purge_run(f.r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(n, 2);
    /* a batch for each finished state, delivered events (of each type
     * where no partial index holds them), sentinels and idempotency keys */
    int per_type = !odbox_conn_dialect(f.c[0])->has_partial_indexes;
    assert_result(&res[0], 0, 2, 2, 1, per_type ? 6 : 5);
    assert_result(&res[1], 1, 1, 2, 0, 5);
    odbox_purge_results_free(&res);
    ck_assert_ptr_null(res);

    ck_assert_int_eq(ofx_count(&f, 0, "event_notifications", "1 = 1"), 5);
    ck_assert_int_eq(ofx_count(&f, 0, "event_notifications", "state IN ('PENDING', 'FAILED')"), 2);
    ck_assert_int_eq(ofx_count(&f, 0, "event_notifications", "state = 'SUCCEEDED'"), 3);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "1 = 1"), 5);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "delivered = TRUE"), 2);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "delivered = FALSE AND event_type IS NOT NULL"), 2);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "event_type IS NULL"), 1);
    ck_assert_int_eq(ofx_count(&f, 1, "events", "1 = 1"), 0);
    ck_assert_int_eq(ofx_count(&f, 1, "event_notifications", "1 = 1"), 0);

    /* again: nothing left to remove (shard 0.1 has no delivered event left) */
    ck_assert_int_eq(odbox_purge_run(f.r, &o, &res, &n, &e), ODBOX_OK);
    assert_result(&res[0], 0, 0, 0, 0, 5);
    assert_result(&res[1], 1, 0, 0, 0, per_type ? 4 : 5);
    odbox_purge_results_free(&res);
    /* a day later, on shard 0.0 only: the one at the cutoff goes now */
    odbox_manual_clock_advance(m, DAY);
    o.shard = ofx_shard(&f, 0);
    ck_assert_int_eq(odbox_purge_run(f.r, &o, &res, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, 1);
    assert_result(&res[0], 0, 1, 1, 0, 5);
    odbox_purge_results_free(&res);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "delivered = FALSE AND event_type IS NOT NULL"), 2);
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

START_TEST(purge_in_batches)
{
    ofx f;
    ofx_open(&f, 1);
    for (int k = 0; k < 25; k++)
        ofx_event(&f, 0, "Deposited", NOW - 10 * DAY + k * SEC, 1, NULL);
    for (int k = 0; k < 7; k++)
        ofx_notification(&f, 0, &(nrow){"a", k % 2 ? "SUCCEEDED" : "EXPIRED", .updated = NOW - 10 * DAY + k}, NULL);
    for (int k = 0; k < 20; k++)
        ofx_event(&f, 0, NULL, NOW - 10 * DAY + k * SEC, 0, NULL);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(NOW, &m, NULL), ODBOX_OK);
    odbox_purge_options o = {.older_than_us = DAY, .batch_size = 10, .clock = odbox_manual_clock_clock(m)};
    odbox_purge_result *res = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_purge_run(f.r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(n, 1);
    /* notifications 3 SUCCEEDED and 4 EXPIRED (a batch each), events
     * 10 + 10 + 5, sentinels 10 + 10 + 0, no idempotency keys (one) */
    assert_result(&res[0], 0, 7, 25, 20, 1 + 1 + 3 + 3 + 1);
    odbox_purge_results_free(&res);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "1 = 1"), 0);
    ck_assert_int_eq(ofx_count(&f, 0, "event_notifications", "1 = 1"), 0);
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

typedef struct remaining {
    ofx *f;
    int64_t want;
} remaining;

static int events_left(void *arg)
{
    remaining *r = arg;
    return ofx_count(r->f, 0, "events", "1 = 1") == r->want;
}

START_TEST(purge_job_on_a_manual_clock)
{
    ofx f;
    ofx_open(&f, 1);
    ofx_event(&f, 0, "Deposited", NOW - 8 * DAY, 1, NULL);
    ofx_event(&f, 0, "Deposited", NOW - 6 * DAY, 1, NULL);
    ofx_event(&f, 0, "Deposited", NOW - 30 * DAY, 0, NULL); /* undelivered: never */
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(NOW, &m, NULL), ODBOX_OK);
    odbox_purge_options o = {.older_than_us = 7 * DAY, .batch_size = 1};
    odbox_job job;
    odbox_error e = {0};
    ck_assert_msg(odbox_purge_job(f.r, &o, odbox_schedule_fixed_delay(3600 * 1000), &job, &e) == ODBOX_OK, "%s",
                  e.message);
    /* named per eventlog: this test's is not the default one */
    char want[128];
    snprintf(want, sizeof want, "%s@%s", ODBOX_PURGE_JOB_NAME, odbox_shard_eventlog(odbox_registry_default_shard(f.r)));
    ck_assert_str_eq(job.name, want);
    char name[64];
    itest_name(name, sizeof name, "purge");
    job.name = name; /* runs beside other tests on the same scheduled_tasks */
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .clock = odbox_manual_clock_clock(m)};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    /* due at start: the 8-day-old event goes, by the job registry's clock */
    remaining r = {&f, 2};
    ck_assert(jt_wait_for(events_left, &r));
    jt_sleep_ms(200);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "1 = 1"), 2);
    /* two days and an hour later the next run takes the other */
    odbox_manual_clock_advance(m, 2 * DAY + 3600 * SEC);
    r.want = 1;
    ck_assert(jt_wait_for(events_left, &r));
    ck_assert_int_eq(ofx_count(&f, 0, "events", "delivered = FALSE"), 1);
    odbox_jobs_free(&j);
    odbox_job_info in = jt_must_row(&(jfx){.pool = odbox_shard_primary(ofx_shard(&f, 0))}, name);
    ck_assert_int_eq(in.consecutive_failures, 0);
    ck_assert_int_eq(in.last_success_us, NOW + 2 * DAY + 3600 * SEC);
    itest_exec(f.c[0], "DELETE FROM scheduled_tasks WHERE task_name = '%s'", name);
    odbox_purge_job_free(&job);
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

/* Keys and ages are measured in the database's time: a key written by a
 * process whose clock is two days behind, purged by one whose clock is
 * two days ahead, with a window of one day, stays: it is seconds old by
 * the database's time. So does a delivered event an hour old. Before,
 * the key's created_date was the writer's clock and the cutoff the
 * purger's. An explicit clock still decides where one is given. */
START_TEST(purge_measures_ages_in_the_database_time)
{
    ofx f;
    ofx_open(&f, 1);
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_executor_open("com.example.purge_keys", f.r, NULL, &exe, &e) == ODBOX_OK, "%s", e.message);
    odbox_clock_skew_set(-2 * DAY);
    odbox_tx *tx = NULL;
    odbox_tx_config keyed = {.idempotency_key = "purge-key-1"};
    int rc = odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &keyed, &tx, &e);
    if (rc == ODBOX_OK)
        rc = odbox_tx_commit(&tx, &e);
    odbox_clock_skew_set(0);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(ofx_count(&f, 0, "idempotency_keys", "1 = 1"), 1);
    /* a delivered event an hour old by the database's time */
    int64_t db_now = itest_db_now(f.c[0]);
    ofx_event(&f, 0, "Deposited", db_now - 3600 * SEC, 1, NULL);

    odbox_purge_options o = {.older_than_us = DAY, .keys_older_than_us = DAY};
    odbox_purge_result *res = NULL;
    size_t n = 0;
    odbox_clock_skew_set(2 * DAY);
    rc = odbox_purge_run(f.r, &o, &res, &n, &e);
    odbox_clock_skew_set(0);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(res[0].keys, 0);
    ck_assert_int_eq(res[0].events, 0);
    odbox_purge_results_free(&res);
    ck_assert_int_eq(ofx_count(&f, 0, "idempotency_keys", "1 = 1"), 1);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "delivered = TRUE"), 1);

    /* an explicit clock two days on: both go */
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(db_now + 2 * DAY, &m, NULL), ODBOX_OK);
    o.clock = odbox_manual_clock_clock(m);
    ck_assert_msg(odbox_purge_run(f.r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res[0].keys, 1);
    ck_assert_int_eq(res[0].events, 1);
    odbox_purge_results_free(&res);
    ck_assert_int_eq(ofx_count(&f, 0, "idempotency_keys", "1 = 1"), 0);
    odbox_manual_clock_free(&m);
    odbox_executor_free(&exe);
    ofx_close(&f);
}
END_TEST

START_TEST(purge_of_an_unreachable_shard)
{
    odbox_registry *r = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open_dsn(itest_unreachable_dsn("S3cretPw"), &r, &e), ODBOX_OK);
    odbox_purge_options o = {.older_than_us = DAY};
    odbox_purge_result *res = NULL;
    size_t n = 9;
    ck_assert_int_eq(odbox_purge_run(r, &o, &res, &n, &e), ODBOX_ECONNECT);
    ck_assert_msg(strstr(e.message, "shard 0.0") && !strstr(e.message, "S3cretPw"), "%s", e.message);
    /* what was done before the error: the shard it failed on, nothing removed */
    ck_assert_uint_eq(n, 1);
    assert_result(&res[0], 0, 0, 0, 0, 0);
    odbox_purge_results_free(&res);
    odbox_registry_free(&r);
}
END_TEST

/* A subscription named name of event type type on shard 0.0's eventlog,
 * retired or not, as a delivery's registration writes it. */
static void subscription(ofx *f, const char *name, const char *type, int retired)
{
    itest_exec(f->c[0], "INSERT INTO %s (name, created_date, retired_date) VALUES ('%s', CURRENT_TIMESTAMP, %s)",
               itest_evt(f->ev[0], "subscriptions"), name, retired ? "CURRENT_TIMESTAMP" : "NULL");
    itest_exec(f->c[0], "INSERT INTO %s (name, event_type) VALUES ('%s', '%s')",
               itest_evt(f->ev[0], "subscription_types"), name, type);
}

static int64_t undelivered(ofx *f, const char *type)
{
    char where[128];
    snprintf(where, sizeof where, "delivered = FALSE AND event_type = '%s'", type);
    return ofx_count(f, 0, "events", where);
}

/* An outbox read by CDC only: events of a type no subscription takes (or
 * only a retired one) are never delivered, so odbox_purge_run keeps them;
 * odbox_purge_unsubscribed_run removes those past its age, never one a
 * subscription still takes, nor anything else. As a job, when asked. */
START_TEST(unsubscribed_events_go_only_when_asked)
{
    ofx f;
    ofx_open(&f, 1);
    subscription(&f, "live", "Deposited", 0);
    subscription(&f, "gone", "Withdrawn", 1);
    ofx_event(&f, 0, "Deposited", NOW - 20 * DAY, 0, NULL); /* its fan-out waits: stays */
    ofx_event(&f, 0, "Withdrawn", NOW - 20 * DAY, 0, NULL); /* only a retired subscription: goes */
    for (int k = 0; k < 3; k++)
        ofx_event(&f, 0, "Unhandled", NOW - 10 * DAY + k * SEC, 0, NULL); /* go */
    ofx_event(&f, 0, "Unhandled", NOW - 3600 * SEC, 0, NULL);           /* too young */
    ofx_event(&f, 0, NULL, NOW - 20 * DAY, 0, NULL);                    /* a sentinel: not this purge's */
    ofx_event(&f, 0, "Deposited", NOW - 20 * DAY, 1, NULL);             /* delivered: not this purge's */
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(NOW, &m, NULL), ODBOX_OK);
    odbox_purge_options o = {.older_than_us = DAY, .batch_size = 2, .clock = odbox_manual_clock_clock(m)};
    odbox_purge_result *res = NULL;
    size_t n = 9;
    odbox_error e = {0};
    ck_assert_msg(odbox_purge_run(f.r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    odbox_purge_results_free(&res);
    ck_assert_int_eq(undelivered(&f, "Unhandled"), 4);
    ck_assert_int_eq(undelivered(&f, "Withdrawn"), 1);
    ofx_event(&f, 0, NULL, NOW - 20 * DAY, 0, NULL);
    ofx_event(&f, 0, "Deposited", NOW - 20 * DAY, 1, NULL);

    ck_assert_msg(odbox_purge_unsubscribed_run(f.r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(res[0].events, 4);
    ck_assert_int_eq(res[0].notifications + res[0].sentinels + res[0].keys + res[0].processes, 0);
    ck_assert_int_ge(res[0].batches, 3); /* 2 + 1 Unhandled, 1 Withdrawn, in batches of 2 */
    odbox_purge_results_free(&res);
    ck_assert_int_eq(undelivered(&f, "Unhandled"), 1);
    ck_assert_int_eq(undelivered(&f, "Withdrawn"), 0);
    ck_assert_int_eq(undelivered(&f, "Deposited"), 1);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "event_type IS NULL"), 1);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "delivered = TRUE"), 1);

    /* the job, asked: a day later the young one goes too */
    odbox_job job;
    odbox_purge_options jo = {.older_than_us = 7 * DAY};
    ck_assert_msg(odbox_purge_job(f.r, &jo, odbox_schedule_fixed_delay(3600 * 1000), &job, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(odbox_purge_job_unsubscribed(&job, DAY, &e), ODBOX_OK);
    char name[64];
    itest_name(name, sizeof name, "purge");
    job.name = name;
    odbox_manual_clock_advance(m, DAY);
    odbox_jobs_config cfg = {.poll_interval_ms = 20, .clock = odbox_manual_clock_clock(m)};
    odbox_jobs *j = jt_open_jobs(f.r, &cfg, &job);
    jt_start(j);
    remaining r = {&f, 1}; /* the delivered one and the sentinel go too: only the subscribed one stays */
    ck_assert(jt_wait_for(events_left, &r));
    odbox_jobs_free(&j);
    ck_assert_int_eq(undelivered(&f, "Deposited"), 1);
    ck_assert_int_eq(undelivered(&f, "Unhandled"), 0);
    itest_exec(f.c[0], "DELETE FROM scheduled_tasks WHERE task_name = '%s'", name);
    odbox_purge_job_free(&job);
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

typedef struct purging {
    ofx *f;
    odbox_purge_options o;
    odbox_purge_result *res;
    size_t n;
    odbox_error e;
    int rc;
} purging;

static void *purge_main(void *arg)
{
    purging *p = arg;
    p->rc = odbox_purge_run(p->f->r, &p->o, &p->res, &p->n, &p->e);
    return NULL;
}

/* Sessions of this database waiting for a row lock, as the server sees
 * them (up to 10 s); 1 when there are n. */
static int lock_waiters(ofx *f, int64_t n)
{
    for (int i = 0; i < 1000; i++, usleep(10000))
        if (itest_count(f->c[0], "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                                 "wait_event_type = 'Lock'") >= n)
            return 1;
    return 0;
}

/* A purge's DELETE that loses a deadlock against a transaction locking
 * the same rows in the other order (a locking read, as a handling
 * round's claim) was rolled back whole: it runs again
 * and the purge ends with every row deleted, instead of failing with
 * "deadlock detected" and leaving the rest for its next run. PostgreSQL
 * only: its waiter that waited first (the purge) detects the cycle and
 * gives way, where InnoDB picks the lighter transaction. */
START_TEST(a_purge_that_loses_a_deadlock_deletes_again)
{
    ofx f;
    ofx_open(&f, 1);
    char e1[37], e2[37];
    ofx_event(&f, 0, "Deposited", NOW - 10 * DAY, 1, e1);
    ofx_event(&f, 0, "Deposited", NOW - 9 * DAY, 1, e2);
    const char *events = itest_evt(f.ev[0], "events");
    odbox_error e = {0};
    /* the writer locks the newer event; the purge deletes the older one
     * first, then waits for the newer */
    ck_assert_int_eq(odbox_conn_begin(f.c[0], &e), ODBOX_OK);
    /* the writer never checks for the cycle itself: the purge, whose
     * check (deadlock_timeout, 1 s) comes first, is the one rolled back */
    itest_exec(f.c[0], "SET LOCAL deadlock_timeout = '60s'");
    itest_exec(f.c[0], "SELECT id FROM %s WHERE id = '%s' FOR UPDATE", events, e2);
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(NOW, &m, NULL), ODBOX_OK);
    purging p = {.f = &f, .o = {.older_than_us = 7 * DAY, .clock = odbox_manual_clock_clock(m)}};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, purge_main, &p), 0);
    ck_assert_msg(lock_waiters(&f, 1), "the purge never waited for the writer's row");
    /* the writer then locks the older event: a cycle, which the purge's
     * check finds; its DELETE is rolled back, and the writer goes on */
    itest_exec(f.c[0], "SELECT id FROM %s WHERE id = '%s' FOR UPDATE", events, e1);
    ck_assert_msg(lock_waiters(&f, 1), "the purge did not delete again");
    ck_assert_int_eq(odbox_conn_commit(f.c[0], &e), ODBOX_OK);
    pthread_join(t, NULL);
    ck_assert_msg(p.rc == ODBOX_OK, "%s: %s", odbox_errname(p.rc), p.e.message);
    ck_assert_uint_eq(p.n, 1);
    ck_assert_int_eq(p.res[0].events, 2);
    ck_assert_int_eq(ofx_count(&f, 0, "events", "1 = 1"), 0);
    odbox_purge_results_free(&p.res);
    odbox_manual_clock_free(&m);
    ofx_close(&f);
}
END_TEST

Suite *purge_suite(void)
{
    Suite *s = suite_create("purge");
    TCase *tc = tcase_create("purge");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, purge_removes_only_what_is_done);
    tcase_add_test(tc, purge_in_batches);
    tcase_add_test(tc, purge_job_on_a_manual_clock);
    tcase_add_test(tc, purge_measures_ages_in_the_database_time);
    tcase_add_test(tc, purge_of_an_unreachable_shard);
    tcase_add_test(tc, unsubscribed_events_go_only_when_asked);
    tcase_add_test(tc, a_purge_that_loses_a_deadlock_deletes_again);
    suite_add_tcase(s, tc);
    return s;
}
