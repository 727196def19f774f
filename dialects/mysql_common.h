/* odbox — the fields MySQL and MariaDB share (designated initialisers;
 * each dialect then sets what differs). Not installed. */
#ifndef ODBOX_MYSQL_COMMON_H
#define ODBOX_MYSQL_COMMON_H

#include "dialects.h"

int odbox_mysql_batch_update_sql(const odbox_dialect *d, const char *table, const char *const *cols,
                                  const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err);
int odbox_mysql_bound_rows_sql(const odbox_dialect *d, const char *alias, const char *const *cols,
                               const int *types, size_t ncols, size_t nrows, char **out, odbox_error *err);
int odbox_mysql_connection_string(const odbox_dsn *dsn, const char *driver, char **out,
                                  odbox_error *err);
extern const char *const odbox_mysql_session_setup[];
int odbox_mysql_map_error(const char *sqlstate, long native, const char *message);
/* Lock waits (InnoDB rows, metadata) in whole seconds; MariaDB also
 * bounds a statement (max_statement_time). MySQL's max_execution_time
 * covers SELECTs only, so there the DSN's read_timeout bounds the rest. */
int odbox_mysql_bounded_session_sql(size_t i, int lock_ms, int statement_ms, char *out, size_t cap);
int odbox_mariadb_bounded_session_sql(size_t i, int lock_ms, int statement_ms, char *out, size_t cap);

#define ODBOX_MYSQL_FAMILY_FIELDS                                                          \
    .version = ODBOX_DIALECT_VERSION,                                                      \
    .default_driver = "MariaDB Unicode",                                                   \
    .default_port = 3306,                                                                  \
    .connection_string = odbox_mysql_connection_string,                                    \
    .session_setup = odbox_mysql_session_setup,                                            \
    /* MariaDB's driver sends SET autocommit=0 and =1 around each          \
     * transaction: two extra round trips */                               \
    .begin_sql = "START TRANSACTION",                                                      \
    .commit_sql = "COMMIT",                                                                \
    .rollback_sql = "ROLLBACK",                                                            \
    .json_type = "JSON",                                                                   \
    .timestamp_type = "DATETIME(6)",                                                       \
    .bool_type = "BOOLEAN",                                                                \
    .uuid_param = "?",                                                                     \
    .json_param = "?",                                                                     \
    .typed_param = {"?", "?", "?", "?", "?", "?", "?", "CAST(? AS DATETIME(6))"},          \
    .batch_update_sql = odbox_mysql_batch_update_sql,                                      \
    .has_partial_indexes = 0,                                                              \
    .has_skip_locked = 1,                                                                  \
    .has_transactional_ddl = 0,                                                            \
    .backslash_escapes = 1,                                                                \
    /* the protocol allows 65535, but a statement's cost in the client \
     * grows with the square of its parameters (2,100 events in one     \
     * action: 2.7 s at 30,000 per statement, 1.4 s at 2,000; 100 s     \
     * under ASan, whose realloc always copies) */                      \
    .max_params = 2000,                                                                    \
    .claims_keys_first = 1,                                                                \
    .eventlog_container = "database",                                                      \
    /* utf8mb4 whatever the server's default (MariaDB's is latin1 before  \
     * 11.6): the tables' text columns without a character set of their \
     * own inherit it, and a model id outside Latin-1 was refused */     \
    .create_eventlog_fmt = "CREATE DATABASE IF NOT EXISTS %s CHARACTER SET utf8mb4",       \
    .drop_eventlog_fmt = "DROP DATABASE IF EXISTS %s",                                     \
    .table_exists_sql = "SELECT COUNT(*) FROM information_schema.tables "                  \
                        "WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?", \
    .insert_ignore_fmt = "INSERT INTO %1$s (%2$s) VALUES %3$s ON DUPLICATE KEY UPDATE %4$s = %4$s", \
    .claim_suffix = " FOR UPDATE SKIP LOCKED",                                             \
    .lock_key_form = ODBOX_LOCK_KEY_HEX,                                                   \
    .lock_try_sql = "SELECT GET_LOCK(?, 0)",                                               \
    .lock_release_sql = "SELECT RELEASE_LOCK(?)",                                          \
    .session_id_sql = "SELECT CONNECTION_ID()",                                            \
    .kill_session_fmt = "KILL %lld",                                                       \
    .identifier_quote = "`",                                                               \
    .owner_sql = "SELECT DATABASE()",                                                      \
    .table_columns_sql = "SELECT column_name, column_type, "                               \
                         "CASE WHEN is_nullable = 'NO' THEN 1 ELSE 0 END, "                \
                         "CASE WHEN column_default IS NOT NULL OR extra <> '' THEN 1 ELSE 0 END " \
                         "FROM information_schema.columns "                                \
                         "WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? " \
                         "ORDER BY ordinal_position",                                      \
    .alter_column_type_fmt = "ALTER TABLE %1$s MODIFY %2$s %3$s NOT NULL",                 \
    .server_version_sql = "SELECT VERSION()",                                              \
    .eventlog_separator = ".",                                                             \
    .map_error = odbox_mysql_map_error,                                       \
    .delete_batch_fmt = "DELETE t FROM %1$s t JOIN (SELECT id FROM %1$s WHERE %2$s%3$s LIMIT ?) d " \
                        "ON t.id = d.id WHERE %4$s",                                       \
    .interval_us_fmt = "TIMESTAMPDIFF(MICROSECOND, %2$s, %1$s)",                          \
    /* the target's key column, qualified: the SELECT's tables may have one \
     * of that name too */                                                 \
    .insert_select_ignore_fmt = "INSERT INTO %1$s (%2$s) %3$s ON DUPLICATE KEY UPDATE %1$s.%4$s = %1$s.%4$s", \
    .bound_rows_sql = odbox_mysql_bound_rows_sql,                                          \
    .now_sql = "UTC_TIMESTAMP(6)",                                                         \
    /* the statement's start, one value for all its rows */                \
    .stmt_now_sql = "UTC_TIMESTAMP(6)",                                                    \
    .delivery_isolation_sql = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",            \
    /* InnoDB: a locking read reads the latest rows, its subqueries a       \
     * snapshot (see the field) */                                           \
    .claim_order_recheck = 1,                                                              \
    .order_probe_hint = " FORCE INDEX (event_notifications_order_key)",                    \
    .order_lease_probe_hint = " FORCE INDEX (event_notifications_order_leases)"

#endif
