/* odbox-bench-notify — what the writer's NOTIFY after each commit costs:
 * commit throughput with cross-process wake-ups on, and off.
 *
 * Two registries on the same database and eventlog, one of them with
 * notify=off in its DSN, each with its executor. N threads run actions
 * that each commit one event (the cheapest commit, where a NOTIFY would
 * show most) for S seconds on one executor, then on the other; the order
 * alternates per round. Prints actions per second of each run and the
 * ratio on/off per round and its median. With notify on, the executor's
 * thread sends at most one NOTIFY per notify interval (default 5 ms) on
 * its own connection, after the commits; the committers only set a flag.
 *
 * Usage: odbox-bench-notify [--dsn DSN] [--clients N] [--seconds S] [--rounds R]
 *                           [--eventlog NAME]
 * Without --dsn the DSN comes from ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN
 * (keeps the password off the command line). Framework migrations are
 * applied to the eventlog (default bench_notify) from $ODBOX_MIGRATIONS_DIR,
 * else the installed folder. Exit status: 0 when every action succeeded,
 * 1 on any error, 2 on a usage error. Not a test: nothing is asserted. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <odbox/action.h>
#include <odbox/migrate.h>
#include <odbox/model.h>
#include <odbox/registry.h>
#include "bench_util.h"

static const odbox_model_type PROBE_T = {"BenchNotifyProbe", "bench_notify_probes", ODBOX_KIND_MODEL, NULL, 0};
static const odbox_event_type PROBED = {"BenchNotifyProbed"};

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    (void)params;
    (void)user;
    odbox_model *m = NULL; /* never written: only its event is */
    int rc = odbox_model_new(&PROBE_T, NULL, &m, err);
    json_object *payload = json_object_new_object();
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &PROBED, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

static const odbox_action ACTION = {"BenchNotify", perform, NULL};

typedef struct worker {
    pthread_t th;
    odbox_executor *exe;
    uint64_t deadline_ns;
    long count;
    int failed;
    odbox_error err;
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    while (now_ns() < w->deadline_ns) {
        int rc = odbox_execute(w->exe, &ACTION, NULL, NULL, NULL, &w->err);
        if (rc != ODBOX_OK) {
            w->failed = 1;
            break;
        }
        w->count++;
    }
    return NULL;
}

/* Actions per second of N clients on exe for S seconds; < 0 on failure. */
static double measure(odbox_executor *exe, long clients, long seconds)
{
    worker *ws = calloc((size_t)clients, sizeof *ws);
    if (!ws)
        return -1;
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)seconds * 1000000000ull;
    for (long i = 0; i < clients; i++) {
        ws[i] = (worker){.exe = exe, .deadline_ns = deadline};
        pthread_create(&ws[i].th, NULL, run_worker, &ws[i]);
    }
    long total = 0;
    int failed = 0;
    for (long i = 0; i < clients; i++) {
        pthread_join(ws[i].th, NULL);
        total += ws[i].count;
        if (ws[i].failed && !failed) {
            failed = 1;
            fprintf(stderr, "odbox-bench-notify: %s: %s\n", odbox_errname(ws[i].err.code), ws[i].err.message);
        }
    }
    double elapsed = (double)(now_ns() - t0) / 1e9;
    free(ws);
    return failed ? -1 : (double)total / elapsed;
}

static int open_side(const char *dsn, const char *eventlog, long clients, odbox_registry **r, odbox_executor **exe)
{
    odbox_shard_config sc = {.primary_dsn = dsn, .eventlog = eventlog,
                             .pool = {.size = (int)clients, .acquire_timeout_ms = 60000}};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_error e = {0};
    int rc = odbox_registry_open(&cfg, r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_open("bench.odbox", *r, NULL, exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(*exe, &PROBE_T, &e);
    if (rc != ODBOX_OK)
        fprintf(stderr, "odbox-bench-notify: %s: %s\n", odbox_errname(rc), e.message);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *dsn = getenv("ODBOX_BENCH_DSN"), *eventlog = "bench_notify";
    long clients = 4, seconds = 5, rounds = 3;
    if (!dsn)
        dsn = getenv("ODBOX_TEST_PG_DSN");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "odbox-bench-notify: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--dsn"))
            dsn = v;
        else if (!strcmp(a, "--clients"))
            clients = parse_long("odbox-bench-notify", "--clients", v, 1, 256);
        else if (!strcmp(a, "--seconds"))
            seconds = parse_long("odbox-bench-notify", "--seconds", v, 1, 3600);
        else if (!strcmp(a, "--rounds"))
            rounds = parse_long("odbox-bench-notify", "--rounds", v, 1, 99);
        else if (!strcmp(a, "--eventlog"))
            eventlog = v;
        else {
            fprintf(stderr, "usage: odbox-bench-notify [--dsn DSN] [--clients N] [--seconds S] [--rounds R] "
                            "[--eventlog NAME]\n");
            return 2;
        }
        i++;
    }
    if (!dsn) {
        fprintf(stderr, "odbox-bench-notify: no DSN (--dsn, ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN)\n");
        return 2;
    }
    size_t n = strlen(dsn) + 32;
    char *dsn_off = malloc(n);
    if (!dsn_off)
        return 1;
    snprintf(dsn_off, n, "%s%s", dsn, strstr(dsn, "://") ? (strchr(dsn, '?') ? "&notify=off" : "?notify=off")
                                                           : ";notify=off");
    odbox_registry *r_on = NULL, *r_off = NULL;
    odbox_executor *on = NULL, *off = NULL;
    odbox_error e = {0};
    int rc = open_side(dsn, eventlog, clients, &r_on, &on);
    if (rc == ODBOX_OK)
        rc = open_side(dsn_off, eventlog, clients, &r_off, &off);
    odbox_migrate_options mo = {0};
    if (rc == ODBOX_OK && (rc = odbox_migrate_registry(r_on, &mo, &e)) != ODBOX_OK)
        fprintf(stderr, "odbox-bench-notify: migrate: %s: %s\n", odbox_errname(rc), e.message);
    double *ratios = calloc((size_t)rounds, sizeof *ratios);
    if (!ratios)
        rc = ODBOX_ENOMEM;
    if (rc == ODBOX_OK)
        printf("odbox-bench-notify: %ld clients, %ld s per run, eventlog %s, one event per action\n", clients,
               seconds, eventlog);
    for (long k = 0; k < rounds && rc == ODBOX_OK; k++) {
        double tps_on, tps_off;
        if (k % 2 == 0) {
            tps_on = measure(on, clients, seconds);
            tps_off = measure(off, clients, seconds);
        } else {
            tps_off = measure(off, clients, seconds);
            tps_on = measure(on, clients, seconds);
        }
        if (tps_on < 0 || tps_off < 0) {
            rc = ODBOX_EDB;
            break;
        }
        ratios[k] = tps_on / tps_off;
        printf("round %ld: notify on %.0f actions/s, notify off %.0f actions/s, on/off %.3f\n", k + 1, tps_on,
               tps_off, ratios[k]);
        fflush(stdout);
    }
    if (rc == ODBOX_OK) {
        qsort(ratios, (size_t)rounds, sizeof *ratios, cmp_double);
        printf("median on/off ratio over %ld rounds: %.3f\n", rounds, ratios[rounds / 2]);
    }
    free(ratios);
    odbox_executor_free(&on);
    odbox_executor_free(&off);
    odbox_registry_free(&r_on);
    odbox_registry_free(&r_off);
    free(dsn_off);
    return rc == ODBOX_OK ? 0 : 1;
}
