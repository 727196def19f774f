/* odbox — integration tier: helpers for suites that run against a real
 * server, once per dialect (ODBOX_TEST_DIALECT = pg | mariadb | mysql). */
#ifndef ODBOX_TESTS_ITEST_H
#define ODBOX_TESTS_ITEST_H

#include <check.h>
#include <stdint.h>
#include "odbox/odbox.h"

/* "pg", "mariadb" or "mysql" */
const char *itest_dialect(void);
/* The test DSN: which = 1 (database odbox_test*) or 2 (second database). */
const char *itest_dsn(int which);
/* A DSN for `which` with `extra` appended to the query string. */
char *itest_dsn_with(int which, const char *extra);

odbox_conn *itest_connect(int which);
void itest_exec(odbox_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t itest_count(odbox_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A name unique to this process and call, e.g. "t_1234_7". */
void itest_name(char *buf, size_t cap, const char *prefix);
/* The server's id of c's session, and ending a session from killer's
 * (waits a little: servers end sessions asynchronously). */
int64_t itest_session_id(odbox_conn *c);
void itest_kill_session(odbox_conn *killer, int64_t id);
/* Drops an eventlog container (schema or database) of that name. */
void itest_drop_eventlog(odbox_conn *c, const char *name);
/* Absolute path of a file below the source tree. */
const char *itest_src(const char *rel);

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
Suite *commit_listeners_suite(void);
Suite *wake_suite(void);

#endif
