/* odbox-bench-relay-ceiling DSN NAME WORKERS POLL_MS [LOOPS] (bench/relay_*.sh):
 * the delivery as `odbox relay` runs it (its delivery and jobs settings,
 * tools/relay_cmd.c) with a relay NAME on RelayProbed events whose broker
 * confirms every message at once: what the outbox side alone drains, the
 * ceiling of any relay on the same machine. LOOPS: as `odbox relay
 * --loops` (default: its default). Runs until SIGTERM; exit 0 after a
 * clean stop. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "bench_util.h"
#include "odbox/odbox.h"

static int noop_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    (void)broker, (void)env, (void)body, (void)len, (void)err;
    return ODBOX_OK;
}

static void noop_close(void *broker)
{
    (void)broker;
}

static void noop_publish_batch(void *broker, size_t n, const odbox_envelope *const *envs, const char *const *bodies,
                               const size_t *lens, int *rcs, odbox_error *errs)
{
    (void)broker, (void)envs, (void)bodies, (void)lens, (void)errs;
    memset(rcs, 0, n * sizeof *rcs);
}

static const odbox_relay_ops noop_ops = {ODBOX_RELAY_OPS_VERSION, "noop", noop_publish, noop_close,
                                         noop_publish_batch};

int main(int argc, char **argv)
{
    static const char prog[] = "odbox-bench-relay-ceiling";
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s DSN NAME WORKERS POLL_MS [LOOPS]\n", prog);
        return 2;
    }
    int workers = (int)parse_long(prog, "WORKERS", argv[3], 1, 256);
    int poll_ms = (int)parse_long(prog, "POLL_MS", argv[4], 1, 60000);
    int loops = argc == 6 ? (int)parse_long(prog, "LOOPS", argv[5], 1, 64) : 0;
    /* SIGTERM is waited for below, by every thread the calls start too */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    odbox_error e = {0};
    odbox_registry *reg = NULL;
    odbox_handlers *h = NULL;
    odbox_relay *relay = NULL;
    odbox_delivery *d = NULL;
    odbox_jobs *jobs = NULL;
    const char *types[] = {"RelayProbed", NULL};
    odbox_relay_config cfg = {.name = argv[2], .event_types = types};
    static int broker;
    /* as tools/relay_cmd.c with a 10 s relay timeout and its default --batch */
    odbox_delivery_config dc = {.fanout_poll_ms = poll_ms, .handling_poll_ms = poll_ms, .workers = workers,
                                .stop_wait_ms = 5000, .handler_timeout_ms = 15000, .handling_batch = 250,
                                .handling_loops = loops};
    odbox_jobs_config jc = {.poll_interval_ms = poll_ms, .shutdown_max_wait_ms = 15000};
    int rc = odbox_registry_open_dsn(argv[1], &reg, &e);
    if (rc == ODBOX_OK)
        rc = odbox_handlers_new(&h, &e);
    if (rc == ODBOX_OK)
        rc = odbox_relay_add(h, &cfg, &noop_ops, &broker, &relay, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(reg, h, &dc, &d, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(reg, &jc, &jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(d, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, &e);
    if (rc == ODBOX_OK) {
        int sig = 0;
        sigwait(&set, &sig);
        rc = odbox_jobs_stop(jobs, &e);
    }
    if (rc != ODBOX_OK)
        fprintf(stderr, "%s: %s: %s\n", prog, odbox_errname(rc), e.message);
    odbox_delivery_free(&d);
    odbox_jobs_free(&jobs);
    odbox_relay_free(&relay);
    odbox_handlers_free(&h);
    odbox_registry_free(&reg);
    return rc == ODBOX_OK ? 0 : 1;
}
