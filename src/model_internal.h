/* odbox — model internals shared by model.c, repository.c and action.c;
 * not installed. */
#ifndef ODBOX_MODEL_INTERNAL_H
#define ODBOX_MODEL_INTERNAL_H

#include "odbox/model.h"
#include "internal.h"
#include "odbox/dialect.h"

typedef struct model_value {
    int is_null;
    char *s;
    int64_t i;
    double d;
    int b;
} model_value;

struct odbox_model {
    const odbox_model_type *type;
    char id[37];
    int64_t version;
    char state[ODBOX_STATE_MAX + 1];
    int64_t created_us;
    int64_t updated_us;
    model_value *values; /* one per type->columns */
};

/* 1 when name matches [A-Za-z_][A-Za-z0-9_]* and is at most max long. */
int odbox_is_type_name(const char *name, size_t max);

/* A model of type t with every field zero/NULL (no id); NULL on OOM. */
odbox_model *odbox_model_alloc(const odbox_model_type *t);

/* Index of a user column, or -1. */
int odbox_model_column_index(const odbox_model_type *t, const char *name);

/* ---- writes as statement parts (repository.c) ----------------------------
 * odbox_repo_insert and odbox_repo_update run one statement per chunk;
 * the executor may join a shard's writes into one statement instead
 * (odbox_dialect.join_writes_sql). These build and bind each part.
 * op is ODBOX_SQL_INSERT or ODBOX_SQL_UPDATE. */

/* A bound parameter of an odbox type where a column gives it its type:
 * the dialect's UUID or JSON form, else a bare "?". */
const char *odbox_repo_param_form(const odbox_dialect *d, int type);
/* Adds what SQL generated for t depends on: table, kind, columns. */
void odbox_repo_key_add_type(odbox_sql_key *k, const odbox_model_type *t);
/* Parameters one row of op on t binds. */
int odbox_repo_write_params(const odbox_model_type *t, int op, size_t *per_row, odbox_error *err);
/* The statement writing n rows of t (*out malloc'd): a multi-row INSERT,
 * or the optimistic UPDATE (plain for one row, the dialect's batch form
 * for more). select_form (INSERT of one row): INSERT INTO t (...) SELECT
 * ?, ?, ... which a dialect can make conditional with a WHERE. */
int odbox_repo_write_sql(const odbox_dialect *d, const odbox_model_type *t, int op, size_t n, int select_form,
                         char **out, odbox_error *err);
/* Binds models[0..n) for that statement from *idx on, advancing *idx. */
int odbox_repo_write_bind(odbox_stmt *s, int *idx, const odbox_model_type *t, int op, odbox_model *const *models,
                          size_t n, odbox_error *err);
/* ODBOX_ESTALE for an UPDATE of models[0..n) that changed got rows. */
int odbox_repo_stale(const odbox_model_type *t, odbox_model *const *models, size_t n, int64_t got,
                     odbox_error *err);

#endif
