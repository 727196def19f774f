/* odbox — integration tests of deliveries that overlap, on every dialect:
 * the fan-out reads from a lagging replica and the primary decides; two
 * fan-outs draining one backlog at once (a run taken over while the old
 * one still goes) write every notification once; two handling rounds on
 * the same rows at once call handlers twice at most and write each
 * outcome once (the guard turns the later one away). And a table that
 * grows under plans cached while it was small (PostgreSQL) is still
 * updated by id. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_handlers.h"

static const odbox_event_type EV_A = {"PaymentCaptured"};

/* A second registry on the same databases and eventlogs as f's. */
static odbox_registry *same_registry(dfx *f)
{
    odbox_shard_config sc[2];
    memset(sc, 0, sizeof sc);
    for (int i = 0; i < f->nshards; i++) {
        sc[i].id = (odbox_shard_id){0, i};
        sc[i].primary_dsn = itest_dsn(i + 1);
        sc[i].eventlog = f->ev[i];
    }
    odbox_registry_config cfg = {.shards = sc, .nshards = (size_t)f->nshards};
    odbox_registry *r = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_registry_open(&cfg, &r, &e) == ODBOX_OK, "%s", e.message);
    return r;
}

/* Copies event row ev into table (on conn c) with delivered as given. */
static void copy_event(odbox_conn *c, const char *table, const evrow *ev, int delivered)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (id, namespace, action_id, action_name, action_params, started_date, completion_date, "
             "model_id, model_type, event_type, payload, event_date, delivered) VALUES (%s, ?, %s, ?, %s, ?, ?, ?, ?, "
             "?, %s, ?, %s)",
             table, d->uuid_param, d->uuid_param, d->json_param, d->json_param, delivered ? "TRUE" : "FALSE");
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_prepare(c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    int k = 1;
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, k++, ev->id, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, k++, ev->ns, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, k++, ev->action_id, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, k++, ev->action_name, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_json(s, k++, ev->params, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, k++, ev->started, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, k++, ev->completion, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, k++, ev->model_id, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, k++, ev->model_type, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, k++, ev->event_type, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_json(s, k++, ev->payload, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, k++, ev->event_date, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);
}

START_TEST(the_fanout_reads_the_replica_and_the_primary_decides)
{
    dfx f;
    dfx_open(&f, 2, 0);
    const odbox_dialect *dl = odbox_conn_dialect(f.c[0]);
    if (!strcmp(dl->eventlog_container, "database")) {
        /* a MySQL/MariaDB eventlog is a database of the server: a replica
         * DSN on the same server sees the primary's tables, not a copy */
        printf("handlers: a lagging replica needs a second server here: not on %s\n", itest_dialect());
        dfx_close(&f);
        return;
    }
    /* shard 0.0 reads from a "replica": database 2, whose copy of the
     * eventlog (the one of shard 0.1) holds what the test puts there */
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .replica_dsn = itest_dsn(2), .eventlog = f.ev[0]};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e = {0};
    /* the replica's eventlog must have the primary's name */
    itest_drop_eventlog(f.c[1], f.ev[1]);
    snprintf(f.ev[1], sizeof f.ev[1], "%s", f.ev[0]);
    odbox_shard_config rs = {.id = {0, 0}, .primary_dsn = itest_dsn(2), .eventlog = f.ev[0]};
    odbox_registry_config rcfg = {.shards = &rs, .nshards = 1};
    odbox_registry *rr = NULL;
    ck_assert_int_eq(odbox_registry_open(&rcfg, &rr, &e), ODBOX_OK);
    ck_assert_msg(odbox_migrate_registry(rr, NULL, &e) == ODBOX_OK, "%s", e.message);
    odbox_registry_free(&rr);
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    odbox_executor *exe = open_exe(&f);
    hrec rec;
    hrec_init(&rec);
    hbeh h;
    hbeh_init(&h, &rec, NULL);
    odbox_handlers *hs = handlers_of(1, (const char *[]){"h"}, (const char *[]){EV_A.name}, (hbeh *[]){&h});
    odbox_delivery *d = NULL;
    ck_assert_int_eq(odbox_delivery_open(r, hs, NULL, &d, &e), ODBOX_OK);
    odbox_shard *s = odbox_registry_shard_at(r, 0);
    char a[3][37];
    emit_n(&f, exe, 0, &EV_A, 3, a);
    /* the replica has not seen them yet */
    odbox_delivery_round rd;
    round_ok(odbox_delivery_fanout_round(d, s, &rd, &e), &e);
    ck_assert_int_eq(rd.read, 0);
    ck_assert_int_eq(nrows(&f, 0, NULL), 0);
    /* now it shows a0 and a1, a1 as it was before the primary delivered it */
    evrow ev[4];
    int n = read_events(&f, 0, ev, 4);
    ck_assert_int_eq(n, 3);
    itest_exec(f.c[0], "UPDATE %s SET delivered = TRUE WHERE id = '%s'", etab(&f, 0), a[1]);
    for (int i = 0; i < n; i++)
        if (strcmp(ev[i].id, a[2]))
            copy_event(f.c[1], etab(&f, 1), &ev[i], 0);
    round_ok(odbox_delivery_fanout_round(d, s, &rd, &e), &e);
    ck_assert_int_eq(rd.read, 2);
    ck_assert_int_eq(rd.delivered, 1);
    ck_assert_int_eq(nrows(&f, 0, NULL), 1);
    ck_assert_str_eq(nstate(&f, 0, a[0], "h"), "PENDING");
    /* the context comes from the primary: the replica's row is not read */
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE event_id = '%s' AND action_name = 'EmitAction'",
                                 ntab(&f, 0), a[0]),
                     1);
    odbox_delivery_free(&d);
    odbox_handlers_free(&hs);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    hrec_destroy(&rec);
    dfx_close(&f);
}
END_TEST

/* ---- two at once --------------------------------------------------------------- */

typedef struct racer {
    odbox_delivery *d;
    odbox_registry *r;
    int handling;
    int rounds_failed;   /* deadlocks and lock timeouts: retried */
    char error[600];
} racer;

/* Rounds on every shard until two in a row find nothing. */
static void *race(void *arg)
{
    racer *x = arg;
    for (size_t i = 0; i < odbox_registry_shard_count(x->r); i++) {
        odbox_shard *s = odbox_registry_shard_at(x->r, i);
        for (int idle = 0, k = 0; idle < 2 && k < 500; k++) {
            odbox_delivery_round rd;
            odbox_error e = {0};
            int rc = x->handling ? odbox_delivery_handling_round(x->d, s, &rd, &e)
                                 : odbox_delivery_fanout_round(x->d, s, &rd, &e);
            if (rc == ODBOX_EDEADLOCK || rc == ODBOX_ETIMEDOUT || rc == ODBOX_EBUSY) {
                x->rounds_failed++;
                continue;
            }
            if (rc != ODBOX_OK) {
                snprintf(x->error, sizeof x->error, "%s: %s", odbox_errname(rc), e.message);
                return NULL;
            }
            idle = rd.read == 0 ? idle + 1 : 0;
        }
    }
    return NULL;
}

START_TEST(overlapping_fanouts_and_handlings_write_each_row_once)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    hrec rec;
    hrec_init(&rec);
    hbeh h1, h2;
    hbeh_init(&h1, &rec, NULL), hbeh_init(&h2, &rec, NULL);
    odbox_registry *r2 = same_registry(&f);
    odbox_handlers *hs[2];
    odbox_delivery *d[2];
    odbox_error e = {0};
    odbox_delivery_config cfg = {.fanout_batch = 7, .handling_batch = 5};
    for (int i = 0; i < 2; i++) {
        hs[i] = handlers_of(2, (const char *[]){"one", "two"}, (const char *[]){EV_A.name, EV_A.name},
                            (hbeh *[]){&h1, &h2});
        ck_assert_int_eq(odbox_delivery_open(i ? r2 : f.r, hs[i], &cfg, &d[i], &e), ODBOX_OK);
    }
    const int per_shard = 60;
    emit_n(&f, exe, 0, &EV_A, per_shard, NULL);
    emit_n(&f, exe, 1, &EV_A, per_shard, NULL);
    for (int handling = 0; handling < 2; handling++) {
        racer x[2] = {{d[0], f.r, handling, 0, ""}, {d[1], r2, handling, 0, ""}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(pthread_create(&t[i], NULL, race, &x[i]), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        for (int i = 0; i < 2; i++)
            ck_assert_msg(!x[i].error[0], "racer %d: %s", i, x[i].error);
        printf("handlers: two %s at once: %d and %d rounds failed (deadlock or lock wait) and were retried\n",
               handling ? "handlings" : "fan-outs", x[0].rounds_failed, x[1].rounds_failed);
    }
    for (int m = 0; m < 2; m++) {
        ck_assert_int_eq(nrows(&f, m, NULL), 2 * per_shard);
        ck_assert_int_eq(itest_count(f.c[m], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE AND event_type IS NOT NULL",
                                     etab(&f, m)),
                         0);
        /* both may have called a handler for one row; one outcome was
         * written, the other found the row changed */
        ck_assert_int_eq(nrows(&f, m, "state = 'SUCCEEDED' AND attempts = 1"), 2 * per_shard);
    }
    int calls = hrec_count(&rec, NULL);
    ck_assert_int_ge(calls, 4 * per_shard);
    ck_assert_int_le(calls, 8 * per_shard);
    printf("handlers: %d handler calls for %d notifications\n", calls, 4 * per_shard);
    for (int i = 0; i < 2; i++) {
        odbox_delivery_free(&d[i]);
        odbox_handlers_free(&hs[i]);
    }
    odbox_registry_free(&r2);
    odbox_executor_free(&exe);
    hrec_destroy(&rec);
    dfx_close(&f);
}
END_TEST

/* ---- plans cached while the table was small (PostgreSQL) ----------------------- */

/* The table's sequential scans so far. PostgreSQL 15 sends a session's
 * counts at most once a second, or after 10 s idle: every session of the
 * shard's pool (the rounds' ones among them) is asked to send them now,
 * and the pool is left in its order, so that the rounds after this run
 * on the session whose plans were cached before it. */
static int64_t seq_scans(hx *x)
{
    odbox_pool *pool = odbox_shard_primary(hx_shard(x, 0));
    odbox_conn *c[10] = {0};
    odbox_error e = {0};
    for (int i = 0; i < 10; i++) {
        ck_assert_msg(odbox_pool_acquire(pool, &c[i], &e) == ODBOX_OK, "%s", e.message);
        ck_assert_msg(odbox_conn_exec(c[i], "SELECT pg_stat_force_next_flush()", &e) == ODBOX_OK, "%s", e.message);
    }
    for (int i = 9; i >= 0; i--) /* the pool hands out its last released: the same order again */
        odbox_pool_release(pool, &c[i]);
    return itest_count(x->f.c[0], "SELECT COALESCE(SUM(seq_scan), 0) FROM pg_stat_user_tables WHERE schemaname = '%s' "
                                  "AND relname = 'event_notifications'", x->f.ev[0]);
}

/* Thirty rounds of ten rows while the table is small (PostgreSQL's plan
 * cache then keeps a generic plan for the claim's and the outcome's
 * UPDATE by ten ids: a scan of the whole table, cheapest while it was
 * one page), then 20,000 finished rows and ten more rounds: every claim
 * and outcome still finds its rows by id, no round scans the table
 * (without plans for the rows at hand: 20 scans, a claim of 100 rows took
 * 12 ms on a fresh eventlog's drain, and the drain 7,500 events/s). */
START_TEST(rounds_on_a_table_grown_under_cached_plans_read_by_id)
{
    hx x;
    hx_open(&x, 1);
    if (strcmp(itest_dialect(), "pg")) {
        /* MariaDB and MySQL plan each execution; SQLite's plans do not
         * weigh table sizes against a primary key lookup */
        printf("handlers: plans cached on a small table: no generic plans on %s\n", itest_dialect());
        hx_close(&x);
        return;
    }
    hbeh ok;
    hbeh_init(&ok, &x.rec, NULL);
    odbox_delivery_config cfg = {.handling_batch = 10};
    hx_deliver(&x, handlers_of(1, (const char *[]){"ok"}, (const char *[]){EV_A.name}, (hbeh *[]){&ok}), &cfg);
    odbox_delivery_round r;
    for (int i = 0; i < 30; i++) { /* > 5 executions on each of the pool's sessions the rounds use */
        emit_n(&x.f, x.exe, 0, &EV_A, 10, NULL);
        hx_fanout(&x, 0);
        r = hx_handle(&x, 0);
        ck_assert_int_eq(r.succeeded, 10);
    }
    itest_exec(x.f.c[0],
               "INSERT INTO %s (id, event_id, handler_name, namespace, action_id, action_name, action_params, "
               "started_date, completion_date, event_type, event_date, state, attempts, next_retry_at, created_date, "
               "updated_date) SELECT gen_random_uuid(), gen_random_uuid(), 'ok', 'default', gen_random_uuid(), 'Bulk', "
               "'{}', now(), now(), '%s', now(), 'SUCCEEDED', 1, now(), now(), now() FROM generate_series(1, 20000)",
               ntab(&x.f, 0), EV_A.name);
    for (int i = 0; i < 10; i++)
        emit_n(&x.f, x.exe, 0, &EV_A, 10, NULL);
    hx_fanout(&x, 0);
    int64_t before = seq_scans(&x);
    for (int i = 0; i < 10; i++) {
        r = hx_handle(&x, 0);
        ck_assert_int_eq(r.succeeded, 10);
    }
    int64_t scans = seq_scans(&x) - before;
    printf("handlers: 10 rounds on a table grown to 20,400 rows under plans cached at 300: %lld sequential scans\n",
           (long long)scans);
    ck_assert_int_eq(scans, 0);
    ck_assert_int_eq(nrows(&x.f, 0, "state = 'SUCCEEDED' AND handler_name = 'ok' AND action_name <> 'Bulk'"), 400);
    hx_close(&x);
}
END_TEST

Suite *handlers_overlap_suite(void)
{
    Suite *s = suite_create("handlers_overlap");
    TCase *tc = tcase_create("handlers_overlap");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_fanout_reads_the_replica_and_the_primary_decides);
    tcase_add_test(tc, overlapping_fanouts_and_handlings_write_each_row_once);
    tcase_add_test(tc, rounds_on_a_table_grown_under_cached_plans_read_by_id);
    suite_add_tcase(s, tc);
    return s;
}
