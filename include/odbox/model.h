/* odbox — models, entities and the generic repository.
 *
 * A model type describes a domain table: its name (written to
 * eventlog.events.model_type), the table, and its own columns. Every row
 * also has the common columns
 *     id VARCHAR/UUID, version BIGINT (starts at 1), state VARCHAR(24),
 * and, for models (not entities), created_date and updated_date
 * (UTC, microseconds). Models can emit events; entities cannot.
 *
 * Writes are optimistic: an update of version N writes N + 1 WHERE
 * id = ? AND version = N; fewer rows than expected is ODBOX_ESTALE.
 * updated_date is set on every update. Reads skip state = 'DELETED'.
 *
 * A model type is caller-owned and must outlive everything that uses it;
 * a model (odbox_model) is owned by whoever created or received it. */
#ifndef ODBOX_MODEL_H
#define ODBOX_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "db.h"
#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODBOX_STATE_MAX 24        /* state VARCHAR(24) */
#define ODBOX_TYPE_NAME_MAX 255   /* model_type / event_type VARCHAR(255) */

typedef struct odbox_column {
    const char *name;   /* [a-z_][a-z0-9_]*, not one of the common columns */
    odbox_type type;
    int nullable;
    int max_length;     /* TEXT: most characters (UTF-8) accepted (0: unchecked) */
} odbox_column;

typedef enum odbox_model_kind {
    ODBOX_KIND_MODEL = 0,  /* common columns + created_date, updated_date; emits events */
    ODBOX_KIND_ENTITY = 1  /* common columns only; no events, no dates */
} odbox_model_kind;

typedef struct odbox_model_type {
    const char *name;              /* e.g. "Wallet": [A-Za-z_][A-Za-z0-9_]*, <= 255 */
    const char *table;             /* "wallets" or "schema.wallets" */
    odbox_model_kind kind;
    const odbox_column *columns;
    size_t ncolumns;
} odbox_model_type;

/* Checks names, types and duplicates; ODBOX_EINVAL with the reason. */
int odbox_model_type_check(const odbox_model_type *t, odbox_error *err);

/* Checks t's table on every shard's primary: that it exists and has the
 * common columns (id, version, state; created_date and updated_date for
 * models) and every column of t, and that every NOT NULL column without
 * a default is one odbox writes. ODBOX_EINVAL naming the table and the
 * column otherwise. The executor and the repository's reads make the
 * same check at a type's first use on each shard (once per shard and
 * type); call this at startup to find out before. Thread-safe. */
int odbox_model_type_verify(odbox_registry *r, const odbox_model_type *t, odbox_error *err);

/* A value for conditions: a type and, unless is_null, its payload. */
typedef struct odbox_value {
    odbox_type type;
    int is_null;
    const char *s;    /* TEXT, UUID, JSON */
    int64_t i;        /* INT64, TIMESTAMP (UTC microseconds) */
    double d;         /* DOUBLE */
    int b;            /* BOOL */
} odbox_value;

typedef struct odbox_model odbox_model;

/* A new row of type t: id given (NULL: a random v4 id), version 1, state
 * "ACTIVE", created_date = updated_date = now, columns NULL. */
int odbox_model_new(const odbox_model_type *t, const char *id, odbox_model **out, odbox_error *err);
/* The same with a shard-aware UUIDv7 id for shard (see odbox/uuid.h). */
int odbox_model_new_in_shard(const odbox_model_type *t, odbox_shard_id shard, odbox_model **out,
                             odbox_error *err);
/* A deep copy; NULL when memory runs out. */
odbox_model *odbox_model_copy(const odbox_model *m);
void odbox_model_free(odbox_model **m);

const odbox_model_type *odbox_model_get_type(const odbox_model *m);
const char *odbox_model_id(const odbox_model *m);
int64_t odbox_model_version(const odbox_model *m);
const char *odbox_model_state(const odbox_model *m);
int64_t odbox_model_created(const odbox_model *m);
int64_t odbox_model_updated(const odbox_model *m);
int odbox_model_set_state(odbox_model *m, const char *state, odbox_error *err);

/* Column setters copy; ODBOX_EINVAL for an unknown column, a type that
 * does not match, NULL in a NOT NULL column, an overlong text, text or
 * JSON that is not valid UTF-8 or JSON holding U+0000 (not every database
 * stores them), or text that is not one whole JSON document (any JSON
 * value but the bare null: SQL NULL is odbox_model_set_null). */
int odbox_model_set(odbox_model *m, const char *column, const odbox_value *v, odbox_error *err);
int odbox_model_set_text(odbox_model *m, const char *column, const char *v, odbox_error *err);
int odbox_model_set_int64(odbox_model *m, const char *column, int64_t v, odbox_error *err);
int odbox_model_set_double(odbox_model *m, const char *column, double v, odbox_error *err);
int odbox_model_set_bool(odbox_model *m, const char *column, int v, odbox_error *err);
int odbox_model_set_uuid(odbox_model *m, const char *column, const char *v, odbox_error *err);
int odbox_model_set_json(odbox_model *m, const char *column, const char *v, odbox_error *err);
int odbox_model_set_timestamp(odbox_model *m, const char *column, int64_t utc_us, odbox_error *err);
int odbox_model_set_null(odbox_model *m, const char *column, odbox_error *err);

/* Getters: *v points into the model (valid until the next set or free).
 * A NULL model or v, an unknown column, or a getter of another type than
 * the column's (get_text reads UUID and JSON columns too) is ODBOX_EINVAL,
 * *v untouched. */
int odbox_model_get(const odbox_model *m, const char *column, odbox_value *v, odbox_error *err);
int odbox_model_get_text(const odbox_model *m, const char *column, const char **v, odbox_error *err);
int odbox_model_get_int64(const odbox_model *m, const char *column, int64_t *v, odbox_error *err);
int odbox_model_get_double(const odbox_model *m, const char *column, double *v, odbox_error *err);
int odbox_model_get_bool(const odbox_model *m, const char *column, int *v, odbox_error *err);
int odbox_model_get_timestamp(const odbox_model *m, const char *column, int64_t *v, odbox_error *err);
/* 1 when the column holds NULL (0 for an unknown column). */
int odbox_model_is_null(const odbox_model *m, const char *column);

/* ---- the generic repository --------------------------------------------- */

typedef enum odbox_read_from {
    ODBOX_READ_PRIMARY = 0,
    ODBOX_READ_REPLICA = 1   /* the shard's replica, or its primary when it has none */
} odbox_read_from;

/* A list of models; free with odbox_models_free. */
typedef struct odbox_models {
    odbox_model **items;
    size_t n;
} odbox_models;
void odbox_models_free(odbox_models *list);

/* Writes on the caller's connection (inside the caller's transaction, or
 * autocommit). insert: multi-row INSERTs, as many rows to a statement as
 * the dialect's parameter limit allows. update: one statement for all
 * rows (dialect batch form), as many as that limit allows; each model's
 * version and updated_date are advanced in place when every row was
 * written; ODBOX_ESTALE when fewer rows matched than given (inside your
 * transaction, roll it back: nothing of it must be kept). In autocommit
 * an insert of more than one statement, and an update of more than one
 * row, run in a transaction of their own: a failure or a stale row
 * leaves none of their rows written. In autocommit, a connection lost
 * during a statement or that commit is ODBOX_EINDOUBT: the server may
 * have committed it. */
int odbox_repo_insert(odbox_conn *c, const odbox_model_type *t, odbox_model *const *models, size_t n,
                      odbox_error *err);
int odbox_repo_update(odbox_conn *c, const odbox_model_type *t, odbox_model *const *models, size_t n,
                      int64_t updated_us, odbox_error *err);

/* Reads through a registry. By id: the id's shard (shard-aware UUIDv7 id
 * of a registered shard, else the default shard); ODBOX_ENOTFOUND when
 * there is no such row or it is DELETED. */
int odbox_repo_find(odbox_registry *r, const odbox_model_type *t, const char *id, odbox_read_from from,
                    odbox_model **out, odbox_error *err);
/* By ids (duplicates ignored, missing ones skipped), grouped per shard. */
int odbox_repo_find_many(odbox_registry *r, const odbox_model_type *t, const char *const *ids, size_t n,
                         odbox_read_from from, odbox_models *out, odbox_error *err);
/* column = value (value NULL or is_null: IS NULL), over every shard.
 * column NULL: every row. Ordered by id within a shard. */
int odbox_repo_find_where(odbox_registry *r, const odbox_model_type *t, const char *column,
                          const odbox_value *value, odbox_read_from from, odbox_models *out,
                          odbox_error *err);
int odbox_repo_count_where(odbox_registry *r, const odbox_model_type *t, const char *column,
                           const odbox_value *value, odbox_read_from from, int64_t *count,
                           odbox_error *err);

/* The shard an id routes to (registered shard in a v7 id, else default). */
odbox_shard *odbox_registry_shard_for_id(const odbox_registry *r, const char *id);

#ifdef __cplusplus
}
#endif
#endif
