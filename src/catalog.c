/* odbox — a table's columns from the database's catalogue. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catalog.h"
#include "odbox/dialect.h"
#include "internal.h"

int odbox_catalog_columns(odbox_conn *c, const char *container, const char *table, odbox_table_column **cols,
                          size_t *n, odbox_error *err)
{
    *cols = NULL;
    *n = 0;
    odbox_stmt *s = NULL;
    size_t cap = 0;
    int rc = odbox_stmt_prepare(c, odbox_conn_dialect(c)->table_columns_sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, container, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 2, table, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        const char *name, *type;
        int64_t not_null = 0, has_default = 0;
        if ((rc = odbox_stmt_get_text(s, 1, &name, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_text(s, 2, &type, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 3, &not_null, NULL, err)) != ODBOX_OK ||
            (rc = odbox_stmt_get_int64(s, 4, &has_default, NULL, err)) != ODBOX_OK)
            break;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            odbox_table_column *g = realloc(*cols, cap * sizeof *g);
            if (!g) {
                rc = odbox_fail(err, ODBOX_ENOMEM, "catalogue: out of memory");
                break;
            }
            *cols = g;
        }
        odbox_table_column *col = &(*cols)[(*n)++];
        snprintf(col->name, sizeof col->name, "%s", name);
        snprintf(col->type, sizeof col->type, "%s", type);
        col->not_null = not_null != 0;
        col->has_default = has_default != 0;
    }
    odbox_stmt_free(&s);
    if (rc < 0) {
        free(*cols);
        *cols = NULL;
        *n = 0;
        return odbox_error_prefix(err, rc, "reading the columns of %s%s%s", container ? container : "",
                                  container ? "." : "", table);
    }
    return ODBOX_OK;
}

const odbox_table_column *odbox_catalog_find(const odbox_table_column *cols, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(cols[i].name, name))
            return &cols[i];
    /* MySQL/MariaDB column names ignore case, whatever the catalogue shows */
    for (size_t i = 0; i < n; i++)
        if (odbox_strcaseeq(cols[i].name, name))
            return &cols[i];
    return NULL;
}
