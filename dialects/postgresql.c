/* odbox — PostgreSQL through psqlODBC. */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "dialects.h"
#ifdef HAVE_LIBPQ
#include "postgresql_listen.h"
#endif

static const char *const schemes[] = {"postgresql", "postgres", NULL};

/* Protocol=7.4-1: roll back the transaction on error instead of wrapping
 * every statement in a SAVEPOINT (the driver default, 7.4-2, doubles the
 * round trips); odbox runs its own transactions. BoolsAsChar=0: booleans
 * are booleans. UseDeclareFetch=0: whole results, no cursor per SELECT.
 *
 * ConnSettings names the client encoding, so psqlODBC 13 takes it from
 * there (connection.c:1043, check_client_encoding) and never derives it
 * from the process locale with setlocale(LC_CTYPE, "") (multibyte.c:497,
 * called at every connect from connection.c:1153). setlocale is not
 * thread-safe (glibc frees the locale name another thread may still be
 * reading), and avoiding it is what lets connects run in parallel.
 *
 * Timeouts: conn.c sets SQL_ATTR_LOGIN_TIMEOUT, which psqlODBC hands to
 * libpq as connect_timeout (connection.c:2822): it bounds the TCP connect
 * and the whole login. Reads: libpq 15 waits for an answer without a
 * limit of its own (fe-misc.c, pqSocketCheck), and psqlODBC's query
 * timeout is the server's statement_timeout. What odbox can bound from
 * the client is a server or network that went away: TCP keepalives and
 * tcp_user_timeout (through pqopt, libpq's own options) drop a
 * connection whose peer has not answered for about read_timeout. A
 * statement that runs long on a live server is not cut, and neither is a
 * peer whose TCP stack keeps answering while nothing comes back (a hung
 * proxy). */
static int connection_string(const odbox_dsn *dsn, const char *driver, char **out, odbox_error *err)
{
    odbox_timeouts t;
    int rc = odbox_dsn_timeouts(dsn, &t, err);
    if (rc != ODBOX_OK)
        return rc;
    char pqopt[192];
    int idle = t.read_s / 2 > 0 ? t.read_s / 2 : 1, interval = t.read_s / 10 > 0 ? t.read_s / 10 : 1;
    snprintf(pqopt, sizeof pqopt,
             "keepalives=1 keepalives_idle=%d keepalives_interval=%d keepalives_count=5 tcp_user_timeout=%d", idle,
             interval, t.read_s * 1000);
    const char *const extra[] = {
        "Protocol", "7.4-1",
        "UseServerSidePrepare", "1",
        "BoolsAsChar", "0",
        "UseDeclareFetch", "0",
        "ConnSettings", "SET client_encoding TO 'UTF8'",
        t.read_s > 0 ? "pqopt" : NULL, pqopt,
        NULL,
    };
    return odbox_network_connection_string(dsn, driver, 5432, extra, out, err);
}

static int recognizes(const char *name, const char *version)
{
    (void)version;
    return odbox_contains_nocase(name, "postgres");
}

/* UTF-8 whatever the database's encoding: the ANSI driver hands text
 * through as the server sends it.
 *
 * lock_timeout: every wait is bounded. A row lock held by a transaction
 * that stays open (a keyed begin waits on the uncommitted key row of
 * another) would otherwise be waited for without end; 50 s is InnoDB's
 * default innodb_lock_wait_timeout, so both servers give up alike (55P03,
 * ODBOX_ETIMEDOUT). Set here, once per session, not per transaction; and
 * here rather than in ConnSettings, which raw ODBC strings lack and a
 * DSN's own ConnSettings replaces. A session may SET its own. */
static const char *const session_setup[] = {"SET TIME ZONE 'UTC'", "SET client_encoding TO 'UTF8'",
                                            "SET lock_timeout = '50s'", NULL};

static int bounded_session_sql(size_t i, int lock_ms, int statement_ms, char *out, size_t cap)
{
    if (i == 0)
        snprintf(out, cap, "SET lock_timeout = %d", lock_ms);
    else if (i == 1)
        snprintf(out, cap, "SET statement_timeout = %d", statement_ms);
    return i < 2;
}

/* (VALUES (CAST(? AS T), ...), (...)) AS alias(c, ...) */
static int bound_rows_sql(const odbox_dialect *d, const char *alias, const char *const *cols, const int *types,
                          size_t ncols, size_t nrows, char **out, odbox_error *err)
{
    odbox_buf b = {0};
    odbox_buf_append(&b, "(VALUES ");
    for (size_t r = 0; r < nrows; r++) {
        odbox_buf_append(&b, r ? ", (" : "(");
        for (size_t c = 0; c < ncols; c++)
            odbox_buf_cat(&b, c ? ", " : "", d->typed_param[types[c]], (char *)NULL);
        odbox_buf_append(&b, ")");
    }
    odbox_buf_cat(&b, ") AS ", alias, "(", (char *)NULL);
    for (size_t c = 0; c < ncols; c++)
        odbox_buf_cat(&b, c ? ", " : "", cols[c], (char *)NULL);
    odbox_buf_append(&b, ")");
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "bound rows: out of memory");
    return ODBOX_OK;
}

/* WITH w0 AS (UPDATE ... RETURNING 1), w1 AS (INSERT ... SELECT ...
 *   WHERE EXISTS (SELECT 1 FROM w0)), ... INSERT ... WHERE EXISTS (...)
 * Every WITH item runs once and to the end, whether read or not; only
 * the guard reads one. An INSERT ... SELECT types each parameter from its
 * target column, as INSERT ... VALUES does. */
static int join_writes_sql(const odbox_dialect *d, const char *const *stmts, size_t n, int guarded, char **out,
                           odbox_error *err)
{
    (void)d;
    if (n == 0)
        return odbox_fail(err, ODBOX_EINVAL, "join writes: no statement");
    odbox_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n)
            odbox_buf_appendf(&b, "%sw%zu AS (", i ? ", " : "WITH ", i);
        else if (i)
            odbox_buf_append(&b, " ");
        odbox_buf_append(&b, stmts[i]);
        if (guarded && i == 0 && n > 1)
            odbox_buf_append(&b, " RETURNING 1");
        else if (guarded && i > 0)
            odbox_buf_append(&b, " WHERE EXISTS (SELECT 1 FROM w0)");
        if (i + 1 < n)
            odbox_buf_append(&b, ")");
    }
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "join writes: out of memory");
    return ODBOX_OK;
}

/* PostgreSQL's own SQLSTATEs; psqlODBC's native numbers are its internal
 * error kinds, which say nothing the SQLSTATE does not. */
static int map_error(const char *st, long native, const char *message)
{
    (void)native, (void)message;
    static const struct {
        const char *state;
        int code;
    } table[] = {
        {"23505", ODBOX_EUNIQUE},    /* unique_violation */
        {"40P01", ODBOX_EDEADLOCK},  /* deadlock_detected */
        {"55P03", ODBOX_ETIMEDOUT},  /* lock_not_available: lock_timeout (odbox uses no NOWAIT), as InnoDB's 1205 */
        {"57014", ODBOX_ETIMEDOUT},  /* query_canceled (statement_timeout) */
        {"57P01", ODBOX_ECONNLOST},  /* admin_shutdown: the session was terminated */
        {"57P02", ODBOX_ECONNLOST},  /* crash_shutdown */
        {"57P03", ODBOX_ECONNLOST},  /* cannot_connect_now: starting up or shutting down */
        {"28P01", ODBOX_ECONNECT},   /* invalid_password */
    };
    for (size_t i = 0; st && i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(st, table[i].state))
            return table[i].code;
    return odbox_map_standard_sqlstate(st);
}

const odbox_dialect odbox_dialect_postgresql = {
    .version = ODBOX_DIALECT_VERSION,
    .name = "postgresql",
    .migrations_dir = "pg",
    .schemes = schemes,
    /* ANSI, not Unicode: odbox's text is UTF-8 bytes both ways, and the
     * Unicode build looks up the process locale's character set among
     * ~40 names (strcasecmp) for every parameter and column. */
    .default_driver = "PostgreSQL ANSI",
    .default_port = 5432,
    .connection_string = connection_string,
    .recognizes = recognizes,
    .session_setup = session_setup,
    .uuid_type = "UUID",
    .json_type = "JSONB",
    .timestamp_type = "TIMESTAMP",
    .bool_type = "BOOLEAN",
    .uuid_param = "CAST(? AS UUID)",
    .json_param = "CAST(? AS JSONB)",
    .typed_param = {"?", "CAST(? AS VARCHAR)", "CAST(? AS BIGINT)", "CAST(? AS DOUBLE PRECISION)",
                    "CAST(? AS BOOLEAN)", "CAST(? AS UUID)", "CAST(? AS JSONB)", "CAST(? AS TIMESTAMP)"},
    .batch_update_sql = odbox_update_from_rows_sql,
    .has_partial_indexes = 1,
    .has_returning = 1,
    .has_skip_locked = 1,
    .has_transactional_ddl = 1,
    /* libpq refuses a ParameterDescription message over 30000 bytes
     * (4 bytes a parameter): about 7490 parameters. */
    .max_params = 7000,
    .eventlog_container = "schema",
    .create_eventlog_fmt = "CREATE SCHEMA IF NOT EXISTS %s",
    .drop_eventlog_fmt = "DROP SCHEMA IF EXISTS %s CASCADE",
    .table_exists_sql = "SELECT COUNT(*) FROM information_schema.tables "
                        "WHERE table_schema = COALESCE(CAST(? AS TEXT), current_schema()) AND table_name = ?",
    .insert_ignore_fmt = "INSERT INTO %1$s (%2$s) VALUES %3$s ON CONFLICT DO NOTHING",
    .claim_suffix = " FOR UPDATE SKIP LOCKED",
    /* a table never analyzed, or analyzed before its backlog, plans a
     * bitmap scan and a sort of every due row: without sorts the due
     * index, read in order, is the plan. A claim is committed without
     * waiting for the WAL flush: one lost in a server crash leaves its
     * rows due again, which at-least-once allows, and a call starts a
     * flush earlier. Plans are made for the rows at hand (no generic
     * plan, cached while the table was small: on a fresh eventlog the
     * claim's UPDATE by 100 ids scanned the whole table, 12 ms a round).
     * No JIT: a plan that must sort all the same (a read of several
     * names at once, as an odbox before V17 makes) costs past
     * jit_above_cost once sorts are off, and was compiled at each claim
     * (measured: 530 ms of a 575 ms read) */
    .claim_begin_sql = "SELECT set_config('enable_sort', 'off', true), set_config('synchronous_commit', 'off', true), "
                       "set_config('plan_cache_mode', 'force_custom_plan', true), set_config('jit', 'off', true)",
    /* the outcomes' UPDATEs by id, for the same reason (durable: no
     * synchronous_commit change) */
    .outcome_begin_sql = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)",
    .handoff_begin_sql = "SELECT set_config('enable_seqscan', 'off', true), "
                         "set_config('plan_cache_mode', 'force_custom_plan', true)",
    .lock_key_form = ODBOX_LOCK_KEY_INT64,
    .lock_try_sql = "SELECT CASE WHEN pg_try_advisory_lock(?) THEN 1 ELSE 0 END",
    .lock_release_sql = "SELECT CASE WHEN pg_advisory_unlock(?) THEN 1 ELSE 0 END",
    .session_id_sql = "SELECT pg_backend_pid()",
    .kill_session_fmt = "SELECT pg_terminate_backend(%lld)",
    /* ISO text (psqlODBC sets DateStyle ISO; TIMESTAMP has no zone) */
    .timestamp_read_open = "CAST(",
    .timestamp_read_close = " AS TEXT)",
    .numbers_as_text = 1,
    .join_writes_sql = join_writes_sql,
    .identifier_quote = "\"",
    .owner_sql = "SELECT current_schema()",
    /* to_regclass resolves an unqualified name through search_path, as
     * the statements odbox sends do; NULL (no rows) when there is none */
    .table_columns_sql = "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
                         "CASE WHEN a.attnotnull THEN 1 ELSE 0 END, "
                         "CASE WHEN a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' THEN 1 ELSE 0 END "
                         "FROM pg_catalog.pg_attribute a WHERE a.attrelid = to_regclass("
                         "COALESCE(quote_ident(CAST(? AS TEXT)) || '.', '') || quote_ident(CAST(? AS TEXT))) "
                         "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
    .alter_column_type_fmt = "ALTER TABLE %1$s ALTER COLUMN %2$s TYPE %3$s",
    .server_version_sql = "SELECT current_setting('server_version')",
    .eventlog_separator = ".",
    .map_error = map_error,
    /* pg_notify takes the channel as a value (bound), where NOTIFY wants
     * an identifier in the text */
    .fanout_begin_sql = "SELECT set_config('synchronous_commit', 'off', true), "
                        "set_config('plan_cache_mode', 'force_custom_plan', true)",
    /* a wake-up is a hint: its commit need not wait for the WAL flush */
    .notify_sql = "SELECT set_config('synchronous_commit', 'off', true), pg_notify(?, ?)",
#ifdef HAVE_LIBPQ
    .listen_open = odbox_pg_listen_open,
    .listen_wait = odbox_pg_listen_wait,
    .listen_close = odbox_pg_listen_close,
    .libpq_conninfo = odbox_pg_conninfo,
#endif
    .failed_statement_aborts_tx = 1,
    /* by ctid: a Tid Scan, where id IN (...) may hash-join a scan of the
     * whole table */
    .delete_batch_fmt =
        "DELETE FROM %1$s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %1$s WHERE %2$s%3$s LIMIT ?)) AND %4$s",
    .interval_us_fmt = "CAST(EXTRACT(EPOCH FROM (%1$s - %2$s)) * 1000000 AS BIGINT)",
    .insert_select_ignore_fmt = "INSERT INTO %1$s (%2$s) %3$s ON CONFLICT DO NOTHING",
    .bound_rows_sql = bound_rows_sql,
    /* The wall clock in UTC, the type of the eventlog's timestamp
     * columns (the jobs' and subscriptions' timestamptz ones take it in
     * the session's zone, UTC: a session whose zone a caller changed is
     * closed at its release, pool.c). */
    .now_sql = "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC')",
    /* CURRENT_TIMESTAMP is the transaction's start; statement_timestamp()
     * is the statement's (its Parse or Bind message), one value for all
     * its rows. */
    .stmt_now_sql = "(statement_timestamp() AT TIME ZONE 'UTC')",
    .bounded_session_sql = bounded_session_sql,
    /* the insert position: never before the commit's record (the write
     * position may be, with synchronous_commit off) */
    .replica_position_sql = "SELECT CAST(pg_current_wal_insert_lsn() AS TEXT)",
    .replica_reached_sql = "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 1 "
                           "WHEN pg_last_wal_replay_lsn() >= CAST(CAST(? AS TEXT) AS pg_lsn) THEN 1 ELSE 0 END",
    /* Not a standby: 0. Replay paused: stopped (NULL). A WAL receiver
     * streaming and all it received replayed: 0 (an idle primary sends
     * nothing, and the last replayed commit grows old without any lag).
     * Else (WAL waiting to be replayed, or no receiver: the primary is
     * out of reach, or a standby fed from an archive) the age of the
     * last replayed commit, NULL before the first one. pg_stat_wal_receiver
     * shows its pid to every role. */
    .replica_lag_sql = "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0 "
                       "WHEN pg_is_wal_replay_paused() THEN NULL "
                       "WHEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE pid IS NOT NULL) "
                       "AND pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0 "
                       "ELSE CAST(GREATEST(EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0) "
                       "* 1000 AS BIGINT) END",
    .replica_lag_column = NULL,
    .replica_lag_unit_ms = 1,
};
