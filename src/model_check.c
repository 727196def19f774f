/* odbox — does a model type's table have what odbox reads and writes?
 * Checked against the catalogue once per shard, so that a missing table
 * or column is an error naming it, not a database error at the first
 * write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model_internal.h"
#include "registry_internal.h"
#include "catalog.h"

static const char *const common_columns[] = {"id", "version", "state", "created_date", "updated_date"};

/* The columns of t that odbox writes: the common ones, then its own. */
static int writes_column(const odbox_model_type *t, const char *name)
{
    size_t ncommon = t->kind == ODBOX_KIND_MODEL ? 5 : 3;
    for (size_t i = 0; i < ncommon; i++)
        if (odbox_strcaseeq(name, common_columns[i]))
            return 1;
    for (size_t i = 0; i < t->ncolumns; i++)
        if (odbox_strcaseeq(name, t->columns[i].name))
            return 1;
    return 0;
}

/* Compares t with the table's columns on c. */
static int check_table(odbox_conn *c, const odbox_model_type *t, odbox_error *err)
{
    char schema[ODBOX_NAME_MAX];
    const char *table = t->table, *dot = strchr(t->table, '.');
    if (dot) {
        snprintf(schema, sizeof schema, "%.*s", (int)(dot - t->table), t->table);
        table = dot + 1;
    }
    odbox_table_column *cols = NULL;
    size_t n = 0;
    int rc = odbox_catalog_columns(c, dot ? schema : NULL, table, &cols, &n, err);
    if (rc != ODBOX_OK)
        return rc;
    if (n == 0 && dot)
        rc = odbox_fail(err, ODBOX_EINVAL, "model type %s: table %s does not exist", t->name, t->table);
    else if (n == 0)
        rc = odbox_fail(err, ODBOX_EINVAL, "model type %s: table %s does not exist (in the connection's own %s)",
                        t->name, t->table, odbox_conn_dialect(c)->eventlog_container);
    size_t ncommon = t->kind == ODBOX_KIND_MODEL ? 5 : 3;
    for (size_t i = 0; i < ncommon && rc == ODBOX_OK; i++)
        if (!odbox_catalog_find(cols, n, common_columns[i]))
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "model type %s: table %s has no column %s, which every %s's table needs (see "
                            "docs/actions.md)",
                            t->name, t->table, common_columns[i], t->kind == ODBOX_KIND_MODEL ? "model" : "entity");
    for (size_t i = 0; i < t->ncolumns && rc == ODBOX_OK; i++)
        if (!odbox_catalog_find(cols, n, t->columns[i].name))
            rc = odbox_fail(err, ODBOX_EINVAL, "model type %s: table %s has no column %s", t->name, t->table,
                            t->columns[i].name);
    for (size_t i = 0; i < n && rc == ODBOX_OK; i++)
        if (cols[i].not_null && !cols[i].has_default && !writes_column(t, cols[i].name))
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "model type %s: table %s has column %s (NOT NULL, no default), which the type does "
                            "not write: inserts would fail", t->name, t->table, cols[i].name);
    free(cols);
    return rc;
}

int odbox_shard_check_model(odbox_shard *s, const odbox_model_type *t, odbox_error *err)
{
    if (odbox_shard_is_verified(s, t))
        return ODBOX_OK;
    odbox_pool *pool = odbox_shard_primary(s);
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK)
        rc = check_table(c, t, err);
    odbox_pool_release(pool, &c);
    if (rc == ODBOX_OK)
        return odbox_shard_set_verified(s, t, err);
    odbox_shard_id id = odbox_shard_get_id(s);
    return odbox_error_prefix(err, rc, "shard %d.%d", id.group, id.member);
}

int odbox_model_type_verify(odbox_registry *r, const odbox_model_type *t, odbox_error *err)
{
    if (!r)
        return odbox_fail(err, ODBOX_EINVAL, "verify: registry is NULL");
    int rc = odbox_model_type_check(t, err);
    for (size_t i = 0; rc == ODBOX_OK && i < odbox_registry_shard_count(r); i++)
        rc = odbox_shard_check_model(odbox_registry_shard_at(r, i), t, err);
    return rc;
}
