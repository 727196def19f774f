/* odbox-wallet worker — a job registry on the registry's default shard
 * with the fan-out job and the handling of one delivery of the wallet's
 * handlers. Several workers may run at once: the fan-out runs in one of
 * them at a time and moves to another when that one stops; every worker
 * handles, claiming due rows under a lease. */
#include <string.h>
#include <time.h>
#include "wallet.h"
#include "worker.h"

#define CHECK_MS 100      /* how often the stop conditions are looked at */
#define IDLE_CHECK_MS 250 /* how often the backlog is read with until_idle */
#define STOP_WAIT_MS 5000 /* running handler calls at the stop */
#define JOBS_STOP_MS 15000
/* The wallet's handlers write a row or two: a call past 10 s has hung.
 * The lease is this + 30 s, so the rows a killed worker had claimed are
 * due again after 40 s rather than odbox's default 330 s. */
#define HANDLER_TIMEOUT_MS 10000

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL); /* a signal ends it early: the loop looks again */
}

/* Loops until one of cfg's conditions holds. */
static int wait_for_end(odbox_registry *r, const wallet_worker_config *cfg, wallet_worker_result *res,
                        odbox_error *err)
{
    int64_t start = now_ms(), next_check = start;
    for (;;) {
        int64_t t = now_ms();
        if (cfg->stop && *cfg->stop)
            return ODBOX_OK;
        if (cfg->run_ms > 0 && t - start >= cfg->run_ms)
            return ODBOX_OK;
        if (cfg->until_idle && t >= next_check) {
            /* a failed read (SQLite busy, a lost connection) is tried again
             * until the timeout; only the last one counts */
            int rc = wallet_backlog_read(r, &res->backlog, err);
            if (rc == ODBOX_OK && res->backlog.undelivered == 0 && res->backlog.pending == 0 &&
                res->backlog.failed == 0) {
                res->idle = 1;
                return ODBOX_OK;
            }
            if (t - start >= cfg->timeout_ms)
                return rc;
            next_check = t + IDLE_CHECK_MS;
        }
        sleep_ms(CHECK_MS);
    }
}

int wallet_worker_run(odbox_registry *r, const wallet_worker_config *cfg, wallet_worker_result *res,
                      odbox_error *err)
{
    memset(res, 0, sizeof *res);
    if (cfg->until_idle && cfg->timeout_ms <= 0)
        return odbox_error_set(err, ODBOX_EINVAL, "worker: --until-idle needs a positive timeout");
    int64_t start = now_ms();
    odbox_handlers *handlers = NULL;
    odbox_delivery *delivery = NULL;
    odbox_jobs *jobs = NULL;
    wallet_handlers_state st;
    memset(&st, 0, sizeof st);
    int64_t cap = cfg->backoff_ms > 0 ? cfg->backoff_ms * 16 : 0;
    odbox_delivery_config dc = {
        .fanout_poll_ms = cfg->poll_ms,
        .handling_poll_ms = cfg->poll_ms,
        .backoff_base_ms = cfg->backoff_ms,
        .backoff_cap_ms = cap > 300000 ? 300000 : cap,
        .workers = cfg->workers,
        .stop_wait_ms = STOP_WAIT_MS,
        .handler_timeout_ms = HANDLER_TIMEOUT_MS,
    };
    if (dc.backoff_cap_ms && dc.backoff_cap_ms < dc.backoff_base_ms)
        dc.backoff_cap_ms = dc.backoff_base_ms;
    odbox_jobs_config jc = {
        .poll_interval_ms = cfg->poll_ms,
        .heartbeat_interval_ms = cfg->heartbeat_ms,
        .shutdown_max_wait_ms = JOBS_STOP_MS,
    };
    int rc = odbox_handlers_new(&handlers, err);
    if (rc == ODBOX_OK)
        rc = wallet_handlers_add(handlers, r, &cfg->faults, &st, err);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(r, handlers, &dc, &delivery, err);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(r, &jc, &jobs, err);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(delivery, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, err);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(jobs, err);
    if (rc == ODBOX_OK)
        rc = wait_for_end(r, cfg, res, err);
    if (jobs) {
        odbox_error stop_err = {0};
        int src = odbox_jobs_stop(jobs, &stop_err);
        if (rc == ODBOX_OK && src != ODBOX_OK) {
            rc = src;
            if (err)
                *err = stop_err;
        }
    }
    odbox_delivery_free(&delivery);
    odbox_jobs_free(&jobs);
    odbox_handlers_free(&handlers);
    res->calls = atomic_load(&st.calls);
    res->injected = atomic_load(&st.injected);
    res->errors = atomic_load(&st.errors);
    res->elapsed_ms = now_ms() - start;
    return rc;
}
