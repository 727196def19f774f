/* odbox — integration tests of the migration runner: fresh and repeated
 * runs, the user's own folder, tampered / missing / misnamed / failing
 * files, the migrator lock, several shards. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "itest.h"

typedef struct counts {
    int applied, up_to_date, waiting, done;
} counts;

static void count_progress(void *ud, const odbox_migrate_event *ev)
{
    counts *c = ud;
    __atomic_add_fetch(ev->phase == ODBOX_MIGRATE_APPLIED      ? &c->applied
                       : ev->phase == ODBOX_MIGRATE_UP_TO_DATE ? &c->up_to_date
                       : ev->phase == ODBOX_MIGRATE_WAITING    ? &c->waiting
                       : ev->phase == ODBOX_MIGRATE_DONE       ? &c->done
                                                               : &(int){0},
                       1, __ATOMIC_SEQ_CST);
}

static odbox_registry *one_shard(int which, const char *eventlog)
{
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(which), .eventlog = eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open(&cfg, &r, &e) == ODBOX_OK, "%s", e.message);
    return r;
}

static int64_t history(odbox_conn *c, const char *eventlog, const char *set)
{
    return itest_count(c, "SELECT COUNT(*) FROM %s.odbox_schema_history WHERE migration_set = '%s' AND success = TRUE",
                       eventlog, set);
}

static int64_t table_count(odbox_conn *c, const char *schema, const char *table)
{
    return itest_count(c, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s%s%s AND table_name = '%s'",
                       schema ? "'" : "", schema ? schema : (strcmp(itest_dialect(), "pg") ? "DATABASE()" : "current_schema()"),
                       schema ? "'" : "", table);
}

/* A private copy of the framework migrations that a test may change. */
static void copy_migrations(char *dir, size_t cap)
{
    char cmd[1200];
    snprintf(dir, cap, "/tmp/odbox-mig-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp -r '%s'/* '%s'/", itest_src("migrations"), dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void remove_dir(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *mig_dir(void)
{
    const char *d = itest_dialect();
    return !strcmp(d, "pg") ? "pg" : d;
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(fresh_then_idempotent)
{
    char ev[64];
    itest_name(ev, sizeof ev, "ev_fresh");
    odbox_registry *r = one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    counts n = {0};
    odbox_migrate_options o = {.progress = count_progress, .progress_ud = &n};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(n.applied, 4);
    ck_assert_int_eq(n.done, 1);
    ck_assert_int_eq(history(c, ev, "odbox"), 4);
    ck_assert_int_eq(table_count(c, ev, "events"), 1);
    ck_assert_int_eq(table_count(c, ev, "event_notifications"), 1);
    ck_assert_int_eq(table_count(c, NULL, "scheduled_tasks"), 1);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s.events", ev), 0);

    memset(&n, 0, sizeof n);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_OK);
    ck_assert_int_eq(n.applied, 0);
    ck_assert_int_eq(n.up_to_date, 1);
    ck_assert_int_eq(history(c, ev, "odbox"), 4);

    odbox_migration_info *list = NULL;
    size_t count = 0;
    ck_assert_int_eq(odbox_migrate_status(odbox_registry_default_shard(r), NULL, &list, &count, &e), ODBOX_OK);
    ck_assert_uint_eq(count, 4);
    for (size_t i = 0; i < count; i++) {
        ck_assert(list[i].applied);
        ck_assert_int_eq(list[i].version, (int64_t)i + 1);
        ck_assert_int_eq(strlen(list[i].checksum), 64);
        ck_assert(list[i].installed_on_us > 0);
    }
    free(list);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(user_migrations)
{
    char ev[64];
    itest_name(ev, sizeof ev, "ev_user");
    odbox_registry *r = one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    itest_exec(c, "DROP TABLE IF EXISTS widgets");
    odbox_migrate_options o = {.user_dir = itest_src("tests/fixtures/app-migrations"), .user_set = "shop"};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(history(c, ev, "shop"), 2);
    ck_assert_int_eq(history(c, ev, "odbox"), 4);
    itest_exec(c, "INSERT INTO widgets (id, version, state, name, created_date, updated_date, color) "
                  "VALUES ('0192f0c1-7a3e-7abc-8def-0123456789ab', 1, 'ACTIVE', 'w', "
                  "'2026-01-01 00:00:00', '2026-01-01 00:00:00', 'red')");
    /* a bad set name is refused before anything runs */
    o.user_set = "Bad-Name";
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EINVAL);
    o.user_set = "odbox";
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EINVAL);
    itest_exec(c, "DROP TABLE widgets");
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(tampered_missing_and_out_of_order)
{
    char ev[64], dir[256], sub[300];
    itest_name(ev, sizeof ev, "ev_tamper");
    copy_migrations(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dir());
    odbox_registry *r = one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    odbox_migrate_options o = {.framework_dir = dir};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);

    /* a new V5 next to a changed V2: refused, and V5 is not applied */
    write_file(sub, "V5__more.sql", "CREATE TABLE ${eventlog}.more_things (id INT PRIMARY KEY);\n");
    char path[400];
    snprintf(path, sizeof path, "%s/V2__create_event_notifications.sql", sub);
    FILE *f = fopen(path, "a");
    fputs("\n-- an innocent-looking edit\n", f);
    fclose(f);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_ptr_nonnull(strstr(e.message, "V2__create_event_notifications.sql"));
    ck_assert_ptr_nonnull(strstr(e.message, "changed"));
    ck_assert_int_eq(table_count(c, ev, "more_things"), 0);
    ck_assert_int_eq(history(c, ev, "odbox"), 4);

    /* missing applied file */
    unlink(path);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_ptr_nonnull(strstr(e.message, "missing"));
    ck_assert_int_eq(table_count(c, ev, "more_things"), 0);

    /* a file that is not named V<n>__<desc>.sql */
    remove_dir(dir);
    copy_migrations(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dir());
    write_file(sub, "V6_one_underscore.sql", "SELECT 1;\n");
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "V6_one_underscore.sql"));
    unlink(strcat(strcat(strcpy(path, sub), "/"), "V6_one_underscore.sql"));

    /* V6 applied, then a V5 squeezed below it */
    write_file(sub, "V6__more.sql", "CREATE TABLE ${eventlog}.more_things (id INT PRIMARY KEY);\n");
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(table_count(c, ev, "more_things"), 1);
    write_file(sub, "V5__late.sql", "CREATE TABLE ${eventlog}.late (id INT);\n");
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_ptr_nonnull(strstr(e.message, "older than applied version 6"));
    ck_assert_int_eq(table_count(c, ev, "late"), 0);

    remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(failing_migration)
{
    char ev[64], dir[256], sub[300];
    itest_name(ev, sizeof ev, "ev_fail");
    copy_migrations(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dir());
    write_file(sub, "V5__broken.sql",
               "CREATE TABLE ${eventlog}.half (id INT PRIMARY KEY);\nSELEC broken syntax;\n");
    odbox_registry *r = one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    odbox_migrate_options o = {.framework_dir = dir};
    odbox_error e;
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EDB);
    ck_assert_ptr_nonnull(strstr(e.message, "V5__broken.sql"));
    ck_assert_ptr_nonnull(strstr(e.message, "statement 2"));
    ck_assert_int_eq(history(c, ev, "odbox"), 4); /* V1..V4 stay applied */
    if (odbox_conn_dialect(c)->has_transactional_ddl) {
        /* the whole file rolled back; fixing it lets the next run apply it */
        ck_assert_int_eq(table_count(c, ev, "half"), 0);
        write_file(sub, "V5__broken.sql", "CREATE TABLE ${eventlog}.half (id INT PRIMARY KEY);\n");
        ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
        ck_assert_int_eq(table_count(c, ev, "half"), 1);
    } else {
        /* DDL commits on its own here: the failure is recorded and later
         * runs refuse to build on it */
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s.odbox_schema_history WHERE version = 5 AND success = FALSE", ev), 1);
        ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
        ck_assert_ptr_nonnull(strstr(e.message, "failed in an earlier run"));
    }
    remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

typedef struct migrator {
    const char *eventlog;
    counts n;
    int rc;
    char message[ODBOX_ERROR_MESSAGE_MAX];
} migrator;

static void *run_migrator(void *ud)
{
    migrator *m = ud;
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = m->eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e = {0};
    odbox_migrate_options o = {.user_dir = itest_src("tests/fixtures/slow-migrations"), .user_set = "slow",
                               .progress = count_progress, .progress_ud = &m->n};
    m->rc = odbox_registry_open(&cfg, &r, &e);
    if (m->rc == ODBOX_OK)
        m->rc = odbox_migrate_registry(r, &o, &e);
    snprintf(m->message, sizeof m->message, "%s", e.message);
    odbox_registry_free(&r);
    return NULL;
}

START_TEST(concurrent_migrators_apply_once)
{
    char ev[64];
    itest_name(ev, sizeof ev, "ev_conc");
    odbox_conn *c = itest_connect(1);
    migrator m[2] = {{.eventlog = ev}, {.eventlog = ev}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, run_migrator, &m[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(m[i].rc == ODBOX_OK, "migrator %d: %s", i, m[i].message);
    /* one applied everything, the other waited and found nothing to do */
    ck_assert_int_eq(m[0].n.applied + m[1].n.applied, 5);
    ck_assert_int_ge(m[0].n.waiting + m[1].n.waiting, 1);
    ck_assert_int_eq(history(c, ev, "odbox"), 4);
    ck_assert_int_eq(history(c, ev, "slow"), 1);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
}
END_TEST

START_TEST(lock_held_times_out)
{
    char ev[64], key[128];
    itest_name(ev, sizeof ev, "ev_lock");
    snprintf(key, sizeof key, "odbox.migrate.%s", ev);
    odbox_conn *holder = itest_connect(1);
    odbox_error e;
    ck_assert_int_eq(odbox_conn_lock(holder, key, 1000, &e), ODBOX_OK);
    odbox_registry *r = one_shard(1, ev);
    odbox_migrate_options o = {.lock_timeout_ms = 300};
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(e.message, "another migrator"));
    ck_assert_int_eq(table_count(holder, ev, "events"), 0);
    ck_assert_int_eq(odbox_conn_unlock(holder, key, &e), ODBOX_OK);
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    itest_drop_eventlog(holder, ev);
    odbox_conn_close(&holder);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(every_shard_migrated)
{
    char ev1[64], ev2[64];
    itest_name(ev1, sizeof ev1, "ev_s1");
    itest_name(ev2, sizeof ev2, "ev_s2");
    odbox_shard_config sc[] = {
        {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = ev1},
        {.id = {0, 1}, .primary_dsn = itest_dsn(2), .eventlog = ev2},
    };
    odbox_registry_config cfg = {.shards = sc, .nshards = 2};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_msg(odbox_migrate_registry(r, NULL, &e) == ODBOX_OK, "%s", e.message);
    odbox_conn *c1 = itest_connect(1), *c2 = itest_connect(2);
    ck_assert_int_eq(history(c1, ev1, "odbox"), 4);
    ck_assert_int_eq(history(c2, ev2, "odbox"), 4);
    ck_assert_int_eq(table_count(c2, NULL, "scheduled_tasks"), 1);
    itest_drop_eventlog(c1, ev1);
    itest_drop_eventlog(c2, ev2);
    odbox_conn_close(&c1);
    odbox_conn_close(&c2);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(unreachable_shard)
{
    const char *scheme = !strcmp(itest_dialect(), "pg") ? "postgresql" : itest_dialect();
    char dsn[128];
    snprintf(dsn, sizeof dsn, "%s://u:Pw-991@127.0.0.1:1/db", scheme);
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open_dsn(dsn, &r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_migrate_registry(r, NULL, &e), ODBOX_ECONNECT);
    ck_assert_ptr_nonnull(strstr(e.message, "shard 0.0"));
    ck_assert_ptr_null(strstr(e.message, "Pw-991"));
    odbox_registry_free(&r);
    ck_assert_int_eq(odbox_migrate_registry(NULL, NULL, &e), ODBOX_EINVAL);
}
END_TEST

Suite *migrate_suite(void)
{
    Suite *s = suite_create("migrate");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, fresh_then_idempotent);
    tcase_add_test(t, user_migrations);
    tcase_add_test(t, tampered_missing_and_out_of_order);
    tcase_add_test(t, failing_migration);
    tcase_add_test(t, concurrent_migrators_apply_once);
    tcase_add_test(t, lock_held_times_out);
    tcase_add_test(t, every_shard_migrated);
    tcase_add_test(t, unreachable_shard);
    suite_add_tcase(s, t);
    return s;
}
