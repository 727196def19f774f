/* odbox-wallet — the wallet's two event handlers, shared by
 * `odbox-wallet worker` and `odbox demo`, and the idle check the worker
 * stops on.
 *
 * - statement: WalletMoneyDepositedEvent, WalletMoneyWithdrawnEvent,
 *   WalletTransferSentEvent, WalletTransferReceivedEvent; one row per event
 *   in wallet_statement, keyed on the event id (a second call writes
 *   nothing new);
 * - audit: every wallet event type; counts its calls per event in
 *   wallet_handler_calls (handler_name 'audit'), so duplicate deliveries
 *   can be counted. statement counts its calls there too ('statement'). */
#ifndef ODBOX_WALLET_HANDLERS_H
#define ODBOX_WALLET_HANDLERS_H

#include <stdatomic.h>
#include <stdint.h>
#include <odbox/odbox.h>

/* Failures injected after the handler's effect, as a real handler may fail
 * after it wrote (the effect then must be idempotent). */
typedef struct wallet_faults {
    double fail_rate;      /* each call fails with this probability (0..1) */
    /* audit only: calls with attempt <= audit_fail_attempts fail, for the
     * events whose id hashes to 0 modulo audit_fail_every (0: none) */
    int audit_fail_attempts;
    int audit_fail_every;
} wallet_faults;

typedef struct wallet_handlers_state wallet_handlers_state;

/* Shared by the handlers' calls (on the delivery's worker threads). */
struct wallet_handlers_state {
    odbox_registry *registry;  /* where the handlers write: the event's shard */
    wallet_faults faults;
    atomic_uint_fast64_t rng;  /* for fail_rate */
    atomic_llong calls;        /* calls of both handlers */
    atomic_llong injected;     /* of which failed on purpose */
    atomic_llong errors;       /* of which failed on a database error */
    /* When set (after wallet_handlers_add): each successful call records
     * its commit-to-handler latency (now - the action's completion) here,
     * the first lag_cap of them. */
    int64_t *lag_us;
    size_t lag_cap;
    atomic_size_t nlag;
    /* The same for each first call as it starts (commit to handler start,
     * before the handler's own statements), when set. */
    int64_t *start_lag_us;
    atomic_size_t nstart;
};

/* Sets up st (faults may be NULL: none) and adds the handlers to h. st must
 * outlive every delivery using h. */
int wallet_handlers_add(odbox_handlers *h, odbox_registry *r, const wallet_faults *faults,
                        wallet_handlers_state *st, odbox_error *err);

/* What is left to deliver, over every shard of r: undelivered events of a
 * wallet event type, and PENDING or FAILED notifications. */
typedef struct wallet_backlog {
    int64_t undelivered;
    int64_t pending;
    int64_t failed;
} wallet_backlog;

/* The events of a wallet event type on shard s (undelivered_only: those
 * not yet fanned out). */
int wallet_events_count(odbox_shard *s, int undelivered_only, int64_t *n, odbox_error *err);

int wallet_backlog_read(odbox_registry *r, wallet_backlog *out, odbox_error *err);

#endif
