/* odbox-wallet worker — runs the fan-out and handling jobs with the
 * wallet's handlers (wallet_handlers.h) until stopped, for a time, or until
 * nothing is left to deliver. */
#ifndef ODBOX_WALLET_WORKER_H
#define ODBOX_WALLET_WORKER_H

#include <signal.h>
#include <stdint.h>
#include "wallet_handlers.h"

typedef struct wallet_worker_config {
    wallet_faults faults;
    int64_t backoff_ms;   /* backoff base; 0: the library's (30 s); the cap is 16 x base */
    int poll_ms;          /* the jobs' and delivery's poll delays; 0: the library's */
    int heartbeat_ms;     /* 0: the library's (10 s) */
    int workers;          /* handler threads; 0: the library's (8) */
    int64_t run_ms;       /* > 0: stop after this long (--for) */
    int until_idle;       /* stop once wallet_backlog_read finds nothing left */
    int64_t timeout_ms;   /* with until_idle: give up after this long (required > 0) */
    volatile sig_atomic_t *stop; /* set (by a signal handler) to stop gracefully */
} wallet_worker_config;

typedef struct wallet_worker_result {
    int idle;             /* until_idle: the backlog was found empty */
    int64_t calls, injected, errors; /* the handlers' calls in this process */
    wallet_backlog backlog; /* at the end */
    int64_t elapsed_ms;
} wallet_worker_result;

/* Runs until *stop, run_ms, or (until_idle) an empty backlog or timeout_ms:
 * ODBOX_OK, with res->idle telling which for until_idle; ODBOX_ETIMEDOUT
 * when the jobs did not stop within their bound. */
int wallet_worker_run(odbox_registry *r, const wallet_worker_config *cfg, wallet_worker_result *res,
                      odbox_error *err);

#endif
