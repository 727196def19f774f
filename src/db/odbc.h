/* odbox — ODBC internals shared by conn.c, stmt.c and pool.c. */
#ifndef ODBOX_DB_ODBC_H
#define ODBOX_DB_ODBC_H

#include <sql.h>
#include <sqlext.h>
#include "odbox/db.h"
#include "odbox/dialect.h"
#include "internal.h"
#include "sqltext.h"
#include "driver.h"

#define ODBOX_STMT_CACHE 16

/* What a connection needs from the pool that hands it out, passed down by
 * db/pool.c (a layer above: docs/architecture.md) so that conn.c does not
 * call it: the pool's DSN (with its password), for reconnecting in place;
 * and a note that one of its connections was found lost, so that its idle
 * ones opened before are checked before their next hand-out (returns the
 * new count). */
typedef struct odbox_conn_owner {
    const char *(*dsn)(const struct odbox_pool *p);
    uint64_t (*note_lost)(struct odbox_pool *p);
} odbox_conn_owner;

struct odbox_conn {
    const odbox_db_driver *drv; /* the client the session goes through */
    SQLHDBC dbc;               /* ODBC's session */
    void *native;              /* another driver's session (libpq's PGconn) */
    const odbox_dialect *dialect;
    char server_name[64];
    char server_version[64];
    int in_tx;
    int tx_failed;             /* a statement failed in the open transaction (begin clears it) */
    int tx_owned;              /* an odbox_tx holds the transaction (odbox_conn_own_tx) */
    int session_changed;       /* odbox_sql_changes_session since the setup: closed at release */
    int dead;
    char *secret;              /* password, scrubbed from driver messages */
    int64_t idle_since_us;     /* set by the pool */
    struct odbox_conn *next;   /* pool's idle list */
    int idle;                  /* on that list (under the pool's mutex): a second release is the caller's bug */
    struct odbox_pool *pool;   /* the pool that hands it out; NULL from odbox_conn_open */
    const odbox_conn_owner *owner; /* that pool's, set with pool */
    uint64_t epoch;            /* the pool's count of lost connections when this one was last known live */
    /* Handed out by the pool, and the server has answered nothing yet on
     * this hand-out: the session holds nothing of the caller's, so a
     * connection found lost now may be replaced under the caller (see
     * odbox_conn_again). */
    int fresh;
    /* Its database must exist: connecting (again) never creates one (its
     * pool's odbox_pool_never_create). */
    int never_create;
    /* Every statement of this connection: those callers hold (nheld of
     * them) and the idle cached ones. Closing or releasing the connection
     * detaches the held ones (odbox_stmt_detach). */
    struct odbox_stmt *stmts;
    int nheld;
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
    /* odbox_conn_again, set at open: the statements (stmt.c, below conn.c)
     * call it through this, to send again after a reconnect. */
    int (*again)(struct odbox_conn *c, int rc, int repeatable, odbox_error *err);
    /* Set by lock_local.c (a layer above) when it takes a lock on this
     * connection: drops what it still holds when the session ends. */
    void (*release_local_locks)(const struct odbox_conn *c);
};

/* c's SQL text follows MySQL's lexical rules (its dialect's
 * backslash_escapes): what odbox_sql_ends_tx and odbox_sql_changes_session
 * take as mysql_rules. */
static inline int odbox_conn_mysql_rules(const odbox_conn *c)
{
    return c->dialect && c->dialect->backslash_escapes;
}

/* Before c disconnects: frees its cached statements and detaches the ones
 * callers still hold (a later use returns ODBOX_ESTATE; odbox_stmt_free
 * frees them), logging each as a caller's mistake; `what` names the
 * operation for the log. With held_only, cached statements stay (the
 * connection goes back to its pool). */
void odbox_stmt_detach(odbox_conn *c, int held_only, const char *what);

/* Before c reconnects in place: frees its cached statements; those held
 * lose their driver handle and are prepared again, from their SQL text,
 * at their next execute. */
void odbox_stmt_drop_handles(odbox_conn *c);

/* ODBOX_EINVAL when c is inside a transaction begun with odbox_conn_begin
 * and sql would end or restart it behind odbox's back (its state, the
 * own transaction's events and the pool's rollback would then be wrong);
 * ODBOX_ESTATE after a failed statement in an odbox_tx's transaction, or
 * in one the server aborted (failed_statement_aborts_tx) unless sql
 * rolls back to a savepoint; else ODBOX_OK. `what` names the operation. */
int odbox_sql_refused_in_tx(const odbox_conn *c, const char *sql, const char *what, odbox_error *err);

/* sql ran on c: c is no longer fresh, and a ROLLBACK TO a savepoint
 * clears the transaction's failure. */
void odbox_sql_sent(odbox_conn *c, const char *sql);

/* After an operation on c failed with rc: 1 when c was handed out fresh
 * (the server had answered nothing on this hand-out), the failure says
 * the connection was lost, and the operation is safe to send again
 * (`repeatable`: a read, a BEGIN, a prepare, or anything inside a
 * transaction that has not sent its COMMIT); then c has been reconnected
 * in place (a transaction that was open is begun again) and the caller
 * runs the operation once more. 0 otherwise: rc stands. Clears c->fresh
 * unless rc shows nothing reached the driver. */
int odbox_conn_again(odbox_conn *c, int rc, int repeatable, odbox_error *err);

/* odbox_conn_open; with never_create, connecting (also again, in place)
 * never creates the database (odbox_pool_never_create). */
int odbox_conn_open_as(const char *dsn_text, int never_create, odbox_conn **out, odbox_error *err);

/* The pool's DSN (with its password): a session of one's own like the
 * pool's (connections reach it through their owner). */
const char *odbox_pool_dsn(const odbox_pool *p);

/* The process-wide ODBC environment (ODBC 3), created once. */
int odbox_odbc_env(SQLHENV *env, odbox_error *err);

/* Drains the diagnostic records of handle h after rc failed, maps them to
 * an odbox code and fills err. conn (may be NULL) is marked dead when the
 * error says the connection is gone. `what` names the operation. */
int odbox_odbc_fail(SQLSMALLINT type, SQLHANDLE h, SQLRETURN rc, odbox_conn *conn,
                    odbox_error *err, const char *what);

/* The error of a driver that is not ODBC (pq.c), as odbox_odbc_fail
 * makes it: "what: [sqlstate] text" without the password, the code
 * through the dialect's map_error (ODBOX_ECONNLOST when lost: the
 * session is gone), conn's transaction marked failed and a lost conn
 * dead. */
int odbox_db_fail(odbox_conn *conn, odbox_error *err, const char *what, int lost, const char *sqlstate,
                  const char *text);

/* SQLSTATE + native code (+ the driver's message) -> ODBOX_E*, through
 * the dialect's map_error (the standard SQLSTATEs only while d is NULL: a
 * raw connection string's dialect is known once connected). */
int odbox_odbc_map(const odbox_dialect *d, const char *sqlstate, long native, const char *message);

#define ODBOX_SQL_OK(rc) ((rc) == SQL_SUCCESS || (rc) == SQL_SUCCESS_WITH_INFO)

#endif
