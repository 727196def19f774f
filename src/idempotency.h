/* odbox — idempotency keys: "this key executes once per namespace".
 *
 * A key row in <eventlog>.idempotency_keys (migration V11), written in the
 * same transaction as the rows and events it stands for, so the key is
 * spent exactly when they commit. It names the action (or own
 * transaction) that spent the key (V15): another name is refused, never
 * answered with the first one's outcome. The unique (namespace, idem_key)
 * decides between concurrent callers: a second INSERT waits on the first
 * one's uncommitted row (PostgreSQL, MySQL/MariaDB; SQLite serialises
 * writers) and fails with ODBOX_EUNIQUE once it commits, or goes through
 * if it rolls back. Any writer that owns a transaction (the executor's
 * persist, an own-transaction API) uses it so:
 *   before its work:  odbox_idem_lookup (a plain read, no transaction):
 *                     found -> return the stored outcome
 *   first statement of the transaction: odbox_idem_claim
 *                     taken -> roll back, odbox_idem_lookup
 * or, where the transaction may as well start before the work (an own
 * transaction; a keyed action where the dialect claims_keys_first, or
 * every keyed action after odbox_executor_claim_keys_first):
 *   odbox_idem_begin: taken -> odbox_idem_lookup; else work, then
 *   odbox_idem_set_result when there is a result, and commit.
 * Not installed. */
#ifndef ODBOX_IDEMPOTENCY_H
#define ODBOX_IDEMPOTENCY_H

#include <stdint.h>
#include "internal.h"
#include "odbox/dialect.h"
#include "odbox/registry.h"

#define ODBOX_IDEM_KEY_MAX 255

/* ODBOX_EINVAL unless key is 1..255 bytes of valid UTF-8 (no overlong
 * forms, no surrogates, nothing past U+10FFFF) without control characters
 * (bytes below 0x20, and 0x7f). what names the caller in the message. */
int odbox_idem_key_check(const char *what, const char *key, odbox_error *err);

/* "Same parameters": the SHA-256 (hex) of the params JSON as odbox writes
 * it (json-c, JSON_C_TO_STRING_PLAIN): so key order and spacing matter. */
void odbox_idem_params_sha256(const char *params_json, char out[65]);

typedef struct odbox_idem_outcome {
    char action_id[37];
    char params_sha256[65];
    char *action_name; /* NULL: unknown, a row of a build before V15 (malloc'd) */
    char *result;      /* the result JSON, or NULL: none (malloc'd) */
} odbox_idem_outcome;

void odbox_idem_outcome_clear(odbox_idem_outcome *o);

/* Reads (ns, key) on c: *found 1 and *out filled, or 0. Outside or inside
 * a transaction. */
int odbox_idem_find(odbox_conn *c, const char *eventlog, const char *ns, const char *key, odbox_idem_outcome *out,
                    int *found, odbox_error *err);

/* What a claim writes besides the namespace and the key. */
typedef struct odbox_idem_spend {
    const char *action_name; /* the action's, or the own transaction's */
    const char *params_sha256;
    const char *action_id;
    const char *result_json; /* NULL: none (yet) */
} odbox_idem_spend;

/* Inserts the key row in c's open transaction (created_date the
 * database's time, the dialect's now_sql: purge measures ages by it).
 * *taken 1 (and ODBOX_EUNIQUE) when (ns, key) exists: the caller rolls
 * back and reads the winner's outcome. */
int odbox_idem_claim(odbox_conn *c, const char *eventlog, const char *ns, const char *key,
                     const odbox_idem_spend *sp, int *taken, odbox_error *err);

/* The claim as a part of another statement (PostgreSQL's joined write):
 * its INSERT (*out malloc'd; select_form: INSERT ... SELECT ?, ... that a
 * WHERE can follow), and its ODBOX_IDEM_CLAIM_PARAMS parameters bound
 * from *idx on. A unique violation of the joined statement may be the
 * key's or a domain row's: odbox_idem_find tells. */
#define ODBOX_IDEM_CLAIM_PARAMS 6
int odbox_idem_claim_sql(const odbox_dialect *d, const char *eventlog, int select_form, char **out,
                         odbox_error *err);
int odbox_idem_claim_bind(odbox_stmt *s, int *idx, const char *ns, const char *key, const odbox_idem_spend *sp,
                          odbox_error *err);

/* The claim as a transaction's first statement: a connection of shard's
 * primary pool, BEGIN, odbox_idem_claim (no result yet). *out holds the
 * open transaction, or is NULL on failure: *taken 1 (ODBOX_EUNIQUE) when
 * the key exists (the caller reads its outcome), with the transaction
 * rolled back and the connection released. */
int odbox_idem_begin(odbox_shard *shard, const char *ns, const char *key, const odbox_idem_spend *sp,
                     odbox_conn **out, int *taken, odbox_error *err);

/* Sets the result JSON of the key row claimed in c's open transaction. */
int odbox_idem_set_result(odbox_conn *c, const char *eventlog, const char *ns, const char *key,
                          const char *result_json, odbox_error *err);

/* ODBOX_OK when the stored outcome was made by action_name (or by an
 * unknown one: a row without a name) with params_sha256, else
 * ODBOX_EUNIQUE with a message naming the key, the first action id and,
 * for another name, both names. */
int odbox_idem_match(const odbox_idem_outcome *o, const char *key, const char *action_name,
                     const char *params_sha256, odbox_error *err);

/* odbox_idem_find on a connection of shard's primary pool, then
 * odbox_idem_match: *found 0, or 1 with *out filled (the caller clears
 * it) when the stored outcome matches; ODBOX_EUNIQUE (out cleared) for
 * another action name or other params. Keys are kept on the default
 * shard. */
int odbox_idem_lookup(odbox_shard *shard, const char *ns, const char *key, const char *action_name,
                      const char *params_sha256, odbox_idem_outcome *out, int *found, odbox_error *err);

/* *used 1 when a key row with id action_id exists on shard (a plain
 * read on a connection of its primary pool): the keys table's primary
 * key is the action id, so a claim with a used one fails with
 * ODBOX_EUNIQUE though its (ns, key) is free. */
int odbox_idem_id_used(odbox_shard *shard, const char *action_id, int *used, odbox_error *err);

#endif
