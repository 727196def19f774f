/* odbox — unit tests of what each dialect says to its driver and how it
 * reads its driver's diagnostics: timeouts in connection strings, and the
 * error tables (SQLSTATE and native numbers to ODBOX_E* codes). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "dialects.h"
#include "db/odbc.h"

typedef struct map_case {
    const char *sqlstate;
    long native;
    int want;
} map_case;

static void check_table(const odbox_dialect *d, const map_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int got = d->map_error(cases[i].sqlstate, cases[i].native, "");
        ck_assert_msg(got == cases[i].want, "%s: (%s, %ld) -> %s, expected %s", d->name,
                      cases[i].sqlstate ? cases[i].sqlstate : "NULL", cases[i].native, odbox_errname(got),
                      odbox_errname(cases[i].want));
    }
}

START_TEST(every_dialect_maps_errors)
{
    for (const odbox_dialect *const *d = odbox_dialects(); *d; d++) {
        ck_assert_msg((*d)->map_error != NULL, "%s has no map_error", (*d)->name);
        /* what every driver means alike */
        static const map_case common[] = {
            {"08001", 0, ODBOX_ECONNECT}, {"08004", 0, ODBOX_ECONNECT}, {"28000", 0, ODBOX_ECONNECT},
            {"08S01", 0, ODBOX_ECONNLOST}, {"08003", 0, ODBOX_ECONNLOST}, {"40001", 0, ODBOX_EDEADLOCK},
            {"HYT00", 0, ODBOX_ETIMEDOUT}, {"HYT01", 0, ODBOX_ETIMEDOUT}, {"IM002", 0, ODBOX_ECONNECT},
            {"HY001", 0, ODBOX_ENOMEM},    {"42601", 0, ODBOX_EDB},       {"", 0, ODBOX_EDB},
            {NULL, 0, ODBOX_EDB},
        };
        check_table(*d, common, sizeof common / sizeof common[0]);
    }
}
END_TEST

START_TEST(postgresql_error_table)
{
    static const map_case cases[] = {
        {"23505", 0, ODBOX_EUNIQUE},    {"40P01", 0, ODBOX_EDEADLOCK}, {"55P03", 0, ODBOX_ETIMEDOUT},
        {"57014", 0, ODBOX_ETIMEDOUT},  {"57P01", 0, ODBOX_ECONNLOST}, {"57P02", 0, ODBOX_ECONNLOST},
        {"57P03", 0, ODBOX_ECONNLOST},  {"28P01", 0, ODBOX_ECONNECT},  {"23503", 0, ODBOX_EDB},
        /* psqlODBC's native numbers are its own: MySQL's mean nothing here */
        {"HY000", 1062, ODBOX_EDB},     {"HY000", 1213, ODBOX_EDB},    {"HY000", 2013, ODBOX_EDB},
        {"HY000", 2003, ODBOX_EDB},     {"23505", 7, ODBOX_EUNIQUE},
    };
    check_table(&odbox_dialect_postgresql, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(mysql_family_error_table)
{
    static const map_case cases[] = {
        {"23000", 1062, ODBOX_EUNIQUE},   {"23000", 1586, ODBOX_EUNIQUE},   {"40001", 1213, ODBOX_EDEADLOCK},
        {"HY000", 1020, ODBOX_EDEADLOCK},
        {"HY000", 1205, ODBOX_ETIMEDOUT}, {"70100", 1969, ODBOX_ETIMEDOUT}, {"HY000", 3024, ODBOX_ETIMEDOUT},
        {"HY000", 2006, ODBOX_ECONNLOST}, {"HY000", 2013, ODBOX_ECONNLOST}, {"08S01", 2013, ODBOX_ECONNLOST},
        {"70100", 1927, ODBOX_ECONNLOST}, {"HY000", 4031, ODBOX_ECONNLOST}, {"HY000", 2002, ODBOX_ECONNECT},
        {"HY000", 2003, ODBOX_ECONNECT},  {"HY000", 2005, ODBOX_ECONNECT},  {"28000", 1045, ODBOX_ECONNECT},
        {"08004", 1040, ODBOX_ECONNECT},  {"23000", 1452, ODBOX_EDB},       {"42000", 1064, ODBOX_EDB},
        /* PostgreSQL's SQLSTATEs are not MySQL's */
        {"23505", 0, ODBOX_EDB},          {"40P01", 0, ODBOX_EDB},          {"57P01", 0, ODBOX_EDB},
    };
    check_table(&odbox_dialect_mysql, cases, sizeof cases / sizeof cases[0]);
    check_table(&odbox_dialect_mariadb, cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* The driver says HY000 and SQLite's primary result code for everything:
 * a UNIQUE failure is told from NOT NULL and CHECK by its message. */
START_TEST(sqlite_error_table)
{
    static const struct {
        long native;
        const char *message;
        int want;
    } cases[] = {
        {19, "UNIQUE constraint failed: t.id (19)", ODBOX_EUNIQUE},
        {19, "PRIMARY KEY must be unique (19)", ODBOX_EUNIQUE},
        {19, "column id is not unique (19)", ODBOX_EUNIQUE},
        /* other constraints stay database errors, as on the other dialects */
        {19, "NOT NULL constraint failed: t.name (19)", ODBOX_EDB},
        {19, "CHECK constraint failed: json_valid(payload) (19)", ODBOX_EDB},
        {19, NULL, ODBOX_EDB},
        {5, "database is locked (5)", ODBOX_ETIMEDOUT},
        {6, "database table is locked (6)", ODBOX_EBUSY},
        {9, "interrupted (9)", ODBOX_ETIMEDOUT},
        {7, "out of memory (7)", ODBOX_ENOMEM},
        {14, "unable to open database file (14)", ODBOX_ECONNECT},
        {1, "near \"SELEC\": syntax error (1)", ODBOX_EDB},
        /* MySQL's numbers are not SQLite's */
        {1062, "Duplicate entry", ODBOX_EDB},
        {2013, "Lost connection", ODBOX_EDB},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = odbox_dialect_sqlite.map_error("HY000", cases[i].native, cases[i].message);
        ck_assert_msg(got == cases[i].want, "sqlite: (HY000, %ld, %s) -> %s, expected %s", cases[i].native,
                      cases[i].message ? cases[i].message : "NULL", odbox_errname(got), odbox_errname(cases[i].want));
    }
    /* the driver manager's own states and PostgreSQL's: the standard mapping */
    static const map_case others[] = {
        {"IM002", 5, ODBOX_ECONNECT}, {"08001", 14, ODBOX_ECONNECT}, {"23505", 19, ODBOX_EDB},
    };
    check_table(&odbox_dialect_sqlite, others, sizeof others / sizeof others[0]);
}
END_TEST

static char *odbc_of(const char *dsn)
{
    const odbox_dialect *d = NULL;
    char *odbc = NULL;
    odbox_error e;
    ck_assert_msg(odbox_dsn_resolve(dsn, &d, &odbc, NULL, &e) == ODBOX_OK, "%s: %s", dsn, e.message);
    return odbc;
}

static void assert_has(const char *odbc, const char *part)
{
    ck_assert_msg(strstr(odbc, part) != NULL, "'%s' lacks '%s'", odbc, part);
}

START_TEST(timeouts_reach_each_driver)
{
    /* MySQL/MariaDB: the driver's own keys (it ignores SQL_ATTR_LOGIN_TIMEOUT) */
    const char *my[] = {"mysql://u@h/db", "mariadb://u@h/db"};
    for (int i = 0; i < 2; i++) {
        char *o = odbc_of(my[i]);
        assert_has(o, ";CONN_TIMEOUT=10;READ_TIMEOUT=300;WRITE_TIMEOUT=300;");
        free(o);
    }
    char *o = odbc_of("mariadb://u@h/db?connect_timeout=5&read_timeout=30");
    assert_has(o, ";CONN_TIMEOUT=5;READ_TIMEOUT=30;WRITE_TIMEOUT=30;");
    ck_assert_ptr_null(strstr(o, "connect_timeout")); /* consumed, not passed on */
    free(o);
    o = odbc_of("mariadb://u@h/db?read_timeout=0&CONN_TIMEOUT=3"); /* 0: no limit; the driver's key wins */
    assert_has(o, ";READ_TIMEOUT=0;WRITE_TIMEOUT=0;CONN_TIMEOUT=3;");
    ck_assert_ptr_null(strstr(o, "CONN_TIMEOUT=10"));
    free(o);
    /* PostgreSQL: keepalives and tcp_user_timeout through libpq; the login
     * timeout is SQL_ATTR_LOGIN_TIMEOUT (a connect_timeout in pqopt too
     * would conflict with it in psqlODBC) */
    o = odbc_of("postgresql://u@h/db?connect_timeout=5&read_timeout=40");
    assert_has(o, ";pqopt={keepalives=1 keepalives_idle=20 keepalives_interval=4 keepalives_count=5 "
                  "tcp_user_timeout=40000};");
    ck_assert_ptr_null(strstr(o, "connect_timeout"));
    free(o);
    o = odbc_of("postgresql://u@h/db?read_timeout=0");
    ck_assert_ptr_null(strstr(o, "pqopt"));
    free(o);
    o = odbc_of("postgresql://u@h/db?read_timeout=1");
    assert_has(o, "keepalives_idle=1 keepalives_interval=1 keepalives_count=5 tcp_user_timeout=1000}");
    free(o);

    /* SQLite: checked, and never passed to the driver (no network; the
     * busy timeout stays the driver's Timeout) */
    o = odbc_of("sqlite:///tmp/a.db?connect_timeout=5&read_timeout=30");
    ck_assert_ptr_null(strstr(o, "connect_timeout"));
    ck_assert_ptr_null(strstr(o, "read_timeout"));
    assert_has(o, ";Timeout=10000;");
    free(o);

    int login = -1, raw = -1;
    odbox_error e;
    ck_assert_int_eq(odbox_dsn_connect_options("mariadb://u@h/db?connect_timeout=7", &login, &raw, &e), ODBOX_OK);
    ck_assert_int_eq(login, 7);
    ck_assert_int_eq(raw, 0);
    ck_assert_int_eq(odbox_dsn_connect_options("postgresql://u@h/db", &login, &raw, &e), ODBOX_OK);
    ck_assert_int_eq(login, ODBOX_CONNECT_TIMEOUT_S);
    /* a raw string is the user's own: the default login timeout, connects serialised */
    ck_assert_int_eq(odbox_dsn_connect_options("Driver={MariaDB Unicode};Server=h", &login, &raw, &e), ODBOX_OK);
    ck_assert_int_eq(login, ODBOX_CONNECT_TIMEOUT_S);
    ck_assert_int_eq(raw, 1);
}
END_TEST

START_TEST(bad_timeouts_are_refused)
{
    const char *bad[] = {"connect_timeout=", "connect_timeout=-1", "connect_timeout=1.5", "read_timeout=ten",
                         "read_timeout=86401", "READ_TIMEOUT=99999999999999999999", "connect_timeout=5s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *prefixes[] = {"postgresql://u:S3cret@h/db", "mysql://u:S3cret@h/db", "mariadb://u:S3cret@h/db",
                                  "sqlite:///tmp/S3cret.db"};
        for (int k = 0; k < 4; k++) {
            char dsn[256];
            snprintf(dsn, sizeof dsn, "%s?%s", prefixes[k], bad[i]);
            const odbox_dialect *d = NULL;
            char *odbc = NULL;
            odbox_error e;
            ck_assert_msg(odbox_dsn_resolve(dsn, &d, &odbc, NULL, &e) == ODBOX_EINVAL, "accepted %s", dsn);
            ck_assert_ptr_null(odbc);
            ck_assert_msg(strstr(e.message, "timeout") && strstr(e.message, "0..86400") &&
                              !strstr(e.message, "S3cret"), "message: %s", e.message);
            int login, raw;
            ck_assert_int_eq(odbox_dsn_connect_options(dsn, &login, &raw, &e), ODBOX_EINVAL);
        }
    }
}
END_TEST

/* psqlODBC takes the client encoding from ConnSettings instead of calling
 * setlocale() at connect, which is what lets connects run in parallel. */
START_TEST(postgresql_names_the_client_encoding)
{
    char *o = odbc_of("postgresql://u@h/db");
    assert_has(o, ";ConnSettings={SET client_encoding TO 'UTF8'};");
    free(o);
}
END_TEST

/* driver=libpq: libpq's connection string carries the URL's parts with
 * ' and \ escaped, the timeouts as psqlODBC's pqopt does, and libpq's
 * own keywords; an ODBC driver's option is refused, not dropped. Where
 * libpq cannot go, driver=libpq is refused before anything connects. */
START_TEST(driver_libpq_connection_string)
{
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_conn_open("mysql://u:pw@127.0.0.1:1/db?driver=libpq", &c, &e), ODBOX_EUNSUPPORTED);
    ck_assert_msg(strstr(e.message, "driver=libpq"), "%s", e.message);
    ck_assert_ptr_null(c);
#ifdef HAVE_LIBPQ
    const odbox_dialect *d = &odbox_dialect_postgresql;
    ck_assert_ptr_nonnull(d->libpq_conninfo);
    odbox_dsn *dsn = NULL;
    char *info = NULL;
    ck_assert_int_eq(odbox_dsn_parse("postgresql://u:p%27w%5C@h:5433/db?sslmode=disable&connect_timeout=5&read_timeout=30",
                                     &dsn, &e), ODBOX_OK);
    ck_assert_int_eq(d->libpq_conninfo(dsn, &info, &e), ODBOX_OK);
    assert_has(info, "host='h'");
    assert_has(info, "port='5433'");
    assert_has(info, "dbname='db'");
    assert_has(info, "password='p\\'w\\\\'");
    assert_has(info, "sslmode='disable'");
    assert_has(info, "connect_timeout='5'");
    assert_has(info, "keepalives_idle='15'");
    assert_has(info, "keepalives_interval='3'");
    assert_has(info, "tcp_user_timeout='30000'");
    assert_has(info, "options='-c DateStyle=ISO'");
    ck_assert_msg(!strstr(info, "read_timeout"), "%s", info);
    free(info);
    odbox_dsn_free(&dsn);
    /* no read limit: no keepalives; connect_timeout=0 is libpq's "wait" too */
    ck_assert_int_eq(odbox_dsn_parse("postgresql://u@h/db?read_timeout=0", &dsn, &e), ODBOX_OK);
    ck_assert_int_eq(d->libpq_conninfo(dsn, &info, &e), ODBOX_OK);
    ck_assert_msg(!strstr(info, "tcp_user_timeout") && !strstr(info, "keepalives"), "%s", info);
    assert_has(info, "connect_timeout='10'");
    free(info);
    odbox_dsn_free(&dsn);
    ck_assert_int_eq(odbox_conn_open("postgresql://u:Pw-9@127.0.0.1:1/db?driver=libpq&ConnSettings=SET%20x", &c, &e),
                     ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "'ConnSettings'") && strstr(e.message, "libpq"), "%s", e.message);
    ck_assert_msg(!strstr(e.message, "Pw-9"), "%s", e.message);
    /* a server that is not there: a connect error, without the password */
    ck_assert_int_eq(odbox_conn_open("postgresql://u:Pw-9@127.0.0.1:1/db?driver=libpq&connect_timeout=2", &c, &e),
                     ODBOX_ECONNECT);
    ck_assert_msg(!strstr(e.message, "Pw-9"), "%s", e.message);
    ck_assert_ptr_null(c);
#else
    ck_assert_int_eq(odbox_conn_open("postgresql://u@127.0.0.1:1/db?driver=libpq", &c, &e), ODBOX_EUNSUPPORTED);
    ck_assert_msg(strstr(e.message, "libpq-dev"), "%s", e.message);
#endif
}
END_TEST

/* What odbox_conn_exec and odbox_stmt_execute refuse inside a
 * transaction: the statements that end or restart it, in any case and
 * spacing, whole words only, also behind a comment or a ';'; ROLLBACK TO
 * a savepoint stays inside. Both lexical rules unless said. */
START_TEST(transaction_control_sql_is_recognised)
{
    static const char *const ends[] = {"COMMIT", "commit work", "  End", "(ABORT)", "\n\tROLLBACK",
                                       "rollback transaction", "ROLLBACK WORK", "BEGIN", "begin immediate",
                                       "START TRANSACTION", "start  transaction read only", "COMMIT;",
                                       "/* app */ ROLLBACK", "-- note\nROLLBACK", "SELECT 1; ROLLBACK",
                                       "select 1;commit", "UPDATE t SET a = ';'; COMMIT",
                                       "PREPARE TRANSACTION 'x'", "/* a */ /* b */ begin",
                                       "SELECT 'unterminated; COMMIT", "CREATE TEMPORARY TABLE t (a int); COMMIT",
                                       "CREATE TEMPORARY TABLE t (begin int); COMMIT"};
    static const char *const stays[] = {"ROLLBACK TO SAVEPOINT a", "rollback to a", "ROLLBACK WORK TO a",
                                        "ROLLBACK TRANSACTION TO SAVEPOINT a", "SAVEPOINT a",
                                        "RELEASE SAVEPOINT a", "COMMITTED", "ENDING", "BEGINNER",
                                        "SELECT 'COMMIT'", "UPDATE t SET end_date = 1", "",
                                        "SELECT 1; SELECT 2", "SELECT ';COMMIT'", "SELECT 1 -- ; COMMIT",
                                        "/* COMMIT */ SELECT 1", "PREPARE p AS SELECT 1", "SELECT 1; /* ; */",
                                        "SELECT 1; ROLLBACK TO a", "CREATE TEMPORARY TABLE t (a int)"};
    for (int mysql = 0; mysql <= 1; mysql++) {
        for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
            ck_assert_msg(odbox_sql_ends_tx(ends[i], mysql) == 1, "'%s' ends a transaction (%d)", ends[i], mysql);
        for (size_t i = 0; i < sizeof stays / sizeof stays[0]; i++)
            ck_assert_msg(odbox_sql_ends_tx(stays[i], mysql) == 0, "'%s' does not (%d)", stays[i], mysql);
    }
    /* what a transaction the server aborted still takes: a savepoint
     * rollback first, nothing else */
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(odbox_sql_is_savepoint_rollback(stays[i]), "'%s' rolls back to a savepoint", stays[i]);
    static const char *const not_savepoint[] = {"ROLLBACK", "SAVEPOINT a", "RELEASE SAVEPOINT a",
                                                "SELECT 1; ROLLBACK TO a", "ROLLBACKTO a", "INSERT INTO t VALUES (1)"};
    for (size_t i = 0; i < sizeof not_savepoint / sizeof not_savepoint[0]; i++)
        ck_assert_msg(!odbox_sql_is_savepoint_rollback(not_savepoint[i]), "'%s' is no savepoint rollback",
                      not_savepoint[i]);
    /* PostgreSQL's dollar quotes; MySQL's '#' comments and backslash escapes */
    ck_assert_int_eq(odbox_sql_ends_tx("DO $$BEGIN END$$", 0), 0);
    ck_assert_int_eq(odbox_sql_ends_tx("DO $$BEGIN; COMMIT; END$$", 0), 0);
    ck_assert_int_eq(odbox_sql_ends_tx("# note\nROLLBACK", 1), 1);
    ck_assert_int_eq(odbox_sql_ends_tx("PREPARE transaction FROM 'SELECT 1'", 1), 0); /* MySQL: a name */
    /* PostgreSQL's E'...' strings take backslash escapes, and a $ inside
     * an identifier starts no dollar quote: neither hides a COMMIT */
    ck_assert_int_eq(odbox_sql_ends_tx("INSERT INTO t VALUES (E'\\''); COMMIT", 0), 1);
    ck_assert_int_eq(odbox_sql_ends_tx("INSERT INTO t VALUES (e'\\''); COMMIT; SELECT E'\\''", 0), 1);
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT 'a\\'; COMMIT; SELECT 'b\\'", 0), 1); /* a plain string */
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT 1 AS x$y$; COMMIT; SELECT 1 AS z$y$", 0), 1);
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT $1::int; COMMIT", 0), 1);
    ck_assert_int_eq(odbox_sql_ends_tx("LOCK TABLE t IN SHARE MODE", 0), 0);
    /* PostgreSQL's and SQLite's DDL stays in the transaction, bodies and
     * all; a BEGIN elsewhere in a CREATE hides no COMMIT */
    static const char *const ddl[] = {
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO l VALUES (1); END",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END",
        "create or replace procedure p() BEGIN SELECT 1; SELECT 2; END",
        "CREATE TEMP TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END", "CREATE TABLE t (a int)", "DROP TABLE t",
        "START SLAVE", "CREATE INDEX i ON t (a)", "ALTER TABLE t ADD b int"};
    for (size_t i = 0; i < sizeof ddl / sizeof ddl[0]; i++) {
        ck_assert_msg(odbox_sql_ends_tx(ddl[i], 0) == 0, "'%s' on PostgreSQL", ddl[i]);
        ck_assert_msg(odbox_sql_ends_tx(ddl[i], 1) == ODBOX_TX_IMPLICIT_COMMIT, "'%s' on MySQL", ddl[i]);
    }
    ck_assert_int_eq(odbox_sql_ends_tx("CREATE TABLE t (begin int); COMMIT", 0), 1);
    ck_assert_int_eq(odbox_sql_ends_tx("CREATE TABLE t (a int); COMMIT", 0), 1);
    /* MySQL: what commits there without a COMMIT; its -- comment wants a blank */
    static const char *const mysql_ends[] = {"SET autocommit = 0", "SET @@autocommit=1", "set session autocommit = 0",
                                             "SET LOCAL autocommit=0", "SET @@session.autocommit = 0",
                                             "LOCK TABLES t WRITE", "lock table t read", "UNLOCK TABLES",
                                             "SELECT 1; SET autocommit = 1", "RENAME TABLE a TO b",
                                             "truncate table t", "DROP INDEX i ON t", "CREATE USER u",
                                             "GRANT SELECT ON t TO u", "REVOKE ALL ON t FROM u", "SET PASSWORD = 'x'",
                                             "FLUSH PRIVILEGES", "OPTIMIZE NO_WRITE_TO_BINLOG TABLE t",
                                             "REPAIR LOCAL TABLE t", "ANALYZE TABLE t", "CHECK TABLE t",
                                             "CACHE INDEX t IN c", "LOAD INDEX INTO CACHE t", "RESET MASTER",
                                             "STOP REPLICA", "START ALL SLAVES", "CHANGE MASTER TO MASTER_HOST='h'",
                                             "INSTALL PLUGIN p SONAME 'x.so'", "CREATE SEQUENCE s", "IMPORT TABLE FROM 'x.sdi'",
                                             "/* app */ CREATE DATABASE d", "SELECT 1; DROP TABLE t",
                                             "CREATE OR REPLACE TABLE t (a int)", "DROP TEMPORARY TABLES_X t"};
    for (size_t i = 0; i < sizeof mysql_ends / sizeof mysql_ends[0]; i++) {
        ck_assert_msg(odbox_sql_ends_tx(mysql_ends[i], 1) == ODBOX_TX_IMPLICIT_COMMIT,
                      "'%s' commits implicitly on MySQL", mysql_ends[i]);
        ck_assert_msg(odbox_sql_ends_tx(mysql_ends[i], 0) == 0, "'%s' on PostgreSQL", mysql_ends[i]);
    }
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT 1--1; COMMIT", 1), 1);
    /* MySQL and MariaDB run an executable comment's text; a hint is no
     * word of the statement anywhere; a plain comment is nothing */
    static const char *const executed[] = {"/*!40101 COMMIT */", "/*! ROLLBACK */", "SELECT 1 /*!; COMMIT */",
                                           "/*M!100101 COMMIT */", "/*+ hint */ COMMIT", "/*+ a */ /*+ b */ BEGIN"};
    for (size_t i = 0; i < sizeof executed / sizeof executed[0]; i++)
        ck_assert_msg(odbox_sql_ends_tx(executed[i], 1) == 1, "'%s' on MySQL", executed[i]);
    ck_assert_int_eq(odbox_sql_ends_tx("/*!40101 SET autocommit = 0 */", 1), ODBOX_TX_IMPLICIT_COMMIT);
    ck_assert_int_eq(odbox_sql_ends_tx("/*+ hint */ COMMIT", 0), 1);
    ck_assert_int_eq(odbox_sql_ends_tx("/*! x */ COMMIT", 0), 1); /* a comment on PostgreSQL */
    ck_assert_int_eq(odbox_sql_ends_tx("/*!40101 COMMIT */", 0), 0);
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT /*+ MAX_EXECUTION_TIME(1) */ 1 /*!40101 , 2 */", 1), 0);
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT 1--1; COMMIT", 0), 0);
    /* what commits nothing there: a temporary table's CREATE and DROP,
     * MariaDB's ANALYZE of a query, a checksum */
    static const char *const mysql_stays[] = {"CREATE TEMPORARY TABLE t (a int)", "drop temporary table if exists t",
                                              "CREATE OR REPLACE TEMPORARY TABLE t (a int)", "ANALYZE SELECT 1",
                                              "CHECKSUM TABLE t", "SET autocommit_x = 1", "SET password_x = 1",
                                              "START TRANSACTION_X", "SELECT 1 -- ; COMMIT"};
    for (size_t i = 0; i < sizeof mysql_stays / sizeof mysql_stays[0]; i++)
        ck_assert_msg(odbox_sql_ends_tx(mysql_stays[i], 1) == 0, "'%s' on MySQL", mysql_stays[i]);
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT 1 -- ; COMMIT", 1), 0);
}
END_TEST

/* The session settings whose change closes a session at its release
 * (pool.c): those odbox's setup made and relies on; not others. */
START_TEST(session_setting_changes_are_recognised)
{
    static const char *const changes[] = {"SET TIME ZONE 'Etc/GMT+12'", "set timezone = 'UTC'",
                                          "SET SESSION TIME ZONE LOCAL", "SET time_zone = '-12:00'",
                                          "SET @@time_zone = '+01:00'", "SET @@session.time_zone = '+01:00'",
                                          "SET SESSION time_zone = 'x'", "SET client_encoding TO 'LATIN1'",
                                          "SET NAMES latin1", "SET CHARACTER SET latin1",
                                          "SET character_set_results = NULL", "SET DateStyle = 'SQL'",
                                          "SET sql_mode = ''", "RESET ALL", "reset timezone", "DISCARD ALL",
                                          "SET autocommit = 0", "SET @@session.autocommit = 0"};
    static const char *const stays[] = {"SET lock_timeout = 1000", "SET search_path TO app",
                                        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
                                        "SET LOCAL statement_timeout = 5", "SET @x = 1", "SET time_zones_x = 1",
                                        "SET SESSION innodb_lock_wait_timeout = 1", "SELECT 'SET TIME ZONE'",
                                        "UPDATE t SET timezone = 'x'", "SETTLE", "SET LOCAL TIME ZONE 'UTC'", ""};
    for (int mysql = 0; mysql <= 1; mysql++)
        for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++)
            ck_assert_msg(odbox_sql_changes_session(changes[i], mysql) == 1, "'%s' changes the session (%d)",
                          changes[i], mysql);
    for (size_t i = 0; i < sizeof stays / sizeof stays[0]; i++)
        ck_assert_msg(odbox_sql_changes_session(stays[i], 0) == 0, "'%s' does not", stays[i]);
    /* behind a ';' or a comment; MySQL's SET sets every variable of its
     * list, LOCAL is SESSION there, and an executable comment is code */
    static const char *const hidden[] = {"SELECT 1; SET time_zone = '+12:00'", "/* x */ SET TIME ZONE 'UTC'",
                                         "/*+ hint */ SET time_zone = '+12:00'"};
    for (int mysql = 0; mysql <= 1; mysql++)
        for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
            ck_assert_msg(odbox_sql_changes_session(hidden[i], mysql) == 1, "'%s' (%d)", hidden[i], mysql);
    static const char *const mysql_changes[] = {"SET @x = 1, time_zone = '+12:00'", "SET @x = f(1, 2), sql_mode = ''",
                                                "SET @a = '\\'', @@session.autocommit = 0",
                                                "SET LOCAL time_zone = '+01:00'", "/*!40101 SET NAMES latin1 */"};
    for (size_t i = 0; i < sizeof mysql_changes / sizeof mysql_changes[0]; i++)
        ck_assert_msg(odbox_sql_changes_session(mysql_changes[i], 1) == 1, "'%s' on MySQL", mysql_changes[i]);
    static const char *const mysql_stays[] = {"SET @x = 'a,time_zone=1', @y = 2", "SET @x = (1, 2), @y = 3",
                                              "SET GLOBAL time_zone = '+01:00'", "SET @x = \"a\\\", sql_mode\""};
    for (size_t i = 0; i < sizeof mysql_stays / sizeof mysql_stays[0]; i++)
        ck_assert_msg(odbox_sql_changes_session(mysql_stays[i], 1) == 0, "'%s' on MySQL", mysql_stays[i]);
    ck_assert_int_eq(odbox_sql_changes_session("SET search_path = a, time_zone", 0), 0); /* a value's ',' */
    /* PostgreSQL's set_config sets as SET does */
    ck_assert_int_eq(odbox_sql_changes_session("SELECT set_config('TimeZone', 'Etc/GMT+12', false)", 0), 1);
    ck_assert_int_eq(odbox_sql_changes_session("SELECT 1, SET_CONFIG( 'datestyle', 'SQL', true)", 0), 1);
    ck_assert_int_eq(odbox_sql_changes_session("SELECT set_config('lock_timeout', '1s', false)", 0), 0);
    ck_assert_int_eq(odbox_sql_changes_session("SELECT my_set_config('TimeZone')", 0), 0);
    ck_assert_int_eq(odbox_sql_ends_tx("SET @x = 1, autocommit = 0", 1), ODBOX_TX_IMPLICIT_COMMIT);
    ck_assert_int_eq(odbox_sql_ends_tx("SET @x = 'autocommit = 0', @y = 1", 1), 0);
    /* MySQL: one string; elsewhere a string, a COMMIT and an open quote */
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT 'a\\'; COMMIT'", 1), 0);
    ck_assert_int_eq(odbox_sql_ends_tx("SELECT 'a\\'; COMMIT'", 0), 1);
}
END_TEST

Suite *drivers_suite(void)
{
    Suite *s = suite_create("drivers");
    TCase *t = tcase_create("core");
    tcase_add_test(t, timeouts_reach_each_driver);
    tcase_add_test(t, bad_timeouts_are_refused);
    tcase_add_test(t, postgresql_names_the_client_encoding);
    tcase_add_test(t, driver_libpq_connection_string);
    tcase_add_test(t, every_dialect_maps_errors);
    tcase_add_test(t, postgresql_error_table);
    tcase_add_test(t, mysql_family_error_table);
    tcase_add_test(t, sqlite_error_table);
    tcase_add_test(t, transaction_control_sql_is_recognised);
    tcase_add_test(t, session_setting_changes_are_recognised);
    suite_add_tcase(s, t);
    return s;
}
