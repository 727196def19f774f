/* odbox — the SQLite dialect's pure parts: selection by DSN, the ODBC
 * connection string, error mapping, eventlog table names and the batch
 * UPDATE (the database behaviour is in the integration tier: sqlite.test). */
#include <stdlib.h>
#include <string.h>
#include "odbox/odbox.h"
#include "dialects.h"
#include "unit.h"

START_TEST(sqlite_is_selected)
{
    ck_assert_ptr_eq(odbox_dialect_find("sqlite"), &odbox_dialect_sqlite);
    ck_assert_ptr_eq(odbox_dialect_find("SQLite"), &odbox_dialect_sqlite);
    ck_assert_ptr_eq(odbox_dialect_detect("SQLite", "3.40.1"), &odbox_dialect_sqlite);
    const char *dsns[] = {"sqlite:///tmp/a.db", "sqlite://rel/a.db", "sqlite::memory:", "sqlite:a.db",
                          "Driver=SQLite3;Database=/tmp/a.db;dialect=sqlite"};
    for (size_t i = 0; i < sizeof dsns / sizeof dsns[0]; i++) {
        const odbox_dialect *d = NULL;
        odbox_error e;
        ck_assert_msg(odbox_dsn_resolve(dsns[i], &d, NULL, NULL, &e) == ODBOX_OK, "%s: %s", dsns[i], e.message);
        ck_assert_msg(d == &odbox_dialect_sqlite, "%s", dsns[i]);
    }
    /* every dialect names its eventlog tables; one without server locks
     * says how its local locks are scoped */
    for (const odbox_dialect *const *d = odbox_dialects(); *d; d++) {
        ck_assert_ptr_nonnull((*d)->eventlog_separator);
        if ((*d)->lock_key_form == ODBOX_LOCK_KEY_NONE)
            ck_assert_ptr_nonnull((*d)->lock_scope_sql);
        else
            ck_assert_ptr_nonnull((*d)->lock_try_sql);
    }
}
END_TEST

static void resolves_to(const char *dsn, const char *want)
{
    const odbox_dialect *d = NULL;
    char *odbc = NULL;
    odbox_error e;
    ck_assert_msg(odbox_dsn_resolve(dsn, &d, &odbc, NULL, &e) == ODBOX_OK, "%s: %s", dsn, e.message);
    ck_assert_str_eq(odbc, want);
    free(odbc);
}

START_TEST(sqlite_connection_strings)
{
    resolves_to("sqlite:///var/lib/app.db",
                "Driver=SQLite3;Database=/var/lib/app.db;Timeout=10000;JournalMode=WAL;SyncPragma=FULL;FKSupport=1;");
    resolves_to("sqlite://data/app.db", "Driver=SQLite3;Database=data/app.db;Timeout=10000;JournalMode=WAL;"
                                        "SyncPragma=FULL;FKSupport=1;");
    resolves_to("sqlite::memory:",
                "Driver=SQLite3;Database=:memory:;Timeout=10000;JournalMode=WAL;SyncPragma=FULL;FKSupport=1;");
    /* the DSN's options override the defaults, in its own order; the
     * driver takes values up to the next ';' and knows no braces: a blank
     * goes in as it is, a ';' cannot go in at all */
    resolves_to("sqlite:///my%20dir/a%7Bb%7D.db?SyncPragma=NORMAL&timeout=500&driver=SQLite3%20Custom",
                "Driver={SQLite3 Custom};Database=/my dir/a{b}.db;JournalMode=WAL;FKSupport=1;"
                "SyncPragma=NORMAL;timeout=500;");
    const odbox_dialect *d = NULL;
    char *odbc = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_dsn_resolve("sqlite:///a%3Bb.db", &d, &odbc, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "';'"));
    ck_assert_ptr_null(odbc);
    ck_assert_int_eq(odbox_dsn_resolve("sqlite:///a.db?JournalMode=WAL%3BX", &d, &odbc, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "JournalMode"));
    ck_assert_ptr_null(odbc);
}
END_TEST

/* A connection that must not create its file (odbox_registry_never_create):
 * a missing file is refused before the driver is asked (which would say
 * "connect failed"), and the driver is told NoCreat=1 first, where a
 * DSN's own NoCreat= (the driver takes a key's first value) cannot undo
 * it. Servers' dialects have nothing to do. */
START_TEST(sqlite_never_creates_when_told)
{
    const odbox_dialect *d = NULL;
    char *odbc = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_dsn_resolve_as("sqlite:///nonexistent-dir-odbox/a.db", 1, &d, &odbc, NULL, &e),
                     ODBOX_ECONNECT);
    ck_assert_ptr_nonnull(strstr(e.message, "'/nonexistent-dir-odbox/a.db' does not exist"));
    ck_assert_ptr_null(odbc);
    ck_assert_int_eq(odbox_dsn_resolve_as("sqlite:///?NoCreat=0", 1, &d, &odbc, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(odbox_dsn_resolve_as("sqlite:///tmp?NoCreat=0", 1, &d, &odbc, NULL, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_str_eq(odbc, "NoCreat=1;Driver=SQLite3;Database=/tmp;Timeout=10000;JournalMode=WAL;SyncPragma=FULL;"
                           "FKSupport=1;NoCreat=0;");
    free(odbc);
    ck_assert_msg(odbox_dsn_resolve_as("sqlite::memory:", 1, &d, &odbc, NULL, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_ptr_nonnull(strstr(odbc, "NoCreat=1;"));
    free(odbc);
    /* unchanged without it, and on a server */
    resolves_to("sqlite:///nonexistent-dir-odbox/a.db", "Driver=SQLite3;Database=/nonexistent-dir-odbox/a.db;"
                                                        "Timeout=10000;JournalMode=WAL;SyncPragma=FULL;FKSupport=1;");
    ck_assert_msg(odbox_dsn_resolve_as("postgresql://u@h/db", 1, &d, &odbc, NULL, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_ptr_null(strstr(odbc, "NoCreat"));
    free(odbc);
}
END_TEST

START_TEST(eventlog_table_names)
{
    char out[32];
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_sqlite, "eventlog", "events", out, sizeof out),
                     ODBOX_OK);
    ck_assert_str_eq(out, "eventlog_events");
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_postgresql, "ev_1", "event_notifications", out,
                                                  sizeof out), ODBOX_OK);
    ck_assert_str_eq(out, "ev_1.event_notifications");
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_mariadb, "e", "events", out, sizeof out), ODBOX_OK);
    ck_assert_str_eq(out, "e.events");
    /* exactly full (NUL included) fits; one byte less does not */
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_sqlite, "e", "events", out, 9), ODBOX_OK);
    ck_assert_str_eq(out, "e_events");
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_sqlite, "e", "events", out, 8), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_table(NULL, "e", "events", out, sizeof out), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_sqlite, NULL, "events", out, sizeof out),
                     ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_sqlite, "e", NULL, out, sizeof out), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_sqlite, "e", "events", NULL, 9), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_table(&odbox_dialect_sqlite, "e", "events", out, 0), ODBOX_EINVAL);
}
END_TEST

/* Where the catalogue finds an eventlog table: in the eventlog's schema or
 * database, or (SQLite) under its prefixed name in the connection's own. */
START_TEST(eventlog_table_locations)
{
    char out[32];
    const char *container = "unset";
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_sqlite, "ev", "events", &container, out, sizeof out),
                     ODBOX_OK);
    ck_assert_ptr_null(container);
    ck_assert_str_eq(out, "ev_events");
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_postgresql, "ev", "events", &container, out,
                                                   sizeof out), ODBOX_OK);
    ck_assert_str_eq(container, "ev");
    ck_assert_str_eq(out, "events");
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_mysql, "ev", "events", &container, out, 7),
                     ODBOX_OK);
    ck_assert_str_eq(container, "ev");
    ck_assert_str_eq(out, "events");
    /* too small, or an argument missing */
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_mysql, "ev", "events", &container, out, 6),
                     ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_sqlite, "ev", "events", &container, out, 9),
                     ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_locate(NULL, "ev", "events", &container, out, sizeof out), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_mariadb, NULL, "events", &container, out,
                                                   sizeof out), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_mariadb, "ev", NULL, &container, out, sizeof out),
                     ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_mariadb, "ev", "events", NULL, out, sizeof out),
                     ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_mariadb, "ev", "events", &container, NULL, 7),
                     ODBOX_EINVAL);
    ck_assert_int_eq(odbox_dialect_eventlog_locate(&odbox_dialect_sqlite, "ev", "events", &container, NULL, 16),
                     ODBOX_EINVAL);
}
END_TEST

START_TEST(sqlite_batch_update_sql)
{
    const char *cols[] = {"id", "version", "name", "amount"};
    const int types[] = {ODBOX_TYPE_UUID, ODBOX_TYPE_INT64, ODBOX_TYPE_TEXT, ODBOX_TYPE_INT64};
    char *sql = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_dialect_sqlite.batch_update_sql(&odbox_dialect_sqlite, "dummies", cols, types, 4, 2, &sql,
                                                           &e), ODBOX_OK);
    ck_assert_str_eq(sql, "UPDATE dummies AS t SET name = v.name, amount = v.amount, version = v.version + 1 "
                          "FROM (SELECT column1 AS id, column2 AS version, column3 AS name, column4 AS amount "
                          "FROM (VALUES (lower(?), ?, ?, ?), (lower(?), ?, ?, ?))) AS v WHERE t.id = v.id AND t.version = v.version");
    free(sql);
}
END_TEST

/* Every session takes SQLite's busy handler with the connection string's
 * Timeout (the driver's 100 s without one); a value that is no number
 * gets no statement (the driver reads it as it will). */
START_TEST(sqlite_sessions_wait_with_the_strings_timeout)
{
    const odbox_dialect *d = &odbox_dialect_sqlite;
    char sql[128];
    ck_assert_ptr_nonnull(d->session_sql);
    ck_assert_int_eq(d->session_sql("Driver={SQLite3};Database=/x.db;Timeout=300;JournalMode=WAL;", 0, sql,
                                    sizeof sql), 1);
    ck_assert_str_eq(sql, "PRAGMA busy_timeout = 300");
    ck_assert_int_eq(d->session_sql("Driver={SQLite3};Database=/x.db;Timeout=300;", 1, sql, sizeof sql), 0);
    ck_assert_int_eq(d->session_sql("Driver={SQLite3};Database=/x.db;timeout=25", 0, sql, sizeof sql), 1);
    ck_assert_str_eq(sql, "PRAGMA busy_timeout = 25");
    ck_assert_int_eq(d->session_sql("Driver={SQLite3};Database=/x.db", 0, sql, sizeof sql), 1);
    ck_assert_str_eq(sql, "PRAGMA busy_timeout = 100000");
    ck_assert_int_eq(d->session_sql("Database=/x.db;Timeout=3s;", 0, sql, sizeof sql), 0);
    ck_assert_int_eq(d->session_sql("Database=/x.db;Timeout=-1;", 0, sql, sizeof sql), 0);
    /* the string odbox makes from a URL carries the default */
    char *odbc = NULL;
    odbox_dsn *dsn = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_dsn_parse("sqlite:///tmp/x.db", &dsn, &e), ODBOX_OK);
    ck_assert_int_eq(d->connection_string(dsn, "SQLite3", &odbc, &e), ODBOX_OK);
    ck_assert_int_eq(d->session_sql(odbc, 0, sql, sizeof sql), 1);
    ck_assert_str_eq(sql, "PRAGMA busy_timeout = 10000");
    free(odbc);
    odbox_dsn_free(&dsn);
}
END_TEST

Suite *dialect_sqlite_suite(void)
{
    Suite *s = suite_create("dialect_sqlite");
    TCase *t = tcase_create("core");
    tcase_add_test(t, sqlite_is_selected);
    tcase_add_test(t, sqlite_connection_strings);
    tcase_add_test(t, sqlite_never_creates_when_told);
    tcase_add_test(t, eventlog_table_names);
    tcase_add_test(t, eventlog_table_locations);
    tcase_add_test(t, sqlite_batch_update_sql);
    tcase_add_test(t, sqlite_sessions_wait_with_the_strings_timeout);
    suite_add_tcase(s, t);
    return s;
}
