/* odbox — actions, plans and the executor: the outbox guarantee.
 *
 * An action is a name and a perform callback. perform reads (through the
 * repository, odbox/model.h) and stages changes on a plan: models to add,
 * models to update, events to emit on models. It never writes. The
 * executor then, per shard and in ONE transaction, writes the domain rows
 * and the events — one multi-row INSERT into <eventlog>.events, or a single
 * sentinel row when the action emitted nothing on that shard — and
 * commits. Either both land or neither does.
 *
 * Where the dialect can join writes (PostgreSQL: data-modifying WITH), a
 * shard whose plan updates at most one row is written by ONE statement in
 * autocommit, its own transaction: one round trip instead of BEGIN, one
 * per statement and COMMIT. The other rows and the events then depend on
 * that update in the statement itself, so a stale version writes nothing.
 * Plans that update several rows on a shard, that insert more than 30
 * rows beside an update, or that exceed the dialect's parameter limit,
 * and every plan while a hook is set, are written in a transaction of
 * separate statements.
 *
 * A connection lost after a shard's commit was sent (its COMMIT, or its
 * one statement) leaves unknown whether that shard committed:
 * ODBOX_EINDOUBT, never retried; odbox_action_committed finds out.
 *
 * Thread model: configure an executor (register types) before sharing it;
 * odbox_execute is then thread-safe. A plan and a context belong to one
 * perform call. */
#ifndef ODBOX_ACTION_H
#define ODBOX_ACTION_H

#include <json-c/json.h>
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An event type: its identity is this descriptor's address; its name is
 * written to eventlog.events.event_type. Two different descriptors with
 * the same name are refused (the rows would be ambiguous). */
typedef struct odbox_event_type {
    const char *name;  /* [A-Za-z_][A-Za-z0-9_]*, <= 255 */
} odbox_event_type;

typedef struct odbox_plan odbox_plan;
typedef struct odbox_context odbox_context;

/* Returns 0, or a negative ODBOX_E* code with err filled: the action
 * fails (a retryable code re-runs it per the retry rules). */
typedef int (*odbox_perform_fn)(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user,
                                odbox_error *err);

typedef struct odbox_action {
    const char *name;        /* action_name: [A-Za-z_][A-Za-z0-9_.]*, <= 255 */
    odbox_perform_fn perform;
    void *user;
} odbox_action;

/* ---- plans (inside perform) -------------------------------------------- */

/* Stages a new row (copied). ODBOX_EINVAL when its id is already staged,
 * its type is not registered with the executor, or a column that is not
 * nullable was never set (odbox_plan_update too). */
int odbox_plan_add(odbox_plan *p, const odbox_model *m, odbox_error *err);
/* Stages an update of m as read (version N, copied); *next_version (may
 * be NULL) gets N + 1, the version the row will have. */
int odbox_plan_update(odbox_plan *p, const odbox_model *m, int64_t *next_version, odbox_error *err);
/* Emits an event on model m (staged or not; its type registered): payload
 * must be a JSON object, NULL is ODBOX_EINVAL, and so is text in it that is
 * not UTF-8 or holds U+0000 (serialised now; the caller keeps its
 * reference). */
int odbox_plan_emit(odbox_plan *p, const odbox_model *m, const odbox_event_type *et,
                    json_object *payload, odbox_error *err);
/* As odbox_plan_emit, delivered no earlier than deliver_after_us (UTC
 * microseconds, by the database's clock when handlers claim; 0: at once,
 * as odbox_plan_emit). Written to events.deliver_after: its in-process
 * notifications are due then. A time past the delivery's retention
 * expires the notifications without a call. ODBOX_EINVAL: a negative time. */
int odbox_plan_emit_after(odbox_plan *p, const odbox_model *m, const odbox_event_type *et, json_object *payload,
                          int64_t deliver_after_us, odbox_error *err);
/* Hands a result to the caller of odbox_execute (takes the reference). */
void odbox_plan_set_result(odbox_plan *p, json_object *result);

/* ---- contexts (inside perform) ------------------------------------------ */

odbox_registry *odbox_context_registry(odbox_context *ctx);
/* This attempt's action id (the same on every event row it writes). */
const char *odbox_context_action_id(odbox_context *ctx);
/* 0 on the first attempt, then 1, 2, ... on retries. */
int odbox_context_attempt(odbox_context *ctx);

/* ---- execution configuration -------------------------------------------- */

#define ODBOX_MAX_RETRY_RULES 8

/* Re-run the whole action (new plan, new action id) when it fails with
 * code, at most max_retries times for that code, after delay_ms. Each
 * rule counts its own retries. Nothing is retried once a shard has
 * committed. */
typedef struct odbox_retry_rule {
    int code;
    int max_retries;
    int delay_ms;
} odbox_retry_rule;

typedef struct odbox_exec_config {
    odbox_retry_rule retries[ODBOX_MAX_RETRY_RULES];
    int nretries;
    int allow_cross_shard;   /* else a plan touching several shards is refused */
} odbox_exec_config;

/* Defaults: ODBOX_ESTALE -> 1 retry after 100 ms; no cross-shard. NULL-safe. */
void odbox_exec_config_default(odbox_exec_config *cfg);

/* ---- results -------------------------------------------------------------- */

#define ODBOX_MAX_RESULT_SHARDS 64

typedef struct odbox_result {
    char action_id[37];          /* of the last attempt; "" if perform never ran */
    int attempts;
    int retries[ODBOX_MAX_RETRY_RULES]; /* retries taken per rule of the config used */
    json_object *value;          /* from odbox_plan_set_result; caller puts it */
    /* which shards committed (all of them on success; on ODBOX_EPARTIAL the
     * ones that stay committed) and, on failure, the shard that failed */
    odbox_shard_id committed[ODBOX_MAX_RESULT_SHARDS];
    int ncommitted;
    odbox_shard_id failed_shard;
    int has_failed_shard;
    /* odbox_execute_keyed: 1 when the key had executed already and res
     * is that execution's outcome (action_id, value), perform not run */
    int replayed;
} odbox_result;

/* Releases res->value and zeroes res. */
void odbox_result_clear(odbox_result *res);

/* ---- the executor ----------------------------------------------------------- */

typedef struct odbox_executor odbox_executor;

/* namespace: dotted identifiers without hyphens, e.g. "com.example.shop"
 * (^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$, <= 255).
 * registry is borrowed. defaults may be NULL (odbox_exec_config_default). */
int odbox_executor_open(const char *ns, odbox_registry *registry, const odbox_exec_config *defaults,
                        odbox_executor **out, odbox_error *err);
void odbox_executor_free(odbox_executor **exe);

/* Every model type a plan uses must be registered (checked). */
int odbox_executor_register_model(odbox_executor *exe, const odbox_model_type *t, odbox_error *err);
/* Event types may be registered up front; emitting registers them too.
 * A different descriptor with a registered name is ODBOX_EINVAL. */
int odbox_executor_register_event(odbox_executor *exe, const odbox_event_type *et, odbox_error *err);

/* Test and tracing hook: called per shard inside its transaction after
 * the domain rows (ODBOX_HOOK_DOMAIN_WRITTEN) and after the event rows
 * (ODBOX_HOOK_EVENTS_WRITTEN, just before commit), and after the commit
 * (ODBOX_HOOK_COMMITTED). A non-zero return before the commit fails the
 * shard's transaction with that code. While a hook is set, every shard is
 * written in a transaction of separate statements (never as one
 * statement), so that both points exist. */
typedef enum odbox_hook_point {
    ODBOX_HOOK_DOMAIN_WRITTEN = 1,
    ODBOX_HOOK_EVENTS_WRITTEN,
    ODBOX_HOOK_COMMITTED
} odbox_hook_point;
typedef int (*odbox_hook_fn)(void *ud, odbox_hook_point at, odbox_shard_id shard, odbox_conn *conn);
void odbox_executor_set_hook(odbox_executor *exe, odbox_hook_fn hook, void *ud);

/* on 1: odbox_execute_keyed claims its key before perform on every
 * dialect, as MySQL/MariaDB always do: the default shard's transaction
 * begins with the key's INSERT, so a second caller with the same key at
 * the same moment waits there for the first and never runs perform. It
 * costs that transaction's BEGIN and COMMIT, and the shard is written in
 * separate statements, not as one. On SQLite the claim holds the
 * database's write lock through perform. 0 (the default): the dialect's
 * way; on PostgreSQL and SQLite the key is read before perform and
 * written with the rows, so two callers at the same moment may both run
 * perform, and one of them then writes nothing and returns the other's
 * outcome. A NULL exe does nothing. */
void odbox_executor_claim_keys_first(odbox_executor *exe, int on);

/* Runs the action. params must be a JSON object (NULL: {}) of UTF-8 text
 * without U+0000 (else ODBOX_EINVAL; a keyed action's result that is not
 * UTF-8 is too: its key's row keeps it as text). cfg NULL:
 * the executor's defaults. res (may be NULL) gets the action id, retry
 * counts and perform's result, also on failure. Codes: perform's own,
 * ODBOX_ESTALE (retries exhausted), ODBOX_ECROSSSHARD (nothing written),
 * ODBOX_EPARTIAL (some shards committed: see res and err->message),
 * ODBOX_EINDOUBT (see above; res->failed_shard is the shard, and the
 * message names it and the action_id), database errors. A retry rule for
 * ODBOX_EINDOUBT or ODBOX_EPARTIAL is refused (ODBOX_EINVAL): nothing is
 * retried once a shard has, or may have, committed. */
int odbox_execute(odbox_executor *exe, const odbox_action *action, json_object *params,
                  const odbox_exec_config *cfg, odbox_result *res, odbox_error *err);

/* As odbox_execute, once per idempotency key within the executor's
 * namespace. key: 1..255 bytes of valid UTF-8, no control characters
 * (else ODBOX_EINVAL, nothing written), e.g. an HTTP request id. The key is written with the
 * action's rows and events, first in their transaction, and spent only if
 * they commit (a perform that fails, a stale version, a rollback leave it
 * unspent). A key that has executed: perform does not run, nothing is
 * written, and ODBOX_OK returns the first execution's outcome in res
 * (its action_id, its result JSON in value, the default shard committed,
 * replayed = 1); also when the two calls run at the same moment in
 * different processes (the second waits on the key's unique index until
 * the first commits). The same key with another action name (the key
 * row records it, migration V15; a row written before has none and is
 * compared by params only) or with other params is ODBOX_EUNIQUE,
 * nothing written, perform not run: params are "the same" when their
 * JSON text, as json-c writes it (JSON_C_TO_STRING_PLAIN), has the same
 * SHA-256; so key order matters. After ODBOX_EINDOUBT the same call again is safe: it returns
 * the first outcome if that committed, else runs. A keyed action writes
 * only on the registry's default shard, where keys are kept (else
 * ODBOX_ECROSSSHARD, nothing written). Where the shard is written in one
 * statement (see above), the key's INSERT is a part of it, made to depend
 * on the UPDATE as the other rows are, and the key is read before perform.
 * On MySQL/MariaDB (and on every dialect after
 * odbox_executor_claim_keys_first) the transaction begins before perform with the key's
 * INSERT, which finds a key that executed, and perform's reads of the
 * default shard run in it on its connection (a second caller with the
 * key waits for the first at that INSERT, through perform); the result is
 * written to the key's row before the commit. There, while perform runs,
 * the thread's connection of the default shard's primary is that
 * transaction's: a perform that executes another action or begins an own
 * transaction on that shard gets ODBOX_ESTATE. A key another
 * transaction holds, uncommitted, past the lock wait bound (50 s unless
 * the session set its own) is ODBOX_ETIMEDOUT, nothing written; a key a
 * concurrent execution took and then released, or whose claim lost a
 * deadlock five times (MySQL/MariaDB), ODBOX_EDEADLOCK: execute again.
 * Keys are kept until odbox_purge_run removes them (keys_older_than_us,
 * default 7 days). Needs migrations V11 and V15. Thread-safe as
 * odbox_execute. */
int odbox_execute_keyed(odbox_executor *exe, const odbox_action *action, json_object *params, const char *key,
                        const odbox_exec_config *cfg, odbox_result *res, odbox_error *err);

/* Sets *committed to 1 when the execution action_id committed on shard,
 * else 0: every execution that commits leaves at least one row (an event
 * or its sentinel) with its action_id in the shard's <eventlog>.events.
 * For ODBOX_EINDOUBT: ask once the lost session has ended on the server,
 * which may still be finishing a COMMIT it received (until then a 0 may
 * turn into 1), and before odbox_purge_run removes its rows (older_than_us):
 * afterwards every execution reads 0. Reads the
 * shard's primary. ODBOX_EINVAL for a NULL
 * argument or an action_id that is not a UUID, ODBOX_ENOTFOUND for an
 * unregistered shard. */
int odbox_action_committed(odbox_registry *registry, odbox_shard_id shard, const char *action_id, int *committed,
                           odbox_error *err);

#ifdef __cplusplus
}
#endif
#endif
