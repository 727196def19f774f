/* odbox — what the MySQL and MariaDB dialects share. */
#include "mysql_common.h"

/* Shared by the MySQL and MariaDB dialects. */
int odbox_mysql_connection_string(const odbox_dsn *dsn, const char *driver, char **out,
                                  odbox_error *err)
{
    return odbox_network_connection_string(dsn, driver, 3306, NULL, out, err);
}

/* UTC and strict mode: a value that does not fit is an error, never a
 * silent truncation. */
const char *const odbox_mysql_session_setup[] = {
    "SET time_zone = '+00:00'",
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'",
    NULL,
};
