/* odbox — what SQL an own transaction refuses (the owntx suite, with
 * test_owntx.c): statements that would end it, sent as SQL or hidden
 * behind a comment or a ';', and on MySQL and MariaDB those that commit
 * implicitly (DDL, LOCK TABLES, SET autocommit); a caller's session
 * settings do not outlive its transaction. Every check counts rows. */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "jobs_fx.h"
#include "owntx_fx.h"

/* Emits one event for id on tx and commits it: the caller's one row and
 * the event land, and nothing else is there. */
static void commit_lands_one(txf *o, odbox_tx **tx, const char *id)
{
    odbox_error e;
    txf_emit(*tx, id, "{}");
    int rc = odbox_tx_commit(tx, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(txf_rows(o), 1);
    ck_assert_int_eq(txf_events(o), 1);
}

/* A caller's SET TIME ZONE on its transaction's connection does not stay
 * on the pooled session: a session whose settings a caller changed is
 * closed at its release, and the next hand-out has odbox's UTC. The
 * database's time that odbox writes and compares (a key's created_date,
 * purge's "now") is UTC. Before, on PostgreSQL the next keyed transaction
 * on that session dated its key 12 hours back, and a purge with a window
 * of an hour removed it at once. (SQLite has no zone to set.) */
START_TEST(a_callers_time_zone_does_not_move_the_databases_time)
{
    txf o;
    txf_open(&o);
    odbox_error e;
    odbox_tx *tx = txf_begin(&o, NULL);
    if (!itest_is("sqlite")) {
        /* PostgreSQL's set_config sets as SET does; MySQL's SET sets each
         * variable of its list: the zone behind another */
        const char *set = itest_is("pg") ? "SELECT set_config('TimeZone', 'Etc/GMT+12', false)"
                                         : "SET @odbox_x = 1, time_zone = '-12:00'";
        int rc = odbox_conn_exec(odbox_tx_conn(tx), set, &e);
        ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    }
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    if (!itest_is("sqlite")) {
        odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(o.f.r));
        odbox_conn *c = NULL;
        ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
        odbox_stmt *s = NULL;
        const char *zone = NULL;
        int is_null = 0;
        ck_assert_int_eq(odbox_stmt_prepare(c, itest_is("pg") ? "SHOW TIME ZONE" : "SELECT @@session.time_zone", &s,
                                            &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
        ck_assert_int_eq(odbox_stmt_get_text(s, 1, &zone, &is_null, &e), ODBOX_OK);
        ck_assert_str_eq(zone, itest_is("pg") ? "UTC" : "+00:00");
        odbox_stmt_free(&s);
        odbox_pool_release(pool, &c);
    }
    odbox_tx_config keyed = {.idempotency_key = "tz-key"};
    tx = txf_begin(&o, &keyed); /* the pool hands out the session released last */
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    odbox_purge_options po = {.older_than_us = 365LL * 86400 * 1000000, .keys_older_than_us = 3600LL * 1000000};
    odbox_purge_result *res = NULL;
    size_t n = 0;
    int rc = odbox_purge_run(o.f.r, &po, &res, &n, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(res[0].keys, 0);
    odbox_purge_results_free(&res);
    ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s", itest_evt(o.f.ev[0], "idempotency_keys")), 1);
    if (itest_is("mysql") || itest_is("mariadb")) {
        /* autocommit turned off on a pooled session, outside any
         * transaction: closed at its release too; before, the next
         * caller's autocommit INSERT reported OK and never committed */
        odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(o.f.r));
        odbox_conn *c = NULL;
        ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
        ck_assert_msg(odbox_conn_exec(c, "SET autocommit = 0", &e) == ODBOX_OK, "%s", e.message);
        odbox_pool_release(pool, &c);
        ck_assert_int_eq(odbox_pool_acquire(pool, &c, &e), ODBOX_OK);
        ck_assert_int_eq(itest_count(c, "SELECT @@autocommit"), 1);
        itest_exec(c, "INSERT INTO %s (id, amount) VALUES ('after-autocommit', 1)", o.table);
        odbox_pool_release(pool, &c);
        ck_assert_int_eq(itest_count(o.f.c[0], "SELECT COUNT(*) FROM %s WHERE id = 'after-autocommit'", o.table), 1);
    }
    txf_close(&o);
}
END_TEST

/* A COMMIT (or another statement that ends or restarts the transaction)
 * sent as SQL on the tx's connection is refused and not sent, through
 * odbox_conn_exec and through a prepared statement; a savepoint and ROLLBACK TO it stay allowed. The
 * transaction stays open, and its rows and events then land together.
 * Before, a raw COMMIT committed the caller's rows alone, and the events
 * followed in a transaction of their own. */
START_TEST(a_commit_sent_as_sql_is_refused)
{
    txf o;
    txf_open(&o);
    odbox_error e;
    int rc;
    odbox_tx *tx = txf_begin(&o, NULL);
    odbox_conn *c = odbox_tx_conn(tx);
    txf_insert_row(&o, tx, "raw-commit", 1);
    static const char *const ending[] = {"COMMIT", " commit work", "\n(END)", "Abort", "ROLLBACK",
                                         "rollback transaction", "BEGIN", "START TRANSACTION",
                                         "/* app */ ROLLBACK", "-- note\nROLLBACK"};
    for (size_t i = 0; i < sizeof ending / sizeof ending[0]; i++) {
        rc = odbox_conn_exec(c, ending[i], &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "%s: %s: %s", ending[i], odbox_errname(rc), e.message);
        ck_assert_msg(strstr(e.message, "odbox_tx_commit") && strstr(e.message, "nothing was sent"),
                      "message: %s", e.message);
        odbox_stmt *s = NULL;
        rc = odbox_stmt_prepare(c, ending[i], &s, &e);
        ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
        rc = odbox_stmt_execute(s, &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "%s: %s: %s", ending[i], odbox_errname(rc), e.message);
        odbox_stmt_free(&s);
    }
    /* a second statement behind a ';' (sent as text, where drivers take
     * two), also behind PostgreSQL's E'...' string or a $ in a name */
    static const char *const hidden[] = {"SELECT 1; ROLLBACK", "SELECT E'\\''; COMMIT",
                                         "SELECT 1 AS x$y$; COMMIT; SELECT 1 AS z$y$"};
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++) {
        if (i > 0 && !itest_is("pg"))
            break; /* text the other servers read otherwise */
        rc = odbox_conn_exec(c, hidden[i], &e);
        ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, "nothing was sent"), "%s: %s: %s", hidden[i],
                      odbox_errname(rc), e.message);
    }
    /* MySQL and MariaDB commit at SET autocommit and at LOCK or UNLOCK
     * TABLES: refused there; before, they committed the caller's rows
     * ahead of the events, and a session left with autocommit off went
     * back to the pool, where the next caller's writes never committed */
    static const char *const commits_on_mysql[] = {"SET autocommit = 0", "SET @@autocommit = 1",
                                                   "LOCK TABLES t WRITE", "UNLOCK TABLES",
                                                   "SET @odbox_x = 1, autocommit = 0"};
    size_t ncommits = sizeof commits_on_mysql / sizeof commits_on_mysql[0];
    for (size_t i = 0; (itest_is("mysql") || itest_is("mariadb")) && i < ncommits; i++) {
        rc = odbox_conn_exec(c, commits_on_mysql[i], &e);
        ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, "nothing was sent"), "%s: %s: %s",
                      commits_on_mysql[i], odbox_errname(rc), e.message);
    }
    /* MySQL and MariaDB run the text of an executable comment (slash-star
     * and '!', MariaDB's also 'M!') as code; every server ignores an
     * optimizer hint's comment before a statement */
    static const char *const executed[] = {"/*!40101 COMMIT */", "/*! SET autocommit = 1 */",
                                           "SELECT 1 /*!; COMMIT */", "/*+ hint */ COMMIT",
                                           "/*M!100101 COMMIT */"};
    for (size_t i = 0; i < sizeof executed / sizeof executed[0]; i++) {
        if ((i < 3 && !itest_is("mysql") && !itest_is("mariadb")) || (i == 4 && !itest_is("mariadb")))
            continue;
        rc = odbox_conn_exec(c, executed[i], &e);
        ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, "nothing was sent"), "%s: %s: %s", executed[i],
                      odbox_errname(rc), e.message);
    }
    ck_assert_int_eq(odbox_conn_in_transaction(c), 1);
    ck_assert_int_eq(odbox_conn_exec(c, "SAVEPOINT before_second", &e), ODBOX_OK);
    txf_insert_row(&o, tx, "raw-rolled-back", 1);
    rc = odbox_conn_exec(c, "ROLLBACK TO SAVEPOINT before_second", &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(txf_rows(&o), 0); /* nothing committed by the refused ones */
    commit_lands_one(&o, &tx, "raw-commit");
    txf_close(&o);
}
END_TEST

/* MySQL and MariaDB commit the open transaction before DDL, account
 * statements and table maintenance (the manuals' "statements that cause
 * an implicit commit"): inside a transaction odbox refuses them and
 * sends nothing, so the caller's rows cannot land without their events.
 * A temporary table's CREATE and DROP commit nothing there and stay
 * allowed. PostgreSQL's and SQLite's DDL is transactional: it rolls back
 * with the rest. Before, a CREATE TABLE committed the caller's row at
 * once, and a rollback then left it with no event. */
START_TEST(ddl_that_commits_implicitly_is_refused)
{
    txf o;
    txf_open(&o);
    odbox_error e;
    int rc;
    int mysql = itest_is("mysql") || itest_is("mariadb");
    odbox_tx *tx = txf_begin(&o, NULL);
    odbox_conn *c = odbox_tx_conn(tx);
    txf_insert_row(&o, tx, "ddl", 1);
    static const char *const commits[] = {
        "CREATE TABLE owntx_ddl (a INT)", "create index owntx_i on owntx_x (a)", "ALTER TABLE owntx_x ADD b INT",
        "DROP TABLE IF EXISTS owntx_none", "RENAME TABLE owntx_x TO owntx_y", "TRUNCATE owntx_x",
        "/* app */ CREATE VIEW owntx_v AS SELECT 1", "SELECT 1; DROP TABLE owntx_none", "GRANT SELECT ON *.* TO nobody",
        "ANALYZE TABLE owntx_x", "OPTIMIZE LOCAL TABLE owntx_x", "FLUSH TABLES", "CREATE OR REPLACE TABLE owntx_x (a INT)",
        "CREATE PROCEDURE p() BEGIN SELECT 1; END", "SET PASSWORD = 'x'", "CHECK TABLE owntx_x"};
    for (size_t i = 0; mysql && i < sizeof commits / sizeof commits[0]; i++) {
        rc = odbox_conn_exec(c, commits[i], &e);
        ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, "nothing was sent") && strstr(e.message, "implicitly"),
                      "%s: %s: %s", commits[i], odbox_errname(rc), e.message);
        ck_assert_int_eq(odbox_conn_in_transaction(c), 1);
    }
    /* what commits nothing: a temporary table, its use and its drop */
    const char *create_temp = "CREATE TEMPORARY TABLE owntx_tmp (a INT)";
    const char *drop_temp = mysql ? "DROP TEMPORARY TABLE owntx_tmp" : "DROP TABLE owntx_tmp";
    rc = odbox_conn_exec(c, create_temp, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(odbox_conn_exec(c, "INSERT INTO owntx_tmp VALUES (1)", &e), ODBOX_OK);
    rc = odbox_conn_exec(c, drop_temp, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    if (!mysql) {
        rc = odbox_conn_exec(c, "CREATE TABLE owntx_ddl (a INT)", &e);
        ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    }
    ck_assert_int_eq(txf_rows(&o), 0); /* still nothing committed */
    char action_id[37];
    memcpy(action_id, odbox_tx_action_id(tx), sizeof action_id);
    odbox_tx_rollback(&tx);
    txf_nothing_landed(&o, action_id);
    if (!mysql) /* the table went with the rollback */
        ck_assert_int_ne(odbox_conn_exec(o.f.c[0], "SELECT a FROM owntx_ddl", &e), ODBOX_OK);

    /* the refusals left the session whole: a transaction on it commits */
    tx = txf_begin(&o, NULL);
    txf_insert_row(&o, tx, "after", 2);
    commit_lands_one(&o, &tx, "after");
    txf_close(&o);
}
END_TEST

void owntx_add_sql_tests(TCase *t)
{
    tcase_add_test(t, a_commit_sent_as_sql_is_refused);
    tcase_add_test(t, a_callers_time_zone_does_not_move_the_databases_time);
    tcase_add_test(t, ddl_that_commits_implicitly_is_refused);
}
