/* odbox — the generic repository: SQL for any model type, written once;
 * the dialect supplies parameter forms and the batch UPDATE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model_internal.h"
#include "registry_internal.h"
#include "odbox/dialect.h"
#include "odbox/uuid.h"

/* The columns of a row in SELECT/INSERT order: common ones, then the
 * type's own. field says where a model keeps each: one of the common
 * fields, or (>= 0) its index among the type's columns. */
enum { FIELD_ID = -5, FIELD_VERSION, FIELD_STATE, FIELD_CREATED, FIELD_UPDATED };

typedef struct colset {
    const char *names[5 + 64];
    int types[5 + 64];
    int fields[5 + 64];
    size_t n;
} colset;

#define MAX_USER_COLUMNS 64

static void colset_add(colset *cs, const char *name, int type, int field)
{
    cs->names[cs->n] = name;
    cs->types[cs->n] = type;
    cs->fields[cs->n++] = field;
}

static int columns_of(const odbox_model_type *t, colset *cs, odbox_error *err)
{
    if (t->ncolumns > MAX_USER_COLUMNS)
        return odbox_fail(err, ODBOX_EUNSUPPORTED, "model type %s has more than %d columns", t->name,
                          MAX_USER_COLUMNS);
    cs->n = 0;
    colset_add(cs, "id", ODBOX_TYPE_UUID, FIELD_ID);
    colset_add(cs, "version", ODBOX_TYPE_INT64, FIELD_VERSION);
    colset_add(cs, "state", ODBOX_TYPE_TEXT, FIELD_STATE);
    if (t->kind == ODBOX_KIND_MODEL) {
        colset_add(cs, "created_date", ODBOX_TYPE_TIMESTAMP, FIELD_CREATED);
        colset_add(cs, "updated_date", ODBOX_TYPE_TIMESTAMP, FIELD_UPDATED);
    }
    for (size_t i = 0; i < t->ncolumns; i++)
        colset_add(cs, t->columns[i].name, t->columns[i].type, (int)i);
    return ODBOX_OK;
}

const char *odbox_repo_param_form(const odbox_dialect *d, int type)
{
    return type == ODBOX_TYPE_UUID ? d->uuid_param : type == ODBOX_TYPE_JSON ? d->json_param : "?";
}

void odbox_repo_key_add_type(odbox_sql_key *k, const odbox_model_type *t)
{
    odbox_sql_key_add(k, (int)t->kind, t->table);
    for (size_t i = 0; i < t->ncolumns; i++)
        odbox_sql_key_add(k, (int)t->columns[i].type, t->columns[i].name);
}

/* Names go into SQL quoted, so that a table or column may be called
 * order or group: a column, or a table as "schema"."table". Names are
 * validated, so the quote never appears inside one. */
#define QUOTED_MAX (2 * ODBOX_NAME_MAX + 8)

static void quote_into(const odbox_dialect *d, const char *name, char *dst, size_t cap)
{
    const char *q = d->identifier_quote, *dot = strchr(name, '.');
    if (dot)
        snprintf(dst, cap, "%s%.*s%s.%s%s%s", q, (int)(dot - name), name, q, q, dot + 1, q);
    else
        snprintf(dst, cap, "%s%s%s", q, name, q);
}

static void append_quoted(odbox_buf *b, const odbox_dialect *d, const char *name)
{
    char q[QUOTED_MAX];
    quote_into(d, name, q, sizeof q);
    odbox_buf_append(b, q);
}

/* A column list; for a SELECT list (reading), timestamps in the dialect's
 * read form. */
static void append_columns(odbox_buf *b, const colset *cs, const odbox_dialect *d, int reading)
{
    for (size_t i = 0; i < cs->n; i++) {
        int wrap = reading && d->timestamp_read_open && cs->types[i] == ODBOX_TYPE_TIMESTAMP;
        odbox_buf_cat(b, i ? ", " : "", wrap ? d->timestamp_read_open : "", (char *)NULL);
        append_quoted(b, d, cs->names[i]);
        odbox_buf_append(b, wrap ? d->timestamp_read_close : "");
    }
}

/* Binds column k of cs of model m at idx. */
static int bind_field(odbox_stmt *s, int idx, const odbox_model *m, const colset *cs, size_t k, odbox_error *err)
{
    switch (cs->fields[k]) {
    case FIELD_ID: return odbox_stmt_bind_valid_uuid(s, idx, m->id, err);
    case FIELD_VERSION: return odbox_stmt_bind_int64(s, idx, m->version, err);
    case FIELD_STATE: return odbox_stmt_bind_text(s, idx, m->state, err);
    case FIELD_CREATED: return odbox_stmt_bind_timestamp(s, idx, m->created_us, err);
    case FIELD_UPDATED: return odbox_stmt_bind_timestamp(s, idx, m->updated_us, err);
    }
    const model_value *v = &m->values[cs->fields[k]];
    odbox_type type = (odbox_type)cs->types[k];
    if (v->is_null)
        return odbox_stmt_bind_null(s, idx, type, err);
    switch (type) {
    case ODBOX_TYPE_TEXT: return odbox_stmt_bind_text(s, idx, v->s, err);
    case ODBOX_TYPE_UUID: return odbox_stmt_bind_uuid(s, idx, v->s, err);
    case ODBOX_TYPE_JSON: return odbox_stmt_bind_json(s, idx, v->s, err);
    case ODBOX_TYPE_INT64: return odbox_stmt_bind_int64(s, idx, v->i, err);
    case ODBOX_TYPE_TIMESTAMP: return odbox_stmt_bind_timestamp(s, idx, v->i, err);
    case ODBOX_TYPE_DOUBLE: return odbox_stmt_bind_double(s, idx, v->d, err);
    case ODBOX_TYPE_BOOL: return odbox_stmt_bind_bool(s, idx, v->b, err);
    }
    return odbox_fail(err, ODBOX_EINVAL, "bind: unknown type");
}

static int check_batch(odbox_conn *c, const odbox_model_type *t, odbox_model *const *models, size_t n,
                       const char *what, odbox_error *err)
{
    if (!c || !t || (n && !models))
        return odbox_fail(err, ODBOX_EINVAL, "%s: connection, type or models missing", what);
    int rc = odbox_model_type_check(t, err);
    if (rc != ODBOX_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (!models[i] || models[i]->type != t)
            return odbox_fail(err, ODBOX_EINVAL, "%s: model %zu is not of type %s", what, i, t->name);
    return ODBOX_OK;
}

/* ---- writes as statement parts ------------------------------------------ */

/* What a write of n rows binds, row after row: an INSERT every column; a
 * one-row UPDATE the columns it sets (state, updated_date, the type's
 * own; never id, version or created_date), then id and version for its
 * WHERE; the dialect's batch UPDATE id, version, then the set columns. */
static int write_binds(const odbox_model_type *t, int op, size_t n, colset *out, odbox_error *err)
{
    colset cs;
    int rc = columns_of(t, &cs, err);
    if (rc != ODBOX_OK)
        return rc;
    if (op == ODBOX_SQL_INSERT) {
        *out = cs;
        return ODBOX_OK;
    }
    out->n = 0;
    if (n > 1) {
        colset_add(out, "id", ODBOX_TYPE_UUID, FIELD_ID);
        colset_add(out, "version", ODBOX_TYPE_INT64, FIELD_VERSION);
    }
    for (size_t i = 0; i < cs.n; i++)
        if (cs.fields[i] != FIELD_ID && cs.fields[i] != FIELD_VERSION && cs.fields[i] != FIELD_CREATED)
            colset_add(out, cs.names[i], cs.types[i], cs.fields[i]);
    if (n == 1) {
        colset_add(out, "id", ODBOX_TYPE_UUID, FIELD_ID);
        colset_add(out, "version", ODBOX_TYPE_INT64, FIELD_VERSION);
    }
    return ODBOX_OK;
}

int odbox_repo_write_params(const odbox_model_type *t, int op, size_t *per_row, odbox_error *err)
{
    colset b;
    int rc = write_binds(t, op, 1, &b, err);
    *per_row = rc == ODBOX_OK ? b.n : 0;
    return rc;
}

int odbox_repo_write_sql(const odbox_dialect *d, const odbox_model_type *t, int op, size_t n, int select_form,
                         char **out, odbox_error *err)
{
    *out = NULL;
    colset b;
    int rc = write_binds(t, op, n, &b, err);
    if (rc != ODBOX_OK)
        return rc;
    char table[QUOTED_MAX];
    quote_into(d, t->table, table, sizeof table);
    if (op == ODBOX_SQL_UPDATE && n > 1) {
        char quoted[5 + MAX_USER_COLUMNS][QUOTED_MAX];
        const char *names[5 + MAX_USER_COLUMNS];
        for (size_t i = 0; i < b.n; i++) {
            quote_into(d, b.names[i], quoted[i], sizeof quoted[i]);
            names[i] = quoted[i];
        }
        return d->batch_update_sql(d, table, names, b.types, b.n, n, out, err);
    }
    odbox_buf sql = {0};
    if (op == ODBOX_SQL_UPDATE) {
        odbox_buf_cat(&sql, "UPDATE ", table, " SET ", (char *)NULL);
        for (size_t i = 0; i + 2 < b.n; i++) {
            append_quoted(&sql, d, b.names[i]);
            odbox_buf_cat(&sql, " = ", odbox_repo_param_form(d, b.types[i]), ", ", (char *)NULL);
        }
        odbox_buf_cat(&sql, "version = version + 1 WHERE id = ", d->uuid_param, " AND version = ?", (char *)NULL);
    } else {
        const char *forms[5 + MAX_USER_COLUMNS];
        for (size_t i = 0; i < b.n; i++)
            forms[i] = odbox_repo_param_form(d, b.types[i]);
        char *source = odbox_sql_insert_source((int)n, forms, (int)b.n, select_form);
        odbox_buf_cat(&sql, "INSERT INTO ", table, " (", (char *)NULL);
        append_columns(&sql, &b, d, 0);
        odbox_buf_cat(&sql, ") ", source ? source : "", (char *)NULL);
        if (!source)
            sql.oom = 1;
        free(source);
    }
    if (!(*out = odbox_buf_take(&sql)))
        return odbox_fail(err, ODBOX_ENOMEM, "%s: out of memory", op == ODBOX_SQL_UPDATE ? "update" : "insert");
    return ODBOX_OK;
}

int odbox_repo_write_bind(odbox_stmt *s, int *idx, const odbox_model_type *t, int op, odbox_model *const *models,
                          size_t n, odbox_error *err)
{
    colset b;
    int rc = write_binds(t, op, n, &b, err);
    for (size_t r = 0; r < n && rc == ODBOX_OK; r++)
        for (size_t k = 0; k < b.n && rc == ODBOX_OK; k++)
            rc = bind_field(s, (*idx)++, models[r], &b, k, err);
    return rc;
}

/* Rows per statement so that each fits the dialect's parameter limit. */
static size_t rows_per_statement(const odbox_dialect *d, const odbox_model_type *t, int op)
{
    size_t ncols = 1;
    odbox_repo_write_params(t, op, &ncols, NULL);
    size_t per = ncols ? (size_t)d->max_params / ncols : 1;
    return per ? per : 1;
}

/* One statement writing models[0..n): prepared by key (built on a miss),
 * bound and executed. *affected gets the rows it changed. */
static int write_chunk(odbox_conn *c, const odbox_model_type *t, int op, odbox_model *const *models, size_t n,
                       int64_t *affected, odbox_error *err)
{
    odbox_sql_key key;
    odbox_sql_key_init(&key, op, n);
    odbox_repo_key_add_type(&key, t);
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare_keyed(c, NULL, &key, &s, err);
    if (rc == ODBOX_OK && !s) {
        char *sql = NULL;
        if ((rc = odbox_repo_write_sql(odbox_conn_dialect(c), t, op, n, 0, &sql, err)) == ODBOX_OK)
            rc = odbox_stmt_prepare_keyed(c, sql, &key, &s, err);
        free(sql);
    }
    int idx = 1;
    if (rc == ODBOX_OK && (rc = odbox_repo_write_bind(s, &idx, t, op, models, n, err)) == ODBOX_OK) {
        if ((rc = odbox_stmt_execute(s, err)) == ODBOX_OK)
            *affected = odbox_stmt_rows_affected(s);
        else if (!odbox_conn_in_transaction(c))
            rc = odbox_commit_failed(rc, err); /* in autocommit the statement was its own commit */
    }
    odbox_stmt_free(&s);
    return rc;
}

int odbox_repo_stale(const odbox_model_type *t, odbox_model *const *models, size_t n, int64_t got, odbox_error *err)
{
    if (n == 1)
        return odbox_fail(err, ODBOX_ESTALE, "%s [%s, version=%lld] was concurrently modified or not found", t->name,
                          models[0]->id, (long long)models[0]->version);
    return odbox_fail(err, ODBOX_ESTALE,
                      "%s: expected to update %zu rows but updated %lld (concurrently modified or not found)", t->name,
                      n, (long long)got);
}

/* In autocommit, a write that needs more than one statement, or that may
 * match only some of its rows (a batch UPDATE), runs in a transaction of
 * its own, so that a failure or a stale row leaves nothing of it written:
 * *own says whether one was begun. */
static int own_tx_begin(odbox_conn *c, int needed, int *own, odbox_error *err)
{
    *own = needed && !odbox_conn_in_transaction(c);
    return *own ? odbox_conn_begin(c, err) : ODBOX_OK;
}


int odbox_repo_insert(odbox_conn *c, const odbox_model_type *t, odbox_model *const *models, size_t n,
                      odbox_error *err)
{
    int rc = check_batch(c, t, models, n, "insert", err);
    if (rc != ODBOX_OK || n == 0)
        return rc;
    size_t per = rows_per_statement(odbox_conn_dialect(c), t, ODBOX_SQL_INSERT);
    int own = 0;
    rc = own_tx_begin(c, n > per, &own, err);
    for (size_t off = 0; off < n && rc == ODBOX_OK; off += per) {
        int64_t got = 0;
        rc = write_chunk(c, t, ODBOX_SQL_INSERT, models + off, n - off < per ? n - off : per, &got, err);
    }
    if (own) /* a lost commit is ODBOX_EINDOUBT */
        rc = odbox_conn_end(c, rc, err);
    if (rc != ODBOX_OK)
        odbox_error_prefix(err, rc, "insert into %s", t->table);
    return rc;
}

int odbox_repo_update(odbox_conn *c, const odbox_model_type *t, odbox_model *const *models, size_t n,
                      int64_t updated_us, odbox_error *err)
{
    int rc = check_batch(c, t, models, n, "update", err);
    if (rc != ODBOX_OK || n == 0)
        return rc;
    int64_t *saved = malloc(n * sizeof *saved);
    if (!saved)
        return odbox_fail(err, ODBOX_ENOMEM, "update: out of memory");
    for (size_t r = 0; r < n; r++) {
        saved[r] = models[r]->updated_us;
        if (t->kind == ODBOX_KIND_MODEL)
            models[r]->updated_us = updated_us;
    }
    size_t per = rows_per_statement(odbox_conn_dialect(c), t, ODBOX_SQL_UPDATE);
    int own = 0;
    rc = own_tx_begin(c, n > 1, &own, err);
    for (size_t off = 0; off < n && rc == ODBOX_OK; off += per) {
        size_t rows = n - off < per ? n - off : per;
        int64_t got = 0;
        if ((rc = write_chunk(c, t, ODBOX_SQL_UPDATE, models + off, rows, &got, err)) == ODBOX_OK &&
            got != (int64_t)rows)
            rc = odbox_repo_stale(t, models + off, rows, got, err);
    }
    if (own) /* a lost commit is ODBOX_EINDOUBT */
        rc = odbox_conn_end(c, rc, err);
    /* The caller's models follow the database only when every row landed. */
    for (size_t r = 0; r < n; r++) {
        if (rc == ODBOX_OK)
            models[r]->version++;
        else
            models[r]->updated_us = saved[r];
    }
    free(saved);
    if (rc != ODBOX_OK && rc != ODBOX_ESTALE)
        odbox_error_prefix(err, rc, "update %s", t->table);
    return rc;
}

/* ---- reads ------------------------------------------------------------- */

odbox_shard *odbox_registry_shard_for_id(const odbox_registry *r, const char *id)
{
    odbox_shard_id sid;
    if (id && odbox_uuid_shard(id, &sid))
        return odbox_registry_effective_shard(r, sid);
    return odbox_registry_default_shard(r);
}

/* Copies text into a fixed field, cut to fit (the database keeps the
 * same limits: ids are 36 characters, states ODBOX_STATE_MAX). */
static void copy_text(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int row_to_model(odbox_stmt *s, const odbox_model_type *t, const colset *cs, odbox_model **out,
                        odbox_error *err)
{
    odbox_model *m = odbox_model_alloc(t);
    if (!m)
        return odbox_fail(err, ODBOX_ENOMEM, "read: out of memory");
    int rc = ODBOX_OK;
    for (size_t k = 0; k < cs->n && rc == ODBOX_OK; k++) {
        int col = (int)k + 1, null = 0;
        const char *txt;
        switch (cs->fields[k]) {
        case FIELD_ID:
            if ((rc = odbox_stmt_get_text(s, col, &txt, &null, err)) == ODBOX_OK)
                copy_text(m->id, sizeof m->id, txt);
            continue;
        case FIELD_VERSION: rc = odbox_stmt_get_int64(s, col, &m->version, &null, err); continue;
        case FIELD_STATE:
            if ((rc = odbox_stmt_get_text(s, col, &txt, &null, err)) == ODBOX_OK)
                copy_text(m->state, sizeof m->state, txt);
            continue;
        case FIELD_CREATED: rc = odbox_stmt_get_timestamp(s, col, &m->created_us, &null, err); continue;
        case FIELD_UPDATED: rc = odbox_stmt_get_timestamp(s, col, &m->updated_us, &null, err); continue;
        }
        model_value *v = &m->values[cs->fields[k]];
        switch ((odbox_type)cs->types[k]) {
        case ODBOX_TYPE_TEXT:
        case ODBOX_TYPE_UUID:
        case ODBOX_TYPE_JSON:
            if ((rc = odbox_stmt_get_text(s, col, &txt, &null, err)) == ODBOX_OK && !null && !(v->s = strdup(txt)))
                rc = odbox_fail(err, ODBOX_ENOMEM, "read: out of memory");
            break;
        case ODBOX_TYPE_INT64: rc = odbox_stmt_get_int64(s, col, &v->i, &null, err); break;
        case ODBOX_TYPE_TIMESTAMP: rc = odbox_stmt_get_timestamp(s, col, &v->i, &null, err); break;
        case ODBOX_TYPE_DOUBLE: rc = odbox_stmt_get_double(s, col, &v->d, &null, err); break;
        case ODBOX_TYPE_BOOL: rc = odbox_stmt_get_bool(s, col, &v->b, &null, err); break;
        }
        v->is_null = null;
    }
    if (rc != ODBOX_OK) {
        odbox_model_free(&m);
        return rc;
    }
    *out = m;
    return ODBOX_OK;
}

static int push_model(odbox_models *list, odbox_model *m, odbox_error *err)
{
    odbox_model **items = realloc(list->items, (list->n + 1) * sizeof *items);
    if (!items) {
        odbox_model_free(&m);
        return odbox_fail(err, ODBOX_ENOMEM, "read: out of memory");
    }
    list->items = items;
    list->items[list->n++] = m;
    return ODBOX_OK;
}

/* The WHERE clause of a read (after "WHERE state <> 'DELETED'"). */
typedef struct filter {
    const char *column;        /* column = value; NULL: none */
    const odbox_value *value;  /* NULL or is_null: IS NULL */
    const char *const *ids;    /* id IN (...) */
    size_t nids;
} filter;

/* The type of column in cs (TEXT when it is not there). */
static int column_type(const colset *cs, const char *column)
{
    int ctype = ODBOX_TYPE_TEXT;
    if (column) {
        for (size_t i = 0; i < cs->n; i++)
            if (!strcmp(cs->names[i], column))
                ctype = cs->types[i];
    }
    return ctype;
}

/* The text of a read's SELECT (COUNT(*) when counting); NULL when out of
 * memory. */
static char *read_sql(const odbox_dialect *d, const odbox_model_type *t, const colset *cs, const filter *f,
                      int ctype, int with_value, int counting)
{
    odbox_buf b = {0};
    if (counting) {
        odbox_buf_append(&b, "SELECT COUNT(*)");
    } else {
        odbox_buf_append(&b, "SELECT ");
        append_columns(&b, cs, d, 1);
    }
    odbox_buf_append(&b, " FROM ");
    append_quoted(&b, d, t->table);
    odbox_buf_append(&b, " WHERE state <> 'DELETED'");
    if (f->column) {
        odbox_buf_append(&b, " AND ");
        append_quoted(&b, d, f->column);
        odbox_buf_cat(&b, with_value ? " = " : " IS NULL", with_value ? odbox_repo_param_form(d, ctype) : "",
                      (char *)NULL);
    }
    if (f->nids) {
        odbox_buf_append(&b, " AND id IN (");
        odbox_buf_list(&b, d->uuid_param, f->nids);
        odbox_buf_append(&b, ")");
    }
    if (!counting)
        odbox_buf_append(&b, " ORDER BY id");
    return odbox_buf_take(&b);
}

/* The read's statement on c, from c's cache when it is there. Reads by id
 * are the hot ones: found by key. Others build their SQL and are found by
 * its text (a key marked too long is no key). */
static int prepare_read(odbox_conn *c, const odbox_model_type *t, const colset *cs, const filter *f, int ctype,
                        int with_value, int counting, odbox_stmt **s, odbox_error *err)
{
    odbox_sql_key key;
    odbox_sql_key_init(&key, ODBOX_SQL_FIND_IDS, f->nids);
    if (counting || f->column)
        key.too_long = 1;
    else
        odbox_repo_key_add_type(&key, t);
    int rc = odbox_stmt_prepare_keyed(c, NULL, &key, s, err);
    if (rc == ODBOX_OK && !*s) {
        char *sql = read_sql(odbox_conn_dialect(c), t, cs, f, ctype, with_value, counting);
        rc = sql ? odbox_stmt_prepare_keyed(c, sql, &key, s, err)
                 : odbox_fail(err, ODBOX_ENOMEM, "read: out of memory");
        free(sql);
    }
    return rc;
}

/* Binds the filter's value (as the column's type) and ids, in order. */
static int bind_filter(odbox_stmt *s, const filter *f, int ctype, int with_value, odbox_error *err)
{
    int rc = ODBOX_OK, idx = 1;
    if (with_value) {
        const odbox_value *v = f->value;
        switch ((odbox_type)ctype) {
        case ODBOX_TYPE_TEXT: rc = odbox_stmt_bind_text(s, idx++, v->s, err); break;
        case ODBOX_TYPE_UUID: rc = odbox_stmt_bind_uuid(s, idx++, v->s, err); break;
        case ODBOX_TYPE_JSON: rc = odbox_stmt_bind_json(s, idx++, v->s, err); break;
        case ODBOX_TYPE_INT64: rc = odbox_stmt_bind_int64(s, idx++, v->i, err); break;
        case ODBOX_TYPE_TIMESTAMP: rc = odbox_stmt_bind_timestamp(s, idx++, v->i, err); break;
        case ODBOX_TYPE_DOUBLE: rc = odbox_stmt_bind_double(s, idx++, v->d, err); break;
        case ODBOX_TYPE_BOOL: rc = odbox_stmt_bind_bool(s, idx++, v->b, err); break;
        }
    }
    for (size_t i = 0; i < f->nids && rc == ODBOX_OK; i++)
        rc = odbox_stmt_bind_valid_uuid(s, idx++, f->ids[i], err);
    return rc;
}

/* Executes the bound read and takes its rows: models appended to list,
 * or the count added to *count. 0, or a negative code. */
static int run_read(odbox_stmt *s, const odbox_model_type *t, const colset *cs, odbox_models *list, int64_t *count,
                    odbox_error *err)
{
    int rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        if (count) {
            int64_t n = 0;
            if ((rc = odbox_stmt_get_int64(s, 1, &n, NULL, err)) == ODBOX_OK)
                *count += n;
        } else {
            odbox_model *m = NULL;
            if ((rc = row_to_model(s, t, cs, &m, err)) == ODBOX_OK)
                rc = push_model(list, m, err);
        }
    }
    return rc;
}

/* SELECT (or COUNT when count != NULL) on one shard, appending to list. */
static int read_shard(odbox_shard *shard, odbox_read_from from, const odbox_model_type *t, const filter *f,
                      odbox_models *list, int64_t *count, odbox_error *err)
{
    odbox_pool *pool = from == ODBOX_READ_REPLICA ? odbox_shard_replica(shard) : odbox_shard_primary(shard);
    odbox_conn *c = NULL;
    colset cs;
    int rc = columns_of(t, &cs, err);
    if (rc == ODBOX_OK)
        rc = odbox_shard_check_model(shard, t, err);
    if (rc == ODBOX_OK)
        rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    int ctype = column_type(&cs, f->column);
    int with_value = f->column && f->value && !f->value->is_null;
    if (with_value && (int)f->value->type != ctype && !(ctype == ODBOX_TYPE_UUID && f->value->type == ODBOX_TYPE_TEXT)) {
        odbox_pool_release(pool, &c);
        return odbox_fail(err, ODBOX_EINVAL, "read %s: the value for %s is not of the column's type", t->name,
                          f->column);
    }
    odbox_stmt *s = NULL;
    rc = prepare_read(c, t, &cs, f, ctype, with_value, count != NULL, &s, err);
    if (rc == ODBOX_OK)
        rc = bind_filter(s, f, ctype, with_value, err);
    if (rc == ODBOX_OK)
        rc = run_read(s, t, &cs, list, count, err);
    odbox_stmt_free(&s);
    odbox_pool_release(pool, &c);
    if (rc < 0) {
        odbox_shard_id id = odbox_shard_get_id(shard);
        return odbox_error_prefix(err, rc, "read %s on shard %d.%d", t->table, id.group, id.member);
    }
    return ODBOX_OK;
}

static int check_read(odbox_registry *r, const odbox_model_type *t, const char *column, odbox_error *err)
{
    if (!r || !t)
        return odbox_fail(err, ODBOX_EINVAL, "read: registry or model type missing");
    int rc = odbox_model_type_check(t, err);
    if (rc != ODBOX_OK || !column)
        return rc;
    static const char *const common[] = {"id", "version", "state", "created_date", "updated_date"};
    for (size_t i = 0; i < (t->kind == ODBOX_KIND_MODEL ? 5u : 3u); i++)
        if (!strcmp(column, common[i]))
            return ODBOX_OK;
    if (odbox_model_column_index(t, column) < 0)
        return odbox_fail(err, ODBOX_EINVAL, "read: %s has no column '%.64s'", t->name, column);
    return ODBOX_OK;
}

int odbox_repo_find(odbox_registry *r, const odbox_model_type *t, const char *id, odbox_read_from from,
                    odbox_model **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "find: out is NULL");
    *out = NULL;
    int rc = check_read(r, t, NULL, err);
    if (rc != ODBOX_OK)
        return rc;
    if (!odbox_uuid_is_valid(id))
        return odbox_fail(err, ODBOX_EINVAL, "find %s: id '%.40s' is not a UUID", t->name, id ? id : "(null)");
    odbox_models list = {0};
    filter f = {.ids = &id, .nids = 1};
    rc = read_shard(odbox_registry_shard_for_id(r, id), from, t, &f, &list, NULL, err);
    if (rc == ODBOX_OK && list.n == 0)
        rc = odbox_fail(err, ODBOX_ENOTFOUND, "%s %s not found", t->name, id);
    if (rc == ODBOX_OK) {
        *out = list.items[0];
        list.items[0] = NULL;
    }
    odbox_models_free(&list);
    return rc;
}

int odbox_repo_find_many(odbox_registry *r, const odbox_model_type *t, const char *const *ids, size_t n,
                         odbox_read_from from, odbox_models *out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "find: out is NULL");
    memset(out, 0, sizeof *out);
    int rc = check_read(r, t, NULL, err);
    if (rc != ODBOX_OK)
        return rc;
    if (n && !ids)
        return odbox_fail(err, ODBOX_EINVAL, "find: ids missing");
    for (size_t i = 0; i < n; i++)
        if (!odbox_uuid_is_valid(ids[i]))
            return odbox_fail(err, ODBOX_EINVAL, "find %s: id %zu ('%.40s') is not a UUID", t->name, i,
                              ids[i] ? ids[i] : "(null)");
    const char **group = n ? malloc(n * sizeof *group) : NULL;
    if (n && !group)
        return odbox_fail(err, ODBOX_ENOMEM, "find: out of memory");
    /* One query per shard, over that shard's distinct ids. */
    for (size_t s = 0; s < odbox_registry_shard_count(r) && rc == ODBOX_OK; s++) {
        odbox_shard *shard = odbox_registry_shard_at(r, s);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (odbox_registry_shard_for_id(r, ids[i]) != shard)
                continue;
            int dup = 0;
            for (size_t j = 0; j < k && !dup; j++)
                dup = !strcasecmp(group[j], ids[i]);
            if (!dup)
                group[k++] = ids[i];
        }
        for (size_t off = 0; off < k && rc == ODBOX_OK; off += 1000) {
            filter f = {.ids = group + off, .nids = k - off < 1000 ? k - off : 1000};
            rc = read_shard(shard, from, t, &f, out, NULL, err);
        }
    }
    free(group);
    if (rc != ODBOX_OK)
        odbox_models_free(out);
    return rc;
}

int odbox_repo_find_where(odbox_registry *r, const odbox_model_type *t, const char *column,
                          const odbox_value *value, odbox_read_from from, odbox_models *out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "find: out is NULL");
    memset(out, 0, sizeof *out);
    int rc = check_read(r, t, column, err);
    filter f = {.column = column, .value = value};
    for (size_t s = 0; rc == ODBOX_OK && s < odbox_registry_shard_count(r); s++)
        rc = read_shard(odbox_registry_shard_at(r, s), from, t, &f, out, NULL, err);
    if (rc != ODBOX_OK)
        odbox_models_free(out);
    return rc;
}

int odbox_repo_count_where(odbox_registry *r, const odbox_model_type *t, const char *column,
                           const odbox_value *value, odbox_read_from from, int64_t *count, odbox_error *err)
{
    if (!count)
        return odbox_fail(err, ODBOX_EINVAL, "count: out is NULL");
    *count = 0;
    int rc = check_read(r, t, column, err);
    filter f = {.column = column, .value = value};
    for (size_t s = 0; rc == ODBOX_OK && s < odbox_registry_shard_count(r); s++)
        rc = read_shard(odbox_registry_shard_at(r, s), from, t, &f, NULL, count, err);
    return rc;
}
