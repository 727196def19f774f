/* odbox — model types and model values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "model_internal.h"
#include "odbox/uuid.h"

static const char *const common_columns[] = {"id", "version", "state", "created_date", "updated_date", NULL};

int odbox_is_type_name(const char *name, size_t max)
{
    if (!name || !*name || strlen(name) > max)
        return 0;
    if (!((*name >= 'a' && *name <= 'z') || (*name >= 'A' && *name <= 'Z') || *name == '_'))
        return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return 0;
    return 1;
}

static int table_name_valid(const char *table)
{
    if (!table)
        return 0;
    const char *dot = strchr(table, '.');
    if (!dot)
        return odbox_name_is_valid(table);
    char schema[ODBOX_NAME_MAX];
    size_t n = (size_t)(dot - table);
    if (n == 0 || n >= sizeof schema)
        return 0;
    memcpy(schema, table, n);
    schema[n] = '\0';
    return odbox_name_is_valid(schema) && odbox_name_is_valid(dot + 1);
}

int odbox_model_type_check(const odbox_model_type *t, odbox_error *err)
{
    if (!t)
        return odbox_fail(err, ODBOX_EINVAL, "model type is NULL");
    if (!odbox_is_type_name(t->name, ODBOX_TYPE_NAME_MAX))
        return odbox_fail(err, ODBOX_EINVAL, "model type name '%.80s' must match [A-Za-z_][A-Za-z0-9_]* (at most %d)",
                          t->name ? t->name : "(null)", ODBOX_TYPE_NAME_MAX);
    if (!table_name_valid(t->table))
        return odbox_fail(err, ODBOX_EINVAL, "model type %s: table '%.80s' is not a valid [schema.]name", t->name,
                          t->table ? t->table : "(null)");
    if (t->kind != ODBOX_KIND_MODEL && t->kind != ODBOX_KIND_ENTITY)
        return odbox_fail(err, ODBOX_EINVAL, "model type %s: unknown kind %d", t->name, (int)t->kind);
    if (t->ncolumns && !t->columns)
        return odbox_fail(err, ODBOX_EINVAL, "model type %s: %zu columns but no column array", t->name, t->ncolumns);
    for (size_t i = 0; i < t->ncolumns; i++) {
        const odbox_column *c = &t->columns[i];
        if (!odbox_name_is_valid(c->name))
            return odbox_fail(err, ODBOX_EINVAL, "model type %s: column '%.80s' is not a valid name", t->name,
                              c->name ? c->name : "(null)");
        for (const char *const *k = common_columns; *k; k++)
            if (!strcmp(c->name, *k))
                return odbox_fail(err, ODBOX_EINVAL, "model type %s: column %s is a common column", t->name, c->name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(c->name, t->columns[j].name))
                return odbox_fail(err, ODBOX_EINVAL, "model type %s: column %s is listed twice", t->name, c->name);
        if (c->type < ODBOX_TYPE_TEXT || c->type > ODBOX_TYPE_TIMESTAMP)
            return odbox_fail(err, ODBOX_EINVAL, "model type %s: column %s has unknown type %d", t->name, c->name,
                              (int)c->type);
        if (c->max_length < 0)
            return odbox_fail(err, ODBOX_EINVAL, "model type %s: column %s has a negative max_length", t->name,
                              c->name);
    }
    return ODBOX_OK;
}

odbox_model *odbox_model_alloc(const odbox_model_type *t)
{
    odbox_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->type = t;
    if (t->ncolumns && !(m->values = calloc(t->ncolumns, sizeof *m->values))) {
        free(m);
        return NULL;
    }
    for (size_t i = 0; i < t->ncolumns; i++)
        m->values[i].is_null = 1;
    return m;
}

static int model_init(const odbox_model_type *t, const char *id, odbox_model **out, odbox_error *err)
{
    int rc;
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "model: out is NULL");
    *out = NULL;
    if ((rc = odbox_model_type_check(t, err)) != ODBOX_OK)
        return rc;
    if (id && !odbox_uuid_is_valid(id))
        return odbox_fail(err, ODBOX_EINVAL, "model %s: id '%.40s' is not a UUID", t->name, id);
    odbox_model *m = odbox_model_alloc(t);
    if (!m)
        return odbox_fail(err, ODBOX_ENOMEM, "model: out of memory");
    if (id) {
        for (int i = 0; i < 36; i++)
            m->id[i] = (char)((id[i] >= 'A' && id[i] <= 'F') ? id[i] - 'A' + 'a' : id[i]);
        m->id[36] = '\0';
    } else {
        odbox_uuid_v4(m->id);
    }
    m->version = 1;
    strcpy(m->state, "ACTIVE");
    if (t->kind == ODBOX_KIND_MODEL)
        m->created_us = m->updated_us = odbox_now_us();
    *out = m;
    return ODBOX_OK;
}

int odbox_model_new(const odbox_model_type *t, const char *id, odbox_model **out, odbox_error *err)
{
    return model_init(t, id, out, err);
}

int odbox_model_new_in_shard(const odbox_model_type *t, odbox_shard_id shard, odbox_model **out,
                             odbox_error *err)
{
    char id[ODBOX_UUID_LEN + 1];
    /* emptied before the shard is checked: refused for its shard, as for
     * anything else, the caller holds no stale pointer to free */
    if (out)
        *out = NULL;
    int rc = odbox_uuid_v7_sharded(shard, id, err);
    return rc == ODBOX_OK ? model_init(t, id, out, err) : rc;
}

odbox_model *odbox_model_copy(const odbox_model *m)
{
    if (!m)
        return NULL;
    odbox_model *c = odbox_model_alloc(m->type);
    if (!c)
        return NULL;
    memcpy(c->id, m->id, sizeof c->id);
    memcpy(c->state, m->state, sizeof c->state);
    c->version = m->version;
    c->created_us = m->created_us;
    c->updated_us = m->updated_us;
    for (size_t i = 0; i < m->type->ncolumns; i++) {
        c->values[i] = m->values[i];
        c->values[i].s = NULL;
        if (m->values[i].s && !(c->values[i].s = strdup(m->values[i].s))) {
            odbox_model_free(&c);
            return NULL;
        }
    }
    return c;
}

void odbox_model_free(odbox_model **mp)
{
    if (!mp || !*mp)
        return;
    odbox_model *m = *mp;
    for (size_t i = 0; m->values && i < m->type->ncolumns; i++)
        free(m->values[i].s);
    free(m->values);
    free(m);
    *mp = NULL;
}

const odbox_model_type *odbox_model_get_type(const odbox_model *m) { return m ? m->type : NULL; }
const char *odbox_model_id(const odbox_model *m) { return m ? m->id : NULL; }
int64_t odbox_model_version(const odbox_model *m) { return m ? m->version : 0; }
const char *odbox_model_state(const odbox_model *m) { return m ? m->state : NULL; }
int64_t odbox_model_created(const odbox_model *m) { return m ? m->created_us : 0; }
int64_t odbox_model_updated(const odbox_model *m) { return m ? m->updated_us : 0; }

int odbox_model_set_state(odbox_model *m, const char *state, odbox_error *err)
{
    if (!m || !state || !*state)
        return odbox_fail(err, ODBOX_EINVAL, "model: state is missing");
    if (strlen(state) > ODBOX_STATE_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "model %s: state '%.40s' is longer than %d", m->type->name, state,
                          ODBOX_STATE_MAX);
    strcpy(m->state, state);
    return ODBOX_OK;
}

int odbox_model_column_index(const odbox_model_type *t, const char *name)
{
    for (size_t i = 0; name && i < t->ncolumns; i++)
        if (!strcmp(t->columns[i].name, name))
            return (int)i;
    return -1;
}

static int column_for(const odbox_model *m, const char *column, odbox_error *err)
{
    if (!m)
        return odbox_fail(err, ODBOX_EINVAL, "model is NULL");
    int i = odbox_model_column_index(m->type, column);
    if (i < 0)
        return odbox_fail(err, ODBOX_EINVAL, "model %s has no column '%.64s'", m->type->name,
                          column ? column : "(null)");
    return i;
}

/* A whole JSON document (object, array, string, number or boolean): no
 * trailing text, and not the bare literal null (SQL NULL is set_null). */
static int valid_json(const char *text)
{
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return 0;
    size_t len = strlen(text);
    /* len + 1: the NUL ends a bare number ("42" could still grow) */
    json_object *o = json_tokener_parse_ex(tok, text, (int)len + 1);
    int ok = o && json_tokener_get_error(tok) == json_tokener_success;
    for (size_t end = json_tokener_get_parse_end(tok); ok && end < len; end++)
        ok = strchr(" \t\r\n", text[end]) != NULL;
    json_tokener_free(tok);
    json_object_put(o);
    return ok;
}

/* Characters of a UTF-8 string (what VARCHAR(n) counts). */
static size_t utf8_length(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Text and JSON only as every database stores them, refused here rather
 * than by some databases at the action's commit. */
static int storable_text(const odbox_model *m, const odbox_column *c, const char *s, odbox_error *err)
{
    if (c->type == ODBOX_TYPE_JSON) {
        char subject[80];
        snprintf(subject, sizeof subject, "column %.64s", c->name);
        return odbox_json_storable(s, "model", m->type->name, subject, 0, err);
    }
    long bad = odbox_utf8_bad_at(s);
    if (bad >= 0)
        return odbox_fail(err, ODBOX_EINVAL,
                          "model %s: column %s: not valid UTF-8 (byte %ld), which PostgreSQL and MySQL/MariaDB "
                          "cannot store",
                          m->type->name, c->name, bad);
    return ODBOX_OK;
}

int odbox_model_set(odbox_model *m, const char *column, const odbox_value *v, odbox_error *err)
{
    int rc;
    int i = column_for(m, column, err);
    if (i < 0)
        return i;
    const odbox_column *c = &m->type->columns[i];
    if (!v || v->is_null)
        goto set_null;
    if (v->type != c->type)
        return odbox_fail(err, ODBOX_EINVAL, "model %s: column %s does not take a value of type %d", m->type->name,
                          c->name, (int)v->type);
    model_value nv = {0};
    switch (c->type) {
    case ODBOX_TYPE_TEXT:
    case ODBOX_TYPE_UUID:
    case ODBOX_TYPE_JSON:
        if (!v->s)
            goto set_null;
        if (c->type != ODBOX_TYPE_UUID && (rc = storable_text(m, c, v->s, err)) != ODBOX_OK)
            return rc;
        if (c->type == ODBOX_TYPE_TEXT && c->max_length && utf8_length(v->s) > (size_t)c->max_length)
            return odbox_fail(err, ODBOX_EINVAL, "model %s: column %s: value longer than %d characters", m->type->name,
                              c->name, c->max_length);
        if (c->type == ODBOX_TYPE_UUID && !odbox_uuid_is_valid(v->s))
            return odbox_fail(err, ODBOX_EINVAL, "model %s: column %s: '%.40s' is not a UUID", m->type->name,
                              c->name, v->s);
        if (c->type == ODBOX_TYPE_JSON && !valid_json(v->s))
            return odbox_fail(err, ODBOX_EINVAL, "model %s: column %s: invalid JSON", m->type->name, c->name);
        if (!(nv.s = strdup(v->s)))
            return odbox_fail(err, ODBOX_ENOMEM, "model: out of memory");
        break;
    case ODBOX_TYPE_INT64:
    case ODBOX_TYPE_TIMESTAMP:
        nv.i = v->i;
        break;
    case ODBOX_TYPE_DOUBLE:
        if (v->d != v->d || v->d - v->d != 0)
            return odbox_fail(err, ODBOX_EINVAL, "model %s: column %s: not a finite number", m->type->name, c->name);
        nv.d = v->d;
        break;
    case ODBOX_TYPE_BOOL:
        nv.b = v->b ? 1 : 0;
        break;
    }
    free(m->values[i].s);
    m->values[i] = nv;
    return ODBOX_OK;
set_null:
    if (!c->nullable)
        return odbox_fail(err, ODBOX_EINVAL, "model %s: column %s is NOT NULL", m->type->name, c->name);
    free(m->values[i].s);
    memset(&m->values[i], 0, sizeof m->values[i]);
    m->values[i].is_null = 1;
    return ODBOX_OK;
}

#define SETTER(fn, ctype, T, field)                                                        \
    int fn(odbox_model *m, const char *column, ctype v, odbox_error *err)                  \
    {                                                                                      \
        odbox_value val = {.type = T};                                                     \
        val.field = v;                                                                     \
        return odbox_model_set(m, column, &val, err);                                      \
    }
SETTER(odbox_model_set_text, const char *, ODBOX_TYPE_TEXT, s)
SETTER(odbox_model_set_uuid, const char *, ODBOX_TYPE_UUID, s)
SETTER(odbox_model_set_json, const char *, ODBOX_TYPE_JSON, s)
SETTER(odbox_model_set_int64, int64_t, ODBOX_TYPE_INT64, i)
SETTER(odbox_model_set_timestamp, int64_t, ODBOX_TYPE_TIMESTAMP, i)
SETTER(odbox_model_set_double, double, ODBOX_TYPE_DOUBLE, d)
SETTER(odbox_model_set_bool, int, ODBOX_TYPE_BOOL, b)

int odbox_model_set_null(odbox_model *m, const char *column, odbox_error *err)
{
    return odbox_model_set(m, column, NULL, err);
}

int odbox_model_get(const odbox_model *m, const char *column, odbox_value *v, odbox_error *err)
{
    int i = column_for(m, column, err);
    if (i < 0)
        return i;
    /* a caller's mistake is reported as one, not a crash */
    if (!v)
        return odbox_fail(err, ODBOX_EINVAL, "model get: out is NULL");
    const model_value *mv = &m->values[i];
    memset(v, 0, sizeof *v);
    v->type = m->type->columns[i].type;
    v->is_null = mv->is_null;
    v->s = mv->s;
    v->i = mv->i;
    v->d = mv->d;
    v->b = mv->b;
    return ODBOX_OK;
}

/* The value of column into v when the column is of type want (or text
 * like it, for want TEXT). out is the caller's output: a NULL one goes on
 * to odbox_model_get as a NULL v, which refuses it (the caller gets
 * ODBOX_EINVAL, not a crash at the store). */
static int get_typed(const odbox_model *m, const char *column, odbox_type want, const void *out, odbox_value *v,
                     odbox_error *err)
{
    int rc = odbox_model_get(m, column, out ? v : NULL, err);
    if (rc != ODBOX_OK)
        return rc;
    int text_like = want == ODBOX_TYPE_TEXT &&
                    (v->type == ODBOX_TYPE_UUID || v->type == ODBOX_TYPE_JSON || v->type == ODBOX_TYPE_TEXT);
    if (v->type != want && !text_like)
        return odbox_fail(err, ODBOX_EINVAL, "model %s: column %s is not of the type asked for", m->type->name,
                          column);
    return ODBOX_OK;
}

int odbox_model_get_text(const odbox_model *m, const char *column, const char **out, odbox_error *err)
{
    odbox_value v;
    int rc = get_typed(m, column, ODBOX_TYPE_TEXT, out, &v, err);
    if (rc == ODBOX_OK)
        *out = v.is_null ? NULL : v.s;
    return rc;
}

int odbox_model_get_int64(const odbox_model *m, const char *column, int64_t *out, odbox_error *err)
{
    odbox_value v;
    int rc = get_typed(m, column, ODBOX_TYPE_INT64, out, &v, err);
    if (rc == ODBOX_OK)
        *out = v.i;
    return rc;
}

int odbox_model_get_double(const odbox_model *m, const char *column, double *out, odbox_error *err)
{
    odbox_value v;
    int rc = get_typed(m, column, ODBOX_TYPE_DOUBLE, out, &v, err);
    if (rc == ODBOX_OK)
        *out = v.d;
    return rc;
}

int odbox_model_get_bool(const odbox_model *m, const char *column, int *out, odbox_error *err)
{
    odbox_value v;
    int rc = get_typed(m, column, ODBOX_TYPE_BOOL, out, &v, err);
    if (rc == ODBOX_OK)
        *out = v.b;
    return rc;
}

int odbox_model_get_timestamp(const odbox_model *m, const char *column, int64_t *out, odbox_error *err)
{
    odbox_value v;
    int rc = get_typed(m, column, ODBOX_TYPE_TIMESTAMP, out, &v, err);
    if (rc == ODBOX_OK)
        *out = v.i;
    return rc;
}

int odbox_model_is_null(const odbox_model *m, const char *column)
{
    int i = m ? odbox_model_column_index(m->type, column) : -1;
    return i >= 0 && m->values[i].is_null;
}

void odbox_models_free(odbox_models *list)
{
    if (!list)
        return;
    for (size_t i = 0; i < list->n; i++)
        odbox_model_free(&list->items[i]);
    free(list->items);
    list->items = NULL;
    list->n = 0;
}
