/* odbox — integration test helpers. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "itest.h"

const char *itest_dialect(void)
{
    const char *d = getenv("ODBOX_TEST_DIALECT");
    return d ? d : "pg";
}

int itest_is(const char *dialect) { return !strcmp(itest_dialect(), dialect); }

const char *itest_evt(const char *eventlog, const char *table)
{
    static char buf[8][160];
    static int k;
    char *b = buf[k++ % 8];
    const odbox_dialect *d = odbox_dialect_find(itest_dialect());
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(odbox_dialect_eventlog_table(d, eventlog, table, b, sizeof buf[0]), ODBOX_OK);
    return b;
}

/* What a dialect cannot do, by test name. */
static const struct {
    const char *dialect, *test, *why;
} skipped[] = {
    {"sqlite", "wrong_password_is_connect_error_without_password", "SQLite has no user or password"},
    {"sqlite", "server_gone_mid_transaction", "SQLite has no server session for another connection to end"},
    {"sqlite", "commit_on_a_lost_connection_is_in_doubt", "SQLite has no server session for another connection to end"},
    {"sqlite", "commit_on_a_lost_connection_is_in_doubt_tx", "SQLite has no server session for another connection to end"},
    {"sqlite", "a_commit_whose_answer_is_lost_is_in_doubt_and_landed", "SQLite has no network between odbox and the database"},
    {"sqlite", "a_deadlocked_transaction_writes_nothing", "SQLite has no row locks: writers queue for the file, nothing deadlocks"},
    {"sqlite", "a_session_lost_while_idle_is_replaced_under_the_transaction",
     "SQLite has no server session for another connection to end"},
    {"sqlite", "a_lost_session_that_cannot_be_replaced_writes_nothing",
     "SQLite has no server session for another connection to end"},
    {"mariadb", "a_lost_session_that_cannot_be_replaced_writes_nothing",
     "begin's START TRANSACTION sees a lost session and fails: no transaction is left without one"},
    {"mysql", "a_lost_session_that_cannot_be_replaced_writes_nothing",
     "begin's START TRANSACTION sees a lost session and fails: no transaction is left without one"},
    {"sqlite", "pool_replaces_dead_connections", "SQLite has no server session for another connection to end"},
    {"sqlite", "insert_and_find_round_trip/lost_under_a_write",
     "SQLite has no server session for another connection to end"},
    {"sqlite", "connection_lost_while_idle", "SQLite has no server session for another connection to end"},
    {"sqlite", "commit_lost_is_in_doubt_and_never_retried",
     "SQLite has no server session for another connection to end"},
    {"sqlite", "a_keyed_call_again_after_a_lost_commit_runs",
     "SQLite has no server session for another connection to end"},
    {"sqlite", "eventlog_of_another_application_refused",
     "an eventlog's tables sit in its application's file, which no other application opens as its own "
     "(eventlog_belongs_to_its_file shows a copy and another file)"},
    {"sqlite", "a_ddl_behind_an_open_reader_times_out",
     "SQLite in WAL mode: a reader holds back no writer, and a writer's one wait is the busy Timeout"},
    {"sqlite", "existing_installation_adopted",
     "no odbox before eventlog owners and dotted versions wrote a SQLite eventlog: there is none to adopt"},
    {"sqlite", "connection_without_a_database", "a SQLite connection always has its file"},
    {"sqlite", "a_fast_writer_clock_does_not_reorder_a_model",
     "SQLite's event dates are the writer's clock (its writers share one machine's; its own counts milliseconds), "
     "which this test skews"},
    {"sqlite", "a_fast_writer_clock_does_not_reorder_own_transactions",
     "SQLite's event dates are the writer's clock (its writers share one machine's; its own counts milliseconds), "
     "which this test skews"},
    {"sqlite", "pool_hides_a_lost_session_from_the_first_read",
     "SQLite has no server session for another connection to end"},
    {"sqlite", "pool_never_sends_a_first_write_again", "SQLite has no server session for another connection to end"},
    {"sqlite", "pool_begins_a_first_transaction_again", "SQLite has no server session for another connection to end"},
    {"sqlite", "connect_gives_up_at_a_black_hole", "SQLite opens a file: no network, nothing to wait for"},
    {"sqlite", "cli_status_at_a_black_hole_exits_4", "SQLite opens a file: no network, nothing to wait for"},
    {"sqlite", "a_lock_at_a_black_hole_is_a_connect_failure", "SQLite opens a file: no network, nothing to wait for"},
    {"sqlite", "read_gives_up_when_the_server_goes_silent", "SQLite has no server to go silent"},
    {"sqlite", "read_timeout_and_a_long_statement",
     "SQLite has no read timeout: read_timeout= is checked and dropped (docs/sqlite.md)"},
    {"sqlite", "outcomes_lost_with_their_connection_are_delivered_again",
     "SQLite has no server session for another connection to end"},
    {"sqlite", "a_hanging_shard_does_not_delay_another", "SQLite opens a file: no network, nothing to hang"},
#define NO_DEADLOCK_VICTIM(dialect, why) {dialect, "an_outcome_update_that_loses_a_deadlock_runs_again", why}
    NO_DEADLOCK_VICTIM("sqlite", "SQLite has no row locks: writers queue for the file, nothing deadlocks"),
    NO_DEADLOCK_VICTIM("mariadb", "InnoDB picks the lighter transaction as a deadlock's victim, so a test cannot "
                                  "make the outcome UPDATE lose (bench/delivery.sh's fresh drain shows it)"),
    NO_DEADLOCK_VICTIM("mysql", "InnoDB picks the lighter transaction as a deadlock's victim, so a test cannot "
                                "make the outcome UPDATE lose (bench/delivery.sh's fresh drain shows it)"),
#undef NO_DEADLOCK_VICTIM
#define NO_STANDBY(dialect, why)                                                                 \
    {dialect, "a_backlog_drains_through_the_replica_without_idle_rounds", why},                  \
    {dialect, "paused_replay_falls_back_to_the_primary_and_back", why}
    NO_STANDBY("sqlite", "SQLite has no replication: a replica file shows what it holds (no lag to measure)"),
    NO_STANDBY("mariadb", "tests/db starts no MariaDB replica yet; the replica suite's standby is PostgreSQL's"),
    NO_STANDBY("mysql", "tests/db starts no MySQL replica (the mysql dialect runs on the MariaDB server there)"),
#undef NO_STANDBY
    {"sqlite", "scheduled_tasks_holds_what_db_scheduler_writes/other_time_zone",
     "SQLite has no session time zone: its times are the UTC text a writer gives"},
    {"pg", "scheduled_tasks_holds_what_db_scheduler_writes/other_time_zone",
     "timestamptz stores an instant: a writer's session time zone says which instant it means"},
    {"mariadb", "a_purge_that_loses_a_deadlock_deletes_again",
     "InnoDB rolls back the lighter of the two transactions, which may be the writer's: no deterministic loser"},
    {"mysql", "a_purge_that_loses_a_deadlock_deletes_again",
     "InnoDB rolls back the lighter of the two transactions, which may be the writer's: no deterministic loser"},
    {"sqlite", "a_purge_that_loses_a_deadlock_deletes_again", "SQLite has one writer at a time: no deadlock between rows"},
    {"mariadb", "a_row_json_c_cannot_read_is_its_subscriptions_last_error",
     "its JSON CHECK refuses what json-c cannot read (nesting of 32 levels or more)"},
    {"mysql", "a_row_json_c_cannot_read_is_its_subscriptions_last_error",
     "tests/db runs the mysql dialect on MariaDB, whose JSON CHECK refuses nesting of 32 levels or more"},
    {"mariadb", "a_row_that_cannot_be_read_is_given_up_on",
     "its JSON CHECK refuses what json-c cannot read (nesting of 32 levels or more)"},
    {"mysql", "a_row_that_cannot_be_read_is_given_up_on",
     "tests/db runs the mysql dialect on MariaDB, whose JSON CHECK refuses nesting of 32 levels or more"},
    {"sqlite", "a_heartbeat_session_ended_while_idle_is_replaced_at_once", "SQLite has no network between odbox and the database"},
    {"sqlite", "a_run_whose_session_was_lost_meanwhile_is_recorded",
     "SQLite has no network between odbox and the database: no session to lose"},
    {"sqlite", "an_eventlog_is_created_utf8mb4_whatever_the_server_default",
     "SQLite stores text as it is given: no character set"},
    {"pg", "an_eventlog_is_created_utf8mb4_whatever_the_server_default",
     "an eventlog is a schema, in the database's one encoding"},
    {"sqlite", "scheduled_tasks_of_an_older_installation_migrated_in_place",
     "SQLite's V3 made TEXT times and the (priority DESC, execution_time) index: nothing to migrate"},
    {"pg", "scheduled_tasks_of_an_older_installation_migrated_in_place",
     "PostgreSQL's V3 made timestamptz times and the (priority DESC, execution_time) index: nothing to migrate"},
};

int itest_part_skipped(const char *name)
{
    for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++)
        if (itest_is(skipped[i].dialect) && !strcmp(skipped[i].test, name)) {
            printf("SKIPPED on %s: %s: %s\n", skipped[i].dialect, name, skipped[i].why);
            fflush(stdout);
            return 1;
        }
    return 0;
}

void itest_add_test(TCase *tc, const TTest *tf)
{
    if (!itest_part_skipped(tf->name))
        tcase_add_test_raise_signal(tc, tf, 0);
}

const char *itest_dsn(int which)
{
    const char *d = itest_dialect();
    char var[64];
    snprintf(var, sizeof var, "ODBOX_TEST_%s_DSN%s",
             !strcmp(d, "pg")        ? "PG"
             : !strcmp(d, "mariadb") ? "MARIADB"
             : !strcmp(d, "sqlite")  ? "SQLITE"
                                     : "MYSQL",
             which == 2 ? "2" : "");
    return getenv(var);
}

char *itest_dsn_with(int which, const char *extra)
{
    const char *base = itest_dsn(which);
    size_t n = strlen(base) + strlen(extra) + 2;
    char *s = malloc(n);
    ck_assert_ptr_nonnull(s);
    snprintf(s, n, "%s%s%s", base, strchr(base, '?') ? "&" : "?", extra);
    return s;
}

const char *itest_unreachable_dsn(const char *secret)
{
    static char dsn[256];
    if (itest_is("sqlite"))
        snprintf(dsn, sizeof dsn, "sqlite:///nonexistent-odbox-dir/x.db");
    else
        snprintf(dsn, sizeof dsn, "%s://u:%s@127.0.0.1:1/db%s", itest_is("pg") ? "postgresql" : itest_dialect(), secret,
                 itest_libpq() ? "?driver=libpq" : "");
    return dsn;
}

int itest_libpq(void)
{
    return itest_is("pg") && strstr(itest_dsn(1), "driver=libpq") != NULL;
}

odbox_conn *itest_connect(int which)
{
    odbox_conn *c = NULL;
    odbox_error e = {0};
    int rc = odbox_conn_open(itest_dsn(which), &c, &e);
    ck_assert_msg(rc == ODBOX_OK, "connect: %s", e.message);
    return c;
}

void itest_exec(odbox_conn *c, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    odbox_error e = {0};
    int rc = odbox_conn_exec(c, sql, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", sql, e.message);
}

int64_t itest_count(odbox_conn *c, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    odbox_error e = {0};
    int64_t n = -1;
    int rc = odbox_conn_query_int64(c, sql, &n, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", sql, e.message);
    return n;
}

int64_t itest_db_now(odbox_conn *c)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT %s%s%s", d->timestamp_read_open ? d->timestamp_read_open : "", d->now_sql,
             d->timestamp_read_close ? d->timestamp_read_close : "");
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    int64_t now = 0;
    int rc = odbox_stmt_prepare(c, sql, &s, &e);
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, &e)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, &e)) == 1)
        rc = odbox_stmt_get_timestamp(s, 1, &now, NULL, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", sql, e.message);
    odbox_stmt_free(&s);
    return now;
}

/* The pid alone repeats: a test that fails leaves its eventlog, and with
 * a pid_max of 32768 a later test process on the same server got that
 * test's pid; the left eventlog's migration history said the dummies
 * table (just dropped) was there. The time's seconds (20 bits: 12 days)
 * tell them apart. */
void itest_name(char *buf, size_t cap, const char *prefix)
{
    static int counter;
    snprintf(buf, cap, "%s_%ld_%lx_%d", prefix, (long)getpid(), (unsigned long)time(NULL) & 0xfffffUL, ++counter);
}

void itest_types_table(odbox_conn *c, char *name, size_t cap)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    itest_name(name, cap, "t_types");
    itest_exec(c,
               "CREATE TABLE %s (id %s PRIMARY KEY, txt VARCHAR(200), i BIGINT, dbl DOUBLE PRECISION, "
               "b %s, j %s, ts %s NULL)",
               name, d->uuid_type, d->bool_type, d->json_type, d->timestamp_type);
}

void itest_drop_eventlog(odbox_conn *c, const char *name)
{
    char sql[256];
    if (!odbox_conn_dialect(c)->drop_eventlog_fmt)
        return;
    snprintf(sql, sizeof sql, odbox_conn_dialect(c)->drop_eventlog_fmt, name);
    itest_exec(c, "%s", sql);
}

const char *itest_src(const char *rel)
{
    static char buf[4][1024];
    static int k;
    const char *top = getenv("ODBOX_SRCDIR");
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", top ? top : ".", rel);
    return b;
}

int itest_restart_server(void)
{
    const char *state = getenv("ODBOX_DB_STATE_DIR");
    if (!state || !*state) {
        const char *ci = getenv("CI");
        ck_assert_msg(!ci || strcmp(ci, "true"), "restart tests need ODBOX_DB_STATE_DIR under CI=true "
                                                 "(run through tests/db/with-servers.sh)");
        fprintf(stderr, "*** SKIPPED restart test: ODBOX_DB_STATE_DIR is unset, no server to restart\n");
        return 0;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>&1", itest_src("tests/db/restart-server.sh"),
             itest_is("pg") ? "pg" : "mariadb");
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    return 1;
}

int64_t itest_session_id(odbox_conn *c)
{
    return itest_count(c, "%s", odbox_conn_dialect(c)->session_id_sql);
}

void itest_barrier_name(char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "/tmp/odbox-%s-barrier-XXXXXX", what);
    int fd = mkstemp(out);
    ck_assert_int_ge(fd, 0);
    close(fd);
    unlink(out); /* the processes wait until it exists again */
}

void itest_start_together(FILE **p, int n, const char *cmd, const char *barrier)
{
    for (int k = 0; k < n; k++)
        ck_assert_ptr_nonnull(p[k] = popen(cmd, "r"));
    usleep(300000); /* let them connect, then start them together */
    FILE *b = fopen(barrier, "w");
    ck_assert_ptr_nonnull(b);
    fclose(b);
}

void itest_kill_session(odbox_conn *killer, int64_t id)
{
    char sql[128];
    snprintf(sql, sizeof sql, odbox_conn_dialect(killer)->kill_session_fmt, (long long)id);
    itest_exec(killer, "%s", sql);
    usleep(200 * 1000);
}

/* odbox's own migrations of the dialect under test, read once. */
static struct {
    int n;
    long v[64];
    char text[64][24];
} framework = {.n = -1};

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void framework_read(void)
{
    if (framework.n >= 0)
        return;
    const char *base = getenv("ODBOX_MIGRATIONS_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", base ? base : itest_src("migrations"),
             odbox_dialect_find(itest_dialect())->migrations_dir);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    framework.n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] != 'V' || len < 5 || strcmp(de->d_name + len - 4, ".sql"))
            continue;
        ck_assert_int_lt(framework.n, 64);
        framework.v[framework.n++] = strtol(de->d_name + 1, NULL, 10);
    }
    closedir(d);
    qsort(framework.v, (size_t)framework.n, sizeof framework.v[0], cmp_long);
    for (int i = 0; i < framework.n; i++)
        snprintf(framework.text[i], sizeof framework.text[i], "%ld", framework.v[i]);
}

int itest_framework_migrations(void)
{
    framework_read();
    return framework.n;
}

const char *itest_framework_version(int i)
{
    framework_read();
    ck_assert(i >= 0 && i < framework.n);
    return framework.text[i];
}
