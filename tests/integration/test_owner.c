/* odbox — integration tests of eventlog ownership: an eventlog belongs to
 * the application database (MySQL/MariaDB) or schema (PostgreSQL) whose
 * migrate created it, and migrate, status, repair and the executor refuse
 * it to another application (an action, and a transaction of the
 * caller's own at begin); an eventlog migrated before owners were
 * recorded is adopted; the DSN can name the eventlog. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "actions.h"

static int is_pg(void) { return !strcmp(itest_dialect(), "pg"); }

static odbox_registry *shard_on(const char *dsn, const char *eventlog)
{
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = dsn, .eventlog = eventlog};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open(&cfg, &r, &e) == ODBOX_OK, "%s", e.message);
    return r;
}

static int migrate(odbox_registry *r, odbox_error *e)
{
    return odbox_migrate_registry(r, NULL, e);
}

static int64_t tables_in(odbox_conn *c, const char *container, const char *table)
{
    return itest_count(c, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '%s' AND table_name = '%s'",
                       container, table);
}

/* The test DSN with another database (NULL: none), malloc'd. */
static char *dsn_of_database(const char *db)
{
    const char *base = itest_dsn(1);
    const char *q = strchr(base, '?');
    size_t slash = q ? (size_t)(q - base) : strlen(base);
    while (slash > 0 && base[slash - 1] != '/')
        slash--;
    size_t n = strlen(base) + (db ? strlen(db) : 0) + 1;
    char *dsn = malloc(n);
    ck_assert_ptr_nonnull(dsn);
    snprintf(dsn, n, "%.*s%s%s", (int)(db ? slash : slash - 1), base, db ? db : "", q ? q : "");
    return dsn;
}

/* Another application on the same server: a database of its own
 * (MySQL/MariaDB), or a schema of its own that its connections put first
 * on the search_path (PostgreSQL: the eventlog schema lives in the
 * database, so only applications in one database can meet there). */
typedef struct other_app {
    char name[64];
    char *dsn;
} other_app;

static void other_app_open(other_app *a, odbox_conn *admin)
{
    char sql[256];
    itest_name(a->name, sizeof a->name, "oa");
    snprintf(sql, sizeof sql, odbox_conn_dialect(admin)->create_eventlog_fmt, a->name);
    itest_exec(admin, "%s", sql);
    if (is_pg()) {
        char opt[128];
        if (itest_libpq())
            snprintf(opt, sizeof opt, "options=-c%%20search_path%%3D%s", a->name);
        else
            snprintf(opt, sizeof opt, "ConnSettings=SET%%20search_path%%20TO%%20%s", a->name);
        a->dsn = itest_dsn_with(1, opt);
        return;
    }
    a->dsn = dsn_of_database(a->name);
}

static void other_app_close(other_app *a, odbox_conn *admin)
{
    itest_drop_eventlog(admin, a->name);
    free(a->dsn);
}

static int probe(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params, (void)plan, (void)user, (void)err;
    return 0; /* no rows, no events: the executor writes a sentinel */
}

static int execute_probe(odbox_registry *r, odbox_error *e)
{
    odbox_executor *exe = NULL;
    ck_assert_int_eq(odbox_executor_open(NS, r, NULL, &exe, e), ODBOX_OK);
    odbox_action a = {"OwnerProbe", probe, NULL};
    int rc = odbox_execute(exe, &a, NULL, NULL, NULL, e);
    odbox_executor_free(&exe);
    return rc;
}

/* A transaction of the caller's own on shard 0.0, committed when begin
 * succeeds (its sentinel row is the one event it writes); *tx is what
 * begin left there. */
static int begin_probe(odbox_registry *r, odbox_tx **tx, odbox_error *e)
{
    odbox_executor *exe = NULL;
    ck_assert_int_eq(odbox_executor_open(NS, r, NULL, &exe, e), ODBOX_OK);
    int rc = odbox_tx_begin(exe, (odbox_shard_id){0, 0}, NULL, tx, e);
    if (rc == ODBOX_OK)
        rc = odbox_tx_commit(tx, e);
    odbox_executor_free(&exe);
    return rc;
}

START_TEST(eventlog_of_another_application_refused)
{
    char ev[64], ev_b[64], owner[256], want[256];
    itest_name(ev, sizeof ev, "ev_own");
    itest_name(ev_b, sizeof ev_b, "ev_own_b");
    odbox_conn *c = itest_connect(1);
    odbox_registry *a = shard_on(itest_dsn(1), ev);
    odbox_error e;
    ck_assert_msg(migrate(a, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(a), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_ne(owner, "");
    snprintf(want, sizeof want, "%s", owner);
    ck_assert_int_eq(
        itest_count(c, "SELECT COUNT(*) FROM %s WHERE owner = '%s'", itest_evt(ev, "odbox_eventlog_owner"), want), 1);
    ck_assert_int_eq(execute_probe(a, &e), ODBOX_OK);

    other_app oa;
    other_app_open(&oa, c);
    odbox_registry *b = shard_on(oa.dsn, ev);
    /* migrate: refused, with how to name another eventlog; nothing written */
    ck_assert_int_eq(migrate(b, &e), ODBOX_EOWNER);
    ck_assert_msg(strstr(e.message, "shard 0.0") && strstr(e.message, "belongs to") && strstr(e.message, want) &&
                      strstr(e.message, oa.name) && strstr(e.message, "?eventlog=NAME") &&
                      strstr(e.message, "\"eventlog\""),
                  "%s", e.message);
    ck_assert_ptr_null(strstr(e.message, "odbox-test-pw"));
    ck_assert_int_eq(tables_in(c, oa.name, "scheduled_tasks"), 0);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "odbox_schema_history")), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "odbox_eventlog_owner")), 1);
    /* status, repair and the owner check refuse it too */
    odbox_migration_info *list = NULL;
    size_t n = 7;
    ck_assert_int_eq(odbox_migrate_status(odbox_registry_default_shard(b), NULL, &list, &n, &e), ODBOX_EOWNER);
    ck_assert_ptr_null(list);
    ck_assert_uint_eq(n, 0);
    odbox_repair_item *items = NULL;
    ck_assert_int_eq(odbox_migrate_repair(odbox_registry_default_shard(b), NULL, 0, &items, &n, &e), ODBOX_EOWNER);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(b), owner, sizeof owner, &e),
                     ODBOX_EOWNER);
    ck_assert_str_eq(owner, want);
    /* the executor writes nothing into another application's outbox */
    int64_t events = itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events"));
    ck_assert_int_eq(events, 1);
    ck_assert_int_eq(execute_probe(b, &e), ODBOX_EOWNER);
    ck_assert_ptr_nonnull(strstr(e.message, "belongs to"));
    ck_assert_int_eq(execute_probe(b, &e), ODBOX_EOWNER); /* a refusal is not remembered as a pass */
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events")), events);
    /* nor into it through a transaction of the caller's own: refused at begin */
    for (int again = 0; again < 2; again++) {
        odbox_tx *tx = (odbox_tx *)1;
        ck_assert_int_eq(begin_probe(b, &tx, &e), ODBOX_EOWNER);
        ck_assert_msg(strstr(e.message, "belongs to") && strstr(e.message, want), "%s", e.message);
        ck_assert_ptr_null(tx);
    }
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events")), events);
    odbox_registry_free(&b);

    /* its own eventlog, named in the DSN, is fine */
    char *dsn = malloc(strlen(oa.dsn) + 80);
    sprintf(dsn, "%s%ceventlog=%s", oa.dsn, strchr(oa.dsn, '?') ? '&' : '?', ev_b);
    ck_assert_int_eq(odbox_registry_open_dsn(dsn, &b, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_shard_eventlog(odbox_registry_default_shard(b)), ev_b);
    ck_assert_msg(migrate(b, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(tables_in(c, ev_b, "events"), 1);
    ck_assert_int_eq(tables_in(c, oa.name, "scheduled_tasks"), 1);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(b), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_eq(owner, oa.name);
    ck_assert_int_eq(execute_probe(b, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev_b, "events")), 1);
    odbox_tx *tx = NULL;
    ck_assert_msg(begin_probe(b, &tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev_b, "events")), 2);
    odbox_registry_free(&b);
    free(dsn);

    /* a second eventlog of the first application in its own database */
    char ev_a2[64];
    itest_name(ev_a2, sizeof ev_a2, "ev_own_a2");
    odbox_registry *a2 = shard_on(itest_dsn(1), ev_a2);
    ck_assert_msg(migrate(a2, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(a2), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_eq(owner, want);
    odbox_registry_free(&a2);
    ck_assert_int_eq(odbox_migrate_check_owner(NULL, owner, sizeof owner, &e), ODBOX_EINVAL);

    itest_drop_eventlog(c, ev);
    itest_drop_eventlog(c, ev_b);
    itest_drop_eventlog(c, ev_a2);
    other_app_close(&oa, c);
    odbox_conn_close(&c);
    odbox_registry_free(&a);
}
END_TEST

/* An eventlog migrated before owners were recorded: the history table has
 * BIGINT versions and no error column, and there is no owner table. */
static void make_it_old(odbox_conn *c, const char *ev)
{
    itest_exec(c, "DROP TABLE %s.odbox_eventlog_owner", ev);
    itest_exec(c, "CREATE TABLE %s.h_copy AS SELECT * FROM %s.odbox_schema_history", ev, ev);
    itest_exec(c, "DROP TABLE %s.odbox_schema_history", ev);
    const odbox_dialect *d = odbox_conn_dialect(c);
    itest_exec(c,
               "CREATE TABLE %s.odbox_schema_history (migration_set VARCHAR(64) NOT NULL, version BIGINT NOT NULL, "
               "description VARCHAR(255) NOT NULL, script VARCHAR(255) NOT NULL, checksum CHAR(64) NOT NULL, "
               "installed_on %s NOT NULL, execution_ms BIGINT NOT NULL, success %s NOT NULL, "
               "PRIMARY KEY (migration_set, version))", ev, d->timestamp_type, d->bool_type);
    itest_exec(c,
               "INSERT INTO %s.odbox_schema_history SELECT migration_set, CAST(version AS %s), description, script, "
               "checksum, installed_on, execution_ms, success FROM %s.h_copy", ev, is_pg() ? "BIGINT" : "SIGNED", ev);
    itest_exec(c, "DROP TABLE %s.h_copy", ev);
}

START_TEST(existing_installation_adopted)
{
    char ev[64], owner[256];
    itest_name(ev, sizeof ev, "ev_old");
    odbox_conn *c = itest_connect(1);
    odbox_registry *a = shard_on(itest_dsn(1), ev);
    odbox_error e;
    ck_assert_msg(migrate(a, &e) == ODBOX_OK, "%s", e.message);
    make_it_old(c, ev);

    /* status reads the old history as it is; no owner yet */
    odbox_migration_info *list = NULL;
    size_t n = 0;
    ck_assert_msg(odbox_migrate_status(odbox_registry_default_shard(a), NULL, &list, &n, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_uint_eq(n, ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_str_eq(list[ODBOX_TEST_FRAMEWORK_MIGRATIONS - 1].version,
                     itest_framework_version(ODBOX_TEST_FRAMEWORK_MIGRATIONS - 1));
    ck_assert(list[ODBOX_TEST_FRAMEWORK_MIGRATIONS - 1].applied && !list[ODBOX_TEST_FRAMEWORK_MIGRATIONS - 1].changed);
    free(list);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(a), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_eq(owner, "");

    /* another application cannot adopt it: its container lacks the
     * scheduled_tasks that the history's migrate created */
    other_app oa;
    other_app_open(&oa, c);
    odbox_registry *b = shard_on(oa.dsn, ev);
    ck_assert_int_eq(migrate(b, &e), ODBOX_EOWNER);
    ck_assert_msg(strstr(e.message, "records no owner") && strstr(e.message, oa.name), "%s", e.message);
    ck_assert_int_eq(tables_in(c, ev, "odbox_eventlog_owner"), 0); /* nothing written */
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = '%s' "
                                    "AND table_name = 'odbox_schema_history' AND column_name = 'error_message'", ev), 0);

    /* its own application adopts it, and the history gets today's columns */
    ck_assert_msg(migrate(a, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(a), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_ne(owner, "");
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = '%s' "
                                    "AND table_name = 'odbox_schema_history' AND column_name = 'version' "
                                    "AND data_type IN ('character varying', 'varchar')", ev), 1);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = '%s' "
                                    "AND table_name = 'odbox_schema_history' AND column_name = 'error_message'", ev), 1);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE success = TRUE", itest_evt(ev, "odbox_schema_history")), ODBOX_TEST_FRAMEWORK_MIGRATIONS);
    ck_assert_int_eq(migrate(b, &e), ODBOX_EOWNER);
    ck_assert_ptr_nonnull(strstr(e.message, "belongs to"));
    odbox_registry_free(&b);

    itest_drop_eventlog(c, ev);
    other_app_close(&oa, c);
    odbox_conn_close(&c);
    odbox_registry_free(&a);
}
END_TEST

/* SQLite: an eventlog's tables sit in its application's file, so the file
 * owns it (as "main", its own tables' schema) under whatever path opens it;
 * another file has an eventlog of its own under the same name. */
START_TEST(eventlog_belongs_to_its_file)
{
    char ev[64], owner[256], copy[1024];
    itest_name(ev, sizeof ev, "ev_file");
    odbox_conn *c = itest_connect(1);
    odbox_registry *a = shard_on(itest_dsn(1), ev);
    odbox_error e;
    ck_assert_msg(migrate(a, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(a), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_eq(owner, "main");
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s WHERE owner = 'main'", itest_evt(ev, "odbox_eventlog_owner")),
                     1);
    ck_assert_int_eq(execute_probe(a, &e), ODBOX_OK);
    odbox_registry_free(&a);

    /* a copy of the file, opened under another path: still its own */
    const char *dsn = itest_dsn(1), *path = strstr(dsn, "://");
    ck_assert_ptr_nonnull(path);
    const char *slash = strrchr(path + 3, '/');
    ck_assert_ptr_nonnull(slash);
    snprintf(copy, sizeof copy, "%.*s/%s_copy.db", (int)(slash - path - 3), path + 3, ev);
    itest_exec(c, "VACUUM INTO '%s'", copy);
    char copy_dsn[1100];
    snprintf(copy_dsn, sizeof copy_dsn, "sqlite://%s", copy);
    odbox_registry *moved = shard_on(copy_dsn, ev);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(moved), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_eq(owner, "main");
    ck_assert_msg(migrate(moved, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(execute_probe(moved, &e), ODBOX_OK);
    odbox_registry_free(&moved);
    odbox_conn *cc = NULL;
    ck_assert_int_eq(odbox_conn_open(copy_dsn, &cc, &e), ODBOX_OK);
    ck_assert_int_eq(itest_count(cc, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events")), 2);
    odbox_conn_close(&cc);
    unlink(copy);

    /* another file: an eventlog of the same name that is its own */
    odbox_registry *b = shard_on(itest_dsn(2), ev);
    ck_assert_msg(migrate(b, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_migrate_check_owner(odbox_registry_default_shard(b), owner, sizeof owner, &e), ODBOX_OK);
    ck_assert_str_eq(owner, "main");
    ck_assert_int_eq(execute_probe(b, &e), ODBOX_OK);
    odbox_registry_free(&b);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM %s", itest_evt(ev, "events")), 1);
    odbox_conn_close(&c);
}
END_TEST

/* A DSN without a database: nothing to own an eventlog (MySQL/MariaDB). */
START_TEST(connection_without_a_database)
{
    if (is_pg())
        return; /* a PostgreSQL connection always has a database and a schema */
    char ev[64];
    itest_name(ev, sizeof ev, "ev_nodb");
    char *dsn = dsn_of_database(NULL);
    odbox_registry *r = shard_on(dsn, ev);
    free(dsn);
    odbox_error e;
    ck_assert_int_eq(migrate(r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "no current database"), "%s", e.message);
    odbox_registry_free(&r);
    odbox_conn *c = itest_connect(1);
    ck_assert_int_eq(tables_in(c, ev, "odbox_schema_history"), 0);
    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
}
END_TEST

Suite *owner_suite(void)
{
    Suite *s = suite_create("owner");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, eventlog_of_another_application_refused);
    tcase_add_test(t, existing_installation_adopted);
    tcase_add_test(t, connection_without_a_database);
    if (itest_is("sqlite"))
        tcase_add_test(t, eventlog_belongs_to_its_file);
    suite_add_tcase(s, t);
    return s;
}
