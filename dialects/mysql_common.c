/* odbox — what the MySQL and MariaDB dialects share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mysql_common.h"

/* Shared by the MySQL and MariaDB dialects. MariaDB Connector/ODBC 3.1
 * stores SQL_ATTR_LOGIN_TIMEOUT and never uses it (ma_connection.c); its
 * own keys reach libmariadb: CONN_TIMEOUT bounds the TCP connect and each
 * read and write of the login handshake (ma_pvio.c sets all three pvio
 * timeouts to connect_timeout until the session is up), READ_TIMEOUT and
 * WRITE_TIMEOUT each later read and write (mariadb_lib.c applies them
 * once connected). A read that waits longer fails with 2013 and closes
 * the connection: that bounds a server that stops answering, and also
 * any statement that runs longer without sending anything. 0: no limit. */
int odbox_mysql_connection_string(const odbox_dsn *dsn, const char *driver, char **out,
                                  odbox_error *err)
{
    odbox_timeouts t;
    int rc = odbox_dsn_timeouts(dsn, &t, err);
    if (rc != ODBOX_OK)
        return rc;
    char conn_s[16], read_s[16];
    snprintf(conn_s, sizeof conn_s, "%d", t.connect_s);
    snprintf(read_s, sizeof read_s, "%d", t.read_s);
    const char *const extra[] = {"CONN_TIMEOUT", conn_s, "READ_TIMEOUT", read_s, "WRITE_TIMEOUT", read_s, NULL};
    return odbox_network_connection_string(dsn, driver, 3306, extra, out, err);
}

/* UTC and strict mode: a value that does not fit is an error, never a
 * silent truncation.
 *
 * lock_wait_timeout: a metadata lock (a migration's ALTER TABLE behind a
 * transaction that read the table, a write behind such an ALTER) is
 * waited for 50 s, as InnoDB's row locks (innodb_lock_wait_timeout) and
 * PostgreSQL's lock_timeout, not the server's default (a year on MySQL,
 * a day on MariaDB); then 1205, ODBOX_ETIMEDOUT. A session may SET its
 * own. */
const char *const odbox_mysql_session_setup[] = {
    "SET time_zone = '+00:00'",
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'",
    "SET SESSION lock_wait_timeout = 50",
    NULL,
};

/* UPDATE t JOIN (SELECT ? AS id, ? AS version, ? AS c ... UNION ALL
 * SELECT ?, ?, ? ...) AS v ON t.id = v.id AND t.version = v.version
 * SET t.c = v.c, ..., t.version = v.version + 1 */
int odbox_mysql_batch_update_sql(const odbox_dialect *d, const char *table, const char *const *cols,
                                 const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err)
{
    char *rows = NULL;
    int rc = odbox_mysql_bound_rows_sql(d, "v", cols, types, ncols, nrows, &rows, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_buf b = {0};
    odbox_buf_cat(&b, "UPDATE ", table, " AS t JOIN ", rows, " ON t.id = v.id AND t.version = v.version SET ",
                  (char *)NULL);
    free(rows);
    for (size_t c = 2; c < ncols; c++)
        odbox_buf_appendf(&b, "t.%s = v.%s, ", cols[c], cols[c]);
    odbox_buf_append(&b, "t.version = v.version + 1");
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "batch update: out of memory");
    return ODBOX_OK;
}

/* (SELECT ? AS c, ... UNION ALL SELECT ?, ... ...) AS alias: MySQL 8
 * spells a VALUES table VALUES ROW(...), MariaDB without ROW. A UUID is
 * ASCII text: joined to a CHAR(36) CHARACTER SET ascii key (the MySQL
 * dialect's), a value in the connection's utf8mb4 would make MySQL
 * convert the key instead, and leave its index unused. */
int odbox_mysql_bound_rows_sql(const odbox_dialect *d, const char *alias, const char *const *cols,
                               const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err)
{
    odbox_buf b = {0};
    for (size_t r = 0; r < nrows; r++) {
        odbox_buf_append(&b, r ? " UNION ALL SELECT " : "(SELECT ");
        for (size_t c = 0; c < ncols; c++) {
            odbox_buf_cat(&b, c ? ", " : "",
                          types[c] == ODBOX_TYPE_UUID ? "CONVERT(? USING ascii)" : d->typed_param[types[c]],
                          (char *)NULL);
            if (r == 0)
                odbox_buf_cat(&b, " AS ", cols[c], (char *)NULL);
        }
    }
    odbox_buf_cat(&b, ") AS ", alias, (char *)NULL);
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "bound rows: out of memory");
    return ODBOX_OK;
}

/* MySQL and MariaDB report most conditions as SQLSTATE HY000 with a
 * server (1xxx, 3xxx, 4xxx) or client library (2xxx) error number. */
int odbox_mysql_map_error(const char *st, long native, const char *message)
{
    (void)message;
    switch (native) {
    case 1062: case 1586: return ODBOX_EUNIQUE;      /* duplicate entry (for key) */
    case 1213: return ODBOX_EDEADLOCK;               /* deadlock found */
    case 1020: return ODBOX_EDEADLOCK; /* MariaDB: record changed since read (snapshot isolation); rolled back */
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

int odbox_mysql_bounded_session_sql(size_t i, int lock_ms, int statement_ms, char *out, size_t cap)
{
    (void)statement_ms;
    int secs = lock_ms <= 1000 ? 1 : (lock_ms + 999) / 1000;
    if (i == 0)
        snprintf(out, cap, "SET SESSION innodb_lock_wait_timeout = %d", secs);
    else if (i == 1)
        snprintf(out, cap, "SET SESSION lock_wait_timeout = %d", secs);
    return i < 2;
}

int odbox_mariadb_bounded_session_sql(size_t i, int lock_ms, int statement_ms, char *out, size_t cap)
{
    if (i < 2)
        return odbox_mysql_bounded_session_sql(i, lock_ms, statement_ms, out, cap);
    if (i == 2)
        snprintf(out, cap, "SET SESSION max_statement_time = %d.%03d", statement_ms / 1000, statement_ms % 1000);
    return i < 3;
}
