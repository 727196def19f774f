/* odbox — schema check: after migrating, the framework tables, their
 * columns, types, nullability and indexes match the spec's DDL for the
 * dialect (PostgreSQL and SQLite: partial indexes; MySQL/MariaDB:
 * composite ones). SQLite has no information_schema: its catalogue is
 * read through pragma_table_info, pragma_index_list and sqlite_master. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "itest.h"

typedef enum { UUIDT, VC255, VC24, VC64, JSONT, TS, BOOLT, INTT } tag;

typedef struct col {
    const char *name;
    tag t;
    int nullable;
} col;

static const col events_cols[] = {
    {"id", UUIDT, 0},           {"namespace", VC255, 0},     {"action_id", UUIDT, 0},
    {"action_name", VC255, 0},  {"action_params", JSONT, 0}, {"started_date", TS, 0},
    {"completion_date", TS, 0}, {"model_id", VC255, 1},      {"model_type", VC255, 1},
    {"event_type", VC255, 1},   {"payload", JSONT, 1},       {"event_date", TS, 0},
    {"delivered", BOOLT, 0},
};

static const col notif_cols[] = {
    {"id", UUIDT, 0},          {"event_id", UUIDT, 0},      {"handler_name", VC255, 0},
    {"namespace", VC255, 0},   {"action_id", UUIDT, 0},     {"action_name", VC255, 0},
    {"action_params", JSONT, 0}, {"started_date", TS, 0},  {"completion_date", TS, 0},
    {"model_id", VC255, 1},    {"model_type", VC255, 1},    {"event_type", VC255, 0},
    {"payload", JSONT, 1},     {"event_date", TS, 0},       {"state", VC24, 0},
    {"attempts", INTT, 0},     {"next_retry_at", TS, 0},    {"created_date", TS, 0},
    {"updated_date", TS, 0},
    /* odbox's own (V9): a handling round's claim */
    {"lease_owner", VC64, 1},  {"lease_until", TS, 1},
};

static int is_pg(void) { return !strcmp(itest_dialect(), "pg"); }
static int is_sqlite(void) { return itest_is("sqlite"); }

/* Does (data_type, column_type, charset) of this server spell tag? */
static int type_matches(tag t, const char *dt, const char *ct, const char *cs)
{
    const char *d = itest_dialect();
    (void)ct, (void)cs;
    if (is_sqlite()) { /* the declared type, lower case */
        switch (t) {
        case UUIDT: case JSONT: case TS: return !strcmp(dt, "text");
        case VC255: return !strcmp(dt, "varchar(255)");
        case VC24: return !strcmp(dt, "varchar(24)");
        case VC64: return !strcmp(dt, "varchar(64)");
        case BOOLT: return !strcmp(dt, "integer");
        case INTT: return !strcmp(dt, "int");
        }
        return 0;
    }
    switch (t) {
    case UUIDT:
        if (is_pg())
            return !strcmp(dt, "uuid");
        if (!strcmp(d, "mysql"))
            return !strcmp(ct, "char(36)") && !strcmp(cs, "ascii");
        return !strcmp(dt, "uuid");
    case VC255: return is_pg() ? !strcmp(dt, "character varying") && !strcmp(ct, "255") : !strcmp(ct, "varchar(255)");
    case VC24: return is_pg() ? !strcmp(dt, "character varying") && !strcmp(ct, "24") : !strcmp(ct, "varchar(24)");
    case VC64: return is_pg() ? !strcmp(dt, "character varying") && !strcmp(ct, "64") : !strcmp(ct, "varchar(64)");
    /* MariaDB implements JSON as LONGTEXT with a json_valid() check */
    case JSONT: return is_pg() ? !strcmp(dt, "jsonb") : !strcmp(dt, "json") || !strcmp(dt, "longtext");
    case TS: return is_pg() ? !strcmp(dt, "timestamp without time zone") : !strcmp(ct, "datetime(6)");
    case BOOLT: return is_pg() ? !strcmp(dt, "boolean") : !strcmp(ct, "tinyint(1)");
    case INTT: return is_pg() ? !strcmp(dt, "integer") : !strncmp(ct, "int", 3);
    }
    return 0;
}

static void check_columns(odbox_conn *c, const char *schema, const char *table, const col *cols, size_t n)
{
    char sql[768];
    odbox_stmt *s = NULL;
    odbox_error e;
    if (is_sqlite())
        snprintf(sql, sizeof sql,
                 "SELECT name, lower(type), lower(type), '', CASE WHEN \"notnull\" THEN 'NO' ELSE 'YES' END, "
                 "COALESCE(dflt_value, '') FROM pragma_table_info('%s') ORDER BY cid",
                 itest_evt(schema, table));
    else
        snprintf(sql, sizeof sql,
                 is_pg() ? "SELECT column_name, data_type, COALESCE(CAST(character_maximum_length AS VARCHAR), ''), '', "
                           "is_nullable, COALESCE(column_default, '') FROM information_schema.columns "
                           "WHERE table_schema = '%s' AND table_name = '%s' ORDER BY ordinal_position"
                         : "SELECT column_name, data_type, column_type, COALESCE(character_set_name, ''), "
                           "is_nullable, COALESCE(column_default, '') FROM information_schema.columns "
                           "WHERE table_schema = '%s' AND table_name = '%s' ORDER BY ordinal_position",
                 schema, table);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    size_t i = 0;
    while (odbox_stmt_fetch(s, &e) == 1) {
        const char *name, *dt, *ct, *cs, *nul, *def;
        odbox_stmt_get_text(s, 1, &name, NULL, &e);
        odbox_stmt_get_text(s, 2, &dt, NULL, &e);
        odbox_stmt_get_text(s, 3, &ct, NULL, &e);
        odbox_stmt_get_text(s, 4, &cs, NULL, &e);
        odbox_stmt_get_text(s, 5, &nul, NULL, &e);
        odbox_stmt_get_text(s, 6, &def, NULL, &e);
        ck_assert_msg(i < n, "%s: unexpected extra column %s", table, name);
        ck_assert_msg(!strcasecmp(name, cols[i].name), "%s column %zu: %s, want %s", table, i + 1, name, cols[i].name);
        ck_assert_msg(type_matches(cols[i].t, dt, ct, cs), "%s.%s: type %s/%s/%s", table, name, dt, ct, cs);
        ck_assert_msg(!strcmp(nul, cols[i].nullable ? "YES" : "NO"), "%s.%s: nullable %s", table, name, nul);
        if (!strcmp(name, "delivered")) /* no DDL default: odbox writes it */
            ck_assert_msg(!*def || !strcasecmp(def, "NULL"), "delivered has a default: %s", def);
        if (!strcmp(name, "attempts"))
            ck_assert_str_eq(def, "0");
        i++;
    }
    ck_assert_uint_eq(i, n);
    odbox_stmt_free(&s);
}

/* The index's definition (PG: indexdef; MySQL/MariaDB: "u:col,col" with u
 * 0/1 = non-unique), or "" when it does not exist. */
static void index_def(odbox_conn *c, const char *schema, const char *table, const char *index, char *out, size_t cap)
{
    char sql[512];
    odbox_stmt *s = NULL;
    odbox_error e;
    out[0] = '\0';
    if (is_sqlite()) /* the CREATE INDEX as written; index names carry the eventlog prefix */
        snprintf(sql, sizeof sql, "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = '%s' AND name = '%s'",
                 schema ? itest_evt(schema, table) : table, schema ? itest_evt(schema, index) : index);
    else if (is_pg())
        snprintf(sql, sizeof sql, "SELECT indexdef FROM pg_indexes WHERE schemaname = '%s' AND tablename = '%s' AND indexname = '%s'",
                 schema, table, index);
    else
        snprintf(sql, sizeof sql,
                 "SELECT CONCAT(MIN(non_unique), ':', GROUP_CONCAT(column_name ORDER BY seq_in_index)) "
                 "FROM information_schema.statistics WHERE table_schema = '%s' AND table_name = '%s' "
                 "AND index_name = '%s' HAVING COUNT(*) > 0", schema, table, index);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    if (odbox_stmt_fetch(s, &e) == 1) {
        const char *v;
        odbox_stmt_get_text(s, 1, &v, NULL, &e);
        snprintf(out, cap, "%s", v);
    }
    odbox_stmt_free(&s);
}

/* The name of the unique index over exactly cols (MySQL/MariaDB) or whose
 * definition holds "UNIQUE" and "(cols)" (PG). */
static int has_unique(odbox_conn *c, const char *schema, const char *table, const char *cols)
{
    char sql[640];
    if (is_sqlite())
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) FROM pragma_index_list('%s') AS il WHERE il.\"unique\" = 1 AND (SELECT "
                 "group_concat(name, ', ') FROM (SELECT name FROM pragma_index_info(il.name) ORDER BY seqno)) = '%s'",
                 schema ? itest_evt(schema, table) : table, cols);
    else if (is_pg())
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = '%s' AND tablename = '%s' "
                                  "AND indexdef LIKE 'CREATE UNIQUE INDEX %% USING btree (%s)'", schema, table, cols);
    else
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM (SELECT index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index "
                                  "SEPARATOR ', ') AS c FROM information_schema.statistics WHERE table_schema = '%s' "
                                  "AND table_name = '%s' AND non_unique = 0 GROUP BY index_name) x WHERE x.c = '%s'",
                 schema, table, cols);
    return itest_count(c, "%s", sql) == 1;
}

START_TEST(framework_schema_matches_spec)
{
    char ev[64], def[512];
    itest_name(ev, sizeof ev, "ev_schema");
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = ev};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_registry_open(&cfg, &r, &e), ODBOX_OK);
    ck_assert_msg(odbox_migrate_registry(r, NULL, &e) == ODBOX_OK, "%s", e.message);
    odbox_conn *c = itest_connect(1);

    check_columns(c, ev, "events", events_cols, sizeof events_cols / sizeof events_cols[0]);
    check_columns(c, ev, "event_notifications", notif_cols, sizeof notif_cols / sizeof notif_cols[0]);
    ck_assert(has_unique(c, ev, "events", "id"));
    ck_assert(has_unique(c, ev, "event_notifications", "id"));
    ck_assert(has_unique(c, ev, "event_notifications", "event_id, handler_name"));

    index_def(c, ev, "events", "idx_events_action_id", def, sizeof def);
    ck_assert_msg(strstr(def, is_pg() || is_sqlite() ? "(action_id)" : "1:action_id"), "idx_events_action_id: %s", def);
    index_def(c, ev, "events", "events_undelivered", def, sizeof def);
    if (is_pg()) {
        ck_assert_msg(strstr(def, "(event_type, event_date) WHERE (delivered = false)"), "%s", def);
    } else if (is_sqlite()) {
        ck_assert_msg(strstr(def, "(event_type, event_date)") && strstr(def, "WHERE delivered = FALSE"), "%s", def);
    } else {
        ck_assert_str_eq(def, "1:delivered,event_type,event_date");
    }
    index_def(c, ev, "event_notifications", "event_notifications_due", def, sizeof def);
    if (is_pg() || is_sqlite()) {
        ck_assert_msg(strstr(def, "(next_retry_at)") && strstr(def, "WHERE") && strstr(def, "'PENDING'") &&
                      strstr(def, "'FAILED'"), "%s", def);
    } else {
        ck_assert_str_eq(def, "1:state,next_retry_at");
    }

    /* scheduled_tasks: db-scheduler's columns, in the application schema */
    static const char *const task_cols[] = {"task_name", "task_instance", "task_data", "execution_time", "picked",
                                            "picked_by", "last_success", "last_failure", "consecutive_failures",
                                            "last_heartbeat", "version", "priority"};
    static const int task_nullable[] = {0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 1};
    const char *app = is_pg() ? "current_schema()" : "DATABASE()";
    for (size_t i = 0; i < sizeof task_cols / sizeof task_cols[0]; i++) {
        int64_t n = is_sqlite() ? itest_count(c, "SELECT COUNT(*) FROM pragma_table_info('scheduled_tasks') WHERE "
                                                 "name = '%s' AND \"notnull\" = %d", task_cols[i], !task_nullable[i])
                                : itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = %s "
                                                 "AND table_name = 'scheduled_tasks' AND column_name = '%s' AND "
                                                 "is_nullable = '%s'", app, task_cols[i], task_nullable[i] ? "YES" : "NO");
        ck_assert_msg(n == 1, "scheduled_tasks.%s", task_cols[i]);
    }
    ck_assert_int_eq(is_sqlite() ? itest_count(c, "SELECT COUNT(*) FROM pragma_table_info('scheduled_tasks')")
                                 : itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE "
                                                  "table_schema = %s AND table_name = 'scheduled_tasks'", app),
                     12);
    char *dbname = is_pg() ? "public" : NULL;
    odbox_dsn *dsn = NULL;
    ck_assert_int_eq(odbox_dsn_parse(itest_dsn(1), &dsn, NULL), ODBOX_OK);
    if (is_sqlite()) /* the application's tables are the file's own: no container */
        dbname = NULL;
    else if (!dbname)
        dbname = dsn->database;
    ck_assert(has_unique(c, dbname, "scheduled_tasks", "task_name, task_instance"));
    index_def(c, dbname, "scheduled_tasks", "execution_time_idx", def, sizeof def);
    ck_assert(def[0]);
    index_def(c, dbname, "scheduled_tasks", "last_heartbeat_idx", def, sizeof def);
    ck_assert(def[0]);
    index_def(c, dbname, "scheduled_tasks", "priority_execution_time_idx", def, sizeof def);
    ck_assert(def[0]);
    odbox_dsn_free(&dsn);

    itest_drop_eventlog(c, ev);
    odbox_conn_close(&c);
    odbox_registry_free(&r);
}
END_TEST

Suite *schema_suite(void)
{
    Suite *s = suite_create("schema");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, framework_schema_matches_spec);
    suite_add_tcase(s, t);
    return s;
}
