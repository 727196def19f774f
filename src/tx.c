/* odbox — events in the caller's own transaction (odbox/tx.h).
 *
 * A connection from the shard's primary pool, in a transaction the caller
 * fills with its own statements. Events are staged here and written at
 * commit by the executor's own events INSERT (persist.c), with the
 * sentinel row when there are none: every committed transaction leaves a
 * row with its action_id, which is what odbox_action_committed reads. The
 * executor's hook points EVENTS_WRITTEN and COMMITTED sit where they sit
 * in an action's transaction, and a commit wakes delivery as an action's
 * does. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "action_internal.h"
#include "idempotency.h"
#include "registry_internal.h"
#include "odbox/tx.h"
#include "odbox/uuid.h"

#define MODEL_ID_MAX 255 /* events.model_id VARCHAR(255) */
#define DEFAULT_ACTION_NAME "Transaction"
/* emit's and commit's refusal when the transaction is gone: the caller
 * cannot end it (odbox_conn_own_tx), but a session lost while idle and
 * not replaced leaves the connection with none */
#define ENDED_MSG "%s: no open transaction on the transaction's connection (its session was lost and no new one " \
                  "could be begun): nothing written; end it with odbox_tx_rollback"

struct odbox_tx {
    odbox_executor *exe;
    odbox_shard *shard;
    odbox_pool *pool;
    odbox_conn *conn;
    odbox_action action; /* its name only: what the events writer reads */
    char *action_name;
    char *params_json;
    char action_id[ODBOX_UUID_LEN + 1];
    int64_t started_us;
    staged_event *events;
    size_t nevents, cap;
    char *key;      /* the idempotency key, or NULL */
    char sha[65];   /* the params' hash, with a key */
    int replayed;   /* the key executed before: no connection, nothing to write */
};

static void tx_free(odbox_tx *tx)
{
    odbox_conn_own_tx(tx->conn, 0);
    if (tx->conn)
        odbox_pool_release(tx->pool, &tx->conn); /* rolls back an open transaction */
    for (size_t i = 0; i < tx->nevents; i++) {
        free(tx->events[i].model_id);
        free((char *)tx->events[i].model_type);
        free(tx->events[i].payload);
    }
    free(tx->events);
    free(tx->action_name);
    free(tx->params_json);
    free(tx->key);
    free(tx);
}

static int check_config(const odbox_tx_config *cfg, odbox_error *err)
{
    if (cfg->idempotency_key && odbox_idem_key_check("tx begin", cfg->idempotency_key, err) != ODBOX_OK)
        return ODBOX_EINVAL;
    if (cfg->action_name && !odbox_action_name_valid(cfg->action_name))
        return odbox_fail(err, ODBOX_EINVAL,
                          "tx begin: action name '%.80s' must be an identifier (dots allowed, at most 255)",
                          cfg->action_name);
    if (cfg->action_id && !odbox_uuid_is_valid(cfg->action_id))
        return odbox_fail(err, ODBOX_EINVAL, "tx begin: action_id '%.40s' is not a UUID", cfg->action_id);
    if (cfg->params && !json_object_is_type(cfg->params, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "tx begin: params must be a JSON object");
    return ODBOX_OK;
}

/* With a key taken at the claim: tx becomes the replay of the first
 * transaction, with its action id and no connection; another action
 * name or other params are ODBOX_EUNIQUE. */
static int replay_key(odbox_tx *tx, int *found, odbox_error *err)
{
    odbox_idem_outcome o;
    int rc = odbox_idem_lookup(tx->shard, odbox_executor_ns(tx->exe), tx->key, tx->action_name, tx->sha, &o, found,
                               err);
    if (rc == ODBOX_OK && *found) {
        memcpy(tx->action_id, o.action_id, sizeof tx->action_id);
        tx->replayed = 1;
        odbox_idem_outcome_clear(&o);
        odbox_error_clear(err); /* the answer: the claim's conflict that led here is no error of the call's */
    }
    return rc;
}

/* A keyed begin: BEGIN and the key row as the first statement, so that
 * the key is spent exactly when the transaction commits and costs one
 * statement, in the transaction. A key taken already (its transaction
 * committed, or commits while this INSERT waits for it: the database
 * decides) makes this the replay of the first transaction. Unlike a
 * keyed action's, no read comes first: there is no perform to keep from
 * running, only the caller's statements after begin. Keys are kept on the
 * default shard, as for actions. */
static int keyed_begin(odbox_tx *tx, odbox_error *err)
{
    if (tx->shard != odbox_registry_default_shard(odbox_executor_registry(tx->exe)))
        return odbox_fail(err, ODBOX_ECROSSSHARD, "tx begin: a transaction with an idempotency key runs only on the "
                                                  "default shard, where its key is kept");
    odbox_idem_params_sha256(tx->params_json, tx->sha);
    int found = 0, taken = 0;
    odbox_idem_spend sp = {.action_name = tx->action_name, .params_sha256 = tx->sha, .action_id = tx->action_id};
    int rc = odbox_idem_begin(tx->shard, odbox_executor_ns(tx->exe), tx->key, &sp, &tx->conn, &taken, err);
    if (rc == ODBOX_OK || !taken)
        return rc;
    if ((rc = replay_key(tx, &found, err)) != ODBOX_OK || found)
        return rc;
    /* Not the key: the claim's other unique column is the id, a caller's
     * action_id used before, which no retry changes. Else the winner's
     * row went again: rare, retryable. */
    int used = 0;
    if ((rc = odbox_idem_id_used(tx->shard, tx->action_id, &used, err)) != ODBOX_OK)
        return rc;
    if (used)
        return odbox_fail(err, ODBOX_EUNIQUE, "tx begin: action_id %s is already used by another transaction "
                                              "(a caller's action_id must be unique per transaction): refused, "
                                              "nothing written", tx->action_id);
    return odbox_fail(err, ODBOX_EDEADLOCK, "tx begin: idempotency key '%.80s' was taken and then released by a "
                                            "concurrent transaction; begin again", tx->key);
}

int odbox_tx_begin(odbox_executor *exe, odbox_shard_id shard, const odbox_tx_config *cfg, odbox_tx **out,
                   odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "tx begin: out is NULL");
    *out = NULL;
    if (!exe)
        return odbox_fail(err, ODBOX_EINVAL, "tx begin: executor is NULL");
    odbox_tx_config none = {0};
    if (!cfg)
        cfg = &none;
    int rc = check_config(cfg, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_shard *s = odbox_registry_shard(odbox_executor_registry(exe), shard);
    if (!s)
        return odbox_fail(err, ODBOX_ENOTFOUND, "tx begin: no shard %d.%d is registered", shard.group,
                          shard.member);
    if ((rc = odbox_shard_check_eventlog(s, err)) != ODBOX_OK)
        return rc;
    odbox_tx *tx = calloc(1, sizeof *tx);
    if (!tx)
        return odbox_fail(err, ODBOX_ENOMEM, "tx begin: out of memory");
    tx->exe = exe;
    tx->shard = s;
    tx->pool = odbox_shard_primary(s);
    tx->action_name = strdup(cfg->action_name ? cfg->action_name : DEFAULT_ACTION_NAME);
    tx->params_json = strdup(cfg->params ? json_object_to_json_string_ext(cfg->params, JSON_C_TO_STRING_PLAIN) : "{}");
    if (!tx->action_name || !tx->params_json) {
        tx_free(tx);
        return odbox_fail(err, ODBOX_ENOMEM, "tx begin: out of memory");
    }
    rc = odbox_json_storable(tx->params_json, "tx begin", NULL, "params", 1, err);
    if (rc != ODBOX_OK) {
        tx_free(tx);
        return rc;
    }
    tx->action.name = tx->action_name;
    if (cfg->action_id) /* in lower case, as the event rows keep it: the key row's id is text, compared byte by
                         * byte on PostgreSQL and SQLite, so the same UUID in upper case would pass for unused */
        for (size_t i = 0; i < sizeof tx->action_id; i++)
            tx->action_id[i] = (char)tolower((unsigned char)cfg->action_id[i]);
    else
        odbox_uuid_v4(tx->action_id);
    tx->started_us = odbox_now_us();
    if (odbox_pool_lending(tx->pool)) /* its begin, keyed or not, would meet the action's transaction */
        rc = odbox_fail(err, ODBOX_ESTATE, "inside a keyed action's perform, which holds this shard's connection "
                                           "and transaction (its key was claimed first: MySQL/MariaDB, or "
                                           "odbox_executor_claim_keys_first): begin it outside perform");
    else if (cfg->idempotency_key)
        rc = (tx->key = strdup(cfg->idempotency_key)) ? keyed_begin(tx, err)
                                                      : odbox_fail(err, ODBOX_ENOMEM, "tx begin: out of memory");
    else if ((rc = odbox_pool_acquire(tx->pool, &tx->conn, err)) == ODBOX_OK)
        rc = odbox_conn_begin(tx->conn, err);
    if (rc != ODBOX_OK) {
        tx_free(tx);
        return odbox_error_prefix(err, rc, "tx begin on shard %d.%d", shard.group, shard.member);
    }
    odbox_conn_own_tx(tx->conn, 1); /* NULL when replayed */
    *out = tx;
    return ODBOX_OK;
}

odbox_conn *odbox_tx_conn(odbox_tx *tx) { return tx ? tx->conn : NULL; }
const char *odbox_tx_action_id(const odbox_tx *tx) { return tx ? tx->action_id : NULL; }
int odbox_tx_replayed(const odbox_tx *tx) { return tx ? tx->replayed : 0; }

odbox_shard_id odbox_tx_shard(const odbox_tx *tx)
{
    return odbox_shard_get_id(tx ? tx->shard : NULL);
}

static int check_emit(const odbox_tx *tx, const char *model_type, const char *model_id, const odbox_event_type *et,
                      json_object *payload, odbox_error *err)
{
    if (!tx || !model_type || !model_id || !et || !payload)
        return odbox_fail(err, ODBOX_EINVAL, "tx emit: %s is NULL",
                          !tx ? "tx" : !model_type ? "model_type" : !model_id ? "model_id" : !et ? "event type"
                                                                                                 : "payload");
    if (!odbox_is_type_name(model_type, ODBOX_TYPE_NAME_MAX))
        return odbox_fail(err, ODBOX_EINVAL, "tx emit: model type '%.80s' must match [A-Za-z_][A-Za-z0-9_]* (at most %d)",
                          model_type, ODBOX_TYPE_NAME_MAX);
    size_t idlen = strlen(model_id);
    if (idlen == 0 || idlen > MODEL_ID_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "tx emit: model id must be 1 to %d bytes (got %zu)", MODEL_ID_MAX, idlen);
    long bad = odbox_utf8_bad_at(model_id); /* refused here, not by some databases at the commit */
    if (bad >= 0)
        return odbox_fail(err, ODBOX_EINVAL, "tx emit: model id is not valid UTF-8 (byte %ld)", bad);
    if (!json_object_is_type(payload, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "tx emit %s: the payload must be a JSON object", et->name ? et->name : "");
    return ODBOX_OK;
}

int odbox_tx_emit(odbox_tx *tx, const char *model_type, const char *model_id, const odbox_event_type *et,
                  json_object *payload, odbox_error *err)
{
    return odbox_tx_emit_after(tx, model_type, model_id, et, payload, 0, err);
}

int odbox_tx_emit_after(odbox_tx *tx, const char *model_type, const char *model_id, const odbox_event_type *et,
                        json_object *payload, int64_t deliver_after_us, odbox_error *err)
{
    if (deliver_after_us < 0)
        return odbox_fail(err, ODBOX_EINVAL, "tx emit: deliver_after %lld is negative", (long long)deliver_after_us);
    int rc = check_emit(tx, model_type, model_id, et, payload, err);
    if (rc == ODBOX_OK && tx->replayed)
        return odbox_fail(err, ODBOX_ESTATE, "tx emit: the transaction replays idempotency key '%.80s', which "
                                             "executed before: it writes nothing", tx->key);
    if (rc == ODBOX_OK && !odbox_conn_in_transaction(tx->conn)) /* told now, not only at commit */
        return odbox_fail(err, ODBOX_ESTATE, ENDED_MSG, "tx emit");
    if (rc != ODBOX_OK || (rc = odbox_executor_register_event(tx->exe, et, err)) != ODBOX_OK)
        return rc;
    if (tx->nevents == tx->cap) {
        size_t cap = tx->cap ? tx->cap * 2 : 4;
        staged_event *g = realloc(tx->events, cap * sizeof *g);
        if (!g)
            return odbox_fail(err, ODBOX_ENOMEM, "tx emit: out of memory");
        tx->events = g;
        tx->cap = cap;
    }
    staged_event ev = {.et = et, .shard = tx->shard, .deliver_after_us = deliver_after_us};
    ev.model_id = strdup(model_id);
    ev.model_type = strdup(model_type);
    ev.payload = strdup(json_object_to_json_string_ext(payload, JSON_C_TO_STRING_PLAIN));
    rc = !ev.model_id || !ev.model_type || !ev.payload
             ? odbox_fail(err, ODBOX_ENOMEM, "tx emit: out of memory")
             : odbox_json_storable(ev.payload, "tx emit", et->name ? et->name : "", "the payload", 0, err);
    if (rc != ODBOX_OK) {
        free(ev.model_id);
        free((char *)ev.model_type);
        free(ev.payload);
        return rc;
    }
    tx->events[tx->nevents++] = ev;
    return ODBOX_OK;
}

/* The events (or the sentinel row), the hook's EVENTS_WRITTEN, COMMIT.
 * A connection without its transaction (ENDED_MSG) is refused before
 * anything is written: in autocommit the events INSERT would commit
 * alone, without the caller's rows (and without a keyed transaction's
 * key). */
static int write_and_commit(odbox_tx *tx, odbox_hook_fn hook, void *hook_ud, odbox_error *err)
{
    if (!odbox_conn_in_transaction(tx->conn))
        return odbox_fail(err, ODBOX_ESTATE, ENDED_MSG, "tx commit");
    if (odbox_conn_tx_failed(tx->conn))
        return odbox_fail(err, ODBOX_ESTATE, "tx commit: a statement failed in this transaction, so it is not "
                                             "committed (that would keep the statements that succeeded without "
                                             "the one that failed)");
    const staged_event *sentinel = NULL;
    const staged_event **rows = tx->nevents ? malloc(tx->nevents * sizeof *rows) : &sentinel;
    if (!rows)
        return odbox_fail(err, ODBOX_ENOMEM, "tx commit: out of memory");
    for (size_t i = 0; i < tx->nevents; i++)
        rows[i] = &tx->events[i];
    run rn = {.ns = odbox_executor_ns(tx->exe),
              .action = &tx->action,
              .params_json = tx->params_json,
              .action_id = tx->action_id,
              .started_us = tx->started_us}; /* a key was claimed at begin */
    size_t n = tx->nevents ? tx->nevents : 1;
    int rc = odbox_persist_events(&rn, tx->conn, tx->shard, rows, n, odbox_now_us(), err);
    if (rows != &sentinel)
        free(rows);
    odbox_shard_id id = odbox_shard_get_id(tx->shard);
    if (rc == ODBOX_OK && hook && (rc = hook(hook_ud, ODBOX_HOOK_EVENTS_WRITTEN, id, tx->conn)) != ODBOX_OK)
        rc = odbox_fail(err, rc < 0 ? rc : ODBOX_EDB, "hook failed the transaction at point %d",
                        (int)ODBOX_HOOK_EVENTS_WRITTEN);
    odbox_conn_own_tx(tx->conn, 0);
    if (rc == ODBOX_OK)
        rc = odbox_conn_commit(tx->conn, err); /* a lost connection here: ODBOX_EINDOUBT */
    return rc;
}

int odbox_tx_commit(odbox_tx **txp, odbox_error *err)
{
    if (!txp || !*txp)
        return odbox_fail(err, ODBOX_EINVAL, "tx commit: the transaction is NULL (committed or rolled back already?)");
    odbox_tx *tx = *txp;
    *txp = NULL;
    if (tx->replayed) { /* the first transaction committed: nothing to write */
        tx_free(tx);
        return ODBOX_OK;
    }
    odbox_hook_fn hook;
    void *hook_ud;
    odbox_executor_hook(tx->exe, &hook, &hook_ud);
    odbox_shard_id id = odbox_shard_get_id(tx->shard);
    int open = odbox_conn_in_transaction(tx->conn); /* else nothing was written: no "rolled back" */
    int rc = write_and_commit(tx, hook, hook_ud, err);
    if (rc == ODBOX_OK) {
        if (hook)
            hook(hook_ud, ODBOX_HOOK_COMMITTED, id, tx->conn);
        odbox_pool_release(tx->pool, &tx->conn);
        odbox_executor_committed(tx->exe, tx->shard, tx->nevents);
    } else {
        odbox_error_prefix(err, rc, "%stransaction %s (action_id %s) on shard %d.%d",
                           rc == ODBOX_EINDOUBT || !open ? "" : "rolled back: ", tx->action_name, tx->action_id,
                           id.group, id.member);
    }
    tx_free(tx); /* a failed commit's transaction is rolled back by the pool */
    return rc;
}

void odbox_tx_rollback(odbox_tx **txp)
{
    if (!txp || !*txp)
        return;
    odbox_tx *tx = *txp;
    *txp = NULL;
    odbox_conn_own_tx(tx->conn, 0);
    if (tx->conn && odbox_conn_in_transaction(tx->conn)) {
        odbox_error e;
        odbox_conn_rollback(tx->conn, &e);
    }
    tx_free(tx);
}
