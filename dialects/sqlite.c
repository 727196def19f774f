/* odbox — SQLite 3.33+ (UPDATE ... FROM) with its JSON functions (built in
 * since 3.38), through Christian Werner's sqliteodbc driver (Debian:
 * libsqliteodbc, odbcinst name "SQLite3").
 *
 * One file holds the domain tables and the eventlog tables (named
 * <eventlog>_events, ...), so one transaction covers both. Types: UUIDs,
 * JSON (CHECK json_valid) and timestamps are TEXT, timestamps in odbox's
 * fixed-width 'YYYY-MM-DD HH:MM:SS.ffffff' so that they sort as text;
 * booleans are INTEGER 0/1.
 *
 * Concurrency: WAL mode (readers never wait for the writer) and a busy
 * timeout. SQLite has one writer at a time, and a deferred transaction
 * that reads and then writes gets SQLITE_BUSY at once, without waiting,
 * when another connection wrote in between: every transaction therefore
 * starts as BEGIN IMMEDIATE, which takes the write lock up front and waits
 * for it under the busy timeout. The driver is left in autocommit (its
 * own transactions start with a deferred BEGIN). Claims need no SKIP
 * LOCKED: a claim's transaction is the only writer. Keyed locks are held
 * in this process (SQLite has no session locks; see src/lock_local.c).
 *
 * The driver's busy handler sleeps 10 ms between tries, up to Timeout ms;
 * its retry after a busy statement restarts that clock once, so a
 * statement gives up after about twice Timeout (measured: 640 ms for
 * Timeout=300). Every session replaces that handler with SQLite's own
 * (PRAGMA busy_timeout, the same Timeout), which tries again after 1, 2,
 * 5, 10 ms...: the write lock is mostly held for a millisecond or two,
 * and a fixed 10 ms nap put most of a handler's commit-to-call time (the
 * demo's p50: 27 ms with the driver's handler, 1.1 ms with SQLite's). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "dialects.h"

static const char *const schemes[] = {"sqlite", NULL};

/* Timeout: the busy timeout in ms (the driver's default is 100 s).
 * JournalMode=WAL: persistent in the file; a :memory: database stays in
 * memory mode. SyncPragma=FULL: a commit is on disk when it returns
 * (the driver's default, NORMAL, may lose the last commits on a power
 * loss in WAL mode). FKSupport=1: foreign keys are enforced, as on the
 * other databases. Each can be overridden in the DSN's query string. */
static const char *const driver_options[] = {
    "Timeout", "10000",
    "JournalMode", "WAL",
    "SyncPragma", "FULL",
    "FKSupport", "1",
    NULL,
};

/* The driver reads each value up to the next ';' and knows no braces, so
 * values go in as they are (spaces included) and a ';' cannot be passed
 * at all (refused before). */
static void put_plain(odbox_buf *b, const char *key, const char *value)
{
    odbox_buf_cat(b, key, "=", value, ";", (char *)NULL);
}

/* connect_timeout= and read_timeout= are checked as on the other
 * dialects and then dropped (odbox_odbc_options_take): opening a file
 * waits on no network and no server may stop answering. What can wait
 * on SQLite is a writer for the write lock, which the driver's Timeout
 * (the busy timeout) bounds; a URL written for a server must not change
 * that. */
static int connection_string(const odbox_dsn *dsn, const char *driver, char **out, odbox_error *err)
{
    odbox_timeouts unused;
    int rc = odbox_dsn_timeouts(dsn, &unused, err);
    if (rc != ODBOX_OK)
        return rc;
    if (!dsn->database || !*dsn->database)
        return odbox_fail(err, ODBOX_EINVAL, "DSN: sqlite needs a database file path");
    if (strchr(dsn->database, ';'))
        return odbox_fail(err, ODBOX_EINVAL, "DSN: the SQLite ODBC driver cannot open a path that holds ';'");
    for (size_t i = 0; i < dsn->noptions; i++)
        if (strchr(dsn->options[i].value, ';'))
            return odbox_fail(err, ODBOX_EINVAL, "DSN: the SQLite ODBC driver cannot take ';' in option %.64s",
                              dsn->options[i].key);
    odbox_buf b = {0};
    odbox_odbc_kv(&b, "Driver", driver); /* read by the driver manager, which takes braces */
    put_plain(&b, "Database", dsn->database);
    return odbox_odbc_options_take(&b, dsn, driver_options, put_plain, out, err);
}

/* The driver creates a missing file unless NoCreat=1, and takes the
 * first of a key given twice: put first, a DSN's own NoCreat= does not
 * undo it. The file is looked for first only to say what is wrong (the
 * driver says "connect failed"); :memory: and a file: URI are left to
 * the driver. */
static int never_create(const odbox_dsn *dsn, char **odbc, odbox_error *err)
{
    const char *path = dsn->database;
    if (path && strcmp(path, ":memory:") && strncmp(path, "file:", 5) && access(path, F_OK) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return odbox_fail(err, ODBOX_ECONNECT,
                              "connect: the SQLite database file '%.400s' does not exist (odbox migrate creates it)",
                              path);
        return odbox_fail(err, ODBOX_ECONNECT, "connect: the SQLite database file '%.400s': %s", path,
                          strerror(errno));
    }
    odbox_buf b = {0};
    odbox_buf_cat(&b, "NoCreat=1;", *odbc, (char *)NULL);
    char *s = odbox_buf_take(&b);
    if (!s)
        return odbox_fail(err, ODBOX_ENOMEM, "DSN: out of memory");
    odbox_free_secret(*odbc);
    *odbc = s;
    return ODBOX_OK;
}

/* PRAGMA busy_timeout = the Timeout= of the connection string (the
 * driver's default, 100 s, when it has none; nothing for a value that
 * is not a number, which the driver then reads as it will). */
static int session_sql(const char *odbc, size_t i, char *out, size_t cap)
{
    if (i > 0 || !odbc)
        return 0;
    long ms = 100000;
    for (const char *p = odbc; *p;) {
        const char *end = strchr(p, ';');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 8 && !strncasecmp(p, "Timeout=", 8)) {
            char *stop = NULL;
            ms = strtol(p + 8, &stop, 10);
            if (stop != p + n || ms < 0 || ms > INT32_MAX)
                return 0;
        }
        p += n + (end != NULL);
    }
    snprintf(out, cap, "PRAGMA busy_timeout = %ld", ms);
    return 1;
}

static int recognizes(const char *name, const char *version)
{
    (void)version;
    return odbox_contains_nocase(name, "sqlite");
}

/* The driver reports every SQLite error as SQLSTATE HY000 with the
 * primary result code as the native code and sqlite3_errmsg() as text.
 * SQLITE_CONSTRAINT covers NOT NULL, CHECK and foreign keys too: only a
 * unique or primary key conflict is ODBOX_EUNIQUE, as on the others,
 * which takes the message. The rest (the driver manager's own states)
 * is the standard mapping. */
static const struct {
    long native;       /* SQLite's primary result code */
    const char *text;  /* NULL: any message */
    int code;
} errors[] = {
    {19 /* SQLITE_CONSTRAINT */, "UNIQUE constraint failed", ODBOX_EUNIQUE},
    {19 /* SQLITE_CONSTRAINT */, "PRIMARY KEY must be unique", ODBOX_EUNIQUE},
    {19 /* SQLITE_CONSTRAINT */, "is not unique", ODBOX_EUNIQUE},
    /* the write lock stayed taken for the whole busy timeout */
    {5 /* SQLITE_BUSY */, NULL, ODBOX_ETIMEDOUT},
    /* a conflict inside this connection or its shared cache: not waited for */
    {6 /* SQLITE_LOCKED */, NULL, ODBOX_EBUSY},
    {9 /* SQLITE_INTERRUPT */, NULL, ODBOX_ETIMEDOUT},
    {7 /* SQLITE_NOMEM */, NULL, ODBOX_ENOMEM},
    {14 /* SQLITE_CANTOPEN */, NULL, ODBOX_ECONNECT},
};

static int map_error(const char *sqlstate, long native, const char *message)
{
    for (size_t i = 0; sqlstate && !strcmp(sqlstate, "HY000") && i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].native == native && (!errors[i].text || (message && strstr(message, errors[i].text))))
            return errors[i].code;
    return odbox_map_standard_sqlstate(sqlstate);
}

/* (SELECT column1 AS c, ... FROM (VALUES (...), (...))) AS alias: a
 * VALUES list is not bound by the 500 terms of a compound SELECT. */
/* One writer at a time: a lock is the busy wait, and a statement holds no
 * lock another session waits on for long, so only the wait is bounded. */
static int bounded_session_sql(size_t i, int lock_ms, int statement_ms, char *out, size_t cap)
{
    (void)statement_ms;
    if (i == 0)
        snprintf(out, cap, "PRAGMA busy_timeout = %d", lock_ms);
    return i < 1;
}

static int bound_rows_sql(const odbox_dialect *d, const char *alias, const char *const *cols, const int *types,
                          size_t ncols, size_t nrows, char **out, odbox_error *err)
{
    odbox_buf b = {0};
    odbox_buf_append(&b, "(SELECT ");
    for (size_t c = 0; c < ncols; c++)
        odbox_buf_appendf(&b, "%scolumn%zu AS %s", c ? ", " : "", c + 1, cols[c]);
    odbox_buf_append(&b, " FROM (VALUES ");
    for (size_t r = 0; r < nrows; r++) {
        odbox_buf_append(&b, r ? ", (" : "(");
        for (size_t c = 0; c < ncols; c++)
            odbox_buf_cat(&b, c ? ", " : "", d->typed_param[types[c]], (char *)NULL);
        odbox_buf_append(&b, ")");
    }
    odbox_buf_cat(&b, ")) AS ", alias, (char *)NULL);
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "bound rows: out of memory");
    return ODBOX_OK;
}

/* The columns of table ?2 in schema ?1 (NULL: main; a schema the
 * connection does not have: no rows, where pragma_table_xinfo would fail
 * with "unknown database"), for the two catalogue queries below. hidden:
 * 1 a virtual table's hidden column (not a column odbox sees), 2 and 3
 * generated. */
#define TABLE_OF_SCHEMA                                                                              \
    "(SELECT d.name AS s, w.t AS t FROM (SELECT COALESCE(?, 'main') AS want, ? AS t) AS w "           \
    "LEFT JOIN pragma_database_list AS d ON d.name = w.want) AS a, "                                 \
    "pragma_table_xinfo(CASE WHEN a.s IS NOT NULL THEN a.t END, COALESCE(a.s, 'main')) AS p "        \
    "WHERE p.hidden <> 1"

const odbox_dialect odbox_dialect_sqlite = {
    .version = ODBOX_DIALECT_VERSION,
    .name = "sqlite",
    .migrations_dir = "sqlite",
    .schemes = schemes,
    .default_driver = "SQLite3",
    .default_port = 0,
    .connection_string = connection_string,
    .recognizes = recognizes,
    .session_setup = NULL,
    .session_sql = session_sql,
    .begin_sql = "BEGIN IMMEDIATE",
    .commit_sql = "COMMIT",
    .rollback_sql = "ROLLBACK",
    .uuid_type = "TEXT",
    .json_type = "TEXT",
    .timestamp_type = "TEXT",
    .bool_type = "INTEGER",
    /* UUIDs are text compared byte by byte: stored and looked up in lower
     * case, as the other databases read them back whatever case was given */
    .uuid_param = "lower(?)",
    .json_param = "?",
    /* values carry their own storage class: integers and doubles are bound
     * as such, the rest as text */
    .typed_param = {"?", "?", "?", "?", "?", "lower(?)", "?", "?"},
    .batch_update_sql = odbox_update_from_rows_sql,
    .has_partial_indexes = 1,
    /* SQLite has RETURNING (3.35), but the driver reads rows only from
     * statements that start with SELECT, PRAGMA or WITH */
    .has_returning = 0,
    .has_skip_locked = 0,
    .has_transactional_ddl = 1,
    .backslash_escapes = 0,
    /* SQLITE_MAX_VARIABLE_NUMBER is 32766 by default (Debian: 250000) */
    .max_params = 30000,
    .eventlog_container = "prefix",
    .create_eventlog_fmt = NULL,
    .drop_eventlog_fmt = NULL,
    .table_exists_sql = "SELECT COUNT(*) FROM " TABLE_OF_SCHEMA,
    /* SQLite 3.24 upsert; no conflict target: any unique key */
    .insert_ignore_fmt = "INSERT INTO %1$s (%2$s) VALUES %3$s ON CONFLICT DO NOTHING",
    .claim_suffix = "",
    .lock_key_form = ODBOX_LOCK_KEY_NONE,
    .lock_try_sql = NULL,
    .lock_release_sql = NULL,
    /* no server sessions: nothing to end from another connection */
    .session_id_sql = NULL,
    .kill_session_fmt = NULL,
    /* stored as odbox writes them */
    .timestamp_read_open = NULL,
    .timestamp_read_close = NULL,
    .numbers_as_text = 0,
    /* no data-modifying WITH: each shard is written in a transaction */
    .join_writes_sql = NULL,
    .identifier_quote = "\"",
    /* The eventlog's tables sit in the application's own file beside its
     * domain tables, so that file owns it: "main", the schema of the
     * connection's own tables, whatever path opened the file (a copied or
     * moved file keeps its eventlog) */
    .owner_sql = "SELECT 'main'",
    /* an INTEGER PRIMARY KEY is the rowid: SQLite fills it like a default */
    .table_columns_sql = "SELECT p.name, p.type, p.\"notnull\", CASE WHEN p.dflt_value IS NOT NULL "
                         "OR p.hidden IN (2, 3) OR (p.pk = 1 AND upper(p.type) = 'INTEGER') THEN 1 ELSE 0 END "
                         "FROM " TABLE_OF_SCHEMA " ORDER BY p.cid",
    /* no ALTER COLUMN; a type still converts values (INTEGER affinity
     * makes the text '1.10' the number 1.1): the migration runner
     * rebuilds its history table instead */
    .alter_column_type_fmt = NULL,
    .server_version_sql = "SELECT sqlite_version()",
    .eventlog_separator = "_",
    .lock_scope_sql = "SELECT file FROM pragma_database_list WHERE name = 'main'",
    .map_error = map_error,
    /* NOT INDEXED: by rowid, never through an index the guard matches
     * (a scan of all its rows per batch) */
    .delete_batch_fmt =
        "DELETE FROM %1$s NOT INDEXED WHERE rowid IN (SELECT rowid FROM %1$s WHERE %2$s%3$s LIMIT ?) AND %4$s",
    /* timestamps are 'YYYY-MM-DD HH:MM:SS.ffffff' text (V1's CHECK): whole
     * seconds through strftime of the text without its fraction (strftime
     * rounds a fraction to milliseconds, .999999 into the next second),
     * microseconds from the digits (julianday's double is good to ~50 us) */
    .interval_us_fmt = "((CAST(strftime('%%s', substr(%1$s, 1, 19)) AS INTEGER) "
                       "- CAST(strftime('%%s', substr(%2$s, 1, 19)) AS INTEGER)) * 1000000 "
                       "+ CAST(substr(%1$s, 21, 6) AS INTEGER) - CAST(substr(%2$s, 21, 6) AS INTEGER))",
    /* SQLite 3.24 upsert, after the SELECT's WHERE */
    .insert_select_ignore_fmt = "INSERT INTO %1$s (%2$s) %3$s ON CONFLICT DO NOTHING",
    .bound_rows_sql = bound_rows_sql,
    /* odbox's text form (V1's CHECK): 'now' gives milliseconds, and is the
     * same throughout one statement. The end of that millisecond: a time
     * a process's clock wrote in it, to the microsecond (an event's date,
     * from which its notifications are due), is not later than now. */
    .now_sql = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '999')",
    /* none: SQLite's 'now' counts milliseconds, and two actions in one
     * would tie (their event ids, from different actions, in no order);
     * the writers of one file share one machine's clock, which is bound
     * to the microsecond instead */
    .stmt_now_sql = NULL,
    .bounded_session_sql = bounded_session_sql,
    /* no replication: a "replica" file is read whatever it shows */
    .replica_position_sql = NULL,
    .replica_reached_sql = NULL,
    .replica_lag_sql = NULL,
    .replica_lag_column = NULL,
    .replica_lag_unit_ms = 0,
    .never_create = never_create,
};
