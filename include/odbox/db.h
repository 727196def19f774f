/* odbox — the database core: connections, pools, transactions, statements.
 *
 * Talks ODBC (or libpq, for a PostgreSQL URL with driver=libpq) and knows
 * nothing about outboxes. SQL that differs per database is
 * not written here: ask the connection's dialect (odbox/dialect.h).
 *
 * Thread model: an odbox_conn and its statements are used by one thread at
 * a time; an odbox_pool is thread-safe. */
#ifndef ODBOX_DB_H
#define ODBOX_DB_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "dialect.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct odbox_conn odbox_conn;
typedef struct odbox_pool odbox_pool;
typedef struct odbox_stmt odbox_stmt;

/* Value types of binds and getters. */
typedef enum odbox_type {
    ODBOX_TYPE_TEXT = 1,
    ODBOX_TYPE_INT64,
    ODBOX_TYPE_DOUBLE,
    ODBOX_TYPE_BOOL,
    ODBOX_TYPE_UUID,      /* 36-character text form */
    ODBOX_TYPE_JSON,      /* JSON text */
    ODBOX_TYPE_TIMESTAMP  /* UTC, microseconds since the Unix epoch */
} odbox_type;

/* ---- connections ------------------------------------------------------ */

/* Connects to dsn (URL or raw ODBC string, see odbox/dsn.h), detects the
 * dialect and runs its session setup (UTC, ...). Autocommit is on. A URL's
 * connect_timeout= (default 10 s) bounds the connect and the login, and
 * its read_timeout= (default 300 s) how long a read waits on a server
 * that stopped answering (docs/dsn.md). Thread-safe: connects
 * to different servers run in parallel. */
int odbox_conn_open(const char *dsn, odbox_conn **out, odbox_error *err);

/* Rolls back an open transaction and disconnects. NULL-safe; sets *c = NULL.
 * Statements still held are detached: using one returns ODBOX_ESTATE, and
 * odbox_stmt_free frees it. The connection of an odbox_tx (odbox_tx_conn)
 * is neither closed nor released nor discarded (these three calls only
 * set *c = NULL and log an error): odbox_tx_commit or odbox_tx_rollback
 * releases it. */
void odbox_conn_close(odbox_conn **c);

const odbox_dialect *odbox_conn_dialect(const odbox_conn *c);

/* The server's product name and version as reported by the driver
 * (SQLGetInfo SQL_DBMS_NAME / SQL_DBMS_VER; through libpq "PostgreSQL"
 * and the server_version parameter). Valid while c is open. */
const char *odbox_conn_server_name(const odbox_conn *c);
const char *odbox_conn_server_version(const odbox_conn *c);

/* 1 when the connection was found dead (a lost-connection error was seen,
 * or the driver reports SQL_ATTR_CONNECTION_DEAD); such a connection must
 * not be reused. */
int odbox_conn_is_dead(odbox_conn *c);

/* Runs one statement without parameters; results are discarded.
 * Inside a transaction begun with odbox_conn_begin, SQL that would end or
 * restart it (COMMIT, END, ABORT, BEGIN, START TRANSACTION, ROLLBACK but
 * not ROLLBACK TO a savepoint; on MySQL and MariaDB also what commits
 * there implicitly: DDL but a temporary table's CREATE and DROP,
 * account statements (CREATE USER, GRANT, REVOKE, SET PASSWORD), table
 * maintenance (ANALYZE, CHECK, OPTIMIZE, REPAIR TABLE, FLUSH, RESET),
 * replica control, SET autocommit, LOCK or UNLOCK TABLES), also behind
 * a comment or a hint, inside MySQL's executable comments or after a
 * ';', or text whose quotes odbox cannot close, is
 * refused with ODBOX_EINVAL and not sent, here and at
 * odbox_stmt_execute: end it with odbox_conn_commit or
 * odbox_conn_rollback, and run such statements outside it. odbox does
 * not see into a stored procedure's body (CALL) or the text of a
 * statement the server prepared (MySQL's EXECUTE): keep COMMIT and DDL
 * out of those. */
int odbox_conn_exec(odbox_conn *c, const char *sql, odbox_error *err);

/* Explicit transactions. begin turns autocommit off; commit and rollback
 * end the transaction and turn autocommit back on, also when they fail.
 * begin inside a transaction and commit/rollback outside one return
 * ODBOX_ESTATE. A commit whose connection is lost once the COMMIT has
 * been sent returns ODBOX_EINDOUBT: the server may have committed; one
 * lost before that returns ODBOX_ECONNLOST (nothing committed). Where a
 * failed statement aborts the transaction (PostgreSQL), nothing more is
 * sent in it but ROLLBACK TO a savepoint (ODBOX_ESTATE), and commit rolls
 * it back and returns ODBOX_EDB; MySQL, MariaDB and SQLite keep the
 * transaction and what it wrote before the failure. */
int odbox_conn_begin(odbox_conn *c, odbox_error *err);
int odbox_conn_commit(odbox_conn *c, odbox_error *err);
int odbox_conn_rollback(odbox_conn *c, odbox_error *err);
int odbox_conn_in_transaction(const odbox_conn *c);

/* ---- pools ------------------------------------------------------------ */

typedef struct odbox_pool_config {
    int size;                /* most connections open at once; 0 = 10 */
    int acquire_timeout_ms;  /* wait for a free connection; 0 = 30000 */
} odbox_pool_config;

/* Creates a pool for dsn. Connections are opened lazily by acquire; the
 * DSN is parsed now, so a malformed one fails here. cfg may be NULL. */
int odbox_pool_open(const char *dsn, const odbox_pool_config *cfg,
                    odbox_pool **out, odbox_error *err);

/* Hands out a live connection, opening one when none is idle and the pool
 * is below its size, else waiting up to acquire_timeout_ms (ODBOX_ETIMEDOUT)
 * for one to be released; opening one is bounded by the DSN's
 * connect_timeout, not by acquire_timeout_ms. Idle connections found dead
 * are closed and replaced, never handed out. A session lost while the
 * connection sat idle (a server restart) is replaced under the caller
 * when the first thing the caller sends is safe to send again: a read
 * (SQL starting with SELECT or SHOW), a BEGIN, a prepare, or a statement
 * inside a transaction before its COMMIT. A first write in autocommit is
 * never sent twice: it fails with ODBOX_ECONNLOST (ODBOX_EINDOUBT from
 * the executor). */
int odbox_pool_acquire(odbox_pool *p, odbox_conn **out, odbox_error *err);

/* Returns c to the pool (an open transaction is rolled back; a dead
 * connection is closed; statements still held are detached, as by
 * odbox_conn_close). Sets *c = NULL. Not an odbox_tx's connection (see
 * odbox_conn_close). */
void odbox_pool_release(odbox_pool *p, odbox_conn **c);

/* Closes c instead of returning it (its session state is unknown, e.g. a
 * session lock could not be released). Sets *c = NULL. */
void odbox_pool_discard(odbox_pool *p, odbox_conn **c);

/* Closes every connection; all must have been released. NULL-safe. */
void odbox_pool_free(odbox_pool **p);

/* The dialect of the pool's DSN: known from its scheme at once, or after
 * the first connection for raw ODBC strings (NULL until then). */
const odbox_dialect *odbox_pool_dialect(odbox_pool *p);

/* ---- statements ------------------------------------------------------- */

/* Prepares sql with '?' placeholders. Parameters are numbered from 1; any
 * number of them may be bound, so one statement can carry many rows
 * (see odbox_sql_rows below). */
int odbox_stmt_prepare(odbox_conn *c, const char *sql, odbox_stmt **out,
                       odbox_error *err);

/* Binds copy their value: the caller's buffer may be reused at once.
 * A bind stays until replaced or odbox_stmt_clear_binds. */
int odbox_stmt_bind_text(odbox_stmt *s, int idx, const char *v, odbox_error *err);
int odbox_stmt_bind_int64(odbox_stmt *s, int idx, int64_t v, odbox_error *err);
int odbox_stmt_bind_double(odbox_stmt *s, int idx, double v, odbox_error *err);
int odbox_stmt_bind_bool(odbox_stmt *s, int idx, int v, odbox_error *err);
int odbox_stmt_bind_uuid(odbox_stmt *s, int idx, const char *uuid36, odbox_error *err);
int odbox_stmt_bind_json(odbox_stmt *s, int idx, const char *json, odbox_error *err);
int odbox_stmt_bind_timestamp(odbox_stmt *s, int idx, int64_t utc_us, odbox_error *err);
/* A NULL of the given type (drivers need the type to send a typed NULL). */
int odbox_stmt_bind_null(odbox_stmt *s, int idx, odbox_type t, odbox_error *err);
void odbox_stmt_clear_binds(odbox_stmt *s);

/* Executes with the current binds; closes any open cursor first. */
int odbox_stmt_execute(odbox_stmt *s, odbox_error *err);

/* Rows changed by the last INSERT/UPDATE/DELETE, or -1 when unknown. */
int64_t odbox_stmt_rows_affected(odbox_stmt *s);

/* Advances to the next row: 1 = a row, 0 = no more rows, <0 = error. */
int odbox_stmt_fetch(odbox_stmt *s, odbox_error *err);

int odbox_stmt_column_count(odbox_stmt *s);
/* The 1-based index of the current result's column labelled name
 * (case-insensitive); 0 when there is none. */
int odbox_stmt_column_index(odbox_stmt *s, const char *name);

/* Getters read column col (from 1) of the current row. *is_null (may be
 * NULL) tells SQL NULL; the value is then zero/empty. A NULL statement
 * or value output, or a column out of range, is ODBOX_EINVAL, the value
 * and *is_null untouched; a column whose text is not of the getter's
 * type is ODBOX_EINVAL, the value zero. get_int64 takes a decimal's zero
 * fraction ("12.000" is 12) and refuses any other ("12.5"), and an
 * integer beyond int64. Text returned by get_text is owned by the
 * statement and valid until the next fetch, execute or free. */
int odbox_stmt_get_text(odbox_stmt *s, int col, const char **v, int *is_null, odbox_error *err);
int odbox_stmt_get_int64(odbox_stmt *s, int col, int64_t *v, int *is_null, odbox_error *err);
int odbox_stmt_get_double(odbox_stmt *s, int col, double *v, int *is_null, odbox_error *err);
int odbox_stmt_get_bool(odbox_stmt *s, int col, int *v, int *is_null, odbox_error *err);
int odbox_stmt_get_timestamp(odbox_stmt *s, int col, int64_t *utc_us, int *is_null, odbox_error *err);

/* Done with s: it goes back to its connection's statement cache (a later
 * prepare of the same SQL on that connection reuses it) or is freed.
 * Free every statement before closing or releasing its connection; one
 * still held then is detached (every use returns ODBOX_ESTATE, a warning
 * is logged) and only odbox_stmt_free may follow. */
void odbox_stmt_free(odbox_stmt **s);

/* Multi-row statements: returns a malloc'd "(a,b),(a,b),..." of `rows`
 * groups, one entry per column taken from forms ("?", a dialect's
 * uuid_param / json_param, or a literal), for INSERT ... VALUES of many
 * rows in one statement. Parameters then number row-major from 1. NULL on
 * bad input (rows or ncols < 1) or out of memory. */
char *odbox_sql_rows(int rows, const char *const *forms, int ncols);

/* Session-level keyed locks (PostgreSQL advisory locks, MySQL/MariaDB
 * GET_LOCK). The key text is hashed to 64 bits (first 8 bytes of its
 * SHA-256, big-endian) and bound in the dialect's lock_key_form.
 * try_lock sets *taken to 1 or 0 and never waits (a NULL taken is
 * ODBOX_EINVAL, no lock taken); lock polls try_lock until wait_ms passed
 * (ODBOX_ETIMEDOUT). ODBOX_EUNSUPPORTED when the dialect has no keyed
 * locks. */
int odbox_conn_try_lock(odbox_conn *c, const char *key, int *taken, odbox_error *err);
int odbox_conn_lock(odbox_conn *c, const char *key, int wait_ms, odbox_error *err);
int odbox_conn_unlock(odbox_conn *c, const char *key, odbox_error *err);

/* *exists = 1 when table exists in container (a PostgreSQL schema, a
 * MySQL/MariaDB database, a SQLite schema such as "main"; NULL: the
 * connection's own), through the dialect's catalogue query. A NULL
 * exists is ODBOX_EINVAL. */
int odbox_conn_table_exists(odbox_conn *c, const char *container, const char *table, int *exists,
                            odbox_error *err);

/* One-shot helper: prepare, execute, fetch the first column of the first
 * row as int64 (ODBOX_ENOTFOUND when no row). A NULL v is ODBOX_EINVAL,
 * refused before the SQL is sent. */
int odbox_conn_query_int64(odbox_conn *c, const char *sql, int64_t *v, odbox_error *err);

#ifdef __cplusplus
}
#endif
#endif
