/* odbox — events in your own transaction.
 *
 * For services that have their own tables, their own SQL and their own
 * transaction code: begin a transaction on a shard, run your statements
 * on its connection (odbox_stmt_*, odbox/db.h), add events, commit. Your
 * rows and the events land together or not at all. The events are the
 * rows an action writes (odbox/action.h): the same columns, one
 * multi-row INSERT at commit, a sentinel row when the transaction added
 * no event (so that odbox_action_committed can answer for it), the same
 * wake-up of this process's delivery and of other processes after the
 * commit, the same in-doubt rule.
 *
 *     odbox_tx *tx;
 *     odbox_tx_begin(exe, shard, NULL, &tx, &err);
 *     ... odbox_stmt_prepare(odbox_tx_conn(tx), "UPDATE ...", &s, &err) ...
 *     odbox_tx_emit(tx, "Order", "42", &ORDER_PAID, payload, &err);
 *     odbox_tx_commit(&tx, &err);      (or odbox_tx_rollback(&tx))
 *
 * Use an action when the change is a plan of models (odbox reads, checks
 * versions, retries stale ones); use a transaction of your own when you
 * already have the SQL.
 *
 * Thread model: a transaction belongs to one thread; several threads may
 * each run their own on one executor. */
#ifndef ODBOX_TX_H
#define ODBOX_TX_H

#include <json-c/json.h>
#include "action.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_tx odbox_tx;

/* Written to every event row of the transaction; NULL or zeroed: the
 * defaults. A caller's action_id must be unique per transaction: it names
 * the commit that odbox_action_committed answers for, and it is the
 * primary key of a keyed transaction's key row (a used one is refused at
 * a keyed begin with ODBOX_EUNIQUE). */
typedef struct odbox_tx_config {
    const char *action_name;     /* action_name: [A-Za-z_][A-Za-z0-9_.]*, <= 255; NULL: "Transaction" */
    const char *action_id;       /* a UUID of your choosing, unique per transaction; NULL: a new random UUID */
    json_object *params;         /* action_params, a JSON object (borrowed); NULL: {} */
    const char *idempotency_key; /* NULL, or 1..255 bytes of UTF-8: see odbox_tx_replayed */
} odbox_tx_config;

/* Takes a connection from the primary pool of shard (registered in the
 * executor's registry) and begins a transaction on it; the namespace is
 * the executor's. ODBOX_EINVAL (NULL exe or out, a bad config),
 * ODBOX_ENOTFOUND (no such shard), ODBOX_EOWNER (the shard's eventlog
 * belongs to another application), ODBOX_EUNIQUE (an idempotency key
 * used by another action name or with other params, or, with a key, a
 * cfg->action_id that another keyed transaction used), ODBOX_ETIMEDOUT (a key held by another open
 * transaction past the lock wait bound: see odbox_tx_replayed),
 * ODBOX_EDEADLOCK (a key's claim lost a deadlock five times, or the
 * key was taken and then released by a concurrent transaction: begin
 * again), ODBOX_ECROSSSHARD (a key off the default shard), pool and
 * database errors. *out is NULL on failure. */
int odbox_tx_begin(odbox_executor *exe, odbox_shard_id shard, const odbox_tx_config *cfg, odbox_tx **out,
                   odbox_error *err);

/* The transaction's connection, for your own statements; valid until the
 * commit or rollback. odbox_conn_begin, odbox_conn_commit and
 * odbox_conn_rollback on it are refused (ODBOX_ESTATE): the events and
 * a key go with odbox_tx_commit only; nor is it released, discarded or
 * closed by those calls. A COMMIT, ROLLBACK or BEGIN sent as SQL on it
 * (on MySQL and MariaDB also what commits implicitly there: DDL but a
 * temporary table's CREATE and DROP, account and table-maintenance
 * statements, SET autocommit, LOCK or UNLOCK TABLES), also behind a
 * comment or after a ';', is refused (ODBOX_EINVAL, not sent;
 * odbox_conn_exec). A statement that fails
 * on the server spoils the transaction on every database: no other
 * statement is sent on it (ODBOX_ESTATE; MySQL's and MariaDB's deadlock
 * has rolled it back, and what followed would autocommit), and
 * odbox_tx_commit refuses (ODBOX_ESTATE), rolls back and writes nothing
 * (PostgreSQL aborts the transaction at the error; the others would
 * otherwise commit the statements that succeeded). */
odbox_conn *odbox_tx_conn(odbox_tx *tx);

/* The action_id written to the transaction's event rows (36 characters,
 * in lower case, whatever the case of cfg->action_id): the one to give
 * odbox_action_committed. NULL for a NULL tx. */
const char *odbox_tx_action_id(const odbox_tx *tx);

/* 1 when the transaction's idempotency key executed before (in this
 * namespace, by the same action_name, with the same params: the SHA-256
 * of their plain json-c text, so key order matters): odbox_tx_begin then returned ODBOX_OK
 * with a transaction that replays the first one. Its action id is the
 * first one's, it has no connection (odbox_tx_conn is NULL: run none of
 * your statements), odbox_tx_emit refuses (ODBOX_ESTATE), and commit or
 * rollback only free it. The key row is written as the transaction's
 * first statement, so it is spent exactly when the transaction commits:
 * a rollback or a failed commit leaves it unspent. A concurrent begin
 * with the same key waits for the first transaction and then replays it,
 * for a bounded time: past the lock wait bound (odbox's PostgreSQL
 * sessions: lock_timeout 50 s; MySQL/MariaDB: innodb_lock_wait_timeout,
 * 50 s by default; SQLite: its busy timeout) begin returns
 * ODBOX_ETIMEDOUT, writing nothing, and the key stays with the first.
 * The same key with another action_name or other params is ODBOX_EUNIQUE
 * at begin, nothing written (a key row from before migration V15 has no
 * name: its params decide); a key runs only on the default shard
 * (ODBOX_ECROSSSHARD). 0 without a key. */
int odbox_tx_replayed(const odbox_tx *tx);

/* The shard the transaction runs on; -1.-1 for NULL. */
odbox_shard_id odbox_tx_shard(const odbox_tx *tx);

/* Adds an event on the model (model_type: [A-Za-z_][A-Za-z0-9_]*, model_id:
 * 1 to 255 bytes of UTF-8, e.g. your row's key) of type et with payload, a
 * JSON object of UTF-8 text without U+0000 (copied; cfg->params too). It is written at commit. Registers et with the
 * executor as odbox_plan_emit does. ODBOX_EINVAL for a NULL or bad
 * argument; ODBOX_ESTATE for a replaying transaction, or one whose
 * connection has no transaction any more (its session was lost while
 * idle and could not be replaced); the transaction is unchanged. */
int odbox_tx_emit(odbox_tx *tx, const char *model_type, const char *model_id, const odbox_event_type *et,
                  json_object *payload, odbox_error *err);

/* As odbox_tx_emit, delivered no earlier than deliver_after_us (UTC
 * microseconds; 0: at once), as odbox_plan_emit_after: written to
 * events.deliver_after, and the fan-out makes its notifications due then.
 * A negative time is ODBOX_EINVAL (the transaction unchanged). */
int odbox_tx_emit_after(odbox_tx *tx, const char *model_type, const char *model_id, const odbox_event_type *et,
                        json_object *payload, int64_t deliver_after_us, odbox_error *err);

/* Writes the events (or the sentinel row), commits, runs the executor's
 * commit listeners and wakes other processes' delivery, returns the
 * connection to its pool, frees the transaction and sets *tx to NULL,
 * whatever the outcome. On failure nothing was written (it was rolled
 * back; ODBOX_ESTATE: one of your statements had failed, or the session
 * was lost while idle and could not be replaced, and then nothing of
 * odbox's was written), except ODBOX_EINDOUBT: the connection was lost after the
 * COMMIT was sent; odbox_action_committed with odbox_tx_action_id (read it
 * before committing) tells. ODBOX_EINVAL for a NULL tx or *tx. */
int odbox_tx_commit(odbox_tx **tx, odbox_error *err);

/* Rolls back, returns the connection, frees and sets *tx to NULL.
 * Nothing is written. NULL or *tx NULL: nothing to do. */
void odbox_tx_rollback(odbox_tx **tx);

#ifdef __cplusplus
}
#endif
#endif
