/* odbox — dialects: everything in SQL that differs between databases.
 *
 * One const, versioned method table per database (dialects/<name>.c). The
 * core never tests which database it talks to; it reads these fields.
 * A new dialect is a new file in dialects/, a line in the dialect table
 * (dialects/dialects.c) and a folder migrations/<migrations_dir>/. */
#ifndef ODBOX_DIALECT_H
#define ODBOX_DIALECT_H

#include "dsn.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODBOX_DIALECT_VERSION 1

typedef enum odbox_lock_key_form {
    ODBOX_LOCK_KEY_NONE = 0, /* no server locks: held in this process (SQLite) */
    ODBOX_LOCK_KEY_INT64,    /* the 64-bit key hash bound as int64 */
    ODBOX_LOCK_KEY_HEX       /* the 64-bit key hash as lower-case hex text */
} odbox_lock_key_form;

/* A dialect's listening session (see listen_open). */
typedef struct odbox_listener odbox_listener;

typedef struct odbox_dialect {
    int version;                   /* ODBOX_DIALECT_VERSION */
    const char *name;              /* "postgresql", "mysql", "mariadb", "sqlite" */
    const char *migrations_dir;    /* folder under migrations/ */
    const char *const *schemes;    /* URL schemes, NULL-terminated */
    const char *default_driver;    /* odbcinst.ini driver name */
    int default_port;              /* 0 when the database has no port */

    /* Builds the ODBC connection string for a URL DSN, with driver as the
     * driver name. *out is malloc'd. */
    int (*connection_string)(const odbox_dsn *dsn, const char *driver,
                             char **out, odbox_error *err);
    /* 1 when SQLGetInfo's DBMS name and version denote this dialect's
     * server. More specific dialects come first in the table. */
    int (*recognizes)(const char *dbms_name, const char *dbms_version);
    /* Run on every new connection (UTC, strictness), NULL-terminated. */
    const char *const *session_setup;
    /* Transactions as statements, autocommit left on (one round trip
     * each); NULL: through ODBC's autocommit attribute, which the driver
     * turns into the fewest round trips itself. */
    const char *begin_sql;
    const char *commit_sql;
    const char *rollback_sql;

    /* Column types. */
    const char *uuid_type;
    const char *json_type;
    const char *timestamp_type;
    const char *bool_type;
    /* How a bound parameter becomes a UUID / JSON value ("?" or a cast). */
    const char *uuid_param;
    const char *json_param;
    /* A parameter of each odbox_type that carries its type even where no
     * column gives one (a VALUES list, a derived table); index by type. */
    const char *typed_param[8];

    /* Capabilities. */
    int has_partial_indexes;
    int has_returning;
    int has_skip_locked;
    int has_transactional_ddl;
    int backslash_escapes;   /* MySQL's lexical rules: '\'' and "\"" escape a quote inside
                                string literals, and '#' starts a comment to the end of
                                the line (the migration runner splits files by them) */
    int max_params;          /* most parameters one statement may carry */
    /* 1: a keyed action (odbox_execute_keyed) begins its transaction
     * before perform, with the key's INSERT, which is also the key's
     * lookup (a key taken waits for its holder and is then refused), and
     * perform's reads of the default shard run in that transaction: the
     * key costs that one statement. 0: the key is read before perform and
     * inserted with the writes: where join_writes_sql carries the INSERT
     * in its one autocommit statement (a transaction would cost more), or
     * where a transaction held through perform would hold more than the
     * key (SQLite's BEGIN IMMEDIATE takes the database's write lock). */
    int claims_keys_first;

    /* The eventlog container: "schema" (PostgreSQL), "database"
     * (MySQL/MariaDB, where a bare name is server-wide) or "prefix"
     * (SQLite: none, see eventlog_separator). Format strings take the
     * validated name once; NULL when there is no container to create or
     * drop. */
    const char *eventlog_container;
    const char *create_eventlog_fmt;   /* CREATE ... IF NOT EXISTS %s */
    const char *drop_eventlog_fmt;     /* DROP ... IF EXISTS %s (tests, tools) */
    /* Tells whether a table exists: one row with a count, binds (container
     * name, table name); container NULL: the connection's own, as an
     * unqualified name resolves. On SQLite a container is a schema of the
     * connection ("main", an attached file); find an eventlog's tables
     * through odbox_dialect_eventlog_locate. */
    const char *table_exists_sql;

    /* Insert that skips rows conflicting on a unique key and reports
     * every other error: "%s" placeholders take (table, columns, values,
     * a key column). PostgreSQL: ON CONFLICT DO NOTHING; MySQL/MariaDB:
     * ON DUPLICATE KEY UPDATE k = k (INSERT IGNORE would also silence
     * truncation and other errors). */
    const char *insert_ignore_fmt;
    /* Appended to "SELECT ... ORDER BY ... LIMIT n" to claim rows that no
     * other transaction holds. "" when the database locks whole files. */
    const char *claim_suffix;

    /* Keyed locks held by a session: try once, answer 1 taken / 0 busy;
     * release answers 1 when it was held. Key bound as lock_key_form. */
    odbox_lock_key_form lock_key_form;
    const char *lock_try_sql;
    const char *lock_release_sql;

    /* One statement updating many rows optimistically. table and cols
     * come quoted (identifier_quote). cols[0] is id, cols[1] version,
     * the rest are set; parameters are bound row by
     * row in cols order. Each row matches WHERE id = ? AND version = ?
     * and gets version + 1. *out is malloc'd. */
    int (*batch_update_sql)(const struct odbox_dialect *d, const char *table, const char *const *cols,
                            const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err);

    /* Administration: this session's server-side id (one row, one
     * integer), and a statement that ends another session by that id
     * (tests use it to cut a connection mid-transaction). */
    const char *session_id_sql;
    const char *kill_session_fmt;  /* takes the id as %lld */

    /* A timestamp column in a SELECT list is read wrapped in these two
     * (e.g. "CAST(" and " AS TEXT)"), or bare when they are NULL. The text
     * must be "YYYY-MM-DD HH:MM:SS[.ffffff]". psqlODBC parses every
     * timestamp it returns and prints it again, which costs more than
     * the rest of reading a row. */
    const char *timestamp_read_open;
    const char *timestamp_read_close;

    /* 1: integer and boolean parameters are handed to the driver as text.
     * psqlODBC sends every parameter untyped (the server infers the type
     * from where it stands) and formats numbers with snprintf, so text
     * changes nothing the server sees and costs less. */
    int numbers_as_text;

    /* Joins statements that write into one statement (*out malloc'd):
     * stmts[0..n-2] become WITH items, stmts[n-1] the statement itself,
     * all in the order given, parameters too. In autocommit it is its own
     * transaction: the executor writes a shard in one round trip instead
     * of BEGIN, one per statement and COMMIT. guarded: stmts[0] is an
     * UPDATE that may match no row and every later one an INSERT ...
     * SELECT that a WHERE can follow; each of those then writes only when
     * the UPDATE matched. The statements must not touch the same rows (they run on
     * one snapshot). NULL: the database has no data-modifying WITH, and
     * the executor writes a shard in a transaction. */
    int (*join_writes_sql)(const struct odbox_dialect *d, const char *const *stmts, size_t n, int guarded,
                           char **out, odbox_error *err);

    /* Quotes a table or column name in generated SQL, so that names such
     * as order, user or group work: "\"" (PostgreSQL) or "`". Names are
     * validated first, so the quote never appears inside one. */
    const char *identifier_quote;
    /* One row, one text column: the container the connection's own
     * unqualified tables go to (current schema on PostgreSQL, current
     * database on MySQL/MariaDB; SQL NULL when none). An eventlog records
     * the one whose migrate created it as its owner. */
    const char *owner_sql;
    /* A table's columns in order, one row each: name, type as text,
     * 1 when NOT NULL, 1 when it has a default (or is generated or an
     * identity). Binds the container (NULL: the connection's own, as an
     * unqualified name resolves) and the table name; no rows when there
     * is no such table. */
    const char *table_columns_sql;
    /* Changes the type of a NOT NULL column: %1$s table, %2$s column,
     * %3$s new type. NULL where a column's type cannot be altered
     * (SQLite, whose INTEGER affinity still turns the text '1.10' into
     * the number 1.1): the table is rebuilt with today's columns, in a
     * transaction (has_transactional_ddl). */
    const char *alter_column_type_fmt;
    /* One row, one text column: the server's version as the server spells
     * it (text may follow the number: "10.11.19-MariaDB-0+deb12u1"). The
     * driver's SQL_DBMS_VER pads it ("10.11.000019"). */
    const char *server_version_sql;
    /* What joins an eventlog name and a table name in SQL: "." where the
     * eventlog is a schema or database of its own (eventlog.events); "_"
     * on SQLite, where the eventlog tables sit beside the domain tables in
     * the one file, so that one transaction covers both (an ATTACHed file
     * is not atomic in WAL mode): eventlog_events. Read it through
     * odbox_dialect_eventlog_table. */
    const char *eventlog_separator;
    /* For lock_key_form ODBOX_LOCK_KEY_NONE: keyed locks are then held in
     * this process (per database, by connection). This query answers one
     * row with one text naming the connection's database, the same for
     * every connection to it; '' when the database is the connection's
     * own (SQLite :memory:). NULL for dialects with server locks. */
    const char *lock_scope_sql;
    /* Maps a diagnostic of this dialect's driver, its SQLSTATE, native
     * error number and message text, to an ODBOX_E* code (ODBOX_EDB when
     * nothing more specific fits; codes the SQLSTATE alone tells come
     * from the standard mapping every dialect falls back to). Native
     * numbers mean different things per driver (1062 is MySQL's duplicate
     * key, not psqlODBC's), so each dialect reads only its own. The text
     * is for drivers whose number says too little (SQLite reports a
     * UNIQUE, NOT NULL or CHECK failure alike, as HY000 with code 19). */
    int (*map_error)(const char *sqlstate, long native, const char *message);

    /* Cross-process wake-ups (PostgreSQL: NOTIFY and LISTEN). NULL where
     * the database has none: a process then learns of another's commits
     * by polling.
     * notify_sql sends a notification, in autocommit, outside any
     * action's transaction; binds (channel, payload), both text. */
    const char *notify_sql;
    /* The listening side, through the database's own client library (ODBC
     * drivers do not hand notifications on); NULL also when odbox was
     * built without that library. listen_open connects to the server dsn
     * names (a URL, or a raw ODBC string naming its server) and listens on
     * channels (names as odbox_name_is_valid wants them, at most 32). It
     * gives up with ODBOX_ETIMEDOUT after timeout_ms, or as soon as
     * cancel_fd (-1: none) is readable; ODBOX_EUNSUPPORTED when dsn does
     * not say where the server is; ODBOX_ECONNECT when it cannot connect.
     * listen_wait waits at most timeout_ms, or until cancel_fd is
     * readable, for notifications: the number taken (0: none), with bit i
     * of *got set for each channels[i] named, or ODBOX_ECONNLOST once the
     * session is gone. Messages never hold the password. */
    int (*listen_open)(const odbox_dsn *dsn, const char *const *channels, size_t nchannels, int timeout_ms,
                       int cancel_fd, odbox_listener **out, odbox_error *err);
    int (*listen_wait)(odbox_listener *l, int timeout_ms, int cancel_fd, unsigned *got, odbox_error *err);
    /* Ends the session. NULL-safe; sets *l = NULL. */
    void (*listen_close)(odbox_listener **l);

    /* Deletes at most a bound number of rows in one statement: %1$s the
     * table (its key column is id), %2$s the condition that finds them,
     * %3$s an ORDER BY clause or "", %4$s a condition without parameters
     * that each row must still meet when it is deleted (a row changed
     * meanwhile is skipped); the row count is bound after %2$s's
     * parameters. No dialect has a DELETE ... LIMIT that fits: SQLite
     * has none (unless built with it), PostgreSQL none, and MySQL/MariaDB
     * pick an index for it without regard to the ORDER BY (a whole range
     * sorted, and locked, per batch): each finds the rows with a SELECT
     * that uses the index in its order. */
    const char *delete_batch_fmt;
    /* An integer expression: the microseconds from timestamp expression
     * %2$s to timestamp expression %1$s (each may be used twice). */
    const char *interval_us_fmt;

    /* An INSERT fed by a query that skips rows conflicting on a unique
     * key, as insert_ignore_fmt: %1$s the table, %2$s its columns, %3$s a
     * SELECT that ends with a WHERE (SQLite needs one before ON CONFLICT),
     * %4$s a key column. */
    const char *insert_select_ignore_fmt;
    /* A derived table of nrows rows of bound parameters, usable in a FROM
     * clause and named alias, with columns cols of types (odbox_type,
     * each value typed as typed_param says); parameters are bound row by
     * row in cols order. *out is malloc'd. */
    int (*bound_rows_sql)(const struct odbox_dialect *d, const char *alias, const char *const *cols,
                          const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err);

    /* The database's current time in UTC, as an expression that a
     * timestamp column takes and a SELECT list can read (wrapped in
     * timestamp_read_open/close); the same value throughout one
     * statement. Jobs decide with it (due times, heartbeats, the dead
     * test), so the clocks of the processes sharing a table never do. */
    const char *now_sql;
    /* The database's current time in UTC as the statement runs (not as
     * its transaction began: a transaction that began earlier may read
     * another's commit before its own statement), an expression a
     * timestamp column takes; the same value for every row of one
     * statement. An event's event_date and completion_date: an action
     * that read another's committed result writes a later date than it,
     * by one clock, whatever the clocks of the processes say. NULL: the
     * writing process's clock is bound (SQLite, whose clock counts
     * milliseconds and whose writers share one machine's clock). */
    const char *stmt_now_sql;
    /* Statements that bound a session's waits: for a lock at most lock_ms,
     * for a statement at most statement_ms (rounded up where the server
     * counts seconds). Fills out with the i-th (i = 0, 1, ...) and answers
     * 1, or 0 when there are no more. Run on the job registry's own
     * sessions, so that its bookkeeping never waits without a bound. */
    int (*bounded_session_sql)(size_t i, int lock_ms, int statement_ms, char *out, size_t cap);
    /* Reading a shard's replica (the fan-out reads undelivered events
     * there). NULL where the dialect cannot tell.
     * replica_position_sql, on the primary right after a commit on the
     * same connection: one row, one text: a position in the primary's
     * replication stream at or after that commit (PostgreSQL: a WAL LSN;
     * MariaDB: the session's last GTID; MySQL: the executed GTID set).
     * SQL NULL or '': none (no binary log). */
    const char *replica_position_sql;
    /* On the replica, binds such a position (text): one row, one integer,
     * 1 when the replica has applied it, or is no replica (a server that
     * replicates from nothing shows what it shows); 0 otherwise. */
    const char *replica_reached_sql;
    /* On the replica: how far it lags behind the primary, in column
     * replica_lag_column (NULL: the first) of each row, in units of
     * replica_lag_unit_ms milliseconds (0: 1); the largest row counts. 0
     * when nothing received is left to apply; SQL NULL when replication
     * stopped (paused, no receiver, a replica thread not running): over
     * any bound. No rows: no replica (lag 0). NULL: the lag is not
     * measured (the replica is read whatever its lag). */
    const char *replica_lag_sql;
    const char *replica_lag_column;
    int replica_lag_unit_ms;
    /* The delivery's transactions (fan-out writes, claims). NULL: none.
     * delivery_isolation_sql runs before their begin and sets the next
     * transaction's isolation (MySQL/MariaDB: READ COMMITTED, so that a
     * claim's and a fan-out's gap locks do not deadlock); claim_begin_sql
     * runs first in a claim (PostgreSQL: the due read is the ordered
     * index scan even on statistics that predate the backlog). */
    const char *delivery_isolation_sql;
    const char *claim_begin_sql;
    /* Runs first in a fan-out's writes (PostgreSQL: their commit does not
     * wait for the WAL flush: a fan-out lost in a server crash is done
     * again, and any later durable commit flushes it). NULL: none. */
    const char *fanout_begin_sql;
    /* Runs first in the transaction that writes a handling round's
     * outcomes. NULL: no transaction, each outcome UPDATE on its own. */
    const char *outcome_begin_sql;
    /* Statements a new session runs after session_setup that depend on
     * the ODBC connection string it was opened with (odbc). Fills out
     * with the i-th (i = 0, 1, ...) and answers 1, or 0 when there are
     * no more. NULL: none. */
    int (*session_sql)(const char *odbc, size_t i, char *out, size_t cap);
    /* Runs first in the transaction that reads a hand-off's rows by id
     * (PostgreSQL: by the primary key even on statistics taken while the
     * table was small, where a scan of the whole table looked cheaper).
     * NULL: the read runs on its own. */
    const char *handoff_begin_sql;
    /* 1 when a locking read's subqueries read a snapshot taken as the
     * statement began, while the locking read itself reads the rows as
     * committed since (InnoDB under READ COMMITTED): a claim's due read
     * may then find two rows of one model that a fan-out committed while
     * it ran, each without the other. The claim checks its rows of
     * ordered subscriptions again, in a statement of its own (a fresh
     * snapshot), and leaves those an older unfinished row holds back. 0
     * where one snapshot bounds the statement (PostgreSQL) or claims take
     * turns (SQLite). */
    int claim_order_recheck;
    /* Written after the alias o of the order check's look for an older
     * unfinished row of a model (a claim's NOT EXISTS, the recheck's
     * EXISTS), e.g. an index hint. MySQL/MariaDB: FORCE INDEX
     * (event_notifications_order_key): on statistics taken while the
     * table was small (a burst of rows into a young eventlog) MariaDB
     * looked by event_notifications_limit_leases, reading every row of
     * the handler per due row. NULL: none. */
    const char *order_probe_hint;
    /* The oldest server version the dialect's migrations run on ("10.7"),
     * compared part by part as numbers with the number server_version_sql
     * begins with; NULL: any. migrate refuses an older server
     * (ODBOX_EUNSUPPORTED) before it changes anything, and says
     * too_old_hint (what to do instead). */
    const char *min_server_version;
    const char *too_old_hint;
    /* The database's own client library instead of ODBC, for a URL with
     * driver=libpq: libpq's connection string (malloc'd, holds the
     * password) for the server dsn names, with its connect_timeout= and
     * read_timeout= (docs/dsn.md). NULL where there is none (or odbox was
     * built without libpq): driver=libpq is then refused. */
    int (*libpq_conninfo)(const odbox_dsn *dsn, char **out, odbox_error *err);
    /* 1 when a failed statement aborts the whole transaction (PostgreSQL:
     * every later statement fails until ROLLBACK, or ROLLBACK TO a
     * savepoint). odbox then sends nothing else in that transaction and
     * its commit rolls back: psqlODBC (Protocol=7.4-1) rolls it back at
     * the failure and would run the statements that follow, and commit
     * them, in a new one. 0: a failed statement leaves the transaction
     * and what it wrote before (MySQL, MariaDB, SQLite). */
    int failed_statement_aborts_tx;
    /* For a connection that must not create its database
     * (odbox_registry_never_create): ODBOX_ECONNECT, saying so, when the
     * database dsn names does not exist, else adds to *odbc (the
     * connection string, replaced) what keeps the driver from creating
     * it should it go away meanwhile. NULL: connecting never creates a
     * database (a server's must exist). */
    int (*never_create)(const odbox_dsn *dsn, char **odbc, odbox_error *err);
    /* As order_probe_hint, for the look for a row of a model whose call
     * runs (its order lease holds): MySQL/MariaDB FORCE INDEX
     * (event_notifications_order_leases). NULL: none. */
    const char *order_lease_probe_hint;
} odbox_dialect;

/* The built-in dialects, NULL-terminated, most specific first. */
const odbox_dialect *const *odbox_dialects(void);

/* By name ("postgresql", "pg", "postgres", "mysql", "mariadb", "sqlite")
 * or URL scheme; NULL when unknown. */
const odbox_dialect *odbox_dialect_find(const char *name);

/* From the server's SQLGetInfo answers; NULL when none recognises it. */
const odbox_dialect *odbox_dialect_detect(const char *dbms_name, const char *dbms_version);

/* The SQL name of eventlog table `table` ("events", ...) of the eventlog
 * named `eventlog` in dialect d: "eventlog.events", or "eventlog_events"
 * on SQLite (see eventlog_separator), written to out (cap bytes, NUL
 * included). ODBOX_EINVAL when an argument is NULL or the name does not
 * fit. Names are not validated here: pass validated identifiers.
 * Thread-safe. */
int odbox_dialect_eventlog_table(const odbox_dialect *d, const char *eventlog, const char *table, char *out,
                                 size_t cap);

/* Where the catalogue lists eventlog table `table`, for
 * odbox_conn_table_exists: *container = eventlog and out = table where the
 * eventlog is a container (schema, database); *container = NULL (the
 * connection's own) and out = "eventlog_events" where it is a name prefix
 * (SQLite). Same arguments and errors as odbox_dialect_eventlog_table.
 * Thread-safe. */
int odbox_dialect_eventlog_locate(const odbox_dialect *d, const char *eventlog, const char *table,
                                  const char **container, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
