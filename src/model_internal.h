/* odbox — model internals shared by model.c, repository.c and action.c;
 * not installed. */
#ifndef ODBOX_MODEL_INTERNAL_H
#define ODBOX_MODEL_INTERNAL_H

#include "odbox/model.h"
#include "internal.h"

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

#endif
