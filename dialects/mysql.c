/* odbox — MySQL 8 (through MariaDB Connector/ODBC, which speaks to both).
 * UUIDs are CHAR(36) CHARACTER SET ascii: MySQL has no UUID type. */
#include "dialects.h"
#include "mysql_common.h"

static const char *const schemes[] = {"mysql", NULL};

static int recognizes(const char *name, const char *version)
{
    return odbox_contains_nocase(name, "mysql") && !odbox_contains_nocase(name, "mariadb") &&
           !odbox_contains_nocase(version, "mariadb");
}

const odbox_dialect odbox_dialect_mysql = {
    ODBOX_MYSQL_FAMILY_FIELDS,
    .name = "mysql",
    .migrations_dir = "mysql",
    .schemes = schemes,
    .recognizes = recognizes,
    .uuid_type = "CHAR(36) CHARACTER SET ascii",
    .has_returning = 0,
    .bounded_session_sql = odbox_mysql_bounded_session_sql,
    /* GTIDs (gtid_mode=ON; the set is empty without them) */
    .replica_position_sql = "SELECT @@GLOBAL.gtid_executed",
    .replica_reached_sql = "SELECT GTID_SUBSET(?, @@GLOBAL.gtid_executed)",
    /* 8.0.22+; a row per channel; NULL while a thread is stopped */
    .replica_lag_sql = "SHOW REPLICA STATUS",
    .replica_lag_column = "Seconds_Behind_Source",
    .replica_lag_unit_ms = 1000,
};
