/* odbox-bench-latency — time from an action's commit to the start of its
 * event's handler, with actions committed at a steady rate.
 *
 * Writers run actions that each commit one event (payload {"seq": k}) at
 * --rate actions per second for --seconds; the "commit" time of action k
 * is when odbox_execute returned (the commit is acknowledged). A delivery
 * with one handler runs the fan-out and handling jobs through a job
 * registry; the handler stores when it was first called for k. Prints
 * p50, p99, max and mean of (handler start - commit), leaving out the
 * first second (connections and statements warming up).
 *  - in one process (default): the executor is attached to the delivery,
 *    so a commit wakes the fan-out at once;
 *  - --cross-process: the writer is a child process with its own registry
 *    and executor. The worker hears commits only through the database's
 *    wake-up (PostgreSQL LISTEN/NOTIFY), else after its poll delay
 *    (--poll-ms, also the handling's; default the delivery's, 1000 ms).
 *    Both processes read one monotonic clock (CLOCK_MONOTONIC is
 *    system-wide), the times are shared through an anonymous shared map.
 *
 * Usage: odbox-bench-latency [--dsn DSN] [--rate R] [--seconds S] [--writers W]
 *                            [--cross-process] [--no-wakeup] [--poll-ms P] [--eventlog NAME]
 * --no-wakeup: no LISTEN in the worker (polling only, as where the
 * database has no wake-up). Without --dsn the DSN comes from
 * ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN. Framework migrations are applied
 * to the eventlog (default bench_latency), whose rows are deleted first.
 * Exit status: 0, 1 on any error (an action that failed, an event not
 * handled within --seconds + 60 s), 2 on a usage error. Not a test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <odbox/odbox.h>
#include "bench_util.h"

#define TYPE_NAME "BenchLatency"
#define DRAIN_GRACE_S 60

static const odbox_model_type PROBE_T = {"BenchLatencyProbe", "bench_latency_probes", ODBOX_KIND_MODEL, NULL, 0};
static const odbox_event_type PROBED = {TYPE_NAME};

typedef struct opts {
    const char *dsn, *eventlog;
    long rate, seconds, writers, poll_ms;
    int cross, no_wakeup;
} opts;

/* In shared memory: per action, when it committed and when its handler
 * started (monotonic ns, 0: not yet). */
typedef struct shared {
    long n;
    atomic_int failed;
    _Atomic int64_t *commit_ns, *start_ns;
} shared;

static shared *sh;

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)user;
    odbox_model *m = NULL; /* never written: only its event is */
    int rc = odbox_model_new(&PROBE_T, NULL, &m, err);
    json_object *payload = json_object_new_object();
    json_object *seq = NULL;
    json_object_object_get_ex(params, "seq", &seq);
    json_object_object_add(payload, "seq", json_object_get(seq));
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &PROBED, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

static const odbox_action ACTION = {"BenchLatency", perform, NULL};

static int handle(const odbox_envelope *env, void *user, odbox_error *err)
{
    (void)user, (void)err;
    int64_t now = (int64_t)now_ns(), zero = 0;
    json_object *seq = NULL;
    if (!env->payload || !json_object_object_get_ex(env->payload, "seq", &seq))
        return 0;
    long k = (long)json_object_get_int64(seq);
    if (k >= 0 && k < sh->n)
        atomic_compare_exchange_strong(&sh->start_ns[k], &zero, now);
    return 0;
}

typedef struct writer {
    pthread_t th;
    odbox_executor *exe;
    const opts *o;
    long first;
    uint64_t t0;
    odbox_error err;
} writer;

/* Actions first, first + W, ... each at t0 + k / rate. */
static void *run_writer(void *arg)
{
    writer *w = arg;
    const opts *o = w->o;
    for (long k = w->first; k < sh->n && !atomic_load(&sh->failed); k += o->writers) {
        uint64_t at = w->t0 + (uint64_t)((double)k * 1e9 / (double)o->rate);
        struct timespec ts = {(time_t)(at / 1000000000u), (long)(at % 1000000000u)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
            ;
        json_object *params = json_object_new_object();
        json_object_object_add(params, "seq", json_object_new_int64(k));
        int rc = odbox_execute(w->exe, &ACTION, params, NULL, NULL, &w->err);
        json_object_put(params);
        if (rc != ODBOX_OK) {
            atomic_store(&sh->failed, 1);
            fprintf(stderr, "odbox-bench-latency: writer: %s: %s\n", odbox_errname(rc), w->err.message);
            break;
        }
        atomic_store(&sh->commit_ns[k], (int64_t)now_ns());
    }
    return NULL;
}

static int run_writers(odbox_executor *exe, const opts *o)
{
    writer *ws = calloc((size_t)o->writers, sizeof *ws);
    if (!ws)
        return ODBOX_ENOMEM;
    uint64_t t0 = now_ns() + 10000000u;
    for (long i = 0; i < o->writers; i++) {
        ws[i] = (writer){.exe = exe, .o = o, .first = i, .t0 = t0};
        pthread_create(&ws[i].th, NULL, run_writer, &ws[i]);
    }
    for (long i = 0; i < o->writers; i++)
        pthread_join(ws[i].th, NULL);
    free(ws);
    return atomic_load(&sh->failed) ? ODBOX_EDB : ODBOX_OK;
}

static int open_registry(const opts *o, odbox_registry **r, odbox_error *e)
{
    odbox_shard_config sc = {.primary_dsn = o->dsn, .eventlog = o->eventlog,
                             .pool = {.size = (int)o->writers + 4, .acquire_timeout_ms = 60000}};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    return odbox_registry_open(&cfg, r, e);
}

static int open_executor(odbox_registry *r, odbox_executor **exe, odbox_error *e)
{
    int rc = odbox_executor_open("bench.odbox", r, NULL, exe, e);
    return rc == ODBOX_OK ? odbox_executor_register_model(*exe, &PROBE_T, e) : rc;
}

/* The child of --cross-process: waits for the worker's go (a byte on
 * fd), writes, exits 0 when every action committed. */
static int writer_process(const opts *o, int fd)
{
    char go;
    if (read(fd, &go, 1) != 1)
        return 1;
    odbox_error e = {0};
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    int rc = open_registry(o, &r, &e);
    if (rc == ODBOX_OK)
        rc = open_executor(r, &exe, &e);
    if (rc != ODBOX_OK) {
        fprintf(stderr, "odbox-bench-latency: writer: %s: %s\n", odbox_errname(rc), e.message);
        atomic_store(&sh->failed, 1);
    } else {
        rc = run_writers(exe, o);
    }
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    return rc == ODBOX_OK ? 0 : 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void report(const opts *o, double elapsed)
{
    long skip = o->rate < sh->n ? o->rate : 0, m = 0, early = 0, missing = 0;
    int64_t *lat = malloc((size_t)sh->n * sizeof *lat);
    double sum = 0;
    for (long k = skip; lat && k < sh->n; k++) {
        int64_t c = atomic_load(&sh->commit_ns[k]), s = atomic_load(&sh->start_ns[k]);
        if (!c || !s) {
            missing++;
            continue;
        }
        int64_t d = s - c;
        if (d < 0) { /* the handler started before odbox_execute returned */
            early++;
            d = 0;
        }
        lat[m++] = d;
        sum += (double)d;
    }
    if (!lat || m == 0) {
        printf("  no latency measured\n");
        free(lat);
        return;
    }
    qsort(lat, (size_t)m, sizeof *lat, cmp_i64);
    long p99 = (long)((double)m * 0.99);
    if (p99 >= m)
        p99 = m - 1;
    printf("  %ld actions at %.0f/s; commit to handler start over %ld (first second left out): p50 %.3f ms, p99 "
           "%.3f ms, max %.3f ms, mean %.3f ms%s",
           sh->n, (double)sh->n / elapsed, m, (double)lat[m / 2] / 1e6, (double)lat[p99] / 1e6,
           (double)lat[m - 1] / 1e6, sum / (double)m / 1e6, early || missing ? "" : "\n");
    if (early || missing)
        printf(" (%ld started before the writer's odbox_execute returned, counted as 0; %ld not measured)\n", early,
               missing);
    free(lat);
}

int main(int argc, char **argv)
{
    opts o = {.dsn = getenv("ODBOX_BENCH_DSN"), .eventlog = "bench_latency", .rate = 200, .seconds = 10,
              .writers = 1};
    if (!o.dsn)
        o.dsn = getenv("ODBOX_TEST_PG_DSN");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--cross-process")) {
            o.cross = 1;
            continue;
        }
        if (!strcmp(a, "--no-wakeup")) {
            o.no_wakeup = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "odbox-bench-latency: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--dsn"))
            o.dsn = v;
        else if (!strcmp(a, "--rate"))
            o.rate = parse_long(argv[0], a, v, 1, 100000);
        else if (!strcmp(a, "--seconds"))
            o.seconds = parse_long(argv[0], a, v, 2, 3600);
        else if (!strcmp(a, "--writers"))
            o.writers = parse_long(argv[0], a, v, 1, 64);
        else if (!strcmp(a, "--poll-ms"))
            o.poll_ms = parse_long(argv[0], a, v, 1, 60000);
        else if (!strcmp(a, "--eventlog"))
            o.eventlog = v;
        else {
            fprintf(stderr, "usage: odbox-bench-latency [--dsn DSN] [--rate R] [--seconds S] [--writers W] "
                            "[--cross-process] [--no-wakeup] [--poll-ms P] [--eventlog NAME]\n");
            return 2;
        }
    }
    if (!o.dsn) {
        fprintf(stderr, "odbox-bench-latency: no DSN (--dsn, ODBOX_BENCH_DSN or ODBOX_TEST_PG_DSN)\n");
        return 2;
    }
    long n = o.rate * o.seconds;
    size_t bytes = sizeof *sh + 2 * (size_t)n * sizeof(int64_t);
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        perror("odbox-bench-latency: mmap");
        return 1;
    }
    sh = map;
    sh->n = n;
    sh->commit_ns = (_Atomic int64_t *)(sh + 1);
    sh->start_ns = sh->commit_ns + n;
    /* the child is forked before anything opens a connection or a thread */
    int pipefd[2] = {-1, -1};
    pid_t child = -1;
    if (o.cross) {
        if (pipe(pipefd) != 0 || (child = fork()) < 0) {
            perror("odbox-bench-latency: fork");
            return 1;
        }
        if (child == 0) {
            close(pipefd[1]);
            _exit(writer_process(&o, pipefd[0]));
        }
        close(pipefd[0]);
    }
    odbox_error e = {0};
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_handlers *h = NULL;
    odbox_delivery *d = NULL;
    odbox_jobs *jobs = NULL;
    odbox_conn *c = NULL;
    odbox_migrate_options mo = {0};
    int rc = open_registry(&o, &r, &e);
    if (rc == ODBOX_OK)
        rc = odbox_migrate_registry(r, &mo, &e);
    odbox_shard *s = rc == ODBOX_OK ? odbox_registry_shard_at(r, 0) : NULL;
    if (rc == ODBOX_OK && (rc = odbox_pool_acquire(odbox_shard_primary(s), &c, &e)) == ODBOX_OK) {
        char ev[160], nt[160], sql[400];
        odbox_dialect_eventlog_table(odbox_conn_dialect(c), o.eventlog, "events", ev, sizeof ev);
        odbox_dialect_eventlog_table(odbox_conn_dialect(c), o.eventlog, "event_notifications", nt, sizeof nt);
        snprintf(sql, sizeof sql, "DELETE FROM %s", nt);
        if ((rc = odbox_conn_exec(c, sql, &e)) == ODBOX_OK) {
            snprintf(sql, sizeof sql, "DELETE FROM %s", ev);
            rc = odbox_conn_exec(c, sql, &e);
        }
        odbox_pool_release(odbox_shard_primary(s), &c);
    }
    if (rc == ODBOX_OK && !o.cross)
        rc = open_executor(r, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_new(&h, &e);
    odbox_handler hd = {.name = "bench-latency", .event_type = TYPE_NAME, .handle = handle};
    if (rc == ODBOX_OK)
        rc = odbox_handlers_add(h, &hd, &e);
    odbox_delivery_config cfg = {.fanout_poll_ms = (int)o.poll_ms, .handling_poll_ms = (int)o.poll_ms,
                                 .cross_process_wakeup = o.cross && !o.no_wakeup ? 0 : -1};
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(r, h, &cfg, &d, &e);
    if (rc == ODBOX_OK && exe)
        rc = odbox_delivery_attach(d, exe, &e);
    odbox_jobs_config jc = {.poll_interval_ms = 100};
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(r, &jc, &jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(d, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, &e);
    if (rc == ODBOX_OK) {
        const char *dn = odbox_pool_dialect(odbox_shard_primary(s))->name;
        printf("odbox-bench-latency: %s, %s, %ld writer(s), %ld actions/s for %ld s; wake-up: %s; poll delay %ld ms\n",
               dn, o.cross ? "writer and worker in two processes" : "one process", o.writers, o.rate, o.seconds,
               !o.cross ? "in-process (executor attached)"
               : o.no_wakeup || strcmp(dn, "postgresql") ? "none across processes (polling only)"
                                                         : "LISTEN/NOTIFY",
               o.poll_ms ? o.poll_ms : 1000);
        fflush(stdout);
        /* the jobs' first executions begin within a poll of the registry */
        nanosleep(&(struct timespec){1, 0}, NULL);
    }
    uint64_t t0 = now_ns();
    if (rc == ODBOX_OK) {
        if (o.cross) {
            char go = 1;
            if (write(pipefd[1], &go, 1) != 1)
                rc = ODBOX_EDB;
        } else {
            rc = run_writers(exe, &o);
        }
    }
    if (o.cross && child > 0) { /* also when the worker failed: the child waits on the pipe */
        close(pipefd[1]);
        int status = 0;
        waitpid(child, &status, 0);
        if (rc == ODBOX_OK && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
            rc = ODBOX_EDB;
            snprintf(e.message, sizeof e.message, "the writer process failed");
        }
    }
    double elapsed = (double)(now_ns() - t0) / 1e9;
    /* every action's handler, within a bound */
    uint64_t until = now_ns() + (uint64_t)(o.seconds + DRAIN_GRACE_S) * 1000000000u;
    for (long k = 0; rc == ODBOX_OK && k < n;) {
        if (atomic_load(&sh->start_ns[k])) {
            k++;
            continue;
        }
        if (now_ns() > until) {
            rc = ODBOX_ETIMEDOUT;
            snprintf(e.message, sizeof e.message, "action %ld's event not handled within %ld s", k,
                     o.seconds + DRAIN_GRACE_S);
            break;
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    if (rc == ODBOX_OK)
        report(&o, elapsed);
    odbox_error se = {0};
    if (jobs)
        odbox_jobs_stop(jobs, &se);
    odbox_jobs_free(&jobs);
    odbox_delivery_free(&d);
    odbox_handlers_free(&h);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    if (rc != ODBOX_OK)
        fprintf(stderr, "odbox-bench-latency: %s: %s\n", odbox_errname(rc), e.message);
    munmap(map, bytes);
    return rc == ODBOX_OK ? 0 : 1;
}
