/* odbox — what only the SQLite dialect does (its tests run on SQLite
 * only): transactions start with the write lock and wait for it a bounded
 * time, so that threads reading and writing in transactions never fail
 * with "database is locked"; readers never wait (WAL); the settings odbox
 * asks the driver for,
 * :memory: databases, keyed locks held in the process per database file,
 * and the eventlog tables' checks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "itest.h"

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static odbox_conn *connect_to(const char *dsn)
{
    odbox_conn *c = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_conn_open(dsn, &c, &e) == ODBOX_OK, "%s: %s", dsn, e.message);
    return c;
}

/* A deferred BEGIN would let a second transaction start, read, and fail
 * at its first write without waiting (SQLITE_BUSY): odbox's BEGIN takes
 * the write lock up front, waits for it up to the busy timeout, and then
 * fails as ODBOX_ETIMEDOUT with nothing begun. */
START_TEST(begin_takes_the_write_lock_with_a_bounded_wait)
{
    char *dsn = itest_dsn_with(1, "Timeout=300");
    odbox_conn *a = itest_connect(1), *b = connect_to(dsn);
    odbox_error e = {0};
    char t[64];
    itest_name(t, sizeof t, "t_lock");
    itest_exec(a, "CREATE TABLE %s (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)", t);
    itest_exec(a, "INSERT INTO %s (id, n) VALUES (1, 0)", t);

    ck_assert_int_eq(odbox_conn_begin(a, &e), ODBOX_OK);
    long t0 = now_ms();
    int rc = odbox_conn_begin(b, &e);
    long waited = now_ms() - t0;
    ck_assert_msg(rc == ODBOX_ETIMEDOUT, "begin beside a writer: %s: %s", odbox_errname(rc), e.message);
    ck_assert_ptr_nonnull(strstr(e.message, "locked"));
    ck_assert(!odbox_conn_in_transaction(b));
    /* the driver retries a busy statement once more: about 1-2 x Timeout */
    printf("begin beside a writer gave up after %ld ms (Timeout=300)\n", waited);
    ck_assert_msg(waited >= 250 && waited < 10000, "waited %ld ms for a 300 ms busy timeout", waited);

    /* a write outside a transaction waits the same way */
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE %s SET n = n + 1", t);
    ck_assert_int_eq(odbox_conn_exec(b, sql, &e), ODBOX_ETIMEDOUT);

    /* readers do not wait for the writer (WAL) and see the last commit */
    itest_exec(a, "UPDATE %s SET n = 5", t);
    t0 = now_ms();
    ck_assert_int_eq(itest_count(b, "SELECT n FROM %s", t), 0);
    ck_assert_int_lt(now_ms() - t0, 250);

    ck_assert_int_eq(odbox_conn_commit(a, &e), ODBOX_OK);
    ck_assert_msg(odbox_conn_begin(b, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_conn_exec(b, sql, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_commit(b, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(a, "SELECT n FROM %s", t), 6);
    itest_exec(a, "DROP TABLE %s", t);
    odbox_conn_close(&b);
    odbox_conn_close(&a);
    free(dsn);
}
END_TEST

enum { COUNTERS = 8, ROUNDS = 200 };

typedef struct counter_arg {
    odbox_pool *pool;
    const char *table;
    int failures;
    char message[ODBOX_ERROR_MESSAGE_MAX];
} counter_arg;

/* One read-modify-write: reads n, writes n + 1, in one transaction. */
static int bump(odbox_conn *c, const char *table, odbox_error *e)
{
    char sel[128], upd[128];
    snprintf(sel, sizeof sel, "SELECT n FROM %s WHERE id = 1", table);
    snprintf(upd, sizeof upd, "UPDATE %s SET n = ? WHERE id = 1", table);
    int64_t n = 0;
    odbox_stmt *s = NULL;
    int rc = odbox_conn_begin(c, e);
    if (rc == ODBOX_OK && (rc = odbox_conn_query_int64(c, sel, &n, e)) == ODBOX_OK &&
        (rc = odbox_stmt_prepare(c, upd, &s, e)) == ODBOX_OK && (rc = odbox_stmt_bind_int64(s, 1, n + 1, e)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, e);
    odbox_stmt_free(&s);
    if (rc == ODBOX_OK)
        return odbox_conn_commit(c, e);
    if (odbox_conn_in_transaction(c)) {
        odbox_error e2;
        odbox_conn_rollback(c, &e2);
    }
    return rc;
}

static void *count_up(void *ud)
{
    counter_arg *a = ud;
    for (int i = 0; i < ROUNDS; i++) {
        odbox_conn *c = NULL;
        odbox_error e = {0};
        int rc = odbox_pool_acquire(a->pool, &c, &e);
        if (rc == ODBOX_OK)
            rc = bump(c, a->table, &e);
        odbox_pool_release(a->pool, &c);
        if (rc != ODBOX_OK && a->failures++ == 0)
            snprintf(a->message, sizeof a->message, "%s: %.400s", odbox_errname(rc), e.message);
    }
    return NULL;
}

/* Threads that read and then write in one transaction (a deferred BEGIN
 * makes the write fail at once with "database is locked" when another
 * connection committed since the read): none fails, no update is lost. */
START_TEST(threads_read_then_write_in_transactions)
{
    odbox_conn *admin = itest_connect(1);
    char t[64];
    itest_name(t, sizeof t, "t_counter");
    itest_exec(admin, "CREATE TABLE %s (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)", t);
    itest_exec(admin, "INSERT INTO %s (id, n) VALUES (1, 0)", t);
    odbox_pool *pool = NULL;
    odbox_pool_config cfg = {.size = COUNTERS, .acquire_timeout_ms = 60000};
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &pool, NULL), ODBOX_OK);
    counter_arg args[COUNTERS];
    pthread_t th[COUNTERS];
    for (int i = 0; i < COUNTERS; i++) {
        args[i] = (counter_arg){.pool = pool, .table = t};
        ck_assert_int_eq(pthread_create(&th[i], NULL, count_up, &args[i]), 0);
    }
    for (int i = 0; i < COUNTERS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(args[i].failures == 0, "thread %d: %d failed transactions, the first: %s", i, args[i].failures,
                      args[i].message);
    }
    ck_assert_int_eq(itest_count(admin, "SELECT n FROM %s", t), COUNTERS * ROUNDS);
    odbox_pool_free(&pool);
    itest_exec(admin, "DROP TABLE %s", t);
    odbox_conn_close(&admin);
}
END_TEST

/* WAL, FULL synchronous commits and foreign keys, unless the DSN says
 * otherwise. */
START_TEST(driver_settings_and_overrides)
{
    odbox_conn *c = itest_connect(1);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'"), 1);
    ck_assert_int_eq(itest_count(c, "PRAGMA synchronous"), 2);
    ck_assert_int_eq(itest_count(c, "PRAGMA foreign_keys"), 1);
    odbox_conn_close(&c);
    char *dsn = itest_dsn_with(1, "SyncPragma=NORMAL&FKSupport=0");
    c = connect_to(dsn);
    ck_assert_int_eq(itest_count(c, "PRAGMA synchronous"), 1);
    ck_assert_int_eq(itest_count(c, "PRAGMA foreign_keys"), 0);
    odbox_conn_close(&c);
    free(dsn);
}
END_TEST

/* sqlite::memory: opens a database of the connection's own: a second
 * connection (another pooled one too) sees another, empty database, and
 * their keyed locks never meet. */
START_TEST(memory_database_is_private_to_its_connection)
{
    odbox_conn *a = connect_to("sqlite::memory:"), *b = connect_to("sqlite::memory:");
    odbox_error e = {0};
    ck_assert_str_eq(odbox_conn_dialect(a)->name, "sqlite");
    itest_exec(a, "CREATE TABLE m (x INTEGER)");
    itest_exec(a, "INSERT INTO m (x) VALUES (1)");
    ck_assert_int_eq(odbox_conn_begin(a, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(a, "SELECT COUNT(*) FROM m"), 1);
    ck_assert_int_eq(odbox_conn_commit(a, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(b, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'm'"), 0);
    int taken = 0;
    ck_assert_int_eq(odbox_conn_try_lock(a, "k", &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(odbox_conn_try_lock(b, "k", &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1);
    odbox_conn_close(&a);
    odbox_conn_close(&b);
}
END_TEST

/* Keyed locks belong to a connection and meet those of every connection
 * to the same file, however its path is spelled; closing the connection
 * releases them, as a server does when a session ends. */
START_TEST(local_locks_follow_the_file_and_the_connection)
{
    odbox_dsn *dsn = NULL;
    ck_assert_int_eq(odbox_dsn_parse(itest_dsn(1), &dsn, NULL), ODBOX_OK);
    char *slash = strrchr(dsn->database, '/');
    ck_assert_ptr_nonnull(slash);
    char other_spelling[1024];
    *slash = '\0';
    snprintf(other_spelling, sizeof other_spelling, "sqlite://%s/./%s", dsn->database, slash + 1);
    odbox_dsn_free(&dsn);

    char key[64];
    itest_name(key, sizeof key, "local");
    odbox_conn *a = itest_connect(1), *same = connect_to(other_spelling), *elsewhere = itest_connect(2);
    odbox_error e = {0};
    int taken = -1;
    ck_assert_int_eq(odbox_conn_try_lock(a, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(odbox_conn_try_lock(a, key, &taken, &e), ODBOX_OK); /* again: counted */
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(odbox_conn_try_lock(same, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 0);
    ck_assert_int_eq(odbox_conn_try_lock(elsewhere, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(odbox_conn_unlock(a, key, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_try_lock(same, key, &taken, &e), ODBOX_OK);
    ck_assert_int_eq(taken, 0); /* one take left */

    odbox_conn_close(&a); /* holding it */
    long t0 = now_ms();
    ck_assert_int_eq(odbox_conn_lock(same, key, 5000, &e), ODBOX_OK);
    ck_assert_int_lt(now_ms() - t0, 1000);
    ck_assert_int_eq(odbox_conn_unlock(same, key, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_unlock(same, key, &e), ODBOX_ESTATE);
    ck_assert_int_eq(odbox_conn_unlock(elsewhere, key, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_unlock(NULL, key, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_conn_try_lock(same, NULL, &taken, &e), ODBOX_EINVAL);
    odbox_conn_close(&same);
    odbox_conn_close(&elsewhere);
}
END_TEST

/* The eventlog tables take JSON only where JSON belongs, timestamps only
 * in the fixed-width form that sorts as text, booleans only as 0 and 1. */
START_TEST(eventlog_checks_refuse_bad_values)
{
    char ev[64];
    itest_name(ev, sizeof ev, "ev_checks");
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = ev};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_msg(odbox_migrate_registry(r, NULL, &e) == ODBOX_OK, "%s", e.message);
    odbox_conn *c = itest_connect(1);
    static const struct {
        const char *params, *started, *payload, *delivered;
        int rc;
    } rows[] = {
        {"'{}'", "'2026-01-02 03:04:05.123456'", "NULL", "0", ODBOX_OK},
        {"'{}'", "'2026-01-02 03:04:05.123456'", "'[1, 2]'", "FALSE", ODBOX_OK},
        {"'{not json'", "'2026-01-02 03:04:05.123456'", "NULL", "0", ODBOX_EDB},
        {"'{}'", "'2026-01-02 03:04:05.123456'", "'not json'", "0", ODBOX_EDB},
        {"'{}'", "'2026-01-02 03:04:05'", "NULL", "0", ODBOX_EDB},
        {"'{}'", "'2026-01-02T03:04:05.123456'", "NULL", "0", ODBOX_EDB},
        {"'{}'", "'2026-01-02 03:04:05.123456'", "NULL", "2", ODBOX_EDB},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char sql[1024];
        snprintf(sql, sizeof sql,
                 "INSERT INTO %s (id, namespace, action_id, action_name, action_params, started_date, "
                 "completion_date, payload, event_date, delivered) VALUES ('00000000-0000-4000-8000-%012zu', 'ns', "
                 "'00000000-0000-4000-8000-000000000000', 'A', %s, %s, '2026-01-02 03:04:05.123456', %s, "
                 "'2026-01-02 03:04:05.123456', %s)",
                 itest_evt(ev, "events"), i, rows[i].params, rows[i].started, rows[i].payload, rows[i].delivered);
        int rc = odbox_conn_exec(c, sql, &e);
        ck_assert_msg(rc == rows[i].rc, "row %zu: %s: %s", i, odbox_errname(rc), e.message);
    }
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events")), 2);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

Suite *sqlite_suite(void)
{
    Suite *s = suite_create("sqlite");
    if (!itest_is("sqlite"))
        return s;
    TCase *t = tcase_create("dialect");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, begin_takes_the_write_lock_with_a_bounded_wait);
    tcase_add_test(t, threads_read_then_write_in_transactions);
    tcase_add_test(t, driver_settings_and_overrides);
    tcase_add_test(t, memory_database_is_private_to_its_connection);
    tcase_add_test(t, local_locks_follow_the_file_and_the_connection);
    tcase_add_test(t, eventlog_checks_refuse_bad_values);
    suite_add_tcase(s, t);
    return s;
}
