/* odbox — integration tests of the migration runner: fresh and repeated
 * runs, the user's own folder, tampered / missing / misnamed / failing
 * files and how status shows them, repair, dotted versions, the migrator
 * lock, several shards. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "migrate_fx.h"

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

START_TEST(fresh_then_idempotent)
{
    char ev[64];
    itest_name(ev, sizeof ev, "ev_fresh");
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    counts n = {0};
    odbox_migrate_options o = {.progress = count_progress, .progress_ud = &n};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(n.applied, ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_int_eq(n.done, 1);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_int_eq(mig_table_count(c, ev, "events"), 1);
    ck_assert_int_eq(mig_table_count(c, ev, "event_notifications"), 1);
    ck_assert_int_eq(mig_table_count(c, NULL, "scheduled_tasks"), 1);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events")), 0);

    memset(&n, 0, sizeof n);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_OK);
    ck_assert_int_eq(n.applied, 0);
    ck_assert_int_eq(n.up_to_date, 1);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);

    odbox_migration_info *list = NULL;
    size_t count = 0;
    ck_assert_int_eq(odbox_migrate_status(odbox_registry_default_shard(r), NULL, &list, &count, &e), ODBOX_OK);
    ck_assert_uint_eq(count, ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    for (size_t i = 0; i < count; i++) {
        ck_assert(list[i].applied);
        ck_assert_str_eq(list[i].version, itest_framework_version((int)i));
        ck_assert(!list[i].failed && !list[i].changed && !list[i].missing);
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
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    itest_exec(c, "DROP TABLE IF EXISTS widgets");
    odbox_migrate_options o = {.user_dir = itest_src("tests/fixtures/app-migrations"), .user_set = "shop"};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(mig_history(c, ev, "shop"), 2);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
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
    mig_copy_migrations(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dialect_dir());
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    odbox_migrate_options o = {.framework_dir = dir};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);

    /* a new V95 next to a changed V2: refused, and V95 is not applied */
    mig_write_file(sub, "V95__more.sql", mig_create_in_eventlog("more_things", "(id INT PRIMARY KEY);\n"));
    char path[400];
    snprintf(path, sizeof path, "%s/V2__create_event_notifications.sql", sub);
    FILE *f = fopen(path, "a");
    fputs("\n-- an innocent-looking edit\n", f);
    fclose(f);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_ptr_nonnull(strstr(e.message, "V2__create_event_notifications.sql"));
    ck_assert_ptr_nonnull(strstr(e.message, "changed"));
    ck_assert_int_eq(mig_table_count(c, ev, "more_things"), 0);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);

    /* missing applied file */
    unlink(path);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_ptr_nonnull(strstr(e.message, "missing"));
    ck_assert_int_eq(mig_table_count(c, ev, "more_things"), 0);

    /* a file that is not named V<n>__<desc>.sql */
    mig_remove_dir(dir);
    mig_copy_migrations(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dialect_dir());
    mig_write_file(sub, "V96_one_underscore.sql", "SELECT 1;\n");
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "V96_one_underscore.sql"));
    unlink(strcat(strcat(strcpy(path, sub), "/"), "V96_one_underscore.sql"));

    /* V96 applied, then a V95 squeezed below it */
    mig_write_file(sub, "V96__more.sql", mig_create_in_eventlog("more_things", "(id INT PRIMARY KEY);\n"));
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(mig_table_count(c, ev, "more_things"), 1);
    mig_write_file(sub, "V95__late.sql", mig_create_in_eventlog("late", "(id INT);\n"));
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_ptr_nonnull(strstr(e.message, "older than applied version 96"));
    ck_assert_int_eq(mig_table_count(c, ev, "late"), 0);

    mig_remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

/* The entry of one version in a status list. */
static const odbox_migration_info *status_of(odbox_registry *r, const odbox_migrate_options *o, const char *version,
                                             odbox_migration_info **list)
{
    size_t n = 0;
    odbox_error e;
    ck_assert_msg(odbox_migrate_status(odbox_registry_default_shard(r), o, list, &n, &e) == ODBOX_OK, "%s",
                  e.message);
    for (size_t i = 0; i < n; i++)
        if (!strcmp((*list)[i].version, version))
            return &(*list)[i];
    ck_abort_msg("version %s is not in the status", version);
    return NULL;
}

static size_t repair(odbox_registry *r, const odbox_migrate_options *o, int dry_run, odbox_repair_item *first)
{
    odbox_repair_item *items = NULL;
    size_t n = 0;
    odbox_error e;
    ck_assert_msg(odbox_migrate_repair(odbox_registry_default_shard(r), o, dry_run, &items, &n, &e) == ODBOX_OK,
                  "%s", e.message);
    if (n && first)
        *first = items[0];
    free(items);
    return n;
}

START_TEST(failing_migration)
{
    char ev[64], dir[256], sub[300];
    itest_name(ev, sizeof ev, "ev_fail");
    mig_copy_migrations(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dialect_dir());
    mig_write_file(sub, "V95__broken.sql", mig_create_in_eventlog("half", "(id INT PRIMARY KEY);\nSELEC broken syntax;\n"));
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    odbox_migrate_options o = {.framework_dir = dir};
    odbox_error e;
    odbox_migration_info *list = NULL;
    odbox_repair_item item;
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EDB);
    ck_assert_ptr_nonnull(strstr(e.message, "V95__broken.sql"));
    ck_assert_ptr_nonnull(strstr(e.message, "statement 2"));
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS); /* the framework's stay applied */
    if (odbox_conn_dialect(c)->has_transactional_ddl) {
        /* PostgreSQL: the file and its history row roll back together, so
         * nothing is recorded: status shows V95 pending, repair has nothing
         * to do, and fixing the file lets the next run apply it */
        ck_assert_int_eq(mig_table_count(c, ev, "half"), 0);
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE version = '95'", itest_evt(ev, "odbox_schema_history")), 0);
        const odbox_migration_info *v5 = status_of(r, &o, "95", &list);
        ck_assert(!v5->applied && !v5->failed && !v5->error[0]);
        free(list);
        ck_assert_uint_eq(repair(r, &o, 1, NULL), 0);
        mig_write_file(sub, "V95__broken.sql", mig_create_in_eventlog("half", "(id INT PRIMARY KEY);\n"));
        ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
        ck_assert_int_eq(mig_table_count(c, ev, "half"), 1);
    } else {
        /* DDL commits on its own here: the failure is recorded, with its
         * error, and later runs refuse to build on it */
        ck_assert_int_eq(mig_table_count(c, ev, "half"), 1);
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE version = '95' AND success = FALSE",
                                     itest_evt(ev, "odbox_schema_history")), 1);
        const odbox_migration_info *v5 = status_of(r, &o, "95", &list);
        ck_assert(!v5->applied && v5->failed && !v5->missing);
        ck_assert_msg(strstr(v5->error, "V95__broken.sql") && strstr(v5->error, "statement 2"), "%s", v5->error);
        free(list);
        ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
        ck_assert_ptr_nonnull(strstr(e.message, "failed in an earlier run"));
        ck_assert_ptr_nonnull(strstr(e.message, "odbox migrate repair"));
        /* repair: a dry run lists the entry and changes nothing */
        ck_assert_uint_eq(repair(r, &o, 1, &item), 1);
        ck_assert_int_eq(item.action, ODBOX_REPAIR_REMOVE_FAILED);
        ck_assert_str_eq(item.set, "odbox");
        ck_assert_str_eq(item.version, "95");
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE version = '95'", itest_evt(ev, "odbox_schema_history")), 1);
        /* a person undoes what the file did and fixes it, then repairs */
        itest_exec(c, "DROP TABLE %s", itest_evt(ev, "half"));
        mig_write_file(sub, "V95__broken.sql", mig_create_in_eventlog("half", "(id INT PRIMARY KEY);\n"));
        ck_assert_uint_eq(repair(r, &o, 0, &item), 1);
        ck_assert_int_eq(item.action, ODBOX_REPAIR_REMOVE_FAILED);
        ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE version = '95'", itest_evt(ev, "odbox_schema_history")), 0);
        ck_assert_uint_eq(repair(r, &o, 1, NULL), 0);
        ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
        ck_assert_int_eq(mig_table_count(c, ev, "half"), 1);
        ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS + 1);
    }
    mig_remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

/* An applied file that changed: migrate refuses, status says so, repair
 * (after a dry run) takes the file as it is. A renamed file of the same
 * version gets its new description; an applied file that is gone is left
 * alone. */
START_TEST(changed_file_realigned)
{
    char ev[64], dir[256], sub[300], path[400], renamed[400];
    itest_name(ev, sizeof ev, "ev_realign");
    mig_copy_migrations(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%s", dir, mig_dialect_dir());
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    odbox_migrate_options o = {.framework_dir = dir};
    odbox_error e;
    odbox_migration_info *list = NULL;
    odbox_repair_item item;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    char recorded[65];
    const odbox_migration_info *v2 = status_of(r, &o, "2", &list);
    snprintf(recorded, sizeof recorded, "%s", v2->checksum);
    free(list);

    snprintf(path, sizeof path, "%s/V2__create_event_notifications.sql", sub);
    FILE *f = fopen(path, "a");
    fputs("\n-- reformatted by a person\n", f);
    fclose(f);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_ptr_nonnull(strstr(e.message, "changed"));
    v2 = status_of(r, &o, "2", &list);
    ck_assert(v2->applied && v2->changed && !v2->failed);
    char on_disk[65];
    snprintf(on_disk, sizeof on_disk, "%s", v2->checksum);
    free(list);
    ck_assert_str_ne(on_disk, recorded);

    ck_assert_uint_eq(repair(r, &o, 1, &item), 1);
    ck_assert_int_eq(item.action, ODBOX_REPAIR_REALIGN);
    ck_assert_str_eq(item.version, "2");
    ck_assert_str_eq(item.old_checksum, recorded);
    ck_assert_str_eq(item.new_checksum, on_disk);
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION); /* a dry run changed nothing */
    ck_assert_uint_eq(repair(r, &o, 0, &item), 1);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE version = '2' AND checksum = '%s'",
                                 itest_evt(ev, "odbox_schema_history"), on_disk), 1);
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    v2 = status_of(r, &o, "2", &list);
    ck_assert(v2->applied && !v2->changed);
    free(list);

    /* the same file under a new description */
    snprintf(renamed, sizeof renamed, "%s/V2__notifications.sql", sub);
    ck_assert_int_eq(rename(path, renamed), 0);
    ck_assert_uint_eq(repair(r, &o, 0, &item), 1);
    ck_assert_str_eq(item.description, "notifications");
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE version = '2' "
                                    "AND description = 'notifications' AND script = 'V2__notifications.sql'",
                                 itest_evt(ev, "odbox_schema_history")), 1);
    /* an applied file that is gone: status says so, repair leaves it */
    unlink(renamed);
    v2 = status_of(r, &o, "2", &list);
    ck_assert(v2->missing && v2->applied);
    free(list);
    ck_assert_uint_eq(repair(r, &o, 0, NULL), 0);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);

    odbox_repair_item *items = NULL;
    size_t n = 0;
    ck_assert_int_eq(odbox_migrate_repair(NULL, &o, 1, &items, &n, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_migrate_repair(odbox_registry_default_shard(r), &o, 1, NULL, &n, &e), ODBOX_EINVAL);
    mig_remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

typedef struct seen_versions {
    char v[32][ODBOX_MIGRATION_VERSION_MAX];
    int n;
} seen_versions;

static void record_applying(void *ud, const odbox_migrate_event *ev)
{
    seen_versions *s = ud;
    if (ev->phase == ODBOX_MIGRATE_APPLYING && s->n < 32)
        snprintf(s->v[s->n++], sizeof s->v[0], "%s", ev->version);
}

/* Flyway's dotted versions: applied part by part in numeric order. */
START_TEST(dotted_versions)
{
    char ev[64], dir[] = "/tmp/odbox-dotted-XXXXXX";
    itest_name(ev, sizeof ev, "ev_dots");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    mig_write_file(dir, "V1__create.sql", mig_create_in_eventlog("dv", "(n INT NOT NULL);\n"));
    mig_write_file(dir, "V1.10__d.sql", mig_insert_dv(4));
    mig_write_file(dir, "V2__e.sql", mig_insert_dv(5));
    mig_write_file(dir, "V1.1__a.sql", mig_insert_dv(1));
    mig_write_file(dir, "V1_5__c.sql", mig_insert_dv(3));
    mig_write_file(dir, "V1.2__b.sql", mig_insert_dv(2));
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_conn *c = itest_connect(1);
    seen_versions seen = {0};
    odbox_migrate_options o = {.user_dir = dir, .user_set = "dots", .progress = record_applying, .progress_ud = &seen};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "%s", e.message);
    /* odbox's own first, then the set's */
    static const char *const want[] = {"1", "1.1", "1.2", "1.5", "1.10", "2"};
    const int nf = ODBOX_TEST_FRAMEWORK_MIGRATIONS;
    ck_assert_int_eq(seen.n, nf + 6);
    for (int i = 0; i < nf; i++)
        ck_assert_str_eq(seen.v[i], itest_framework_version(i));
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(seen.v[nf + i], want[i]);
    ck_assert_int_eq(mig_history(c, ev, "dots"), 6);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE migration_set = 'dots' "
                                    "AND version = '1.5' AND script = 'V1_5__c.sql'",
                                 itest_evt(ev, "odbox_schema_history")), 1);
    odbox_migration_info *list = NULL;
    size_t n = 0;
    ck_assert_int_eq(odbox_migrate_status(odbox_registry_default_shard(r), &o, &list, &n, &e), ODBOX_OK);
    ck_assert_uint_eq(n, (size_t)nf + 6);
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(list[i].version, (int)i < nf ? itest_framework_version((int)i) : want[(int)i - nf]);
        ck_assert(list[i].applied);
    }
    free(list);

    /* a version below the newest applied one, one that equals another
     * (2.0 is 2), and version 0 are refused before anything runs */
    char path[400];
    mig_write_file(dir, "V1.3__late.sql", mig_insert_dv(99));
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EMIGRATION);
    ck_assert_msg(strstr(e.message, "V1.3__late.sql") && strstr(e.message, "older than applied version 2"), "%s",
                  e.message);
    unlink(strcat(strcat(strcpy(path, dir), "/"), "V1.3__late.sql"));
    mig_write_file(dir, "V2.0__same.sql", mig_insert_dv(99));
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "appears twice"), "%s", e.message);
    unlink(strcat(strcat(strcpy(path, dir), "/"), "V2.0__same.sql"));
    mig_write_file(dir, "V0__zero.sql", "SELECT 1;\n");
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "V0__zero.sql") && strstr(e.message, "versions start above 0"), "%s", e.message);
    unlink(strcat(strcat(strcpy(path, dir), "/"), "V0__zero.sql"));
    mig_write_file(dir, "V12345678901234567890__huge.sql", "SELECT 1;\n");
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "has 20 digits"), "%s", e.message);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "dv")), 5);
    mig_remove_dir(dir);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

typedef struct migrator {
    const char *eventlog;
    const char *dsn;    /* NULL: itest_dsn(1) */
    int framework_only; /* without the slow user set */
    counts n;
    int rc;
    char message[ODBOX_ERROR_MESSAGE_MAX];
} migrator;

static void *run_migrator(void *ud)
{
    migrator *m = ud;
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = m->dsn ? m->dsn : itest_dsn(1), .eventlog = m->eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e = {0};
    odbox_migrate_options o = {.user_dir = itest_src("tests/fixtures/slow-migrations"), .user_set = "slow",
                               .progress = count_progress, .progress_ud = &m->n};
    if (m->framework_only)
        o.user_dir = NULL, o.user_set = NULL;
    m->rc = odbox_registry_open(&cfg, &r, &e);
    if (m->rc == ODBOX_OK)
        m->rc = odbox_migrate_registry(r, &o, &e);
    snprintf(m->message, sizeof m->message, "%s", e.message);
    odbox_registry_free(&r);
    return NULL;
}

/* Runs both at once, each on a thread of its own, until both end. */
static void run_two_migrators(migrator m[2])
{
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, run_migrator, &m[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
}

START_TEST(concurrent_migrators_apply_once)
{
    char ev[64];
    itest_name(ev, sizeof ev, "ev_conc");
    odbox_conn *c = itest_connect(1);
    migrator m[2] = {{.eventlog = ev}, {.eventlog = ev}};
    run_two_migrators(m);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(m[i].rc == ODBOX_OK, "migrator %d: %s", i, m[i].message);
    /* one applied everything, the other waited and found nothing to do */
    ck_assert_int_eq(m[0].n.applied + m[1].n.applied, ODBOX_TEST_FRAMEWORK_MIGRATIONS + 1);
    ck_assert_int_ge(m[0].n.waiting + m[1].n.waiting, 1);
    ck_assert_int_eq(mig_history(c, ev, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_int_eq(mig_history(c, ev, "slow"), 1);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
}
END_TEST

/* A schema (PostgreSQL) or database (MySQL/MariaDB) of its own for an
 * application, and a DSN whose connections use it. */
static void fresh_application(odbox_conn *admin, const char *app, char *dsn, size_t cap)
{
    const char *base = itest_dsn(1);
    if (itest_is("sqlite")) {
        snprintf(dsn, cap, "%s", base); /* one file: one application */
    } else if (itest_is("pg")) {
        itest_exec(admin, "CREATE SCHEMA %s", app);
        snprintf(dsn, cap, "%s%s%s%s", base, strchr(base, '?') ? "&" : "?",
                 itest_libpq() ? "options=-c%20search_path%3D" : "ConnSettings=SET%20search_path%20TO%20", app);
    } else {
        itest_exec(admin, "CREATE DATABASE %s", app);
        const char *query = strchr(base, '?'), *slash = strrchr(base, '/');
        snprintf(dsn, cap, "%.*s/%s%s", (int)(slash - base), base, app, query ? query : "");
    }
}

/* Two eventlogs of one application migrated at once where the tables
 * its eventlogs share (scheduled_tasks, odbox_job_state, ...) do not
 * exist yet: two services' first deploy on one database. Before, both
 * created them at once, and on PostgreSQL one failed at V3 or V4 ('23505
 * duplicate key value violates unique constraint
 * "pg_type_typname_nsp_index"'; 5 of 6 tries by hand). */
START_TEST(two_eventlogs_of_one_application_migrate_at_once)
{
    odbox_conn *c = itest_connect(1);
    for (int round = 0; round < 3; round++) {
        char app[64], ev[2][64], dsn[1024];
        itest_name(app, sizeof app, "app");
        itest_name(ev[0], sizeof ev[0], "ev_two_a");
        itest_name(ev[1], sizeof ev[1], "ev_two_b");
        fresh_application(c, app, dsn, sizeof dsn);
        migrator m[2] = {{.eventlog = ev[0], .dsn = dsn, .framework_only = 1},
                         {.eventlog = ev[1], .dsn = dsn, .framework_only = 1}};
        run_two_migrators(m);
        for (int i = 0; i < 2; i++)
            itest_drop_eventlog(c, ev[i]);
        if (itest_is("pg"))
            itest_exec(c, "DROP SCHEMA %s CASCADE", app);
        else if (!itest_is("sqlite"))
            itest_exec(c, "DROP DATABASE %s", app);
        for (int i = 0; i < 2; i++)
            ck_assert_msg(m[i].rc == ODBOX_OK, "round %d, eventlog %d: %s", round, i, m[i].message);
        ck_assert_int_eq(m[0].n.applied, ODBOX_TEST_FRAMEWORK_MIGRATIONS);
        ck_assert_int_eq(m[1].n.applied, ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    }
    odbox_conn_close(&c);
}
END_TEST

/* An eventlog odbox creates on MySQL/MariaDB is utf8mb4 whatever the
 * server's default character set: here latin1 (MariaDB's default before
 * 11.6, set for the migrating sessions by the driver's INITSTMT). Before,
 * it took the default, and so did the text columns without a character
 * set of their own (model_id, namespace, action_name, ...), which then
 * refused text outside Latin-1 at the commit. */
START_TEST(an_eventlog_is_created_utf8mb4_whatever_the_server_default)
{
    if (itest_part_skipped("an_eventlog_is_created_utf8mb4_whatever_the_server_default"))
        return;
    char ev[64];
    itest_name(ev, sizeof ev, "ev_cs");
    char *dsn = itest_dsn_with(1, "INITSTMT=SET%20character_set_server%3Dlatin1");
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = dsn, .eventlog = ev};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open(&cfg, &r, &e) == ODBOX_OK, "%s", e.message);
    odbox_pool *pool = odbox_shard_primary(odbox_registry_default_shard(r));
    odbox_conn *latin1 = NULL;
    ck_assert_msg(odbox_pool_acquire(pool, &latin1, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(itest_count(latin1, "SELECT COUNT(*) FROM DUAL WHERE @@character_set_server = 'latin1'"), 1);
    odbox_pool_release(pool, &latin1);
    ck_assert_msg(odbox_migrate_registry(r, NULL, &e) == ODBOX_OK, "%s", e.message);
    odbox_conn *c = itest_connect(1);
    int64_t db = itest_count(c,
                             "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '%s' AND "
                             "DEFAULT_CHARACTER_SET_NAME = 'utf8mb4'",
                             ev);
    int64_t other = itest_count(c,
                                "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '%s' AND "
                                "CHARACTER_SET_NAME NOT IN ('utf8mb4', 'ascii', 'binary')",
                                ev);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
    free(dsn);
    ck_assert_int_eq(db, 1);
    ck_assert_int_eq(other, 0);
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
    odbox_registry *r = mig_one_shard(1, ev);
    odbox_migrate_options o = {.lock_timeout_ms = 300};
    ck_assert_int_eq(odbox_migrate_registry(r, &o, &e), ODBOX_ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(e.message, "another migrator"));
    ck_assert_int_eq(mig_table_count(holder, ev, "events"), 0);
    odbox_repair_item *items = NULL;
    size_t n = 0;
    ck_assert_int_eq(odbox_migrate_repair(odbox_registry_default_shard(r), &o, 0, &items, &n, &e), ODBOX_ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(e.message, "another migrator"));
    ck_assert_ptr_null(items);
    ck_assert_int_eq(odbox_conn_unlock(holder, key, &e), ODBOX_OK);
    /* the default wait: the application's lock, which this run takes too,
     * may be another suite's now (pg.test and pg-libpq.test migrate the
     * same schema at once; a 300 ms wait for it failed under CI) */
    ck_assert_msg(odbox_migrate_registry(r, NULL, &e) == ODBOX_OK, "%s", e.message);
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
    ck_assert_int_eq(mig_history(c1, ev1, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_int_eq(mig_history(c2, ev2, "odbox"), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_int_eq(mig_table_count(c2, NULL, "scheduled_tasks"), 1);
    itest_drop_eventlog(c1, ev1);
    itest_drop_eventlog(c2, ev2);
    odbox_conn_close(&c1);
    odbox_conn_close(&c2);
    odbox_registry_free(&r);
}
END_TEST

START_TEST(unreachable_shard)
{
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open_dsn(itest_unreachable_dsn("Pw-991"), &r, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_migrate_registry(r, NULL, &e), ODBOX_ECONNECT);
    ck_assert_ptr_nonnull(strstr(e.message, "shard 0.0"));
    ck_assert_ptr_null(strstr(e.message, "Pw-991"));
    /* every call that reads the eventlog or a table says so too */
    odbox_shard *s = odbox_registry_default_shard(r);
    odbox_migration_info *list = NULL;
    odbox_repair_item *items = NULL;
    size_t n = 0;
    char owner[64];
    ck_assert_int_eq(odbox_migrate_status(s, NULL, &list, &n, &e), ODBOX_ECONNECT);
    ck_assert_int_eq(odbox_migrate_repair(s, NULL, 1, &items, &n, &e), ODBOX_ECONNECT);
    ck_assert_int_eq(odbox_migrate_check_owner(s, owner, sizeof owner, &e), ODBOX_ECONNECT);
    static const odbox_column cols[] = {{"label", ODBOX_TYPE_TEXT, 0, 0}};
    static const odbox_model_type t = {"T", "t", ODBOX_KIND_ENTITY, cols, 1};
    ck_assert_int_eq(odbox_model_type_verify(r, &t, &e), ODBOX_ECONNECT);
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
    tcase_add_test(t, changed_file_realigned);
    tcase_add_test(t, dotted_versions);
    tcase_add_test(t, concurrent_migrators_apply_once);
    tcase_add_test(t, an_eventlog_is_created_utf8mb4_whatever_the_server_default);
    tcase_add_test(t, lock_held_times_out);
    tcase_add_test(t, two_eventlogs_of_one_application_migrate_at_once);
    tcase_add_test(t, every_shard_migrated);
    tcase_add_test(t, unreachable_shard);
    migrate_add_deploy_tests(t);
    suite_add_tcase(s, t);
    return s;
}
