/* odbox-bench-delivery — how fast the in-process delivery drains a
 * backlog, and whether a round's cost grows with the finished rows in the
 * tables. N undelivered events are written straight into the eventlog
 * (the rows the executor writes, 500 per INSERT), then one of:
 *  --mode rounds (default): fan-out rounds on this thread until no event
 *    is left (events/s), then handling rounds with no-op handlers until no
 *    notification is due (notifications/s). One shard, as a job execution
 *    runs them per shard.
 *  --mode drain: both jobs through a job registry, at the same time, as a
 *    service runs them, until every notification's success is written:
 *    events/s from the start of the jobs to that point.
 *  --mode scale: rounds on two eventlogs of one database, NAME (empty but
 *    for the rounds' events) and NAME_old (with --old delivered events and
 *    as many SUCCEEDED notifications, written by the server), in turns:
 *    the median time of a full fan-out round and of a full handling round
 *    on each, and their ratio old/empty, after one unrecorded turn on
 *    each. Prints the plans of the rounds' reads on NAME_old.
 *  --mode fill: only writes the backlog (for a raw client to drain).
 *  --mode fanout: writes the backlog (the tables emptied by TRUNCATE
 *    first; with --reuse, neither), then fan-out rounds on this thread
 *    until no event is left: a backlog of notifications for --mode handle
 *    and --mode raw (issue 19).
 *  --mode handle: one worker process of several sharing the eventlog:
 *    only the handling (by leased claims, as every process runs it), no
 *    fan-out, on rows already there. Prints "ready", waits for the file
 *    --go to exist, starts the job registry, runs until the file --stop
 *    exists, then prints one JSON line: its successes, rounds, stale
 *    outcomes, logged warnings, and the wall-clock times (CLOCK_REALTIME,
 *    ns) of its start and of its last round with a success.
 *  --mode raw: the same claim work by one plain client on one ODBC
 *    connection (odbox's db layer only: no job, no handler threads, no
 *    JSON): per round, in one transaction begun as odbox begins a claim
 *    (the dialect's delivery_isolation_sql before the begin, its
 *    claim_begin_sql after it), the due read of the handling (FOR UPDATE
 *    SKIP LOCKED) and the claim UPDATE by id (lease and next_retry_at,
 *    as odbox's), then the outcome UPDATE (SUCCEEDED) by id guarded by
 *    lease_owner; with --handler-ms, a sleep
 *    of ceil(rows / workers) x that between the two, the time W handler
 *    threads would take. Same "ready"/--go protocol; ends at the first
 *    round that reads nothing, then prints the JSON line.
 *  --mode due-sql: prints what a claim runs for the dialect of the DSN,
 *    one statement a line, each after a tag and a tab: "isolation" (the
 *    dialect's delivery_isolation_sql, before the begin) and "begin" (its
 *    claim_begin_sql, first in the transaction), where the dialect has
 *    them, then "due" for each due read (a copy of due_sql in
 *    src/delivery_claim.c: one handler name, no limit, the order check, the
 *    database's now); connects to nothing.
 *
 * Usage: odbox-bench-delivery [--dsn DSN] [--replica DSN]
 *                             [--mode rounds|drain|scale|fill|fanout|handle|raw|due-sql] [--events N]
 *                             [--handlers H] [--batch B] [--handling-batch B] [--handling-loops L]
 *                             [--workers W]
 *                             [--eventlog NAME] [--reuse] [--ordered] [--old N] [--repeat R]
 *                             [--handler-ms MS] [--go FILE] [--stop FILE]
 * --reuse keeps the eventlog's rows (its undelivered events are the
 * backlog), e.g. to measure a backlog the planner's statistics do not
 * know of yet. --ordered makes every handler ordered (each event has a
 * model of its own, so every row is its model's oldest: what the order
 * costs a claim, not a wait). --old (scale; default 1000000) and
 * --repeat (scale: turns per eventlog; default 5).
 * Without --dsn the DSN comes from ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN.
 * --replica: the shard reads undelivered events there (e.g. a streaming
 * standby of DSN: tests/db/start-standby.sh).
 * Framework migrations are applied to the eventlog (default
 * bench_delivery), whose events and notifications are emptied first.
 * Exit status: 0, 1 on any error, 2 on a usage error. Not a test.
 * --mode raw and --mode due-sql are in delivery_raw.c. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <odbox/odbox.h>
#include "bench_util.h"
#include "delivery_bench.h"

#define FILL_ROWS 500 /* events per INSERT while filling */
#define TYPE "BenchDelivered"
#define DRAIN_MAX_S 900 /* a drain that takes longer fails */

/* What the hook counts while the jobs run. */
typedef struct counts {
    atomic_long delivered, succeeded, rounds[2], statements[2], stale, empty;
    _Atomic int64_t last_ok_ns; /* CLOCK_REALTIME of the last handling round with a success */
} counts;

int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int noop(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)user, (void)err;
    return 0;
}

/* A handler that takes user (a long *) milliseconds. */
static int sleeper(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)env, (void)err;
    sleep_ms(*(const long *)user);
    return 0;
}

/* Warnings and errors the library logs (failed rounds, calls past their
 * lease), counted; the first few go to stderr. */
atomic_long log_warnings, log_retries;
static void count_log(void *ud, odbox_log_level level, const char *message)
{
    (void)ud;
    if (level < ODBOX_LOG_WARN)
        return;
    long n = atomic_fetch_add(&log_warnings, 1);
    if (strstr(message, "40001") || strstr(message, "eadlock") || strstr(message, "serializ"))
        atomic_fetch_add(&log_retries, 1);
    if (n < 5)
        fprintf(stderr, "odbox-bench-delivery[%ld]: %s: %s\n", (long)getpid(), level == ODBOX_LOG_WARN ? "warn" : "error",
                message);
}

static int count_round(void *ud, odbox_delivery_point at, odbox_shard *shard, odbox_conn *conn,
                       const odbox_delivery_round *rd)
{
    (void)shard, (void)conn;
    counts *c = ud;
    if (at != ODBOX_DELIVERY_ROUND_DONE)
        return 0;
    int j = rd->job == ODBOX_DELIVERY_HANDLING;
    atomic_fetch_add(&c->rounds[j], 1);
    atomic_fetch_add(&c->statements[j], rd->statements);
    if (j) {
        atomic_fetch_add(&c->succeeded, (long)rd->succeeded);
        atomic_fetch_add(&c->stale, (long)rd->stale);
        if (rd->read == 0)
            atomic_fetch_add(&c->empty, 1);
        if (rd->succeeded)
            atomic_store(&c->last_ok_ns, wall_ns());
    } else
        atomic_fetch_add(&c->delivered, (long)rd->delivered);
    return 0;
}

static int exec_sql(odbox_conn *c, const char *fmt, const char *a, const char *b, odbox_error *e)
{
    char sql[1024];
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
    int64_t t = (int64_t)time(NULL) * 1000000 - n; /* dated now: due at once */
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

/* One side of the benchmark: a registry on one eventlog, migrated, its
 * delivery of o->handlers no-op handlers. */
typedef struct side {
    odbox_registry *r;
    odbox_handlers *h;
    odbox_delivery *d;
    odbox_shard *s;
    char ev[160], nt[160];
    counts n;
} side;

static int side_open(side *sd, const opts *o, const char *eventlog, odbox_error *e)
{
    odbox_shard_config sc = {.primary_dsn = o->dsn, .replica_dsn = o->replica, .eventlog = eventlog};
    odbox_registry_config rcfg = {.shards = &sc, .nshards = 1};
    odbox_migrate_options mo = {0};
    int rc = odbox_registry_open(&rcfg, &sd->r, e);
    if (rc == ODBOX_OK)
        rc = odbox_migrate_registry(sd->r, &mo, e);
    if (rc != ODBOX_OK)
        return rc;
    sd->s = odbox_registry_shard_at(sd->r, 0);
    const odbox_dialect *d = odbox_pool_dialect(odbox_shard_primary(sd->s));
    odbox_dialect_eventlog_table(d, eventlog, "events", sd->ev, sizeof sd->ev);
    odbox_dialect_eventlog_table(d, eventlog, "event_notifications", sd->nt, sizeof sd->nt);
    rc = odbox_handlers_new(&sd->h, e);
    for (long i = 0; i < o->handlers && rc == ODBOX_OK; i++) {
        char name[32];
        snprintf(name, sizeof name, "bench-%ld", i + 1);
        odbox_handler hd = {.name = name, .event_type = TYPE, .handle = o->handler_ms ? sleeper : noop,
                            .user = (void *)&o->handler_ms};
        rc = odbox_handlers_add(sd->h, &hd, e);
        if (rc == ODBOX_OK && o->ordered)
            rc = odbox_handlers_set_options(sd->h, name, &(odbox_handler_options){.ordered = 1}, e);
    }
    odbox_delivery_config cfg = {.fanout_batch = (int)o->batch, .handling_batch = (int)o->hbatch,
                                 .workers = (int)o->workers, .handling_loops = (int)o->loops,
                                 .cross_process_wakeup = -1, .hook = count_round,
                                 .hook_ud = &sd->n};
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(sd->r, sd->h, &cfg, &sd->d, e);
    return rc;
}

static void side_close(side *sd)
{
    odbox_delivery_free(&sd->d);
    odbox_handlers_free(&sd->h);
    odbox_registry_free(&sd->r);
}

/* Runs fn(c, ...) on a pooled primary connection of sd. */
static int with_conn(side *sd, int (*fn)(side *, odbox_conn *, const void *, odbox_error *), const void *arg,
                     odbox_error *e)
{
    odbox_pool *p = odbox_shard_primary(sd->s);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(p, &c, e);
    if (rc == ODBOX_OK)
        rc = fn(sd, c, arg, e);
    if (c)
        odbox_pool_release(p, &c);
    return rc;
}

static int do_empty(side *sd, odbox_conn *c, const void *arg, odbox_error *e)
{
    (void)arg;
    int rc = exec_sql(c, "DELETE FROM %s%s", sd->nt, "", e);
    return rc == ODBOX_OK ? exec_sql(c, "DELETE FROM %s%s", sd->ev, "", e) : rc;
}

static int do_fill(side *sd, odbox_conn *c, const void *arg, odbox_error *e)
{
    return fill(c, sd->ev, *(const long *)arg, e);
}

/* Rounds of one job on sd until one reads nothing; with times, each
 * round's duration (ns) is stored there (at most max). Returns the rounds
 * that did work, or a negative ODBOX_E*. */
static long run_rounds(side *sd, int job, size_t *total, uint64_t *times, long max, odbox_error *e)
{
    long rounds = 0;
    *total = 0;
    for (;;) {
        odbox_delivery_round rd;
        uint64_t t0 = now_ns();
        int rc = job ? odbox_delivery_handling_round(sd->d, sd->s, &rd, e)
                     : odbox_delivery_fanout_round(sd->d, sd->s, &rd, e);
        if (rc != ODBOX_OK)
            return rc;
        if (rd.read == 0)
            return rounds;
        if (times && rounds < max)
            times[rounds] = now_ns() - t0;
        *total += job ? rd.succeeded : rd.delivered;
        rounds++;
    }
}

static int mode_rounds(side *sd, odbox_error *e)
{
    int rc = ODBOX_OK;
    for (int job = 0; job < 2 && rc == ODBOX_OK; job++) {
        double u0, s0, u1, s1;
        uint64_t start = now_ns();
        cpu_seconds(&u0, &s0);
        size_t total = 0;
        long stm0 = atomic_load(&sd->n.statements[job]);
        long rounds = run_rounds(sd, job, &total, NULL, 0, e);
        if (rounds < 0)
            return (int)rounds;
        double secs = (double)(now_ns() - start) / 1e9;
        cpu_seconds(&u1, &s1);
        long stm = atomic_load(&sd->n.statements[job]) - stm0;
        printf("  %s: %zu %s in %.2f s, %ld rounds, %.2f statements/round: %.0f/s (this process: %.0f%% of one "
               "core)\n",
               job ? "handling" : "fan-out", total, job ? "notifications" : "events", secs, rounds,
               rounds ? (double)stm / (double)(rounds + 1) : 0.0, (double)total / secs,
               100 * (u1 - u0 + s1 - s0) / secs);
    }
    return rc;
}

/* Both jobs through a job registry until every notification's success is
 * written. */
static int mode_drain(side *sd, const opts *o, odbox_error *e)
{
    odbox_jobs *jobs = NULL;
    odbox_jobs_config jc = {.poll_interval_ms = 100};
    long want = o->events * o->handlers;
    int rc = odbox_jobs_open(sd->r, &jc, &jobs, e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(sd->d, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, e);
    double u0, s0, u1, s1, server0 = server_cpu_seconds();
    cpu_seconds(&u0, &s0);
    uint64_t start = now_ns(), fanout_done = 0;
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, e);
    while (rc == ODBOX_OK && atomic_load(&sd->n.succeeded) < want) {
        if (!fanout_done && atomic_load(&sd->n.delivered) >= o->events)
            fanout_done = now_ns();
        if (now_ns() - start > (uint64_t)DRAIN_MAX_S * 1000000000u) {
            snprintf(e->message, sizeof e->message, "not drained after %d s: %ld of %ld notifications succeeded",
                     DRAIN_MAX_S, atomic_load(&sd->n.succeeded), want);
            rc = e->code = ODBOX_ETIMEDOUT;
            break;
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    double secs = (double)(now_ns() - start) / 1e9, server1 = server_cpu_seconds();
    cpu_seconds(&u1, &s1);
    odbox_error se = {0};
    if (jobs && odbox_jobs_stop(jobs, &se) != ODBOX_OK && rc == ODBOX_OK) {
        *e = se;
        rc = se.code;
    }
    odbox_jobs_free(&jobs);
    if (rc != ODBOX_OK)
        return rc;
    long st = atomic_load(&sd->n.statements[0]) + atomic_load(&sd->n.statements[1]);
    printf("  drain: %ld events, %ld notifications succeeded in %.2f s (fan-out done after %.2f s): %.0f events/s; "
           "rounds fan-out %ld, handling %ld; %.3f statements/event (this process: %.0f%% of one core)\n",
           o->events, atomic_load(&sd->n.succeeded), secs,
           fanout_done ? (double)(fanout_done - start) / 1e9 : secs, (double)o->events / secs,
           atomic_load(&sd->n.rounds[0]), atomic_load(&sd->n.rounds[1]), (double)st / (double)o->events,
           100 * (u1 - u0 + s1 - s0) / secs);
    /* CPU per event: on a machine of C cores the drain cannot pass
     * C / (server + client) events per second */
    if (server0 >= 0 && server1 >= 0)
        printf("  CPU per event: server %.0f us, this process %.0f us (ODBOX_BENCH_SERVER_PID %s and its children); "
               "on %ld cores at most %.0f events/s\n",
               (server1 - server0) * 1e6 / (double)o->events, (u1 - u0 + s1 - s0) * 1e6 / (double)o->events,
               getenv("ODBOX_BENCH_SERVER_PID"), sysconf(_SC_NPROCESSORS_ONLN),
               (double)sysconf(_SC_NPROCESSORS_ONLN) * (double)o->events / (server1 - server0 + u1 - u0 + s1 - s0));
    return ODBOX_OK;
}

/* ---- scale -------------------------------------------------------------------- */

/* An expression of a fresh id, per dialect (old rows only: nothing reads
 * them back). */
static const char *uuid_expr(const odbox_dialect *d)
{
    if (!strcmp(d->name, "postgresql"))
        return "gen_random_uuid()";
    if (!strcmp(d->name, "sqlite"))
        return "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || "
               "'-a' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))";
    return "UUID()";
}

#define OLD_CHUNK 100000L
#define OLD_DATE "'2020-01-01 00:00:00.000000'"

/* n delivered events of TYPE and n SUCCEEDED notifications of handler
 * bench-1, dated 2020, made by the server (a recursive counter), OLD_CHUNK
 * rows per transaction. */
static int do_old(side *sd, odbox_conn *c, const void *arg, odbox_error *e)
{
    long n = *(const long *)arg;
    const odbox_dialect *d = odbox_conn_dialect(c);
    const char *id = uuid_expr(d);
    int rc = ODBOX_OK;
    if (strstr(id, "UUID()") && /* MariaDB's limit, else MySQL's (both 1000 by default) */
        odbox_conn_exec(c, "SET SESSION max_recursive_iterations = 1000000000", NULL) != ODBOX_OK &&
        (rc = odbox_conn_exec(c, "SET SESSION cte_max_recursion_depth = 100000000", e)) != ODBOX_OK)
        return rc;
    for (long done = 0; done < n && rc == ODBOX_OK; done += OLD_CHUNK) {
        long k = n - done < OLD_CHUNK ? n - done : OLD_CHUNK;
        char seq[160], sql[2048];
        snprintf(seq, sizeof seq, "WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %ld)",
                 k);
        const char *ctx = "'com.example.bench', %s, 'BenchAction', '{\"amount\": 125}', " OLD_DATE ", " OLD_DATE
                          ", 'm-1', 'BenchModel', '" TYPE "', '{\"amount\": 125}', " OLD_DATE;
        char cols[512];
        snprintf(cols, sizeof cols, ctx, id);
        if ((rc = odbox_conn_begin(c, e)) != ODBOX_OK)
            break;
        snprintf(sql, sizeof sql,
                 "INSERT INTO %s (id, namespace, action_id, action_name, action_params, started_date, "
                 "completion_date, model_id, model_type, event_type, payload, event_date, delivered) "
                 "%s SELECT %s, %s, TRUE FROM s",
                 sd->ev, seq, id, cols);
        if ((rc = odbox_conn_exec(c, sql, e)) == ODBOX_OK) {
            snprintf(sql, sizeof sql,
                     "INSERT INTO %s (id, event_id, handler_name, namespace, action_id, action_name, action_params, "
                     "started_date, completion_date, model_id, model_type, event_type, payload, event_date, state, "
                     "attempts, next_retry_at, created_date, updated_date) %s SELECT %s, %s, 'bench-1', %s, "
                     "'SUCCEEDED', 1, " OLD_DATE ", " OLD_DATE ", " OLD_DATE " FROM s",
                     sd->nt, seq, id, id, cols);
            rc = odbox_conn_exec(c, sql, e);
        }
        if (rc == ODBOX_OK)
            rc = odbox_conn_commit(c, e);
        else
            odbox_conn_rollback(c, NULL);
    }
    return rc;
}

static int do_analyze(side *sd, odbox_conn *c, const void *arg, odbox_error *e)
{
    (void)arg;
    const char *fmt = strcmp(odbox_conn_dialect(c)->name, "postgresql") && strcmp(odbox_conn_dialect(c)->name,
                                                                                  "sqlite")
                          ? "ANALYZE TABLE %s, %s"
                          : "ANALYZE %s";
    int rc = exec_sql(c, fmt, sd->ev, sd->nt, e);
    if (rc == ODBOX_OK && !strstr(fmt, "TABLE"))
        rc = exec_sql(c, fmt, sd->nt, "", e);
    return rc;
}

/* Prints the plan of sql, every column of every row. */
static int do_explain(side *sd, odbox_conn *c, const void *arg, odbox_error *e)
{
    (void)sd;
    const char *what = ((const char *const *)arg)[0], *q = ((const char *const *)arg)[1];
    char sql[2600];
    snprintf(sql, sizeof sql, "%s %s", strcmp(odbox_conn_dialect(c)->name, "sqlite") ? "EXPLAIN"
                                                                                       : "EXPLAIN QUERY PLAN", q);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, e);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, e);
    printf("  plan of %s:\n    %s\n", what, q);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, e)) == 1) {
        printf("    |");
        for (int i = 1; i <= odbox_stmt_column_count(s); i++) {
            const char *v;
            int null;
            if (odbox_stmt_get_text(s, i, &v, &null, e) == ODBOX_OK)
                printf(" %s |", null ? "-" : v);
        }
        printf("\n");
        rc = ODBOX_OK;
    }
    odbox_stmt_free(&s);
    return rc < 0 ? rc : ODBOX_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* One turn on a side: a fresh backlog of ten fan-out batches, its
 * fan-out rounds and its handling rounds, each round timed. */
static int scale_turn(side *sd, const opts *o, uint64_t *times[2], long *nt, odbox_error *e)
{
    long n = 10 * (o->batch ? o->batch : 200);
    int rc = with_conn(sd, do_fill, &n, e);
    for (int job = 0; job < 2 && rc == ODBOX_OK; job++) {
        size_t total;
        long r = run_rounds(sd, job, &total, times[job] + nt[job], 1000, e);
        if (r < 0)
            return (int)r;
        nt[job] += r;
    }
    return rc;
}

static double median_ms(uint64_t *v, long n)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return (double)v[n / 2] / 1e6;
}

static int mode_scale(side *sides, const opts *o, odbox_error *e)
{
    long cap = o->repeat * 1000;
    uint64_t *times[2][2];
    long nt[2][2] = {{0, 0}, {0, 0}};
    int rc = ODBOX_OK;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (!(times[i][j] = calloc((size_t)cap, sizeof **times)))
                rc = e->code = ODBOX_ENOMEM;
    uint64_t t0 = now_ns();
    for (int i = 0; i < 2 && rc == ODBOX_OK; i++)
        rc = with_conn(&sides[i], do_empty, NULL, e);
    if (rc == ODBOX_OK && (rc = with_conn(&sides[1], do_old, &o->old, e)) == ODBOX_OK)
        rc = with_conn(&sides[1], do_analyze, NULL, e);
    if (rc == ODBOX_OK)
        rc = with_conn(&sides[0], do_analyze, NULL, e);
    if (rc == ODBOX_OK)
        printf("  %s: %ld delivered events and %ld SUCCEEDED notifications written and analyzed in %.1f s\n",
               sides[1].ev, o->old, o->old, (double)(now_ns() - t0) / 1e9);
    for (long k = -1; k < o->repeat && rc == ODBOX_OK; k++)
        for (int i = 0; i < 2 && rc == ODBOX_OK; i++) {
            int s = (int)((k + 2) % 2) ^ i; /* who goes first alternates */
            if (nt[s][0] + 1000 > cap || nt[s][1] + 1000 > cap)
                break;
            long keep[2] = {nt[s][0], nt[s][1]};
            rc = scale_turn(&sides[s], o, times[s], nt[s], e);
            if (k < 0) /* a warm-up turn: statements prepared, caches filled */
                nt[s][0] = keep[0], nt[s][1] = keep[1];
        }
    if (rc == ODBOX_OK) {
        double m[2][2];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                m[i][j] = median_ms(times[i][j], nt[i][j]);
        printf("  %-10s %-28s %-28s %s\n", "round", "empty tables (median ms)", "with old rows (median ms)",
               "old/empty");
        for (int j = 0; j < 2; j++)
            printf("  %-10s %-28.3f %-28.3f %.3f   (%ld and %ld rounds of %ld)\n", j ? "handling" : "fan-out",
                   m[0][j], m[1][j], m[0][j] > 0 ? m[1][j] / m[0][j] : 0.0, nt[0][j], nt[1][j],
                   j ? (o->hbatch ? o->hbatch : 100) : (o->batch ? o->batch : 200));
        const odbox_dialect *d = odbox_pool_dialect(odbox_shard_primary(sides[1].s));
        char q[3][768];
        snprintf(q[0], sizeof q[0],
                 "SELECT id, event_type FROM %s WHERE delivered = FALSE AND event_type = '" TYPE
                 "' ORDER BY event_date LIMIT 200",
                 sides[1].ev);
        if (d->has_partial_indexes)
            snprintf(q[1], sizeof q[1],
                     "SELECT id FROM %s WHERE state IN ('PENDING', 'FAILED') AND next_retry_at <= "
                     "'2030-01-01 00:00:00' ORDER BY next_retry_at LIMIT 100",
                     sides[1].nt);
        else
            snprintf(q[1], sizeof q[1],
                     "SELECT id FROM %s WHERE state IN ('PENDING', 'FAILED') AND state = 'PENDING' AND "
                     "next_retry_at <= '2030-01-01 00:00:00' ORDER BY next_retry_at LIMIT 100",
                     sides[1].nt);
        snprintf(q[2], sizeof q[2],
                 "UPDATE %s SET state = 'SUCCEEDED' WHERE id IN ('00000000-0000-4000-8000-000000000001', "
                 "'00000000-0000-4000-8000-000000000002') AND state NOT IN ('SUCCEEDED', 'EXPIRED') AND "
                 "attempts = 0",
                 sides[1].nt);
        const char *what[3] = {"the fan-out's read", "the handling's read (per state where no partial index)",
                               "an outcome UPDATE"};
        for (int i = 0; i < 3 && rc == ODBOX_OK; i++) {
            const char *arg[2] = {what[i], q[i]};
            rc = with_conn(&sides[1], do_explain, arg, e);
        }
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            free(times[i][j]);
    return rc;
}

/* ---- multi-process handling (issue 19) ------------------------------------------ */

static int do_truncate(side *sd, odbox_conn *c, const void *arg, odbox_error *e)
{
    (void)arg;
    int rc = exec_sql(c, "TRUNCATE TABLE %s%s", sd->nt, "", e);
    return rc == ODBOX_OK ? exec_sql(c, "TRUNCATE TABLE %s%s", sd->ev, "", e) : rc;
}

/* Fan-out rounds on this thread until no event is left. */
static int mode_fanout(side *sd, odbox_error *e)
{
    uint64_t t0 = now_ns();
    size_t total = 0;
    long rounds = run_rounds(sd, 0, &total, NULL, 0, e);
    if (rounds < 0)
        return (int)rounds;
    printf("  fan-out: %zu events in %.2f s, %ld rounds\n", total, (double)(now_ns() - t0) / 1e9, rounds);
    return ODBOX_OK;
}

int bench_fail(odbox_error *e, int code, const char *msg)
{
    e->code = code;
    snprintf(e->message, sizeof e->message, "%s", msg);
    return code;
}

static int file_exists(const char *path)
{
    return path && access(path, F_OK) == 0;
}

/* Waits for --go (if given), polling every millisecond. */
void wait_go(const opts *o)
{
    printf("ready\n");
    fflush(stdout);
    while (o->go && !file_exists(o->go))
        sleep_ms(1);
}

void print_result(const char *mode, long succeeded, long rounds, long empty, long stale, long round_errors,
                         int64_t start_ns, int64_t last_ns, double cpu)
{
    printf("{\"mode\":\"%s\",\"pid\":%ld,\"succeeded\":%ld,\"rounds\":%ld,\"empty_rounds\":%ld,\"stale\":%ld,"
           "\"round_errors\":%ld,\"warnings\":%ld,\"retries\":%ld,\"start_ns\":%lld,\"last_ns\":%lld,"
           "\"cpu_s\":%.3f}\n",
           mode, (long)getpid(), succeeded, rounds, empty, stale, round_errors, atomic_load(&log_warnings),
           atomic_load(&log_retries), (long long)start_ns, (long long)last_ns, cpu);
    fflush(stdout);
}

/* One worker process: the handling only, through a job registry, from
 * --go to --stop. */
static int mode_handle(side *sd, const opts *o, odbox_error *e)
{
    odbox_jobs *jobs = NULL;
    odbox_jobs_config jc = {.poll_interval_ms = 100};
    int rc = odbox_jobs_open(sd->r, &jc, &jobs, e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(sd->d, jobs, ODBOX_DELIVERY_HANDLING, e);
    if (rc != ODBOX_OK) {
        odbox_jobs_free(&jobs);
        return rc;
    }
    wait_go(o);
    double u0, s0, u1, s1;
    cpu_seconds(&u0, &s0);
    int64_t start = wall_ns();
    rc = odbox_jobs_start(jobs, e);
    while (rc == ODBOX_OK && !file_exists(o->stop))
        sleep_ms(5);
    cpu_seconds(&u1, &s1);
    odbox_error se = {0};
    if (odbox_jobs_stop(jobs, &se) != ODBOX_OK && rc == ODBOX_OK) {
        *e = se;
        rc = se.code;
    }
    odbox_jobs_free(&jobs);
    odbox_delivery_metrics m = {0};
    long errors = -1;
    if (rc == ODBOX_OK && odbox_delivery_metrics_read(sd->d, NULL, &m, &se) == ODBOX_OK) {
        errors = (long)m.round_errors;
        odbox_delivery_metrics_clear(&m);
    }
    if (rc == ODBOX_OK)
        print_result("handle", atomic_load(&sd->n.succeeded), atomic_load(&sd->n.rounds[1]),
                     atomic_load(&sd->n.empty), atomic_load(&sd->n.stale), errors, start,
                     atomic_load(&sd->n.last_ok_ns), u1 - u0 + s1 - s0);
    return rc;
}

static void usage(void)
{
    fprintf(stderr, "usage: odbox-bench-delivery [--dsn DSN] [--replica DSN] [--mode rounds|drain|scale|fill] "
                    "[--events N] [--handlers H] [--batch B] [--handling-batch B] [--handling-loops L] [--workers W] "
                    "[--eventlog NAME] [--reuse] [--ordered] [--old N] [--repeat R] [--handler-ms MS] [--go FILE] "
                    "[--stop FILE]\n");
}

int main(int argc, char **argv)
{
    opts o = {.dsn = getenv("ODBOX_BENCH_DSN"), .eventlog = "bench_delivery", .mode = "rounds", .events = 100000,
              .handlers = 1, .old = 1000000, .repeat = 5};
    if (!o.dsn)
        o.dsn = getenv("ODBOX_TEST_PG_DSN");
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *flag = !strcmp(a, "--reuse") ? &o.reuse : !strcmp(a, "--ordered") ? &o.ordered : NULL;
        if (flag) {
            *flag = 1;
            i--;
            continue;
        }
        if (!v) {
            fprintf(stderr, "odbox-bench-delivery: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--dsn"))
            o.dsn = v;
        else if (!strcmp(a, "--replica"))
            o.replica = v;
        else if (!strcmp(a, "--mode") && (!strcmp(v, "rounds") || !strcmp(v, "drain") || !strcmp(v, "scale") ||
                                          !strcmp(v, "fill") || !strcmp(v, "fanout") || !strcmp(v, "handle") ||
                                          !strcmp(v, "raw") || !strcmp(v, "due-sql")))
            o.mode = v;
        else if (!strcmp(a, "--events"))
            o.events = parse_long(argv[0], a, v, 1, 100000000);
        else if (!strcmp(a, "--handlers"))
            o.handlers = parse_long(argv[0], a, v, 1, 64);
        else if (!strcmp(a, "--batch"))
            o.batch = parse_long(argv[0], a, v, 1, 10000);
        else if (!strcmp(a, "--handling-batch"))
            o.hbatch = parse_long(argv[0], a, v, 1, 10000);
        else if (!strcmp(a, "--handling-loops"))
            o.loops = parse_long(argv[0], a, v, 1, 64);
        else if (!strcmp(a, "--workers"))
            o.workers = parse_long(argv[0], a, v, 1, 1024);
        else if (!strcmp(a, "--eventlog"))
            o.eventlog = v;
        else if (!strcmp(a, "--old"))
            o.old = parse_long(argv[0], a, v, 1, 100000000);
        else if (!strcmp(a, "--handler-ms"))
            o.handler_ms = parse_long(argv[0], a, v, 0, 60000);
        else if (!strcmp(a, "--go"))
            o.go = v;
        else if (!strcmp(a, "--stop"))
            o.stop = v;
        else if (!strcmp(a, "--repeat"))
            o.repeat = parse_long(argv[0], a, v, 1, 1000);
        else {
            usage();
            return 2;
        }
    }
    if (!o.dsn) {
        fprintf(stderr, "odbox-bench-delivery: no DSN (--dsn, ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN)\n");
        return 2;
    }
    int scale = !strcmp(o.mode, "scale");
    odbox_error e0 = {0};
    odbox_log_set(count_log, NULL, ODBOX_LOG_WARN);
    if (!strcmp(o.mode, "due-sql") || !strcmp(o.mode, "raw")) {
        int rc0 = !strcmp(o.mode, "raw") ? mode_raw(&o, &e0) : mode_due_sql(&o, &e0);
        if (rc0 != ODBOX_OK)
            fprintf(stderr, "odbox-bench-delivery: %s: %s\n", odbox_errname(rc0), e0.message);
        return rc0 == ODBOX_OK ? 0 : 1;
    }
    if (!strcmp(o.mode, "handle") && !o.stop) {
        fprintf(stderr, "odbox-bench-delivery: --mode handle needs --stop FILE\n");
        return 2;
    }
    int handle = !strcmp(o.mode, "handle"), fanout = !strcmp(o.mode, "fanout");
    char old_name[128];
    snprintf(old_name, sizeof old_name, "%s_old", o.eventlog);
    odbox_error e = {0};
    side sides[2] = {{0}};
    int rc = side_open(&sides[0], &o, o.eventlog, &e);
    if (rc == ODBOX_OK && scale)
        rc = side_open(&sides[1], &o, old_name, &e);
    double fill_s = 0;
    if (rc == ODBOX_OK && !scale && !handle && !o.reuse) {
        uint64_t t0 = now_ns();
        if ((rc = with_conn(&sides[0], fanout ? do_truncate : do_empty, NULL, &e)) == ODBOX_OK)
            rc = with_conn(&sides[0], do_fill, &o.events, &e);
        fill_s = (double)(now_ns() - t0) / 1e9;
    }
    if (rc == ODBOX_OK && !handle) {
        printf("odbox-bench-delivery --mode %s: %s, ", o.mode, odbox_pool_dialect(odbox_shard_primary(sides[0].s))->name);
        if (scale)
            printf("%ld old rows per table, %ld turns per eventlog of %ld events; ", o.old, o.repeat,
                   10 * (o.batch ? o.batch : 200));
        else
            printf("%ld events %s in %.1f s; ", o.reuse ? 0 : o.events, o.reuse ? "(reused)" : "written", fill_s);
        printf("%ld handler(s), fan-out batch %ld, handling batch %ld, handling loops %ld, workers %ld\n",
               o.handlers, o.batch ? o.batch : 200, o.hbatch ? o.hbatch : 100, o.loops ? o.loops : 2,
               o.workers ? o.workers : 8);
        fflush(stdout);
    }
    if (rc == ODBOX_OK)
        rc = scale                      ? mode_scale(sides, &o, &e)
             : !strcmp(o.mode, "drain") ? mode_drain(&sides[0], &o, &e)
             : !strcmp(o.mode, "fill")  ? ODBOX_OK
             : fanout                   ? mode_fanout(&sides[0], &e)
             : handle                   ? mode_handle(&sides[0], &o, &e)
                                        : mode_rounds(&sides[0], &e);
    if (rc != ODBOX_OK)
        fprintf(stderr, "odbox-bench-delivery: %s: %s\n", odbox_errname(rc), e.message);
    side_close(&sides[0]);
    side_close(&sides[1]);
    return rc == ODBOX_OK ? 0 : 1;
}
