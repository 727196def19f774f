/* odbox-bench-insert — single-row INSERT transactions through odbox.
 *
 * N threads, each with its own pooled connection and ONE prepared INSERT,
 * execute that statement in autocommit mode (one row per transaction, the
 * shape pgbench runs) until S seconds have passed. Prints transactions per
 * second (total and per client), the latency of each transaction (avg,
 * p50, p99, max) from a log-linear histogram (< 0.8 % bucket error) and
 * the process's CPU time per transaction over the measured window.
 *
 * bench/run.sh runs pgbench with the very same statement text (from
 * --print-sql) on the same server in the same run and prints the ratio.
 *
 * Usage: odbox-bench-insert [--dsn DSN] --clients N --seconds S
 *                           [--table NAME] [--payload JSON] [--json]
 *        odbox-bench-insert --print-sql [--table NAME]
 * Without --dsn the DSN comes from ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN
 * (keeps the password off the command line). Exit status: 0 when every
 * transaction succeeded, 1 on any error, 2 on a usage error. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <odbox/db.h>
#include <odbox/dialect.h>
#include <odbox/error.h>
#include "bench_util.h"

/* The payload both sides insert (run.sh passes it to both explicitly). */
#define DEFAULT_PAYLOAD \
    "{\"type\":\"bench.insert\",\"aggregate\":\"order\",\"version\":1," \
    "\"data\":{\"sku\":\"A-1234\",\"qty\":3,\"note\":\"benchmark payload\"}}"

/* ---- shared state ---------------------------------------------------------- */

typedef struct worker {
    pthread_t th;
    int id;
    uint64_t count;
    uint64_t lat_sum_ns;
    uint64_t lat_max_ns;
    uint64_t *hist;
    uint64_t end_ns;
    int failed;
    odbox_error err;
} worker;

static odbox_pool *g_pool;
static const char *g_sql;
static const char *g_payload;
static pthread_barrier_t g_ready, g_go;
static uint64_t g_start_ns, g_deadline_ns; /* written before g_go */
static atomic_int g_stop;

static void *run_worker(void *arg)
{
    worker *w = arg;
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    int rc = odbox_pool_acquire(g_pool, &c, &w->err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_prepare(c, g_sql, &s, &w->err);
    if (rc != ODBOX_OK) {
        w->failed = 1;
        atomic_store(&g_stop, 1);
    }
    pthread_barrier_wait(&g_ready); /* everyone connected and prepared */
    pthread_barrier_wait(&g_go);    /* main has set the clock */

    uint64_t t0 = now_ns();
    while (!w->failed && !atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        /* Bind every time, as an application inserting different rows does. */
        rc = odbox_stmt_bind_int64(s, 1, w->id, &w->err);
        if (rc == ODBOX_OK)
            rc = odbox_stmt_bind_json(s, 2, g_payload, &w->err);
        if (rc == ODBOX_OK)
            rc = odbox_stmt_execute(s, &w->err);
        uint64_t t1 = now_ns();
        if (rc != ODBOX_OK) {
            w->failed = 1;
            atomic_store(&g_stop, 1);
            break;
        }
        uint64_t d = t1 - t0;
        w->count++;
        w->lat_sum_ns += d;
        if (d > w->lat_max_ns)
            w->lat_max_ns = d;
        w->hist[hist_index(d)]++;
        t0 = t1;
        if (t1 >= g_deadline_ns)
            break;
    }
    w->end_ns = now_ns();
    odbox_stmt_free(&s);
    if (c)
        odbox_pool_release(g_pool, &c);
    return NULL;
}

/* ---- command line ---------------------------------------------------------- */

static void usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "odbox-bench-insert: %s\n", msg);
    fprintf(stderr,
            "usage: odbox-bench-insert [--dsn DSN] --clients N --seconds S [--table NAME]\n"
            "                          [--payload JSON] [--json]\n"
            "       odbox-bench-insert --print-sql [--table NAME]\n"
            "Without --dsn, ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN is used.\n");
    exit(2);
}

/* [A-Za-z_][A-Za-z0-9_]* with an optional "schema." prefix. */
static int valid_table(const char *t)
{
    int dots = 0, start = 1;
    for (const char *p = t; *p; p++) {
        char ch = *p;
        if (ch == '.') {
            if (start || ++dots > 1)
                return 0;
            start = 1;
            continue;
        }
        int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
        int digit = ch >= '0' && ch <= '9';
        if (!alpha && !(digit && !start))
            return 0;
        start = 0;
    }
    return *t && !start && strlen(t) < 128;
}

int main(int argc, char **argv)
{
    const char *dsn = NULL, *table = "bench_insert", *payload = DEFAULT_PAYLOAD;
    long clients = 0, seconds = 0;
    int json = 0, print_sql = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--print-sql")) {
            print_sql = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(NULL);
        } else if (!v) {
            usage("missing value after an option");
        } else if (!strcmp(a, "--dsn")) {
            dsn = v, i++;
        } else if (!strcmp(a, "--clients")) {
            clients = parse_long("odbox-bench-insert", "--clients", v, 1, 1000), i++;
        } else if (!strcmp(a, "--seconds")) {
            seconds = parse_long("odbox-bench-insert", "--seconds", v, 1, 86400), i++;
        } else if (!strcmp(a, "--table")) {
            table = v, i++;
        } else if (!strcmp(a, "--payload")) {
            payload = v, i++;
        } else {
            usage("unknown option");
        }
    }
    if (!valid_table(table))
        usage("--table must be an identifier (optionally schema.name)");

    /* The statement pgbench runs too (run.sh turns the two '?' into
     * :client_id and :payload). Server-generated id and timestamp. */
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO %s (id, client, payload, created) "
             "VALUES (gen_random_uuid(), ?, CAST(? AS JSONB), now())",
             table);
    if (print_sql) {
        puts(sql);
        return 0;
    }
    if (!dsn || !*dsn)
        dsn = getenv("ODBOX_BENCH_DSN");
    if (!dsn || !*dsn)
        dsn = getenv("ODBOX_TEST_PG_DSN");
    if (!dsn || !*dsn)
        usage("no DSN: pass --dsn or set ODBOX_BENCH_DSN / ODBOX_TEST_PG_DSN");
    if (!clients || !seconds)
        usage("--clients and --seconds are required");

    odbox_error err;
    odbox_error_clear(&err);
    odbox_pool_config cfg = {.size = (int)clients, .acquire_timeout_ms = 60000};
    if (odbox_pool_open(dsn, &cfg, &g_pool, &err) != ODBOX_OK) {
        fprintf(stderr, "odbox-bench-insert: pool: %s: %s\n", odbox_errname(err.code), err.message);
        return 1;
    }

    /* One connection up front, to report the server and fail early. */
    char server[160] = "";
    {
        odbox_conn *c = NULL;
        if (odbox_pool_acquire(g_pool, &c, &err) != ODBOX_OK) {
            fprintf(stderr, "odbox-bench-insert: connect: %s: %s\n", odbox_errname(err.code),
                    err.message);
            odbox_pool_free(&g_pool);
            return 1;
        }
        snprintf(server, sizeof server, "%s %s", odbox_conn_server_name(c),
                 odbox_conn_server_version(c));
        odbox_pool_release(g_pool, &c);
    }

    g_sql = sql;
    g_payload = payload;
    worker *ws = calloc((size_t)clients, sizeof *ws);
    if (!ws) {
        fprintf(stderr, "odbox-bench-insert: out of memory\n");
        return 1;
    }
    for (long i = 0; i < clients; i++) {
        ws[i].id = (int)i; /* pgbench's :client_id is 0-based too */
        ws[i].hist = calloc(HIST_BUCKETS, sizeof *ws[i].hist);
        if (!ws[i].hist) {
            fprintf(stderr, "odbox-bench-insert: out of memory\n");
            return 1;
        }
    }
    pthread_barrier_init(&g_ready, NULL, (unsigned)clients + 1);
    pthread_barrier_init(&g_go, NULL, (unsigned)clients + 1);
    for (long i = 0; i < clients; i++) {
        int e = pthread_create(&ws[i].th, NULL, run_worker, &ws[i]);
        if (e) {
            fprintf(stderr, "odbox-bench-insert: pthread_create: %s\n", strerror(e));
            return 1; /* threads already started wait on the barrier forever; exit ends them */
        }
    }
    pthread_barrier_wait(&g_ready);
    double u0, s0, u1, s1;
    cpu_seconds(&u0, &s0); /* connecting and preparing are not counted */
    g_start_ns = now_ns();
    g_deadline_ns = g_start_ns + (uint64_t)seconds * 1000000000u;
    pthread_barrier_wait(&g_go);
    for (long i = 0; i < clients; i++)
        pthread_join(ws[i].th, NULL);
    cpu_seconds(&u1, &s1);
    double cpu_used = (u1 - u0) + (s1 - s0);

    int failed = 0;
    for (long i = 0; i < clients; i++) {
        if (ws[i].failed) {
            fprintf(stderr, "odbox-bench-insert: client %ld: %s [%s] %s\n", i,
                    odbox_errname(ws[i].err.code), ws[i].err.sqlstate, ws[i].err.message);
            failed = 1;
        }
    }
    if (failed) {
        odbox_pool_free(&g_pool);
        return 1;
    }

    /* Merge. */
    uint64_t total = 0, sum_ns = 0, max_ns = 0, end_ns = g_start_ns;
    uint64_t *hist = calloc(HIST_BUCKETS, sizeof *hist);
    if (!hist) {
        fprintf(stderr, "odbox-bench-insert: out of memory\n");
        return 1;
    }
    for (long i = 0; i < clients; i++) {
        total += ws[i].count;
        sum_ns += ws[i].lat_sum_ns;
        if (ws[i].lat_max_ns > max_ns)
            max_ns = ws[i].lat_max_ns;
        if (ws[i].end_ns > end_ns)
            end_ns = ws[i].end_ns;
        for (int b = 0; b < HIST_BUCKETS; b++)
            hist[b] += ws[i].hist[b];
    }
    double elapsed = (double)(end_ns - g_start_ns) / 1e9;
    double tps = elapsed > 0 ? (double)total / elapsed : 0;
    double pct[2] = {0, 0};
    const double want[2] = {0.50, 0.99};
    for (int k = 0; k < 2; k++) {
        uint64_t rank = (uint64_t)(want[k] * (double)total + 0.5), seen = 0;
        if (rank < 1)
            rank = 1;
        for (int b = 0; b < HIST_BUCKETS; b++) {
            seen += hist[b];
            if (seen >= rank) {
                pct[k] = hist_value(b);
                break;
            }
        }
    }
    double cpu_us_tx = total ? cpu_used * 1e6 / (double)total : 0;
    double avg_ms = total ? (double)sum_ns / (double)total / 1e6 : 0;
    double p50_ms = pct[0] / 1e6, p99_ms = pct[1] / 1e6, max_ms = (double)max_ns / 1e6;
    double tmin = 0, tmax = 0;
    for (long i = 0; i < clients; i++) {
        double el = (double)(ws[i].end_ns - g_start_ns) / 1e9;
        double t = el > 0 ? (double)ws[i].count / el : 0;
        if (i == 0 || t < tmin)
            tmin = t;
        if (i == 0 || t > tmax)
            tmax = t;
    }

    if (json) {
        printf("{\"tool\":\"odbox-bench-insert\",\"server\":");
        json_string(stdout, server);
        printf(",\"table\":");
        json_string(stdout, table);
        printf(",\"clients\":%ld,\"threads\":%ld,\"pool_size\":%ld,\"rows_per_transaction\":1,"
               "\"seconds\":%.3f,\"transactions\":%" PRIu64 ",\"errors\":0,\"tps\":%.3f,"
               "\"tps_per_client\":[",
               clients, clients, clients, elapsed, total, tps);
        for (long i = 0; i < clients; i++) {
            double el = (double)(ws[i].end_ns - g_start_ns) / 1e9;
            printf("%s%.3f", i ? "," : "", el > 0 ? (double)ws[i].count / el : 0.0);
        }
        printf("],\"latency_ms\":{\"avg\":%.4f,\"p50\":%.4f,\"p99\":%.4f,\"max\":%.4f},"
               "\"cpu_us_per_transaction\":%.2f}\n",
               avg_ms, p50_ms, p99_ms, max_ms, cpu_us_tx);
    } else {
        printf("odbox-bench-insert: %s\n", server);
        printf("statement:        %s\n", sql);
        printf("clients:          %ld (threads %ld, pool size %ld), 1 row per transaction, autocommit\n",
               clients, clients, clients);
        printf("duration:         %.3f s\n", elapsed);
        printf("transactions:     %" PRIu64 " (0 errors)\n", total);
        printf("tps:              %.1f total, %.1f per client (min %.1f, max %.1f)\n", tps,
               tps / (double)clients, tmin, tmax);
        printf("latency ms:       avg %.3f  p50 %.3f  p99 %.3f  max %.3f\n", avg_ms, p50_ms, p99_ms,
               max_ms);
        printf("client CPU:       %.1f us per transaction (user + system, all threads)\n", cpu_us_tx);
    }

    for (long i = 0; i < clients; i++)
        free(ws[i].hist);
    free(ws);
    free(hist);
    pthread_barrier_destroy(&g_ready);
    pthread_barrier_destroy(&g_go);
    odbox_pool_free(&g_pool);
    return 0;
}
