/* odbox — ODBC internals shared by conn.c, stmt.c and pool.c. */
#ifndef ODBOX_DB_ODBC_H
#define ODBOX_DB_ODBC_H

#include <sql.h>
#include <sqlext.h>
#include "odbox/db.h"
#include "odbox/dialect.h"
#include "internal.h"

#define ODBOX_STMT_CACHE 16

struct odbox_conn {
    SQLHDBC dbc;
    const odbox_dialect *dialect;
    char server_name[64];
    char server_version[64];
    int in_tx;
    int dead;
    char *secret;              /* password, scrubbed from driver messages */
    int64_t idle_since_us;     /* set by the pool */
    struct odbox_conn *next;   /* pool's idle list */
    /* Prepared statements kept for reuse (by SQL text), when the driver
     * keeps them across commit and rollback. */
    int cache_ok;
    /* Result columns are bound (SQLBindCol) and a value longer than its
     * buffer is read again with SQLGetData, which the driver allows on
     * bound columns (SQL_GD_BOUND | SQL_GD_ANY_COLUMN). */
    int bind_columns;
    struct odbox_stmt *cache[ODBOX_STMT_CACHE];
    int ncache;
    uint64_t cache_clock;
};

/* Frees every cached statement of c (before disconnecting). */
void odbox_stmt_cache_clear(odbox_conn *c);

/* The process-wide ODBC environment (ODBC 3), created once. */
int odbox_odbc_env(SQLHENV *env, odbox_error *err);

/* Drains the diagnostic records of handle h after rc failed, maps them to
 * an odbox code and fills err. conn (may be NULL) is marked dead when the
 * error says the connection is gone. `what` names the operation. */
int odbox_odbc_fail(SQLSMALLINT type, SQLHANDLE h, SQLRETURN rc, odbox_conn *conn,
                    odbox_error *err, const char *what);

/* SQLSTATE + native code -> ODBOX_E*, through the dialect's table (the
 * standard SQLSTATEs only while d is NULL: a raw connection string's
 * dialect is known once connected). */
int odbox_odbc_map(const odbox_dialect *d, const char *sqlstate, long native);

#define ODBOX_SQL_OK(rc) ((rc) == SQL_SUCCESS || (rc) == SQL_SUCCESS_WITH_INFO)

#endif
