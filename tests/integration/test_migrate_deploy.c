/* odbox — integration tests of migrate in rolling deploys and upgrades:
 * processes of several versions migrate one database at once, and
 * nothing waits without a bound. A DDL behind a long transaction gives
 * up after the session's lock bound; a --dir without this dialect's
 * folder is refused; versions a newer build applied are left alone; a
 * history table of an earlier odbox takes dotted versions; idempotency
 * keys spent before V15 (no action name) keep replaying after it. Added
 * to the migrate suite (migrate_add_deploy_tests). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "idempotency.h"
#include "migrate_fx.h"
#include "odbox/tx.h"

/* A --dir tree of dialect folders that lacks this dialect's: refused,
 * naming the folder wanted, where the run used to take DIR itself (no
 * .sql files there) and apply nothing. */
START_TEST(a_dir_without_this_dialects_folder_is_refused)
{
    char ev[64], dir[] = "/tmp/odbox-others-XXXXXX", sub[400], want[400];
    itest_name(ev, sizeof ev, "ev_others");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (const odbox_dialect *const *k = odbox_dialects(); *k; k++) {
        if (!strcmp((*k)->migrations_dir, mig_dialect_dir()))
            continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, (*k)->migrations_dir);
        mkdir(sub, 0700);
        mig_write_file(sub, "V1__widgets.sql", "CREATE TABLE widgets_elsewhere (id INT);\n");
    }
    snprintf(want, sizeof want, "%s/%s", dir, mig_dialect_dir());
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_migrate_options o = {.user_dir = dir, .user_set = "others"};
    odbox_error e;
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, want), "%s", e.message);
    odbox_migration_info *list = NULL;
    size_t n = 0;
    ck_assert_int_eq(odbox_migrate_status(odbox_registry_default_shard(r), &o, &list, &n, &e), ODBOX_ENOTFOUND);
    /* with its folder there (empty), the run goes on */
    mkdir(want, 0700);
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    odbox_conn *c = itest_connect(1);
    ck_assert_int_eq(mig_history(c, ev, "others"), 0);
    mig_remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

typedef struct warnings {
    int n;
    char last[1024];
} warnings;

static void keep_warnings(void *ud, odbox_log_level level, const char *message)
{
    warnings *w = ud;
    if (level != ODBOX_LOG_WARN)
        return;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", message);
}

/* A rolling deploy: a newer build applied V2 (and V3); an older one, with
 * V1 only, migrates on start: the versions above its newest file are a
 * warning, once, not an error. A file missing below its newest file, or
 * a changed one, still stops the run. */
START_TEST(versions_newer_than_every_file_are_left_with_a_warning)
{
    char ev[64], dir[] = "/tmp/odbox-future-XXXXXX", path[400];
    itest_name(ev, sizeof ev, "ev_future");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    mig_write_file(dir, "V1__create.sql", mig_create_in_eventlog("dv", "(n INT NOT NULL);\n"));
    mig_write_file(dir, "V2__two.sql", mig_insert_dv(2));
    mig_write_file(dir, "V2.1__two_one.sql", mig_insert_dv(21));
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    odbox_migrate_options o = {.user_dir = dir, .user_set = "fut"};
    odbox_error e;
    warnings w = {0};
    odbox_log_set(keep_warnings, &w, ODBOX_LOG_WARN);
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(w.n, 0);
    ck_assert_int_eq(mig_history(c, ev, "fut"), 3);

    /* the older build: V1 only */
    unlink(strcat(strcat(strcpy(path, dir), "/"), "V2__two.sql"));
    unlink(strcat(strcat(strcpy(path, dir), "/"), "V2.1__two_one.sql"));
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(w.n, 1);
    ck_assert_msg(strstr(w.last, "set 'fut'") && strstr(w.last, "2 applied migration(s) newer") &&
                      strstr(w.last, "V1 ") && strstr(w.last, "up to V2.1"),
                  "%s", w.last);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "dv")), 2);
    /* a changed file below them still stops it */
    mig_write_file(dir, "V1__create.sql", mig_create_in_eventlog("dv", "(n INT NOT NULL); -- edited\n"));
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_msg(strstr(e.message, "changed"), "%s", e.message);
    mig_write_file(dir, "V1__create.sql", mig_create_in_eventlog("dv", "(n INT NOT NULL);\n"));

    /* V1, V2.1 and V3 on disk, V2 applied but gone: missing, as before */
    mig_write_file(dir, "V2.1__two_one.sql", mig_insert_dv(21));
    mig_write_file(dir, "V3__three.sql", mig_insert_dv(3));
    w.n = 0;
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_msg(strstr(e.message, "version 2 is applied but its file is missing"), "%s", e.message);
    ck_assert_int_eq(w.n, 0);
    ck_assert_int_eq(mig_history(c, ev, "fut"), 3);
    odbox_log_set(NULL, NULL, ODBOX_LOG_INFO);
    mig_remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A migration's DDL behind a transaction that read the table waits for
 * its lock (PostgreSQL's table lock, MySQL/MariaDB's metadata lock) at
 * most the session's bound, 50 s: here shortened to 1 s, as a session
 * may. It fails with ODBOX_ETIMEDOUT, having done nothing, and runs once
 * the holder ends. */
START_TEST(a_ddl_behind_an_open_reader_times_out)
{
    char ev[64], dir[] = "/tmp/odbox-ddlwait-XXXXXX";
    itest_name(ev, sizeof ev, "ev_ddlwait");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char sql[256];
    snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN waited INT;\n", itest_evt("${eventlog}", "events"));
    mig_write_file(dir, "V1__add_a_column.sql", sql);
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, NULL, &e) == ODBOX_OK, "%s", e.message);

    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(r));
    odbox_conn *c[4] = {NULL}; /* every idle session of the pool, and then some */
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(odbox_pool_acquire(pool, &c[i], &e), ODBOX_OK);
    /* odbox's own bound, before the test shortens it */
    if (itest_is("pg"))
        ck_assert_int_eq(itest_count(c[0], "SELECT CASE WHEN current_setting('lock_timeout') = '50s' THEN 1 ELSE 0 "
                                           "END"),
                         1);
    else
        ck_assert_int_eq(itest_count(c[0], "SELECT @@SESSION.lock_wait_timeout"), 50);
    const odbox_dialect *d = odbox_conn_dialect(c[0]);
    for (int i = 0; i < 4; i++) {
        for (size_t k = 0; d->bounded_session_sql(k, 1000, 0, sql, sizeof sql); k++)
            ck_assert_msg(odbox_conn_exec(c[i], sql, &e) == ODBOX_OK, "%s: %s", sql, e.message);
        odbox_pool_release(pool, &c[i]);
    }

    odbox_conn *holder = itest_connect(1);
    ck_assert_int_eq(odbox_conn_begin(holder, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(holder, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events")), 0);
    odbox_migrate_options o = {.user_dir = dir, .user_set = "wait"};
    int64_t t0 = mono_ms();
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_ETIMEDOUT);
    int64_t waited = mono_ms() - t0;
    ck_assert_msg(waited >= 900 && waited < 20000, "waited %lld ms", (long long)waited);
    ck_assert_msg(strstr(e.message, "V1__add_a_column.sql") && strstr(e.message, "another transaction"), "%s",
                  e.message);
    ck_assert_int_eq(odbox_conn_rollback(holder, &e), ODBOX_OK);
    /* nothing was done, and nothing recorded that holds the next run back */
    ck_assert_int_eq(itest_count(holder, "SELECT COUNT(*) FROM %s WHERE migration_set = 'wait'",
                                 itest_evt(ev, "odbox_schema_history")),
                     0);
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(mig_history(holder, ev, "wait"), 1);
    ck_assert_int_eq(itest_count(holder, "SELECT COUNT(waited) FROM %s", itest_evt(ev, "events")), 0);
    mig_remove_dir(dir);
    itest_drop_eventlog(holder, ev);
    odbox_conn_close(&holder);
    odbox_registry_free(&r);
}
END_TEST

/* The history table as an odbox before dotted versions made it (version
 * BIGINT, no error_message); with_error: as a later odbox left it on
 * SQLite, with error_message added but version still BIGINT. */
static void make_history_old(odbox_conn *c, const char *ev, int with_error)
{
    char hist[160], copy[160];
    snprintf(hist, sizeof hist, "%s", itest_evt(ev, "odbox_schema_history"));
    snprintf(copy, sizeof copy, "%s", itest_evt(ev, "h_copy"));
    const odbox_dialect *d = odbox_conn_dialect(c);
    itest_exec(c, "CREATE TABLE %s AS SELECT * FROM %s", copy, hist);
    itest_exec(c, "DROP TABLE %s", hist);
    itest_exec(c,
               "CREATE TABLE %s (migration_set VARCHAR(64) NOT NULL, version BIGINT NOT NULL, "
               "description VARCHAR(255) NOT NULL, script VARCHAR(255) NOT NULL, checksum CHAR(64) NOT NULL, "
               "installed_on %s NOT NULL, execution_ms BIGINT NOT NULL, success %s NOT NULL, "
               "PRIMARY KEY (migration_set, version))",
               hist, d->timestamp_type, d->bool_type);
    itest_exec(c,
               "INSERT INTO %s SELECT migration_set, CAST(version AS %s), description, script, checksum, "
               "installed_on, execution_ms, success FROM %s",
               hist, itest_is("pg") ? "BIGINT" : itest_is("sqlite") ? "INTEGER" : "SIGNED", copy);
    itest_exec(c, "DROP TABLE %s", copy);
    if (with_error)
        itest_exec(c, "ALTER TABLE %s ADD COLUMN error_message VARCHAR(1000) NULL", hist);
}

/* A history table of an earlier odbox is brought to today's columns on
 * the next migrate, and then keeps dotted versions as they are written:
 * 2.10 stays 2.10 (SQLite's INTEGER affinity made it the number 2.1,
 * and every later migrate failed), also where an earlier odbox had
 * added the error column but left the version column as it was. */
START_TEST(an_earlier_history_table_takes_dotted_versions)
{
    /* with the error column: only where an earlier odbox left the type
     * (no alter_column_type_fmt); elsewhere no odbox made that table */
    const odbox_dialect *d = odbox_dialect_find(itest_dialect());
    ck_assert_ptr_nonnull(d);
    for (int with_error = 0; with_error < (d->alter_column_type_fmt ? 1 : 2); with_error++) {
        char ev[64], dir[] = "/tmp/odbox-oldhist-XXXXXX";
        itest_name(ev, sizeof ev, "ev_oldhist");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        mig_write_file(dir, "V1__create.sql", mig_create_in_eventlog("dv", "(n INT NOT NULL);\n"));
        mig_write_file(dir, "V2__two.sql", mig_insert_dv(2));
        odbox_registry *r = mig_one_shard(1, ev);
        odbox_conn *c = itest_connect(1);
        odbox_migrate_options o = {.user_dir = dir, .user_set = "dots"};
        odbox_error e;
        ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
        make_history_old(c, ev, with_error);
        odbox_registry_free(&r); /* a process of the newer build: no statement cached on the old table */
        r = mig_one_shard(1, ev);

        mig_write_file(dir, "V2.2__a.sql", mig_insert_dv(22));
        mig_write_file(dir, "V2.10__b.sql", mig_insert_dv(210));
        ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%d: %s", with_error, e.message);
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "dv")), 3);
        /* again: every version is read back as written, nothing to do */
        ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%d: %s", with_error, e.message);
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "dv")), 3);
        ck_assert_int_eq(mig_history(c, ev, "dots"), 4);
        ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
        odbox_migration_info *list = NULL;
        size_t n = 0;
        ck_assert_int_eq(odbox_migrate_status(odbox_registry_default_shard(r), &o, &list, &n, &e), ODBOX_OK);
        int found = 0;
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(list[i].applied && !list[i].missing, "%s V%s", list[i].set, list[i].version);
            found += !strcmp(list[i].set, "dots") && !strcmp(list[i].version, "2.10");
        }
        ck_assert_int_eq(found, 1);
        free(list);
        mig_remove_dir(dir);
        itest_drop_eventlog(c, ev);
        odbox_conn_close(&c);
        odbox_registry_free(&r);
    }
}
END_TEST

#define KEYS_NS "com.example.keys15"

/* A key row as a build before V15 writes it, for own transactions'
 * params ({}): its INSERT names V11's columns only. */
static void key_of_an_older_build(odbox_conn *c, const char *ev, const char *action_id, const char *key)
{
    char sha[65];
    odbox_idem_params_sha256("{}", sha);
    itest_exec(c,
               "INSERT INTO %s (id, namespace, idem_key, params_sha256, result, created_date) "
               "VALUES ('%s', '" KEYS_NS "', '%s', '%s', NULL, %s)",
               itest_evt(ev, "idempotency_keys"), action_id, key, sha, odbox_conn_dialect(c)->now_sql);
}

static int keyed_begin(odbox_executor *exe, const char *name, const char *key, odbox_tx **tx, odbox_error *e)
{
    odbox_tx_config cfg = {.action_name = name, .idempotency_key = key};
    return odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, tx, e);
}

/* Removes the migrations of version v and later from the copy in dir
 * (mig_copy_migrations); how many. */
static int unlink_from_version(const char *dir, int v)
{
    char sub[400];
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dialect_dir());
    DIR *dh = opendir(sub);
    ck_assert_ptr_nonnull(dh);
    int n = 0;
    for (struct dirent *de; (de = readdir(dh));) {
        char path[700];
        if (de->d_name[0] != 'V' || atoi(de->d_name + 1) < v)
            continue;
        snprintf(path, sizeof path, "%s/%s", sub, de->d_name);
        ck_assert_int_eq(unlink(path), 0);
        n++;
    }
    closedir(dh);
    return n;
}

/* An upgrade across V15 during a rolling deploy: a key spent before it
 * has no action name and replays by its params under any name after it,
 * as does one that a build before V15 still writes beside this one (its
 * INSERT, without the new column, keeps working); a key this build spends
 * is its transaction name's, and another name is refused. */
START_TEST(keys_spent_before_v15_keep_replaying)
{
    char ev[64], dir[256];
    itest_name(ev, sizeof ev, "ev_keys15");
    mig_copy_migrations(dir, sizeof dir);
    int later = unlink_from_version(dir, 15); /* a build before V15 has none of them */
    ck_assert_int_ge(later, 1);
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    odbox_migrate_options before = {.framework_dir = dir};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &before, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS - later);
    const char *spent = "0191e5a4-0000-7000-8000-0000000000b1", *beside = "0191e5a4-0000-7000-8000-0000000000b2";
    key_of_an_older_build(c, ev, spent, "before-15");
    ck_assert_msg(odbox_migrate_registry(r, NULL, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    key_of_an_older_build(c, ev, beside, "beside-15");
    char keys[160];
    snprintf(keys, sizeof keys, "%s", itest_evt(ev, "idempotency_keys"));
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE action_name IS NULL", keys), 2);

    odbox_executor *exe = NULL;
    ck_assert_msg(odbox_executor_open(KEYS_NS, r, NULL, &exe, &e) == ODBOX_OK, "%s", e.message);
    odbox_tx *tx = NULL;
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(keyed_begin(exe, i ? "RefundOrder" : "PayOrder", i ? "beside-15" : "before-15", &tx, &e) ==
                          ODBOX_OK, "%s", e.message);
        ck_assert_int_eq(odbox_tx_replayed(tx), 1);
        ck_assert_str_eq(odbox_tx_action_id(tx), i ? beside : spent);
        odbox_tx_rollback(&tx);
    }
    ck_assert_msg(keyed_begin(exe, "PayOrder", "after-15", &tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_tx_replayed(tx), 0);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE action_name = 'PayOrder'", keys), 1);
    int rc = keyed_begin(exe, "RefundOrder", "after-15", &tx, &e);
    ck_assert_msg(rc == ODBOX_EUNIQUE, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_msg(strstr(e.message, "action PayOrder") && strstr(e.message, "RefundOrder"), "%s", e.message);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", keys), 3);
    odbox_executor_free(&exe);
    mig_remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

void migrate_add_deploy_tests(TCase *t)
{
    tcase_add_test(t, a_dir_without_this_dialects_folder_is_refused);
    tcase_add_test(t, versions_newer_than_every_file_are_left_with_a_warning);
    tcase_add_test(t, a_ddl_behind_an_open_reader_times_out);
    tcase_add_test(t, an_earlier_history_table_takes_dotted_versions);
    tcase_add_test(t, keys_spent_before_v15_keep_replaying);
}
