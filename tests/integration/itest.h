/* odbox — integration tier: helpers for suites that run against a real
 * server, once per dialect (ODBOX_TEST_DIALECT = pg | mariadb | mysql |
 * sqlite; SQLite needs no server, its databases are files). */
#ifndef ODBOX_TESTS_ITEST_H
#define ODBOX_TESTS_ITEST_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include "odbox/odbox.h"

/* The number of odbox's own migrations for the dialect under test (the
 * V*.sql files of $ODBOX_MIGRATIONS_DIR/<dialect's folder>; some versions
 * exist for MySQL/MariaDB only); a test's extra framework files are
 * numbered from 95 on, above them. */
#define ODBOX_TEST_FRAMEWORK_MIGRATIONS itest_framework_migrations()
int itest_framework_migrations(void);
/* The version of the i-th of them, in order ("1", "2", ...). */
const char *itest_framework_version(int i);

/* "pg", "mariadb", "mysql" or "sqlite" */
const char *itest_dialect(void);
/* 1 when the suites run on that dialect */
int itest_is(const char *dialect);
/* The SQL name of an eventlog table ("events", ...) in the dialect under
 * test: "ev.events", or "ev_events" on SQLite. Valid for the next 7 calls. */
const char *itest_evt(const char *eventlog, const char *table);
/* The test DSN: which = 1 (database odbox_test*) or 2 (second database). */
const char *itest_dsn(int which);
/* A DSN for `which` with `extra` appended to the query string. */
char *itest_dsn_with(int which, const char *extra);

/* A DSN of the dialect under test that cannot connect: a server port
 * nobody listens on, with secret as the password; on SQLite a file in a
 * directory that does not exist (no password there). Static buffer. */
/* 1 when the PostgreSQL suites run through libpq (the DSN's
 * driver=libpq) rather than ODBC. */
int itest_libpq(void);
const char *itest_unreachable_dsn(const char *secret);

odbox_conn *itest_connect(int which);
void itest_exec(odbox_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t itest_count(odbox_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The database's time on c (the dialect's now_sql), read as odbox reads it. */
int64_t itest_db_now(odbox_conn *c);
/* A name unique to this process and call, e.g. "t_1234_7". */
void itest_name(char *buf, size_t cap, const char *prefix);
/* Creates a table with one column of every odbox type (id, txt, i, dbl,
 * b, j, ts) on c; its name, unique, into name. */
void itest_types_table(odbox_conn *c, char *name, size_t cap);
/* The server's id of c's session, and ending a session from killer's
 * (waits a little: servers end sessions asynchronously). */
int64_t itest_session_id(odbox_conn *c);
void itest_kill_session(odbox_conn *killer, int64_t id);

/* Processes that start together: itest_barrier_name gives a fresh path
 * that does not exist (out: at least 64 bytes); itest_start_together runs
 * n copies of the shell command cmd (which waits, bounded, until that
 * file exists) with their output in p[], gives them 300 ms to connect and
 * creates the file. The caller pcloses them and unlinks the file. */
void itest_barrier_name(char *out, size_t cap, const char *what);
void itest_start_together(FILE **p, int n, const char *cmd, const char *barrier);
/* Drops an eventlog container (schema or database) of that name; SQLite
 * has none (its tables go with the test's temporary files). */
void itest_drop_eventlog(odbox_conn *c, const char *name);
/* Absolute path of a file below the source tree. */
const char *itest_src(const char *rel);
/* Restarts the server of the dialect under test (tests/db/restart-server.sh),
 * for the restart suite only (see test_restart.c). 0, said on stderr, when
 * there is no server to restart (ODBOX_DB_STATE_DIR unset); a failed check
 * under CI=true. */
int itest_restart_server(void);

/* Adds test tf to tc, unless the dialect under test cannot run it: the
 * list in itest.c names those tests and says why, which is printed
 * instead. Every suite's tcase_add_test goes through it. */
void itest_add_test(TCase *tc, const TTest *tf);
/* 1 (and printed) when that list names part ("test/part") for the
 * dialect under test: the test then leaves that part out. */
int itest_part_skipped(const char *part);
#undef tcase_add_test
#define tcase_add_test(tc, tf) itest_add_test(tc, tf)

Suite *db_suite(void);
Suite *migrate_suite(void);
Suite *schema_suite(void);
Suite *lock_suite(void);
Suite *repo_suite(void);
Suite *action_suite(void);
Suite *persist_suite(void);
Suite *shards_suite(void);
Suite *owner_suite(void);
Suite *tables_suite(void);
Suite *writers_suite(void);
Suite *idempotency_suite(void);
Suite *sqlite_suite(void);
Suite *jobs_suite(void);
Suite *jobs_cluster_suite(void);
Suite *jobs_faults_suite(void);
Suite *conn_suite(void);
Suite *restart_suite(void);
/* The wake suite's restart test, which restart_suite adds to its own. */
void wake_add_restart_tests(TCase *t);
Suite *commit_listeners_suite(void);
Suite *wake_suite(void);
Suite *notifications_suite(void);
Suite *purge_suite(void);
Suite *handlers_suite(void);
Suite *handlers_jobs_suite(void);
Suite *handlers_order_suite(void);
Suite *handlers_overlap_suite(void);
Suite *replica_suite(void);
Suite *handlers_names_suite(void);
Suite *handlers_giveup_suite(void);
Suite *subscriptions_suite(void);
Suite *collation_suite(void);
Suite *owntx_suite(void);

/* Suites built from the tests of two files: the second file's tests,
 * added by the suite's function to its tcase where they are listed. */
void db_add_bind_tests(TCase *t);                 /* test_db_binds.c */
void migrate_add_deploy_tests(TCase *t);          /* test_migrate_deploy.c */
void action_add_staging_refusals(TCase *t);       /* test_action_refusals.c */
void action_add_input_refusals(TCase *t);         /* test_action_refusals.c */
void handlers_jobs_add_lease_tests(TCase *tc);    /* test_handlers_leases.c */
void handlers_order_add_lease_tests(TCase *tc);   /* test_handlers_order_leases.c */
void handlers_jobs_add_handoff_tests(TCase *tc);  /* test_handlers_handoff.c */
void idempotency_add_refusal_tests(TCase *t);     /* test_idempotency_refusals.c */

#endif
