/* odbox — what the database's catalogue says about a table, through the
 * dialect's table_columns_sql. Not installed. */
#ifndef ODBOX_CATALOG_H
#define ODBOX_CATALOG_H

#include <stddef.h>
#include "odbox/db.h"

typedef struct odbox_table_column {
    char name[128];
    char type[64];    /* as the catalogue spells it, cut to fit */
    int not_null;
    int has_default;  /* or generated, or an identity */
} odbox_table_column;

/* The columns of container.table (container NULL: the connection's own,
 * as an unqualified name resolves), in order. *cols is malloc'd (free());
 * *n is 0 when there is no such table. */
int odbox_catalog_columns(odbox_conn *c, const char *container, const char *table, odbox_table_column **cols,
                          size_t *n, odbox_error *err);

/* The column of that name (exactly, else without regard to case), or NULL. */
const odbox_table_column *odbox_catalog_find(const odbox_table_column *cols, size_t n, const char *name);

#endif
