/* odbox-wallet — the wallet service: its model type, event types and
 * actions, on odbox's public API only.
 *
 * A wallet is a model row in `wallets` (owner, balance in integer minor
 * units). Every change is an action: perform reads the wallets it needs,
 * stages the updated rows and the events that describe the change, and the
 * executor writes both in one transaction per shard. */
#ifndef ODBOX_WALLET_H
#define ODBOX_WALLET_H

#include <stdint.h>
#include <odbox/odbox.h>
#include <odbox/model.h>
#include <odbox/action.h>
#include <odbox/uuid.h>

#define WALLET_NAMESPACE "odbox.examples.wallet"
#define WALLET_OWNER_MAX 200

extern const odbox_model_type wallet_model_type;

/* Its five event types: WalletOpenedEvent, WalletMoneyDepositedEvent,
 * WalletMoneyWithdrawnEvent, WalletTransferSentEvent,
 * WalletTransferReceivedEvent. */
#define WALLET_NEVENT_TYPES 5
extern const odbox_event_type *const wallet_event_types[WALLET_NEVENT_TYPES];

/* Why an action refused to stage anything (perform then returns an error
 * and nothing is written). */
typedef enum wallet_refusal {
    WALLET_REFUSED_NONE = 0,
    WALLET_REFUSED_NOT_FOUND,    /* no such wallet */
    WALLET_REFUSED_INSUFFICIENT, /* balance < amount */
    WALLET_REFUSED_OVERFLOW      /* balance + amount would not fit in int64 */
} wallet_refusal;

typedef struct wallet_view {
    char id[ODBOX_UUID_LEN + 1];
    char owner[WALLET_OWNER_MAX + 1];
    int64_t balance;
    int64_t version;
} wallet_view;

/* What an action did. On success: the wallet(s) after the change (for a
 * transfer: `wallet` is FROM, `other` is TO). On failure: the refusal, if
 * perform refused. Always: the action id and attempts of the last run. */
typedef struct wallet_reply {
    wallet_view wallet;
    wallet_view other;
    wallet_refusal refusal;
    char action_id[ODBOX_UUID_LEN + 1];
    int attempts;
    int replayed; /* the key had executed: its first outcome, nothing written */
} wallet_reply;

/* An executor in WALLET_NAMESPACE with the wallet model and event types
 * registered. */
int wallet_executor_open(odbox_registry *r, const odbox_exec_config *defaults, odbox_executor **out,
                         odbox_error *err);

/* The actions. cfg may be NULL (the executor's defaults). key (deposit,
 * withdraw, transfer; NULL: none) is an idempotency key: a second call
 * with it returns the first one's reply (odbox_execute_keyed). */
int wallet_open(odbox_executor *exe, const char *owner, odbox_shard_id shard, const odbox_exec_config *cfg,
                wallet_reply *reply, odbox_error *err);
int wallet_deposit(odbox_executor *exe, const char *id, int64_t amount, const char *key, const odbox_exec_config *cfg,
                   wallet_reply *reply, odbox_error *err);
int wallet_withdraw(odbox_executor *exe, const char *id, int64_t amount, const char *key,
                    const odbox_exec_config *cfg, wallet_reply *reply, odbox_error *err);
int wallet_transfer(odbox_executor *exe, const char *from, const char *to, int64_t amount, const char *key,
                    const odbox_exec_config *cfg, wallet_reply *reply, odbox_error *err);

/* Reads one wallet from its shard's primary (ODBOX_ENOTFOUND when absent). */
int wallet_find(odbox_registry *r, const char *id, wallet_view *out, odbox_error *err);

#endif
