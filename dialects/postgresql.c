/* odbox — PostgreSQL through psqlODBC. */
#include "dialects.h"

static const char *const schemes[] = {"postgresql", "postgres", NULL};

/* Protocol=7.4-1: roll back the transaction on error instead of wrapping
 * every statement in a SAVEPOINT (the driver default, 7.4-2, doubles the
 * round trips); odbox runs its own transactions. BoolsAsChar=0: booleans
 * are booleans. UseDeclareFetch=0: whole results, no cursor per SELECT. */
static const char *const driver_options[] = {
    "Protocol", "7.4-1",
    "UseServerSidePrepare", "1",
    "BoolsAsChar", "0",
    "UseDeclareFetch", "0",
    NULL,
};

static int connection_string(const odbox_dsn *dsn, const char *driver, char **out, odbox_error *err)
{
    return odbox_network_connection_string(dsn, driver, 5432, driver_options, out, err);
}

static int recognizes(const char *name, const char *version)
{
    (void)version;
    return odbox_contains_nocase(name, "postgres");
}

/* UTF-8 whatever the database's encoding: the ANSI driver hands text
 * through as the server sends it. */
static const char *const session_setup[] = {"SET TIME ZONE 'UTC'", "SET client_encoding TO 'UTF8'", NULL};

/* UPDATE t SET c = v.c, ..., version = v.version + 1
 *   FROM (VALUES (...), (...)) AS v(id, version, c, ...)
 *  WHERE t.id = v.id AND t.version = v.version
 * Every value is cast so that a column NULL in every row still has a type. */
static int batch_update_sql(const odbox_dialect *d, const char *table, const char *const *cols,
                            const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err)
{
    odbox_buf b = {0};
    odbox_buf_appendf(&b, "UPDATE %s AS t SET ", table);
    for (size_t c = 2; c < ncols; c++)
        odbox_buf_appendf(&b, "%s = v.%s, ", cols[c], cols[c]);
    odbox_buf_append(&b, "version = v.version + 1 FROM (VALUES ");
    for (size_t r = 0; r < nrows; r++) {
        odbox_buf_append(&b, r ? ", (" : "(");
        for (size_t c = 0; c < ncols; c++)
            odbox_buf_appendf(&b, "%s%s", c ? ", " : "", d->typed_param[types[c]]);
        odbox_buf_append(&b, ")");
    }
    odbox_buf_append(&b, ") AS v(");
    for (size_t c = 0; c < ncols; c++)
        odbox_buf_appendf(&b, "%s%s", c ? ", " : "", cols[c]);
    odbox_buf_append(&b, ") WHERE t.id = v.id AND t.version = v.version");
    if (!(*out = odbox_buf_take(&b)))
        return odbox_fail(err, ODBOX_ENOMEM, "batch update: out of memory");
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
    .batch_update_sql = batch_update_sql,
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
    /* by ctid: a Tid Scan, where id IN (...) may hash-join a scan of the
     * whole table */
    .delete_batch_fmt =
        "DELETE FROM %1$s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %1$s WHERE %2$s%3$s LIMIT ?)) AND %4$s",
    .interval_us_fmt = "CAST(EXTRACT(EPOCH FROM (%1$s - %2$s)) * 1000000 AS BIGINT)",
};
