/* odbox — the client a connection talks to its server through, as a
 * versioned method table chosen when the connection opens (libzdb's
 * model): ODBC (odbc_driver.c) for every dialect, and libpq (pq.c) for
 * PostgreSQL URLs with driver=libpq. conn.c and stmt.c keep everything
 * that is the same for both: transactions' state, the statement cache,
 * the refusals, replacing a fresh connection found lost (odbox_conn_again)
 * and the error codes' meaning. Not installed. */
#ifndef ODBOX_DB_DRIVER_H
#define ODBOX_DB_DRIVER_H

#include "odbox/db.h"

#define ODBOX_DB_DRIVER_VERSION 1

typedef struct odbox_db_driver {
    int version;       /* ODBOX_DB_DRIVER_VERSION */
    const char *name;  /* "odbc", "libpq" */
    /* 1 when prepare sends the SQL to the server at once (libpq): SQL
     * that would end a transaction then waits for its execute, where
     * inside one it is refused unsent. */
    int prepares_on_server;

    /* Opens c's session to dsn_text (c has none): sets c->secret, the
     * dialect when c has none yet, server_name, server_version, cache_ok
     * and bind_columns; *named is the dialect the DSN names (NULL: a raw
     * ODBC string's, found from the server's answers) and *conn_string
     * (NULL or malloc'd) what the dialect's session_sql reads. Failing,
     * nothing stays open and the code is ODBOX_ECONNECT (or ENOMEM,
     * EINVAL for a DSN it cannot take). */
    int (*connect)(odbox_conn *c, const char *dsn_text, const odbox_dialect **named, char **conn_string,
                   odbox_error *err);
    /* Rolls back an open transaction unless c is dead, and closes. */
    void (*disconnect)(odbox_conn *c);
    /* 1 when the client knows the session is gone (a local check). */
    int (*is_dead)(odbox_conn *c);
    /* One statement without parameters; results discarded. */
    int (*exec)(odbox_conn *c, const char *sql, odbox_error *err);
    /* Autocommit off begins a transaction; on ends it (after end_tran). */
    int (*autocommit)(odbox_conn *c, int on, odbox_error *err);
    /* Commits (commit = 1) or rolls back the open transaction. */
    int (*end_tran)(odbox_conn *c, int commit, odbox_error *err);

    /* Prepares s->sql on s->conn's session, sets s->nparams. */
    int (*prepare)(odbox_stmt *s, odbox_error *err);
    /* 1 when s is prepared on the current session. */
    int (*prepared)(const odbox_stmt *s);
    /* Frees what the driver keeps for s (its columns too); send: tells
     * the server to forget it (not after a reconnect: that session is
     * gone). */
    void (*unprepare)(odbox_stmt *s, int send);
    /* Sends s with its binds s->binds[0..nbinds). */
    int (*execute)(odbox_stmt *s, odbox_error *err);
    /* Once per execute: the current result's columns into
     * s->result_cols (left 0: none) and s->cols (as many), and
     * s->open_cursor set when there is a result to read. */
    int (*columns)(odbox_stmt *s, odbox_error *err);
    /* The next row into s->cols as text: 1, 0 at the end, or an error. */
    int (*fetch)(odbox_stmt *s, odbox_error *err);
    void (*close_cursor)(odbox_stmt *s);
    int64_t (*rows_affected)(odbox_stmt *s);
    /* Column i's (from 1) label into buf; 0 when there is none. */
    int (*column_label)(odbox_stmt *s, int i, char *buf, size_t cap);
} odbox_db_driver;

extern const odbox_db_driver odbox_db_odbc;
#ifdef HAVE_LIBPQ
extern const odbox_db_driver odbox_db_libpq;
#endif

/* The driver dsn_text asks for: libpq for a PostgreSQL URL with
 * driver=libpq (ODBOX_EUNSUPPORTED when built without libpq or for
 * another dialect), else ODBC. */
int odbox_db_driver_for(const char *dsn_text, const odbox_db_driver **out, odbox_error *err);

#endif
