/* odbox — what the executor (action.c) and the shard writer (persist.c)
 * share: a plan's staged rows and events, and one execution's context.
 * Not installed. */
#ifndef ODBOX_ACTION_INTERNAL_H
#define ODBOX_ACTION_INTERNAL_H

#include "model_internal.h"
#include "odbox/action.h"

typedef enum { STAGE_ADD = 1, STAGE_UPDATE } stage_op;

typedef struct staged {
    stage_op op;
    odbox_model *m; /* the plan's own copy */
    odbox_shard *shard;
} staged;

typedef struct staged_event {
    char *model_id;             /* its own copy */
    const char *model_type;
    const odbox_event_type *et;
    char *payload;
    odbox_shard *shard;
    int64_t deliver_after_us; /* 0: at once */
} staged_event;

struct odbox_plan {
    odbox_executor *exe;
    staged *items;
    size_t n, cap;
    staged_event *events;
    size_t nevents, evcap;
    json_object *result;
};

/* One attempt of an action, as the shard writer needs it. */
typedef struct run {
    const char *ns;
    const odbox_action *action;
    const char *params_json;
    const char *action_id;
    int64_t started_us;
    odbox_plan *plan;
    odbox_hook_fn hook;
    void *hook_ud;
    /* an idempotency key (idempotency.h), or NULL: claimed first in the
     * shard's transaction, with the params' hash and the result JSON;
     * *key_taken is set when another execution holds it */
    const char *key;
    const char *params_sha256;
    const char *result_json;
    int *key_taken;
    /* NULL, or the default shard's connection whose open transaction
     * claimed the key before perform (claims_keys_first, or
     * odbox_executor_claim_keys_first): the shard's
     * writes and the key's result go into it, and its commit is theirs */
    odbox_conn *key_conn;
} run;

/* Commit listeners: fn(ud, shard, nevents) runs after a shard's commit
 * succeeded (its events, nevents of them, or its sentinel row when 0, are
 * durable), on the committing thread, outside any transaction, before
 * odbox_execute returns; never for a failed or in-doubt commit. An action
 * that commits on several shards calls it once per shard that committed.
 * fn must be cheap and must not block (the committer waits for it), and
 * must not add or remove commit listeners. A pair (fn, ud)
 * is added once (ODBOX_EINVAL for a second time). remove returns once no
 * call of fn is running, and fn is not called again (ODBOX_ENOTFOUND when
 * it was not added). Thread-safe against concurrent executes. */
typedef void (*odbox_commit_fn)(void *ud, odbox_shard_id shard, size_t nevents);
int odbox_executor_add_commit_listener(odbox_executor *exe, odbox_commit_fn fn, void *ud, odbox_error *err);
int odbox_executor_remove_commit_listener(odbox_executor *exe, odbox_commit_fn fn, void *ud);

/* Writes the plan's rows and events that belong to shard, all or
 * nothing, and commits them. */
int odbox_persist_shard(const run *rn, odbox_shard *shard, odbox_error *err);

/* Writes n event rows (a NULL row is the sentinel) on c, in the caller's
 * transaction: the executor's events INSERT, for own transactions (tx.c).
 * rn's plan and hook are not used. writer_us (this process's clock) gives
 * the event ids their millisecond; event_date and completion_date are the
 * database's clock at the INSERT. */
int odbox_persist_events(const run *rn, odbox_conn *c, odbox_shard *shard, const staged_event *const *rows, size_t n,
                         int64_t writer_us, odbox_error *err);

/* What an own transaction (tx.c) takes from its executor: the namespace,
 * the registry, the test hook, an action name's check, and the wake-up
 * after a commit (the commit listeners, then a NOTIFY when nevents > 0). */
const char *odbox_executor_ns(const odbox_executor *exe);
odbox_registry *odbox_executor_registry(const odbox_executor *exe);
void odbox_executor_hook(odbox_executor *exe, odbox_hook_fn *hook, void **ud);
int odbox_action_name_valid(const char *name);
void odbox_executor_committed(odbox_executor *exe, odbox_shard *s, size_t nevents);

#endif
