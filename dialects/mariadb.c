/* odbox — MariaDB: 10.7+ for the UUID type (10.6+ for SKIP LOCKED);
 * 10.10.6+ / 10.11.5+ store UUIDv7s unswapped, so event ids order as
 * they were made (the ordered claim's second key). */
#include "dialects.h"
#include "mysql_common.h"

static const char *const schemes[] = {"mariadb", NULL};

/* The MariaDB driver and server announce themselves as MySQL in some
 * fields; the version string always carries "MariaDB". */
static int recognizes(const char *name, const char *version)
{
    return odbox_contains_nocase(name, "mariadb") || odbox_contains_nocase(version, "mariadb");
}

const odbox_dialect odbox_dialect_mariadb = {
    ODBOX_MYSQL_FAMILY_FIELDS,
    .name = "mariadb",
    .migrations_dir = "mariadb",
    .schemes = schemes,
    .recognizes = recognizes,
    .uuid_type = "UUID",
    .has_returning = 1,
    .bounded_session_sql = odbox_mariadb_bounded_session_sql,
    /* GTIDs: the session's last one (empty without a binary log); a
     * server whose replica position is empty has never replicated */
    .replica_position_sql = "SELECT @@last_gtid",
    .replica_reached_sql = "SELECT CASE WHEN @@GLOBAL.gtid_slave_pos = '' THEN 1 "
                           "WHEN MASTER_GTID_WAIT(?, 0) = 0 THEN 1 ELSE 0 END",
    /* a row per replication connection; NULL while a thread is stopped */
    .replica_lag_sql = "SHOW ALL SLAVES STATUS",
    .replica_lag_column = "Seconds_Behind_Master",
    .replica_lag_unit_ms = 1000,
    /* V1 makes UUID columns: MariaDB has the type from 10.7 on */
    .min_server_version = "10.7",
    .too_old_hint = "MariaDB has the UUID type, which its migrations use, from 10.7 on: upgrade the server, or "
                    "use the mysql dialect (a mysql:// URL or dialect=mysql), which stores UUIDs as CHAR(36)",
};
