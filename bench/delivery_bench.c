/* odbox-bench-delivery — how fast the in-process delivery drains a
 * backlog: N undelivered events are written straight into the eventlog,
 * then fan-out rounds run until none is left (events/s), then handling
 * rounds with no-op handlers until no notification is due
 * (notifications/s). One shard, rounds on one thread, as a job execution
 * runs them per shard.
 *
 * Usage: odbox-bench-delivery [--dsn DSN] [--events N] [--handlers H] [--batch B]
 *                             [--handling-batch B] [--workers W] [--eventlog NAME] [--reuse]
 * --reuse keeps the eventlog's rows (its undelivered events are the
 * backlog), e.g. to measure a backlog the planner's statistics do not
 * know of yet.
 * Without --dsn the DSN comes from ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN.
 * Framework migrations are applied to the eventlog (default
 * bench_delivery), whose events and notifications are emptied first.
 * Exit status: 0, 1 on any error, 2 on a usage error. Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <odbox/odbox.h>
#include "bench_util.h"

#define FILL_ROWS 500 /* events per INSERT while filling */
#define TYPE "BenchDelivered"

static int noop(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)user, (void)err;
    return 0;
}

static int exec_sql(odbox_conn *c, const char *fmt, const char *a, const char *b, odbox_error *e)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, a, b);
    return odbox_conn_exec(c, sql, e);
}

/* n undelivered events of TYPE, FILL_ROWS per statement, one transaction
 * per statement. */
static int fill(odbox_conn *c, const char *events, long n, odbox_error *e)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    const char *forms[] = {d->uuid_param, "'com.example.bench'", d->uuid_param, "'BenchAction'",
                           d->json_param, d->typed_param[ODBOX_TYPE_TIMESTAMP], d->typed_param[ODBOX_TYPE_TIMESTAMP],
                           "?", "'BenchModel'", "'" TYPE "'", d->json_param, d->typed_param[ODBOX_TYPE_TIMESTAMP],
                           "FALSE"};
    int rc = ODBOX_OK;
    int64_t t = 1700000000000000LL;
    for (long done = 0; done < n && rc == ODBOX_OK;) {
        int rows = n - done < FILL_ROWS ? (int)(n - done) : FILL_ROWS;
        char *values = odbox_sql_rows(rows, forms, 13);
        size_t len = strlen(values) + 512;
        char *sql = malloc(len);
        snprintf(sql, len,
                 "INSERT INTO %s (id, namespace, action_id, action_name, action_params, started_date, "
                 "completion_date, model_id, model_type, event_type, payload, event_date, delivered) VALUES %s",
                 events, values);
        free(values);
        odbox_stmt *s = NULL;
        rc = odbox_stmt_prepare(c, sql, &s, e);
        free(sql);
        int k = 1;
        for (int r = 0; r < rows && rc == ODBOX_OK; r++, t++) {
            char id[37], aid[37], mid[37];
            odbox_uuid_v4(id);
            odbox_uuid_v4(aid);
            odbox_uuid_v4(mid);
            if ((rc = odbox_stmt_bind_uuid(s, k++, id, e)) || (rc = odbox_stmt_bind_uuid(s, k++, aid, e)) ||
                (rc = odbox_stmt_bind_json(s, k++, "{\"wallet\": \"w-1\", \"amount\": 125}", e)) ||
                (rc = odbox_stmt_bind_timestamp(s, k++, t, e)) || (rc = odbox_stmt_bind_timestamp(s, k++, t, e)) ||
                (rc = odbox_stmt_bind_text(s, k++, mid, e)) ||
                (rc = odbox_stmt_bind_json(s, k++, "{\"amount\": 125, \"currency\": \"EUR\", \"note\": \"a "
                                                   "payload of about a hundred bytes, like most events\"}",
                                           e)))
                break;
            rc = odbox_stmt_bind_timestamp(s, k++, t, e);
        }
        if (rc == ODBOX_OK && (rc = odbox_conn_begin(c, e)) == ODBOX_OK &&
            (rc = odbox_stmt_execute(s, e)) == ODBOX_OK)
            rc = odbox_conn_commit(c, e);
        else if (odbox_conn_in_transaction(c))
            odbox_conn_rollback(c, NULL);
        odbox_stmt_free(&s);
        done += rows;
    }
    return rc;
}

int main(int argc, char **argv)
{
    const char *dsn = getenv("ODBOX_BENCH_DSN"), *eventlog = "bench_delivery";
    if (!dsn)
        dsn = getenv("ODBOX_TEST_PG_DSN");
    long events = 100000, handlers = 1, batch = 0, hbatch = 0, workers = 0;
    int reuse = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--reuse")) {
            reuse = 1;
            i--;
            continue;
        }
        if (!v) {
            fprintf(stderr, "odbox-bench-delivery: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--dsn"))
            dsn = v;
        else if (!strcmp(a, "--events"))
            events = parse_long(argv[0], a, v, 1, 100000000);
        else if (!strcmp(a, "--handlers"))
            handlers = parse_long(argv[0], a, v, 1, 64);
        else if (!strcmp(a, "--batch"))
            batch = parse_long(argv[0], a, v, 1, 10000);
        else if (!strcmp(a, "--handling-batch"))
            hbatch = parse_long(argv[0], a, v, 1, 10000);
        else if (!strcmp(a, "--workers"))
            workers = parse_long(argv[0], a, v, 1, 1024);
        else if (!strcmp(a, "--eventlog"))
            eventlog = v;
        else {
            fprintf(stderr, "usage: odbox-bench-delivery [--dsn DSN] [--events N] [--handlers H] [--batch B] "
                            "[--handling-batch B] [--workers W] [--eventlog NAME] [--reuse]\n");
            return 2;
        }
    }
    if (!dsn) {
        fprintf(stderr, "odbox-bench-delivery: no DSN (--dsn, ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN)\n");
        return 2;
    }
    odbox_error e = {0};
    odbox_registry *r = NULL;
    odbox_handlers *h = NULL;
    odbox_delivery *d = NULL;
    odbox_conn *c = NULL;
    odbox_shard_config sc = {.primary_dsn = dsn, .eventlog = eventlog};
    odbox_registry_config rcfg = {.shards = &sc, .nshards = 1};
    int rc = odbox_registry_open(&rcfg, &r, &e);
    odbox_migrate_options mo = {0};
    if (rc == ODBOX_OK)
        rc = odbox_migrate_registry(r, &mo, &e);
    odbox_shard *s = rc == ODBOX_OK ? odbox_registry_shard_at(r, 0) : NULL;
    char ev[160] = "", nt[160] = "";
    if (rc == ODBOX_OK && !reuse && (rc = odbox_pool_acquire(odbox_shard_primary(s), &c, &e)) == ODBOX_OK) {
        odbox_dialect_eventlog_table(odbox_conn_dialect(c), eventlog, "events", ev, sizeof ev);
        odbox_dialect_eventlog_table(odbox_conn_dialect(c), eventlog, "event_notifications", nt, sizeof nt);
        if ((rc = exec_sql(c, "DELETE FROM %s%s", nt, "", &e)) == ODBOX_OK)
            rc = exec_sql(c, "DELETE FROM %s%s", ev, "", &e);
    }
    uint64_t t0 = now_ns();
    if (rc == ODBOX_OK && !reuse)
        rc = fill(c, ev, events, &e);
    double fill_s = (double)(now_ns() - t0) / 1e9;
    if (c)
        odbox_pool_release(odbox_shard_primary(s), &c);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_new(&h, &e);
    for (long i = 0; i < handlers && rc == ODBOX_OK; i++) {
        char name[32];
        snprintf(name, sizeof name, "bench-%ld", i + 1);
        odbox_handler hd = {name, NULL, TYPE, noop, NULL};
        rc = odbox_handlers_add(h, &hd, &e);
    }
    odbox_delivery_config cfg = {.fanout_batch = (int)batch, .handling_batch = (int)hbatch, .workers = (int)workers,
                                 .cross_process_wakeup = -1};
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(r, h, &cfg, &d, &e);
    if (rc == ODBOX_OK)
        printf("odbox-bench-delivery: %s, %ld events %s in %.1f s; %ld handler(s), fan-out batch %ld, "
               "handling batch %ld, workers %ld\n",
               odbox_pool_dialect(odbox_shard_primary(s))->name, reuse ? 0 : events, reuse ? "(reused)" : "written",
               fill_s, handlers, batch ? batch : 200, hbatch ? hbatch : 100, workers ? workers : 8);
    double u0, s0, u1, s1;
    for (int job = 0; job < 2 && rc == ODBOX_OK; job++) {
        uint64_t start = now_ns();
        cpu_seconds(&u0, &s0);
        size_t total = 0, rounds = 0;
        for (;;) {
            odbox_delivery_round rd;
            rc = job ? odbox_delivery_handling_round(d, s, &rd, &e) : odbox_delivery_fanout_round(d, s, &rd, &e);
            if (rc != ODBOX_OK || rd.read == 0)
                break;
            total += job ? rd.succeeded : rd.delivered;
            rounds++;
        }
        double secs = (double)(now_ns() - start) / 1e9;
        cpu_seconds(&u1, &s1);
        if (rc == ODBOX_OK)
            printf("  %s: %zu %s in %.2f s, %zu rounds: %.0f/s (this process: %.0f%% of one core)\n",
                   job ? "handling" : "fan-out", total, job ? "notifications" : "events", secs, rounds,
                   (double)total / secs, 100 * (u1 - u0 + s1 - s0) / secs);
    }
    if (rc != ODBOX_OK)
        fprintf(stderr, "odbox-bench-delivery: %s: %s\n", odbox_errname(rc), e.message);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    odbox_registry_free(&r);
    return rc == ODBOX_OK ? 0 : 1;
}
