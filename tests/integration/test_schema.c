/* odbox — schema check: after migrating, the framework tables, their
 * columns, types, nullability and indexes match the spec's DDL for the
 * dialect (PostgreSQL and SQLite: partial indexes; MySQL/MariaDB:
 * composite ones). SQLite has no information_schema: its catalogue is
 * read through pragma_table_info, pragma_index_list and sqlite_master.
 * scheduled_tasks holds what db-scheduler writes: times up to 2500, a
 * writer in another time zone, heartbeats that leave execution_time be,
 * and on MySQL/MariaDB an older installation's TIMESTAMP(6) columns
 * migrated in place (V7). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jobs_fx.h"

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
    /* odbox's own (V10): delayed delivery */
    {"deliver_after", TS, 1},
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
    /* (V13) order and limits, NULL for the rows of handlers without them */
    {"order_key", VC255, 1},   {"limit_lease_until", TS, 1},
    /* (V18) the order's lease, NULL but for rows of ordered handlers in flight */
    {"order_lease_until", TS, 1},
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
    /* the claim's due read, by handler (V17); MySQL/MariaDB keep V2's
     * (state, next_retry_at) for the finished rows' reads */
    index_def(c, ev, "event_notifications", "event_notifications_handler_due", def, sizeof def);
    if (is_pg() || is_sqlite()) {
        ck_assert_msg(strstr(def, "(handler_name, next_retry_at)") && strstr(def, "WHERE") && strstr(def, "'PENDING'") &&
                      strstr(def, "'FAILED'"), "%s", def);
    } else {
        ck_assert_str_eq(def, "1:handler_name,state,next_retry_at");
    }
    index_def(c, ev, "event_notifications", "event_notifications_due", def, sizeof def);
    if (is_pg() || is_sqlite())
        ck_assert_str_eq(def, "");
    else
        ck_assert_str_eq(def, "1:state,next_retry_at");
    /* order and limits: indexes that the rows of other handlers do not
     * move (partial where the server has them) */
    index_def(c, ev, "event_notifications", "event_notifications_order_key", def, sizeof def);
    if (is_pg() || is_sqlite())
        ck_assert_msg(strstr(def, "(handler_name, order_key, event_date, event_id)") &&
                      strstr(def, "order_key IS NOT NULL"), "%s", def);
    else
        ck_assert_str_eq(def, "1:handler_name,order_key,event_date,event_id");
    index_def(c, ev, "event_notifications", "event_notifications_limit_leases", def, sizeof def);
    if (is_pg() || is_sqlite())
        ck_assert_msg(strstr(def, "(handler_name, limit_lease_until)") && strstr(def, "limit_lease_until IS NOT NULL"),
                      "%s", def);
    else
        ck_assert_str_eq(def, "1:handler_name,limit_lease_until");
    index_def(c, ev, "event_notifications", "event_notifications_order_leases", def, sizeof def);
    if (is_pg() || is_sqlite())
        ck_assert_msg(strstr(def, "(handler_name, order_key, order_lease_until)") &&
                      strstr(def, "order_lease_until IS NOT NULL"), "%s", def);
    else
        ck_assert_str_eq(def, "1:handler_name,order_key,order_lease_until");
    index_def(c, ev, "event_notifications", "event_notifications_model_order", def, sizeof def);
    ck_assert_str_eq(def, "");
    /* delivered events: a partial index, or (V13) events_undelivered */
    index_def(c, ev, "events", "events_delivered", def, sizeof def);
    if (is_pg() || is_sqlite())
        ck_assert_msg(strstr(def, "(event_date)") && strstr(def, "WHERE"), "%s", def);
    else
        ck_assert_str_eq(def, "");
    /* finished rows: a partial index, or (V13) the due index */
    index_def(c, ev, "event_notifications", "event_notifications_finished", def, sizeof def);
    if (is_pg() || is_sqlite())
        ck_assert_msg(strstr(def, "(updated_date)") && strstr(def, "'SUCCEEDED'"), "%s", def);
    else
        ck_assert_str_eq(def, "");
    index_def(c, ev, "event_notifications", "event_notifications_leased", def, sizeof def);
    ck_assert_str_eq(def, "");

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

/* ---- scheduled_tasks' times ------------------------------------------------------------ */

#define Y2500_US INT64_C(16725225600000000) /* 2500-01-01 00:00:00 UTC: db-scheduler's Schedule.NEVER */
#define HOUR_US INT64_C(3600000000)

/* The four times of scheduled_tasks are DATETIME(6) (MySQL/MariaDB),
 * timestamptz (PG) or TEXT (SQLite), none ON UPDATE; the priority index
 * is (priority DESC, execution_time). db is the database (MySQL/MariaDB)
 * or NULL for the connection's own. */
static void check_task_times(odbox_conn *c, const char *db)
{
    static const char *const times[] = {"execution_time", "last_success", "last_failure", "last_heartbeat"};
    char where[160], def[512];
    snprintf(where, sizeof where, is_pg() ? "current_schema()" : db ? "'%s'" : "DATABASE()", db);
    for (size_t i = 0; i < 4; i++) {
        int64_t n = is_sqlite() ? itest_count(c, "SELECT COUNT(*) FROM pragma_table_info('scheduled_tasks') "
                                                 "WHERE name = '%s' AND upper(type) = 'TEXT'", times[i])
                    : is_pg()   ? itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = %s "
                                                 "AND table_name = 'scheduled_tasks' AND column_name = '%s' AND "
                                                 "data_type = 'timestamp with time zone'", where, times[i])
                                : itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = %s "
                                                 "AND table_name = 'scheduled_tasks' AND column_name = '%s' AND "
                                                 "column_type = 'datetime(6)' AND LOWER(extra) NOT LIKE '%%on update%%'",
                                              where, times[i]);
        ck_assert_msg(n == 1, "scheduled_tasks.%s is not the dialect's time type", times[i]);
    }
    if (is_sqlite() || is_pg()) {
        index_def(c, is_pg() ? "public" : NULL, "scheduled_tasks", "priority_execution_time_idx", def, sizeof def);
        ck_assert_msg(strstr(def, is_pg() ? "(priority DESC, execution_time)" : "(priority DESC, execution_time ASC)"),
                      "%s", def);
        return;
    }
    odbox_stmt *s = NULL;
    odbox_error e;
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT GROUP_CONCAT(CONCAT(column_name, ':', COALESCE(collation, '-')) ORDER BY seq_in_index) "
             "FROM information_schema.statistics WHERE table_schema = %s AND table_name = 'scheduled_tasks' "
             "AND index_name = 'priority_execution_time_idx'", where);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_fetch(s, &e), 1);
    const char *v = NULL;
    odbox_stmt_get_text(s, 1, &v, NULL, &e);
    ck_assert_msg(v && !strcmp(v, "priority:D,execution_time:A"), "priority_execution_time_idx: %s", v ? v : "none");
    odbox_stmt_free(&s);
}

/* Sets one time column of a task's row, bound. */
static void set_time(odbox_conn *c, const char *column, int64_t us, const char *name)
{
    char sql[256];
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    snprintf(sql, sizeof sql, "UPDATE scheduled_tasks SET %s = ? WHERE task_name = ?", column);
    ck_assert_int_eq(odbox_stmt_prepare(c, sql, &s, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 1, us, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 2, name, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "%s", e.message);
    odbox_stmt_free(&s);
}

/* Issue item 7: a row due at Schedule.NEVER (2500-01-01), a heartbeat
 * written by a session in +02:00 as db-scheduler writes it (the UTC wall
 * time), and a heartbeat UPDATE that leaves execution_time alone. */
START_TEST(scheduled_tasks_holds_what_db_scheduler_writes)
{
    jfx f;
    jfx_open(&f);
    check_task_times(f.c, NULL);

    char name[80];
    snprintf(name, sizeof name, "%s_never", f.job);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_stmt_prepare(f.c, "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, "
                                              "picked, version) VALUES (?, 'recurring', ?, FALSE, 1)", &s, &e),
                     ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_text(s, 1, name, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_stmt_bind_timestamp(s, 2, Y2500_US, &e), ODBOX_OK);
    ck_assert_msg(odbox_stmt_execute(s, &e) == ODBOX_OK, "execution_time 2500-01-01: %s", e.message);
    odbox_stmt_free(&s);
    odbox_job_info in = jt_must_row(&f, name);
    ck_assert_int_eq(in.next_execution_us, Y2500_US);

    /* a heartbeat leaves execution_time where it was */
    set_time(f.c, "last_heartbeat", JAN_2030, name);
    in = jt_must_row(&f, name);
    ck_assert_int_eq(in.last_heartbeat_us, JAN_2030);
    ck_assert_int_eq(in.next_execution_us, Y2500_US);

    if (!itest_part_skipped("scheduled_tasks_holds_what_db_scheduler_writes/other_time_zone")) {
        odbox_conn *other = itest_connect(1);
        itest_exec(other, "SET time_zone = '+02:00'");
        itest_exec(other, "UPDATE scheduled_tasks SET last_heartbeat = '2030-01-01 10:00:00' WHERE task_name = '%s'",
                   name);
        odbox_conn_close(&other);
        in = jt_must_row(&f, name);
        ck_assert_msg(in.last_heartbeat_us == JAN_2030 + 10 * HOUR_US, "last_heartbeat read %+lld s off 10:00 UTC",
                      (long long)((in.last_heartbeat_us - JAN_2030 - 10 * HOUR_US) / 1000000));
        ck_assert_int_eq(in.next_execution_us, Y2500_US);
    }
    jfx_close(&f);
}
END_TEST

/* dsn 1 with database db instead of its own */
static char *dsn_on_database(const char *db)
{
    const char *base = itest_dsn(1), *q = strchr(base, '?');
    size_t end = q ? (size_t)(q - base) : strlen(base), at = end;
    while (at > 0 && base[at - 1] != '/')
        at--;
    size_t n = strlen(base) + strlen(db) + 2;
    char *s = malloc(n);
    ck_assert_ptr_nonnull(s);
    snprintf(s, n, "%.*s%s%s", (int)at, base, db, q ? q : "");
    return s;
}

static odbox_registry *registry_on(const char *dsn, const char *ev)
{
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = dsn, .eventlog = ev};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_registry *r = NULL;
    odbox_error e;
    ck_assert_msg(odbox_registry_open(&cfg, &r, &e) == ODBOX_OK, "%s", e.message);
    return r;
}

static void migrate_with(odbox_registry *r, const char *framework_dir)
{
    odbox_migrate_options o = {.framework_dir = framework_dir};
    odbox_error e;
    ck_assert_msg(odbox_migrate_registry(r, &o, &e) == ODBOX_OK, "migrate: %s", e.message);
}

/* Issue item 7 on an existing installation: scheduled_tasks as V3 made
 * it on MySQL 5.7 / MariaDB up to 10.9 (explicit_defaults_for_timestamp
 * OFF: execution_time ON UPDATE CURRENT_TIMESTAMP), odbox migrated up to
 * V5 and a row in it; the full migrate keeps the row's time to the
 * microsecond and changes the types; a second eventlog's migrate in the
 * same database runs it again. */
START_TEST(scheduled_tasks_of_an_older_installation_migrated_in_place)
{
    char db[64], ev1[64], ev2[64], dir[] = "/tmp/odbox-v5-XXXXXX", cmd[1024];
    itest_name(db, sizeof db, "odbox_old");
    itest_name(ev1, sizeof ev1, "ev_old");
    itest_name(ev2, sizeof ev2, "ev_old");
    odbox_conn *admin = itest_connect(1);
    itest_exec(admin, "CREATE DATABASE %s", db);
    char *dsn = dsn_on_database(db);
    odbox_conn *c = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_conn_open(dsn, &c, &e) == ODBOX_OK, "%s", e.message);

    /* V3 as an older server ran it */
    itest_exec(c, "SET SESSION explicit_defaults_for_timestamp = OFF");
    char path[512], text[4096];
    snprintf(path, sizeof path, "migrations/%s/V3__create_scheduled_tasks.sql", itest_dialect());
    FILE *fp = fopen(itest_src(path), "r");
    ck_assert_ptr_nonnull(fp);
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = '\0';
    itest_exec(c, "%s", text);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = '%s' AND "
                                    "table_name = 'scheduled_tasks' AND column_name = 'execution_time' AND "
                                    "LOWER(extra) LIKE '%%on update%%'", db),
                     1);

    /* odbox up to V5 */
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "mkdir '%s/%s' && cp %s/migrations/%s/V[1-5]__*.sql '%s/%s/'", dir, itest_dialect(),
             itest_src(""), itest_dialect(), dir, itest_dialect());
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    odbox_registry *r1 = registry_on(dsn, ev1);
    migrate_with(r1, dir);
    itest_exec(c, "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version, "
                  "last_success, priority) VALUES ('old', 'recurring', '2030-06-01 12:34:56.123456', FALSE, 1, "
                  "'2030-05-31 23:59:59.000001', 3)");

    /* the full migrate (V7) */
    migrate_with(r1, NULL);
    check_task_times(c, db);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = 'old' AND "
                                    "execution_time = '2030-06-01 12:34:56.123456' AND "
                                    "last_success = '2030-05-31 23:59:59.000001'"),
                     1);
    itest_exec(c, "UPDATE scheduled_tasks SET last_heartbeat = '2030-06-01 12:35:00' WHERE task_name = 'old'");
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = 'old' AND "
                                    "execution_time = '2030-06-01 12:34:56.123456'"),
                     1);

    /* a second eventlog in the same database runs V7 again */
    odbox_registry *r2 = registry_on(dsn, ev2);
    migrate_with(r2, NULL);
    check_task_times(c, db);
    ck_assert_int_eq(itest_count(c, "SELECT COUNT(*) FROM scheduled_tasks WHERE task_name = 'old' AND "
                                    "execution_time = '2030-06-01 12:34:56.123456'"),
                     1);

    odbox_registry_free(&r1);
    odbox_registry_free(&r2);
    odbox_conn_close(&c);
    itest_drop_eventlog(admin, ev1);
    itest_drop_eventlog(admin, ev2);
    itest_exec(admin, "DROP DATABASE %s", db);
    odbox_conn_close(&admin);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    free(dsn);
}
END_TEST

Suite *schema_suite(void)
{
    Suite *s = suite_create("schema");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, framework_schema_matches_spec);
    suite_add_tcase(s, t);
    TCase *st = tcase_create("scheduled_tasks");
    tcase_set_timeout(st, 120);
    tcase_add_test(st, scheduled_tasks_holds_what_db_scheduler_writes);
    tcase_add_test(st, scheduled_tasks_of_an_older_installation_migrated_in_place);
    suite_add_tcase(s, st);
    return s;
}
