/* odbox — what the MySQL and MariaDB dialects share. */
#include <string.h>
#include "mysql_common.h"

/* Shared by the MySQL and MariaDB dialects. */
int odbox_mysql_connection_string(const odbox_dsn *dsn, const char *driver, char **out,
                                  odbox_error *err)
{
    return odbox_network_connection_string(dsn, driver, 3306, NULL, out, err);
}

/* UTC and strict mode: a value that does not fit is an error, never a
 * silent truncation. */
const char *const odbox_mysql_session_setup[] = {
    "SET time_zone = '+00:00'",
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'",
    NULL,
};

/* UPDATE t JOIN (SELECT ? AS id, ? AS version, ? AS c ... UNION ALL
 * SELECT ?, ?, ? ...) AS v ON t.id = v.id AND t.version = v.version
 * SET t.c = v.c, ..., t.version = v.version + 1 */
int odbox_mysql_batch_update_sql(const odbox_dialect *d, const char *table, const char *const *cols,
                                 const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err)
{
    odbox_buf b = {0};
    odbox_buf_appendf(&b, "UPDATE %s AS t JOIN (", table);
    for (size_t r = 0; r < nrows; r++) {
        odbox_buf_append(&b, r ? " UNION ALL SELECT " : "SELECT ");
        for (size_t c = 0; c < ncols; c++) {
            odbox_buf_appendf(&b, "%s%s", c ? ", " : "", d->typed_param[types[c]]);
            if (r == 0)
                odbox_buf_appendf(&b, " AS %s", cols[c]);
        }
    }
    odbox_buf_append(&b, ") AS v ON t.id = v.id AND t.version = v.version SET ");
    for (size_t c = 2; c < ncols; c++)
        odbox_buf_appendf(&b, "t.%s = v.%s, ", cols[c], cols[c]);
    odbox_buf_append(&b, "t.version = v.version + 1");
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "batch update: out of memory");
    return ODBOX_OK;
}

/* MySQL and MariaDB report most conditions as SQLSTATE HY000 with a
 * server (1xxx, 3xxx, 4xxx) or client library (2xxx) error number. */
int odbox_mysql_map_error(const char *st, long native)
{
    switch (native) {
    case 1062: case 1586: return ODBOX_EUNIQUE;      /* duplicate entry (for key) */
    case 1213: return ODBOX_EDEADLOCK;               /* deadlock found */
    case 1205: return ODBOX_ETIMEDOUT;               /* lock wait timeout exceeded */
    case 1969: return ODBOX_ETIMEDOUT;               /* MariaDB: max_statement_time exceeded */
    case 3024: return ODBOX_ETIMEDOUT;               /* MySQL: max_execution_time exceeded */
    case 2006: case 2013: return ODBOX_ECONNLOST;    /* server gone away, lost connection */
    case 1927: return ODBOX_ECONNLOST;               /* MariaDB: connection was killed */
    case 4031: return ODBOX_ECONNLOST;               /* MySQL: disconnected for inactivity */
    case 2002: case 2003: case 2005: return ODBOX_ECONNECT; /* no socket, no server, unknown host */
    case 1045: return ODBOX_ECONNECT;                /* access denied */
    case 1040: return ODBOX_ECONNECT;                /* too many connections */
    default: break;
    }
    return odbox_map_standard_sqlstate(st);
}
