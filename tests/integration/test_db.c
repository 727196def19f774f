/* odbox — integration tests of the ODBC core against a real server:
 * dialect detection, connect errors, transactions, multi-row statements,
 * error mapping, a server cutting the connection, pools and keyed locks.
 * Typed binds: test_db_binds.c, in this suite too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "itest.h"

static const char *expected_dialect(void)
{
    const char *d = itest_dialect();
    return !strcmp(d, "pg") ? "postgresql" : d;
}

START_TEST(connect_and_detect)
{
    odbox_conn *c = itest_connect(1);
    ck_assert_str_eq(odbox_conn_dialect(c)->name, expected_dialect());
    ck_assert(strlen(odbox_conn_server_version(c)) > 0);
    ck_assert(!odbox_conn_is_dead(c));
    ck_assert_int_eq(itest_count(c, "SELECT 41 + 1"), 42);
    odbox_conn_close(&c);
    ck_assert_ptr_null(c);
    odbox_conn_close(&c); /* NULL-safe */
}
END_TEST

START_TEST(raw_odbc_string_detects_dialect)
{
    odbox_dsn *dsn = NULL;
    ck_assert_int_eq(odbox_dsn_parse(itest_dsn(1), &dsn, NULL), ODBOX_OK);
    int pg = itest_is("pg");
    char raw[1024];
    if (itest_is("sqlite"))
        snprintf(raw, sizeof raw, "Driver={SQLite3};Database=%s;", dsn->database);
    else
        snprintf(raw, sizeof raw, "Driver={%s};Server=%s;Port=%d;Database=%s;Uid=%s;Pwd=%s;%s",
                 pg ? "PostgreSQL Unicode" : "MariaDB Unicode", dsn->host, dsn->port, dsn->database, dsn->user,
                 dsn->password, pg ? "Protocol=7.4-1;" : "");
    odbox_dsn_free(&dsn);
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_msg(odbox_conn_open(raw, &c, &e) == ODBOX_OK, "%s", e.message);
    /* the MySQL suite runs on a MariaDB server: detection sees MariaDB */
    ck_assert_str_eq(odbox_conn_dialect(c)->name, pg ? "postgresql" : itest_is("sqlite") ? "sqlite" : "mariadb");
    odbox_conn_close(&c);
}
END_TEST

START_TEST(wrong_password_is_connect_error_without_password)
{
    odbox_dsn *dsn = NULL;
    ck_assert_int_eq(odbox_dsn_parse(itest_dsn(1), &dsn, NULL), ODBOX_OK);
    char url[512];
    snprintf(url, sizeof url, "%s://%s:Wr0ng-Secret-42@%s:%d/%s", dsn->scheme, dsn->user, dsn->host, dsn->port,
             dsn->database);
    odbox_dsn_free(&dsn);
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_conn_open(url, &c, &e), ODBOX_ECONNECT);
    ck_assert_ptr_null(c);
    ck_assert(e.message[0]);
    ck_assert_msg(strstr(e.message, "Wr0ng-Secret-42") == NULL, "password in: %s", e.message);
}
END_TEST

START_TEST(unreachable_server)
{
    odbox_conn *c = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_conn_open(itest_unreachable_dsn("Secret-77"), &c, &e), ODBOX_ECONNECT);
    ck_assert_ptr_null(c);
    ck_assert(strstr(e.message, "Secret-77") == NULL);
    /* an unknown ODBC driver name is a connect error too */
    if (!itest_libpq()) {
        char *dsn = itest_dsn_with(1, "driver=No%20Such%20Driver");
        ck_assert_int_eq(odbox_conn_open(dsn, &c, &e), ODBOX_ECONNECT);
        free(dsn);
    }
}
END_TEST

START_TEST(bad_statement_input)
{
    odbox_conn *c = itest_connect(1);
    odbox_stmt *s = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_stmt_prepare(c, NULL, &s, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_prepare(NULL, "SELECT 1", &s, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT ?, ?", &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_int64(s, 0, 1, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, "not-a-uuid", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_bind_uuid(s, 1, "0192f0c1-7a3e-7abc-8def-0123456789abX", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_bind_null(s, 1, (odbox_type)99, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 1, INT64_MAX, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_stmt_bind_int64(s, 2, 5, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_EINVAL); /* parameter 1 unbound */
    ck_assert_ptr_nonnull(strstr(e.message, "parameter 1"));
    odbox_stmt_free(&s);
    int rc = odbox_stmt_prepare(c, "SELEC nonsense FROM", &s, &e);
    if (rc == ODBOX_OK) { /* drivers that prepare lazily report at execute */
        ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_EDB);
        odbox_stmt_free(&s);
    } else {
        ck_assert_int_eq(rc, ODBOX_EDB);
    }
    ck_assert_int_eq(odbox_conn_exec(c, "SELEC nonsense FROM", &e), ODBOX_EDB);
    ck_assert_int_eq((int)strlen(e.sqlstate), 5);
    ck_assert(!odbox_conn_is_dead(c));

    /* NULL handles, outputs and SQL */
    odbox_conn *none = (odbox_conn *)1;
    ck_assert_int_eq(odbox_conn_open(itest_dsn(1), NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_open(NULL, &none, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 1", NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "out is NULL"));
    ck_assert_int_eq(odbox_stmt_execute(NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "statement is NULL"));
    ck_assert_int_eq(odbox_stmt_fetch(NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_exec(NULL, "SELECT 1", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_exec(c, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_begin(NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_commit(NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_ESTATE); /* no transaction open */
    ck_assert_ptr_nonnull(strstr(e.message, "no transaction is open"));

    /* a query for one value that finds no row */
    char t[64], sql[256];
    itest_types_table(c, t, sizeof t);
    int64_t v = 42;
    snprintf(sql, sizeof sql, "SELECT i FROM %s WHERE i = 1", t);
    ck_assert_int_eq(odbox_conn_query_int64(c, sql, &v, &e), ODBOX_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(e.message, "no row"));

    /* result columns by label, case-insensitive; 0 for none */
    snprintf(sql, sizeof sql, "SELECT i AS alpha, dbl AS Beta FROM %s", t);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_column_index(s, "ALPHA"), 1);
    ck_assert_int_eq(odbox_stmt_column_index(s, "beta"), 2);
    ck_assert_int_eq(odbox_stmt_column_index(s, "gamma"), 0);
    ck_assert_int_eq(odbox_stmt_column_index(s, NULL), 0);
    ck_assert_int_eq(odbox_stmt_column_index(NULL, "alpha"), 0);
    odbox_stmt_free(&s);
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

START_TEST(unique_conflict_and_transactions)
{
    odbox_conn *c = itest_connect(1), *other = itest_connect(1);
    char t[64], sql[256];
    odbox_error e;
    itest_types_table(c, t, sizeof t);
    const char *id = "0192f0c1-7a3e-7abc-8def-000000000001";
    snprintf(sql, sizeof sql, "INSERT INTO %s (id, txt) VALUES ('%s', 'x')", t, id);
    ck_assert_int_eq(odbox_conn_exec(c, sql, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_exec(c, sql, &e), ODBOX_EUNIQUE);
    ck_assert(e.sqlstate[0]);

    /* rollback leaves nothing */
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    ck_assert(odbox_conn_in_transaction(c));
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_ESTATE);
    itest_exec(c, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000002')", t);
    ck_assert_int_eq(itest_count(other, "SELECT COUNT(*) FROM %s", t), 1); /* not visible yet */
    ck_assert_int_eq(odbox_conn_rollback(c, &e), ODBOX_OK);
    ck_assert(!odbox_conn_in_transaction(c));
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", t), 1);
    ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_conn_rollback(c, &e), ODBOX_ESTATE);

    /* commit publishes */
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    itest_exec(c, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000003')", t);
    ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(other, "SELECT COUNT(*) FROM %s", t), 2);

    /* autocommit is back on: a plain insert is visible at once */
    itest_exec(c, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000004')", t);
    ck_assert_int_eq(itest_count(other, "SELECT COUNT(*) FROM %s", t), 3);

    /* a failed statement inside a transaction: rollback leaves nothing */
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    itest_exec(c, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000005')", t);
    ck_assert_int_eq(odbox_conn_exec(c, sql, &e), ODBOX_EUNIQUE);
    ck_assert_int_eq(odbox_conn_rollback(c, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(other, "SELECT COUNT(*) FROM %s", t), 3);
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&other);
    odbox_conn_close(&c);
}
END_TEST

/* A '?' in a string, an escape string, a quoted name, a comment or a
 * dollar quote is text, not a parameter, through either client (libpq
 * numbers parameters $n, psqlODBC reads the text too). PostgreSQL's
 * syntax: the other dialects have their own tests of text. */
START_TEST(question_marks_in_text_are_not_parameters)
{
    if (!itest_is("pg"))
        return;
    odbox_conn *c = itest_connect(1);
    odbox_stmt *s = NULL;
    odbox_error e;
    const char *sql = "SELECT '?' || CAST(? AS TEXT) || E'\\'?' || $$?$$ /* ? /* ? */ ? */ AS \"a?\", "
                      "CAST(? AS BIGINT) + 1 AS b -- ?\n";
    ck_assert_msg(odbox_stmt_prepare(c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 1, "x", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_int64(s, 2, 41, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    const char *t = NULL;
    int64_t b = 0;
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &t, NULL, &e), ODBOX_OK);
    ck_assert_str_eq(t, "?x'??");
    ck_assert_int_eq(odbox_stmt_get_int64(s, 2, &b, NULL, &e), ODBOX_OK);
    ck_assert_int_eq(b, 42);
    ck_assert_int_eq(odbox_stmt_column_index(s, "a?"), 1);
    ck_assert_int_eq(odbox_stmt_column_index(s, "B"), 2);
    /* a boolean reads as 1 or 0 through both */
    odbox_stmt_free(&s);
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 1 = ?, CAST(NULL AS BOOLEAN)", &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_int64(s, 1, 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    int null = 0;
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &t, NULL, &e), ODBOX_OK);
    ck_assert_str_eq(t, "1");
    ck_assert_int_eq(odbox_stmt_get_text(s, 2, &t, &null, &e), ODBOX_OK);
    ck_assert_int_eq(null, 1);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 0);
    odbox_stmt_free(&s);
    odbox_conn_close(&c);
}
END_TEST

/* A statement that fails to parse as a transaction's first leaves it a
 * transaction: what follows is rolled back with it (libpq sends the
 * deferred BEGIN on its own, not in one text with the statement, which
 * the server would refuse whole). */
START_TEST(a_syntax_error_first_keeps_the_transaction)
{
    odbox_conn *c = itest_connect(1);
    odbox_error e;
    char t[64];
    itest_name(t, sizeof t, "tx_first");
    itest_exec(c, "CREATE TABLE %s (a INT)", t);
    char sql[128];
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    snprintf(sql, sizeof sql, "INSRT INTO %s VALUES (1)", t);
    ck_assert_int_ne(odbox_conn_exec(c, sql, &e), ODBOX_OK);
    ck_assert_msg(!strstr(e.message, "BEGIN"), "%s", e.message);
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (2)", t);
    odbox_conn_exec(c, sql, &e); /* refused (PostgreSQL, 25P02) or not: the rollback takes it */
    odbox_conn_rollback(c, &e);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", t), 0);
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

/* A failed statement leaves a transaction all or nothing. Where the
 * server aborts the transaction at the failure (PostgreSQL), nothing
 * more is sent, whether through exec or a prepared statement, and the
 * commit rolls back: psqlODBC had rolled back at the failure and ran, and
 * committed, what followed in a new transaction (only row 2 was left).
 * Elsewhere the transaction goes on with what it wrote. ROLLBACK TO a
 * savepoint taken before the failure resumes it where the server can. */
START_TEST(a_failed_statement_leaves_all_or_nothing)
{
    odbox_conn *c = itest_connect(1);
    odbox_error e;
    char t[64], sql[128];
    itest_name(t, sizeof t, "tx_fail");
    itest_exec(c, "CREATE TABLE %s (a INT PRIMARY KEY)", t);
    int aborts = odbox_conn_dialect(c)->failed_statement_aborts_tx;
    odbox_stmt *s = NULL;
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (?)", t);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);

    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (1)", t);
    ck_assert_int_eq(odbox_conn_exec(c, sql, &e), ODBOX_OK);
    ck_assert_int_ne(odbox_conn_exec(c, sql, &e), ODBOX_OK); /* a duplicate */
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (2)", t);
    int rc = odbox_conn_exec(c, sql, &e);
    ck_assert_int_eq(odbox_stmt_bind_int64(s, 1, 3, &e), ODBOX_OK);
    int rc_prepared = odbox_stmt_execute(s, &e);
    if (aborts) {
        ck_assert_int_eq(rc, ODBOX_ESTATE);
        ck_assert_int_eq(rc_prepared, ODBOX_ESTATE);
        ck_assert_msg(strstr(e.message, "nothing was sent"), "%s", e.message);
        ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_EDB);
        ck_assert_msg(strstr(e.message, "rolled back"), "%s", e.message);
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", t), 0);
    } else {
        ck_assert_int_eq(rc, ODBOX_OK);
        ck_assert_int_eq(rc_prepared, ODBOX_OK);
        ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_OK);
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", t), 3);
    }
    odbox_stmt_free(&s);

    /* back to a savepoint: the server takes the transaction up again
     * (libpq, MySQL, MariaDB, SQLite); psqlODBC had rolled it all back,
     * so the savepoint is gone and so is the whole transaction */
    itest_exec(c, "DELETE FROM %s", t);
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (4)", t);
    ck_assert_int_eq(odbox_conn_exec(c, sql, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_exec(c, "SAVEPOINT before_dup", &e), ODBOX_OK);
    ck_assert_int_ne(odbox_conn_exec(c, sql, &e), ODBOX_OK);
    int resumed = odbox_conn_exec(c, "ROLLBACK TO SAVEPOINT before_dup", &e) == ODBOX_OK;
    ck_assert_msg(resumed || (aborts && !itest_libpq()), "%s", e.message);
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (5)", t);
    ck_assert_int_eq(odbox_conn_exec(c, sql, &e), resumed ? ODBOX_OK : ODBOX_ESTATE);
    ck_assert_int_eq(odbox_conn_commit(c, &e), resumed ? ODBOX_OK : ODBOX_EDB);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", t), resumed ? 2 : 0);
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

/* Through libpq: freed statements are deallocated on the server (none
 * piles up past the cache, also when several are freed at once and in a
 * failed transaction); the DSN's own options= keeps ISO dates; a COPY is
 * refused and ends the session instead of hanging. */
START_TEST(libpq_statements_and_sessions)
{
    if (!itest_libpq())
        return;
    odbox_conn *c = itest_connect(1);
    odbox_error e;
    odbox_stmt *held[40] = {0};
    const char *count = "SELECT COUNT(*) FROM pg_prepared_statements";
    for (int round = 0; round < 3; round++) {
        if (round == 2)
            ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
        for (int i = 0; i < 40; i++) {
            char sql[64];
            snprintf(sql, sizeof sql, "SELECT %d + %d", round, i);
            ck_assert_msg(odbox_stmt_prepare(c, sql, &held[i], &e) == ODBOX_OK, "%s", e.message);
        }
        if (round == 2) /* freed inside a transaction that failed */
            ck_assert_int_ne(odbox_conn_exec(c, "SELECT 1/0", &e), ODBOX_OK);
        for (int i = 0; i < 40; i++) /* back to back: all but the cache's go */
            odbox_stmt_free(&held[i]);
        if (round == 2)
            ck_assert_int_eq(odbox_conn_rollback(c, &e), ODBOX_OK);
        int64_t n = -1;
        ck_assert_msg(odbox_conn_query_int64(c, count, &n, &e) == ODBOX_OK, "%s", e.message);
        ck_assert_msg(n <= 17, "round %d: %lld statements prepared on the server", round, (long long)n);
    }
    odbox_conn_close(&c);

    char *dsn = itest_dsn_with(1, "options=-c%20DateStyle%3DSQL,DMY");
    ck_assert_int_eq(odbox_conn_open(dsn, &c, &e), ODBOX_OK);
    free(dsn);
    odbox_stmt *s = NULL;
    int64_t us = 0;
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT CAST('2026-03-04 05:06:07' AS TIMESTAMP)", &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    ck_assert_msg(odbox_stmt_get_timestamp(s, 1, &us, NULL, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(us, 1772600767000000LL);
    odbox_stmt_free(&s);

    ck_assert_int_eq(odbox_stmt_prepare(c, "COPY (SELECT 1) TO STDOUT", &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_EUNSUPPORTED);
    ck_assert_msg(strstr(e.message, "COPY"), "%s", e.message);
    ck_assert(odbox_conn_is_dead(c));
    odbox_stmt_free(&s);
    odbox_conn_rollback(c, &e);
    odbox_conn_close(&c);
}
END_TEST

START_TEST(multi_row_insert)
{
    odbox_conn *c = itest_connect(1);
    const odbox_dialect *d = odbox_conn_dialect(c);
    char t[64];
    odbox_error e;
    itest_types_table(c, t, sizeof t);
    enum { ROWS = 500 };
    const char *forms[] = {d->uuid_param, "?", "?", d->json_param};
    char *values = odbox_sql_rows(ROWS, forms, 4);
    ck_assert_ptr_nonnull(values);
    size_t n = strlen(values) + 128;
    char *sql = malloc(n);
    snprintf(sql, n, "INSERT INTO %s (id, txt, i, j) VALUES %s", t, values);
    free(values);
    odbox_stmt *s = NULL;
    ck_assert_msg(odbox_stmt_prepare(c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    free(sql);
    for (int r = 0; r < ROWS; r++) {
        char id[37], txt[32];
        snprintf(id, sizeof id, "0192f0c1-7a3e-7abc-8def-%012d", r);
        snprintf(txt, sizeof txt, "row %d", r);
        ck_assert_int_eq(odbox_stmt_bind_uuid(s, r * 4 + 1, id, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_text(s, r * 4 + 2, txt, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_int64(s, r * 4 + 3, r, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_bind_json(s, r * 4 + 4, "{\"k\": 1}", &e), ODBOX_OK);
    }
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_rows_affected(s), ROWS);
    odbox_stmt_free(&s);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", t), ROWS);
    ck_assert_int_eq(itest_count(c, "SELECT SUM(i) FROM %s", t), (int64_t)ROWS * (ROWS - 1) / 2);
    itest_exec(c, "DROP TABLE %s", t);
    odbox_conn_close(&c);
}
END_TEST

START_TEST(server_gone_mid_transaction)
{
    odbox_conn *c = itest_connect(1), *admin = itest_connect(1);
    char t[64];
    odbox_error e;
    itest_types_table(admin, t, sizeof t);
    odbox_stmt *held = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 1", &held, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    itest_exec(c, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000009')", t);
    itest_kill_session(admin, itest_session_id(c));
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000010')", t);
    int rc = odbox_conn_exec(c, sql, &e);
    ck_assert_msg(rc == ODBOX_ECONNLOST, "got %s: %s", odbox_errname(rc), e.message);
    ck_assert(odbox_conn_is_dead(c));
    /* the loss was seen before the COMMIT: certainly not committed */
    ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_ECONNLOST);
    ck_assert_int_eq(odbox_conn_exec(c, "SELECT 1", &e), ODBOX_ECONNLOST);
    /* a dead connection takes nothing more: no transaction, no statement */
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_ECONNLOST);
    ck_assert_ptr_nonnull(strstr(e.message, "the connection is dead"));
    odbox_stmt *late = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(c, "SELECT 1", &late, &e), ODBOX_ECONNLOST);
    ck_assert_ptr_null(late);
    ck_assert_int_eq(odbox_stmt_execute(held, &e), ODBOX_ECONNLOST);
    ck_assert_ptr_nonnull(strstr(e.message, "the connection is dead"));
    odbox_stmt_free(&held);
    ck_assert_int_eq(itest_count(admin, "SELECT COUNT(*) FROM %s", t), 0); /* nothing half-written */
    itest_exec(admin, "DROP TABLE %s", t);
    odbox_conn_close(&c);
    odbox_conn_close(&admin);
}
END_TEST

/* A COMMIT sent on a connection that turns out lost: the client cannot
 * know the outcome. */
START_TEST(commit_on_a_lost_connection_is_in_doubt)
{
    odbox_conn *c = itest_connect(1), *admin = itest_connect(1);
    char t[64];
    odbox_error e;
    itest_types_table(admin, t, sizeof t);
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    itest_exec(c, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000011')", t);
    itest_kill_session(admin, itest_session_id(c));
    int rc = odbox_conn_commit(c, &e);
    ck_assert_msg(rc == ODBOX_EINDOUBT && e.code == ODBOX_EINDOUBT, "got %s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, "IN DOUBT") != NULL, "message: %s", e.message);
    ck_assert(odbox_conn_is_dead(c));
    ck_assert(!odbox_conn_in_transaction(c));
    ck_assert_int_eq(itest_count(admin, "SELECT COUNT(*) FROM %s", t), 0); /* killed before its COMMIT */
    itest_exec(admin, "DROP TABLE %s", t);
    odbox_conn_close(&c);
    odbox_conn_close(&admin);
}
END_TEST

START_TEST(pool_bounds_and_timeout)
{
    odbox_pool *p = NULL;
    odbox_error e;
    odbox_pool_config cfg = {.size = 2, .acquire_timeout_ms = 200};
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, &e), ODBOX_OK);
    odbox_conn *a = NULL, *b = NULL, *x = NULL;
    ck_assert_int_eq(odbox_pool_acquire(p, &a, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_pool_acquire(p, &b, &e), ODBOX_OK);
    ck_assert_ptr_ne(a, b);
    ck_assert_int_eq(odbox_pool_acquire(p, &x, &e), ODBOX_ETIMEDOUT);
    ck_assert_ptr_null(x);
    /* a transaction left open is rolled back on release */
    ck_assert_int_eq(odbox_conn_begin(a, &e), ODBOX_OK);
    odbox_pool_release(p, &a);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(odbox_pool_acquire(p, &x, &e), ODBOX_OK);
    ck_assert(!odbox_conn_in_transaction(x));
    ck_assert_str_eq(odbox_conn_dialect(x)->name, expected_dialect());
    odbox_pool_release(p, &x);
    odbox_pool_release(p, &b);
    odbox_pool_free(&p);
    ck_assert_ptr_null(p);
}
END_TEST

/* A discarded connection's session ends: its open transaction is gone
 * (not committed), and its place in the pool is free at once. */
START_TEST(pool_discard_ends_the_session)
{
    odbox_pool *p = NULL;
    odbox_error e;
    odbox_pool_config cfg = {.size = 1, .acquire_timeout_ms = 2000};
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, &e), ODBOX_OK);
    odbox_conn *c = NULL, *admin = itest_connect(1);
    char t[64];
    itest_types_table(admin, t, sizeof t);
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    itest_exec(c, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000012')", t);
    odbox_pool_discard(p, &c);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(itest_count(admin, "SELECT COUNT(*) FROM %s", t), 0);
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert(!odbox_conn_in_transaction(c));
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", t), 0);
    odbox_pool_release(p, &c);
    odbox_pool_discard(p, NULL); /* NULL-safe */
    odbox_pool_free(&p);
    itest_exec(admin, "DROP TABLE %s", t);
    odbox_conn_close(&admin);
}
END_TEST

START_TEST(pool_replaces_dead_connections)
{
    odbox_pool *p = NULL;
    odbox_error e;
    odbox_pool_config cfg = {.size = 1, .acquire_timeout_ms = 2000};
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, &e), ODBOX_OK);
    odbox_conn *c = NULL, *admin = itest_connect(1);
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    int64_t first = itest_session_id(c);
    odbox_pool_release(p, &c);
    itest_kill_session(admin, first);
    usleep(1100 * 1000); /* past the pool's validation window */
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert(!odbox_conn_is_dead(c));
    ck_assert_int_ne(itest_session_id(c), first);

    /* a connection that died while handed out is closed on release */
    itest_kill_session(admin, itest_session_id(c));
    ck_assert_int_eq(odbox_conn_exec(c, "SELECT 1", &e), ODBOX_ECONNLOST);
    odbox_pool_release(p, &c);
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(c, "SELECT 1"), 1);
    odbox_pool_release(p, &c);
    odbox_pool_free(&p);
    odbox_conn_close(&admin);
}
END_TEST

/* A pool of one connection whose session was ended while it sat idle
 * (as a server restart ends them all), within the pool's no-ping window. */
static odbox_pool *pool_with_a_lost_idle_session(odbox_conn **admin, int64_t *old_session, odbox_conn **conn)
{
    odbox_pool *p = NULL;
    odbox_error e;
    odbox_pool_config cfg = {.size = 1, .acquire_timeout_ms = 5000};
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, &e), ODBOX_OK);
    odbox_conn *c = NULL;
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    *old_session = itest_session_id(c); /* leaves that SELECT prepared in the cache */
    *conn = c;
    odbox_pool_release(p, &c);
    *admin = itest_connect(1);
    itest_kill_session(*admin, *old_session);
    return p;
}

/* The first thing sent on a hand-out is a read: the lost session is
 * replaced under it, in place, and the caller never sees it. */
START_TEST(pool_hides_a_lost_session_from_the_first_read)
{
    odbox_conn *admin = NULL, *before = NULL, *c = NULL;
    int64_t old_session = 0;
    odbox_pool *p = pool_with_a_lost_idle_session(&admin, &old_session, &before);
    odbox_error e;
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert_ptr_eq(c, before); /* the same connection, a new session */
    odbox_stmt *s = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(c, odbox_conn_dialect(c)->session_id_sql, &s, &e), ODBOX_OK);
    int64_t now = 0;
    int rc = odbox_stmt_execute(s, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    ck_assert_int_eq(odbox_stmt_get_int64(s, 1, &now, NULL, &e), ODBOX_OK);
    ck_assert_int_ne(now, old_session);
    odbox_stmt_free(&s);
    ck_assert(!odbox_conn_is_dead(c));
    /* once the server has answered, a lost session is the caller's to see:
     * it may have held something (a transaction, a lock) */
    itest_kill_session(admin, now);
    ck_assert_int_eq(odbox_conn_exec(c, "SELECT 1", &e), ODBOX_ECONNLOST);
    odbox_pool_release(p, &c);
    odbox_pool_free(&p);
    odbox_conn_close(&admin);
}
END_TEST

/* The first thing sent is a write in autocommit: it may have committed
 * before the loss showed, so it is never sent again. Here it did not (its
 * session was gone), which the caller learns as a lost connection. */
START_TEST(pool_never_sends_a_first_write_again)
{
    odbox_conn *admin = NULL, *before = NULL, *c = NULL;
    int64_t old_session = 0;
    odbox_pool *p = pool_with_a_lost_idle_session(&admin, &old_session, &before);
    char t[64], sql[256];
    odbox_error e;
    itest_types_table(admin, t, sizeof t);
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    snprintf(sql, sizeof sql, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000021')", t);
    int rc = odbox_conn_exec(c, sql, &e);
    ck_assert_msg(rc == ODBOX_ECONNLOST, "%s: %s", odbox_errname(rc), e.message);
    ck_assert(odbox_conn_is_dead(c));
    ck_assert_int_eq(itest_count(admin, "SELECT COUNT(*) FROM %s", t), 0);
    odbox_pool_release(p, &c); /* closed; the next hand-out opens anew */
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_exec(c, sql, &e), ODBOX_OK);
    odbox_pool_release(p, &c);
    ck_assert_int_eq(itest_count(admin, "SELECT COUNT(*) FROM %s", t), 1);
    itest_exec(admin, "DROP TABLE %s", t);
    odbox_pool_free(&p);
    odbox_conn_close(&admin);
}
END_TEST

/* The first thing sent opens a transaction (a BEGIN, or on PostgreSQL the
 * transaction's first statement, which carries it): nothing of it can
 * have committed, so it is begun again on a new session. */
START_TEST(pool_begins_a_first_transaction_again)
{
    odbox_conn *admin = NULL, *before = NULL, *c = NULL;
    int64_t old_session = 0;
    odbox_pool *p = pool_with_a_lost_idle_session(&admin, &old_session, &before);
    char t[64];
    odbox_error e;
    itest_types_table(admin, t, sizeof t);
    ck_assert_int_eq(odbox_pool_acquire(p, &c, &e), ODBOX_OK);
    int rc = odbox_conn_begin(c, &e);
    ck_assert_msg(rc == ODBOX_OK, "begin: %s: %s", odbox_errname(rc), e.message);
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO %s (id) VALUES ('0192f0c1-7a3e-7abc-8def-000000000022')", t);
    rc = odbox_conn_exec(c, sql, &e);
    ck_assert_msg(rc == ODBOX_OK, "insert: %s: %s", odbox_errname(rc), e.message);
    ck_assert(odbox_conn_in_transaction(c));
    ck_assert_int_eq(itest_count(admin, "SELECT COUNT(*) FROM %s", t), 0); /* still a transaction */
    ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(admin, "SELECT COUNT(*) FROM %s", t), 1);
    odbox_pool_release(p, &c);
    itest_exec(admin, "DROP TABLE %s", t);
    odbox_pool_free(&p);
    odbox_conn_close(&admin);
}
END_TEST

typedef struct worker_arg {
    odbox_pool *pool;
    int errors;
} worker_arg;

static void *pool_worker(void *ud)
{
    worker_arg *w = ud;
    for (int i = 0; i < 40; i++) {
        odbox_conn *c = NULL;
        odbox_error e;
        int64_t v = 0;
        if (odbox_pool_acquire(w->pool, &c, &e) != ODBOX_OK ||
            odbox_conn_query_int64(c, "SELECT 7", &v, &e) != ODBOX_OK || v != 7)
            w->errors++;
        odbox_pool_release(w->pool, &c);
    }
    return NULL;
}

START_TEST(pool_is_thread_safe)
{
    odbox_pool *p = NULL;
    odbox_pool_config cfg = {.size = 3, .acquire_timeout_ms = 10000};
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, NULL), ODBOX_OK);
    pthread_t th[6];
    worker_arg args[6];
    for (int i = 0; i < 6; i++) {
        args[i] = (worker_arg){p, 0};
        pthread_create(&th[i], NULL, pool_worker, &args[i]);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(args[i].errors, 0);
    }
    odbox_pool_free(&p);
}
END_TEST

START_TEST(keyed_locks_exclude)
{
    odbox_conn *a = itest_connect(1), *b = itest_connect(1);
    odbox_error e;
    char key[64];
    int taken = -1;
    itest_name(key, sizeof key, "lock");
    ck_assert_int_eq(odbox_conn_try_lock(a, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(odbox_conn_try_lock(b, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 0);
    ck_assert_int_eq(odbox_conn_lock(b, key, 200, &e), ODBOX_ETIMEDOUT);
    ck_assert_int_eq(odbox_conn_try_lock(b, "another key", &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(odbox_conn_unlock(b, "another key", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_unlock(a, key, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_unlock(a, key, &e), ODBOX_ESTATE); /* not held any more */
    ck_assert_int_eq(odbox_conn_lock(b, key, 1000, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_unlock(b, key, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_try_lock(a, "", &taken, &e), ODBOX_EINVAL);
    odbox_conn_close(&a);
    odbox_conn_close(&b);
}
END_TEST

/* The connection's own container: what the dialect's owner_sql answers. */
static void own_container(odbox_conn *c, char *out, size_t cap)
{
    odbox_stmt *s = NULL;
    odbox_error e;
    const char *v = NULL;
    ck_assert_int_eq(odbox_stmt_prepare(c, odbox_conn_dialect(c)->owner_sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    ck_assert_int_eq(odbox_stmt_get_text(s, 1, &v, NULL, &e), ODBOX_OK);
    snprintf(out, cap, "%s", v);
    odbox_stmt_free(&s);
}

/* A table in the connection's own container (NULL or named) and in an
 * eventlog, found where odbox_dialect_eventlog_locate says; a container
 * that does not exist has no tables (on SQLite too, where a schema the
 * connection lacks is otherwise an error). */
START_TEST(table_exists_by_container)
{
    char t[64], ev[64], own[256], evt_name[160];
    itest_name(t, sizeof t, "te");
    itest_name(ev, sizeof ev, "ev_te");
    odbox_conn *c = itest_connect(1);
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_error e;
    int exists = -1;
    itest_exec(c, "CREATE TABLE %s (id INT)", t);
    own_container(c, own, sizeof own);
    ck_assert_int_eq(odbox_conn_table_exists(c, NULL, t, &exists, &e), ODBOX_OK);
    ck_assert_int_eq(exists, 1);
    ck_assert_int_eq(odbox_conn_table_exists(c, own, t, &exists, &e), ODBOX_OK);
    ck_assert_int_eq(exists, 1);
    ck_assert_int_eq(odbox_conn_table_exists(c, "no_such_container", t, &exists, &e), ODBOX_OK);
    ck_assert_int_eq(exists, 0);
    ck_assert_int_eq(odbox_conn_table_exists(c, NULL, "no_such_table", &exists, &e), ODBOX_OK);
    ck_assert_int_eq(exists, 0);

    if (d->create_eventlog_fmt) {
        char sql[256];
        snprintf(sql, sizeof sql, d->create_eventlog_fmt, ev);
        itest_exec(c, "%s", sql);
    }
    itest_exec(c, "CREATE TABLE %s (id INT)", itest_evt(ev, "probe"));
    const char *container = "unset";
    ck_assert_int_eq(odbox_dialect_eventlog_locate(d, ev, "probe", &container, evt_name, sizeof evt_name), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_table_exists(c, container, evt_name, &exists, &e), ODBOX_OK);
    ck_assert_int_eq(exists, 1);
    ck_assert_int_eq(odbox_conn_table_exists(c, NULL, "probe", &exists, &e), ODBOX_OK);
    ck_assert_int_eq(exists, 0); /* not among the connection's own under its bare name */

    ck_assert_int_eq(odbox_conn_table_exists(c, NULL, NULL, &exists, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_table_exists(NULL, NULL, t, &exists, &e), ODBOX_EINVAL);
    itest_exec(c, "DROP TABLE %s", t);
    itest_exec(c, "DROP TABLE %s", itest_evt(ev, "probe"));
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
}
END_TEST

/* The connection's one-value helpers given a NULL output: ODBOX_EINVAL
 * with a message, before anything is sent (try_lock takes no lock that
 * its caller could not know it holds). */
START_TEST(helpers_refuse_null_outputs)
{
    odbox_conn *c = itest_connect(1), *other = itest_connect(1);
    odbox_error e;
    char key[64];
    int taken = -1;
    ck_assert_int_eq(odbox_conn_table_exists(c, NULL, "no_such_table", NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "table exists: exists is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_conn_query_int64(c, "SELECT 1", NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "query: out is NULL"), "%s", e.message);
    itest_name(key, sizeof key, "nulllock");
    ck_assert_int_eq(odbox_conn_try_lock(c, key, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "lock: taken is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_conn_try_lock(other, key, &taken, &e), ODBOX_OK);
    ck_assert_msg(taken == 1, "the refused try_lock took the lock");
    ck_assert_int_eq(odbox_conn_unlock(other, key, &e), ODBOX_OK);
    ck_assert(!odbox_conn_is_dead(c));
    ck_assert_int_eq(itest_count(c, "SELECT 41 + 1"), 42); /* the connection is as it was */
    odbox_conn_close(&other);
    odbox_conn_close(&c);
}
END_TEST

Suite *db_suite(void)
{
    Suite *s = suite_create("db");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, connect_and_detect);
    tcase_add_test(t, raw_odbc_string_detects_dialect);
    tcase_add_test(t, wrong_password_is_connect_error_without_password);
    tcase_add_test(t, unreachable_server);
    db_add_bind_tests(t);
    tcase_add_test(t, bad_statement_input);
    tcase_add_test(t, unique_conflict_and_transactions);
    tcase_add_test(t, multi_row_insert);
    tcase_add_test(t, question_marks_in_text_are_not_parameters);
    tcase_add_test(t, a_syntax_error_first_keeps_the_transaction);
    tcase_add_test(t, a_failed_statement_leaves_all_or_nothing);
    tcase_add_test(t, libpq_statements_and_sessions);
    tcase_add_test(t, server_gone_mid_transaction);
    tcase_add_test(t, commit_on_a_lost_connection_is_in_doubt);
    tcase_add_test(t, pool_bounds_and_timeout);
    tcase_add_test(t, pool_discard_ends_the_session);
    tcase_add_test(t, pool_replaces_dead_connections);
    tcase_add_test(t, pool_hides_a_lost_session_from_the_first_read);
    tcase_add_test(t, pool_never_sends_a_first_write_again);
    tcase_add_test(t, pool_begins_a_first_transaction_again);
    tcase_add_test(t, pool_is_thread_safe);
    tcase_add_test(t, keyed_locks_exclude);
    tcase_add_test(t, table_exists_by_container);
    tcase_add_test(t, helpers_refuse_null_outputs);
    suite_add_tcase(s, t);
    return s;
}
