/* odbox — jobs-runner: one process with a job registry of one job, for
 * the multi-process jobs tests (exclusivity across processes, takeover
 * after kill -9). Each run is recorded in a runs table (runs.h).
 *
 *   jobs-runner --dsn DSN --job NAME --runner NAME --table TABLE
 *               [--mode record|hold] [--delay MS] [--poll MS]
 *               [--heartbeat MS] [--limit N] [--work MS] [--duration MS]
 *
 * record: each run sleeps --work ms, then records (runner, start, end).
 * hold:   each run records (runner, start, NULL) at once and then waits
 *         for shutdown (or the loss of its row), then records its end.
 * Runs the registry for --duration ms (0: until SIGTERM or SIGINT), then
 * stops it. Prints "started" once the registry runs. Exit 0, or 1 with a
 * message on stderr. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runs.h"

typedef struct runner {
    odbox_pool *pool;
    const char *name, *table;
    int hold, work_ms;
} runner;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int run_job(odbox_job_context *ctx, void *user, odbox_error *err)
{
    runner *r = user;
    int64_t start = odbox_job_context_now_us(ctx);
    if (!r->hold) {
        usleep((useconds_t)r->work_ms * 1000); /* the full time, also when stopping */
        return runs_record(r->pool, r->table, r->name, start, odbox_job_context_now_us(ctx), err);
    }
    int rc = runs_record(r->pool, r->table, r->name, start, 0, err);
    if (rc != ODBOX_OK)
        return rc;
    while (odbox_job_context_wait(ctx, 1000) != ODBOX_JOB_WAIT_STOP)
        ;
    return runs_end(r->pool, r->table, r->name, start, odbox_job_context_now_us(ctx), err);
}

static int number(const char *opt, const char *text, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*end || v < 0 || v > 86400000) {
        fprintf(stderr, "jobs-runner: %s wants a number 0..86400000\n", opt);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"dsn", required_argument, 0, 'd'},   {"job", required_argument, 0, 'j'},
        {"runner", required_argument, 0, 'r'}, {"table", required_argument, 0, 't'},
        {"mode", required_argument, 0, 'm'},  {"delay", required_argument, 0, 'D'},
        {"poll", required_argument, 0, 'p'},  {"heartbeat", required_argument, 0, 'h'},
        {"limit", required_argument, 0, 'l'}, {"work", required_argument, 0, 'w'},
        {"duration", required_argument, 0, 'u'}, {0, 0, 0, 0},
    };
    const char *dsn = NULL, *job = NULL, *mode = "record";
    runner rn = {.work_ms = 20};
    int delay = 200, poll = 50, heartbeat = 1000, limit = 6, duration = 0, ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int ok = 1;
        switch (ch) {
        case 'd': dsn = optarg; break;
        case 'j': job = optarg; break;
        case 'r': rn.name = optarg; break;
        case 't': rn.table = optarg; break;
        case 'm': mode = optarg; break;
        case 'D': ok = number("--delay", optarg, &delay); break;
        case 'p': ok = number("--poll", optarg, &poll); break;
        case 'h': ok = number("--heartbeat", optarg, &heartbeat); break;
        case 'l': ok = number("--limit", optarg, &limit); break;
        case 'w': ok = number("--work", optarg, &rn.work_ms); break;
        case 'u': ok = number("--duration", optarg, &duration); break;
        default: ok = 0;
        }
        if (!ok)
            return 2;
    }
    if (!dsn || !job || !rn.name || !rn.table || (strcmp(mode, "record") && strcmp(mode, "hold"))) {
        fprintf(stderr, "jobs-runner: --dsn, --job, --runner, --table needed; --mode record|hold\n");
        return 2;
    }
    rn.hold = !strcmp(mode, "hold");
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    odbox_error e = {0};
    odbox_registry *reg = NULL;
    odbox_jobs *jobs = NULL;
    odbox_jobs_config cfg = {.poll_interval_ms = poll, .heartbeat_interval_ms = heartbeat,
                             .missed_heartbeats_limit = limit, .picked_by = rn.name};
    odbox_job j = {.name = job, .schedule = odbox_schedule_fixed_delay(delay), .execute = run_job, .user = &rn};
    int rc = odbox_registry_open_dsn(dsn, &reg, &e);
    if (rc == ODBOX_OK) {
        rn.pool = odbox_shard_primary(odbox_registry_default_shard(reg));
        if ((rc = odbox_jobs_open(reg, &cfg, &jobs, &e)) == ODBOX_OK && (rc = odbox_jobs_add(jobs, &j, &e)) == ODBOX_OK)
            rc = odbox_jobs_start(jobs, &e);
    }
    if (rc == ODBOX_OK) {
        puts("started");
        fflush(stdout);
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            long ms = (long)(now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
            if (g_stop || (duration && ms >= duration))
                break;
            usleep(10000);
        }
        rc = odbox_jobs_stop(jobs, &e);
    }
    odbox_jobs_free(&jobs);
    odbox_registry_free(&reg);
    if (rc != ODBOX_OK) {
        fprintf(stderr, "jobs-runner %s: %s\n", rn.name ? rn.name : "?", e.message);
        return 1;
    }
    return 0;
}
