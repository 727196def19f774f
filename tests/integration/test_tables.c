/* odbox — integration tests of model types against their tables: names
 * that are reserved words (a model order with columns group and user,
 * unqualified and schema-qualified) through the whole executor and the
 * reads; and the check that a type's table has what odbox reads and
 * writes, made before the first write and naming the table and column.
 * Tables: tests/fixtures/tables-migrations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "actions.h"

static const odbox_column order_columns[] = {{"group", ODBOX_TYPE_TEXT, 0, 50}, {"user", ODBOX_TYPE_INT64, 1, 0}};
static const odbox_column label_only[] = {{"label", ODBOX_TYPE_TEXT, 0, 50}};
static const odbox_column label_note[] = {{"label", ODBOX_TYPE_TEXT, 0, 50}, {"note", ODBOX_TYPE_TEXT, 1, 10}};
static const odbox_column label_color[] = {{"label", ODBOX_TYPE_TEXT, 0, 50}, {"color", ODBOX_TYPE_TEXT, 1, 10}};

static const odbox_model_type ORDER_T = {"Order", "order", ODBOX_KIND_MODEL, order_columns, 2};
static const odbox_model_type NO_UPDATED_T = {"NoUpdated", "no_updated", ODBOX_KIND_MODEL, label_only, 1};
static const odbox_model_type EXTRA_T = {"Extra", "extra_required", ODBOX_KIND_ENTITY, label_note, 2};
static const odbox_model_type PLAIN_T = {"Plain", "plain", ODBOX_KIND_ENTITY, label_only, 1};
static const odbox_model_type COLOR_T = {"Colored", "plain", ODBOX_KIND_ENTITY, label_color, 2};
static const odbox_model_type GHOST_T = {"Ghost", "no_such_table", ODBOX_KIND_ENTITY, label_only, 1};
static const odbox_model_type NO_SCHEMA_T = {"Lost", "no_such_schema.plain", ODBOX_KIND_ENTITY, label_only, 1};
static const odbox_event_type ORDER_PLACED = {"OrderPlaced"};

typedef struct tfx {
    char ev[64];
    odbox_registry *r;
    odbox_conn *c;
} tfx;

/* How the test's own SQL quotes a name (not through the dialect, whose
 * quoting is under test). */
static const char *quote(void) { return itest_is("mariadb") || itest_is("mysql") ? "`" : "\""; }

static void drop_tables(odbox_conn *c)
{
    const char *q = quote();
    itest_exec(c, "DROP TABLE IF EXISTS %sorder%s", q, q);
    itest_exec(c, "DROP TABLE IF EXISTS no_updated");
    itest_exec(c, "DROP TABLE IF EXISTS extra_required");
    itest_exec(c, "DROP TABLE IF EXISTS plain");
}

static void tfx_open(tfx *f)
{
    itest_name(f->ev, sizeof f->ev, "ev_tables");
    f->c = itest_connect(1);
    drop_tables(f->c);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = f->ev};
    odbox_registry_config cfg = {.shards = &sc, .nshards = 1};
    odbox_error e;
    ck_assert_msg(odbox_registry_open(&cfg, &f->r, &e) == ODBOX_OK, "%s", e.message);
    odbox_migrate_options o = {.user_dir = itest_src("tests/fixtures/tables-migrations"), .user_set = "tables"};
    ck_assert_msg(odbox_migrate_registry(f->r, &o, &e) == ODBOX_OK, "migrate: %s", e.message);
}

static void tfx_close(tfx *f)
{
    drop_tables(f->c);
    itest_drop_eventlog(f->c, f->ev);
    odbox_conn_close(&f->c);
    odbox_registry_free(&f->r);
}

static odbox_model *order(const odbox_model_type *t, const char *group, int64_t user)
{
    odbox_model *m = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_model_new(t, NULL, &m, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(m, "group", group, &e), ODBOX_OK);
    if (user >= 0)
        ck_assert_int_eq(odbox_model_set_int64(m, "user", user, &e), ODBOX_OK);
    return m;
}

static odbox_model *find(odbox_registry *r, const odbox_model_type *t, const char *id)
{
    odbox_model *m = NULL;
    odbox_error e;
    ck_assert_msg(odbox_repo_find(r, t, id, ODBOX_READ_PRIMARY, &m, &e) == ODBOX_OK, "%s", e.message);
    return m;
}

static int64_t count_where(odbox_registry *r, const odbox_model_type *t, const char *column, const odbox_value *v)
{
    int64_t n = -1;
    odbox_error e;
    ck_assert_msg(odbox_repo_count_where(r, t, column, v, ODBOX_READ_PRIMARY, &n, &e) == ODBOX_OK, "%s", e.message);
    return n;
}

/* Insert, one-row update (PostgreSQL: one statement), batch update, every
 * read, of a type whose table and columns are reserved words. */
static void exercise_order(tfx *f, const odbox_model_type *t)
{
    odbox_executor *exe = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_executor_open(NS, f->r, NULL, &exe, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_model(exe, t, &e), ODBOX_OK);
    int64_t events = itest_count(f->c, "SELECT COUNT(*) FROM %s WHERE event_type = 'OrderPlaced'", itest_evt(f->ev, "events"));
    odbox_model *m[2] = {order(t, "g1", 7), order(t, "g2", -1)};
    script add = {.add = {m[0], m[1]}, .nadd = 2, .emit = {{m[0], &ORDER_PLACED, "{\"n\": 1}"}}, .nemit = 1};
    odbox_result res;
    execute_script_ok(exe, "PlaceOrders", &add, NULL, &res);
    odbox_result_clear(&res);

    odbox_model *got = find(f->r, t, odbox_model_id(m[0]));
    dfx_assert_same(m[0], got);
    odbox_model_free(&got);
    got = find(f->r, t, odbox_model_id(m[1]));
    ck_assert(odbox_model_is_null(got, "user"));
    odbox_model_free(&got);

    /* one row */
    ck_assert_int_eq(odbox_model_set_text(m[0], "group", "g1-b", &e), ODBOX_OK);
    script one = {.upd = {m[0]}, .nupd = 1, .emit = {{m[0], &ORDER_PLACED, "{\"n\": 2}"}}, .nemit = 1};
    execute_script_ok(exe, "RegroupOrder", &one, NULL, &res);
    odbox_result_clear(&res);
    /* both rows: the dialect's batch UPDATE */
    odbox_model *cur[2] = {find(f->r, t, odbox_model_id(m[0])), find(f->r, t, odbox_model_id(m[1]))};
    ck_assert_int_eq(odbox_model_version(cur[0]), 2);
    ck_assert_int_eq(odbox_model_set_text(cur[0], "group", "g1-c", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(cur[1], "group", "g2-b", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(cur[1], "user", 9, &e), ODBOX_OK);
    script both = {.upd = {cur[0], cur[1]}, .nupd = 2};
    execute_script_ok(exe, "RegroupOrders", &both, NULL, &res);
    odbox_result_clear(&res);

    got = find(f->r, t, odbox_model_id(m[0]));
    const char *g = NULL;
    ck_assert_int_eq(odbox_model_get_text(got, "group", &g, &e), ODBOX_OK);
    ck_assert_str_eq(g, "g1-c");
    ck_assert_int_eq(odbox_model_version(got), 3);
    odbox_model_free(&got);
    const char *ids[2] = {odbox_model_id(m[0]), odbox_model_id(m[1])};
    odbox_models list = {0};
    ck_assert_int_eq(odbox_repo_find_many(f->r, t, ids, 2, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    odbox_models_free(&list);
    odbox_value g2b = {.type = ODBOX_TYPE_TEXT, .s = "g2-b"};
    ck_assert_int_eq(odbox_repo_find_where(f->r, t, "group", &g2b, ODBOX_READ_REPLICA, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 1);
    int64_t user = 0;
    ck_assert_int_eq(odbox_model_get_int64(list.items[0], "user", &user, &e), ODBOX_OK);
    ck_assert_int_eq(user, 9);
    odbox_models_free(&list);
    odbox_value nine = {.type = ODBOX_TYPE_INT64, .i = 9};
    ck_assert_int_eq(count_where(f->r, t, "user", &nine), 1);
    ck_assert_int_eq(count_where(f->r, t, "group", &g2b), 1);
    ck_assert_int_eq(count_where(f->r, t, NULL, NULL), 2);
    ck_assert_int_eq(itest_count(f->c, "SELECT COUNT(*) FROM %s WHERE event_type = 'OrderPlaced'", itest_evt(f->ev, "events")),
                     events + 2);

    for (int i = 0; i < 2; i++) {
        odbox_model_free(&m[i]);
        odbox_model_free(&cur[i]);
    }
    odbox_executor_free(&exe);
}

START_TEST(reserved_words_as_names)
{
    tfx f;
    tfx_open(&f);
    exercise_order(&f, &ORDER_T);
    const char *q = quote();
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM %sorder%s WHERE %sgroup%s LIKE 'g%%'", q, q, q, q), 2);

    /* schema-qualified: the eventlog's schema (or database); on SQLite,
     * which has none, main: the same table as order, emptied first */
    char table[128];
    const char *schema = itest_is("sqlite") ? "main" : f.ev;
    if (itest_is("sqlite"))
        itest_exec(f.c, "DELETE FROM %sorder%s", q, q);
    snprintf(table, sizeof table, "%s.order", schema);
    const odbox_model_type qualified = {"QualifiedOrder", table, ODBOX_KIND_MODEL, order_columns, 2};
    exercise_order(&f, &qualified);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM %s.%sorder%s", schema, q, q), 2);
    tfx_close(&f);
}
END_TEST

/* err names the table and the column (or says the table is missing). */
static void assert_names(const odbox_error *e, const char *table, const char *column)
{
    ck_assert_int_eq(e->code, ODBOX_EINVAL);
    ck_assert_msg(strstr(e->message, table), "no table %s in: %s", table, e->message);
    ck_assert_msg(strstr(e->message, column), "no %s in: %s", column, e->message);
    ck_assert_msg(strstr(e->message, "shard 0.0"), "no shard in: %s", e->message);
}

static int add_one(odbox_registry *r, const odbox_model_type *t, odbox_error *e)
{
    odbox_executor *exe = NULL;
    odbox_model *m = NULL;
    ck_assert_int_eq(odbox_executor_open(NS, r, NULL, &exe, e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_model(exe, t, e), ODBOX_OK); /* no connection: not checked yet */
    ck_assert_int_eq(odbox_model_new(t, NULL, &m, e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(m, "label", "x", e), ODBOX_OK);
    script s = {.add = {m}, .nadd = 1};
    odbox_result res;
    int rc = execute_script(exe, "AddOne", &s, NULL, NULL, &res, e);
    odbox_result_clear(&res);
    odbox_model_free(&m);
    odbox_executor_free(&exe);
    return rc;
}

START_TEST(tables_checked_before_the_first_write)
{
    tfx f;
    tfx_open(&f);
    odbox_error e;
    odbox_model *m = NULL;
    int64_t events = itest_count(f.c, "SELECT COUNT(*) FROM %s", itest_evt(f.ev, "events"));

    /* a model's table without updated_date: refused by the explicit check,
     * by the executor before it writes, and by reads */
    ck_assert_int_eq(odbox_model_type_verify(f.r, &NO_UPDATED_T, &e), ODBOX_EINVAL);
    assert_names(&e, "no_updated", "updated_date");
    ck_assert_int_eq(add_one(f.r, &NO_UPDATED_T, &e), ODBOX_EINVAL);
    assert_names(&e, "no_updated", "updated_date");
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM no_updated"), 0);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM %s", itest_evt(f.ev, "events")), events);
    char id[ODBOX_UUID_LEN + 1];
    odbox_uuid_v4(id);
    ck_assert_int_eq(odbox_repo_find(f.r, &NO_UPDATED_T, id, ODBOX_READ_PRIMARY, &m, &e), ODBOX_EINVAL);
    assert_names(&e, "no_updated", "updated_date");

    /* a NOT NULL column without a default that the type does not write
     * (seq has a default and note is nullable: neither is named) */
    ck_assert_int_eq(odbox_model_type_verify(f.r, &EXTRA_T, &e), ODBOX_EINVAL);
    assert_names(&e, "extra_required", "code");
    ck_assert_ptr_nonnull(strstr(e.message, "NOT NULL"));
    ck_assert_int_eq(add_one(f.r, &EXTRA_T, &e), ODBOX_EINVAL);
    assert_names(&e, "extra_required", "code");

    /* a column of the type that the table lacks; a missing table */
    ck_assert_int_eq(odbox_model_type_verify(f.r, &COLOR_T, &e), ODBOX_EINVAL);
    assert_names(&e, "plain", "color");
    ck_assert_int_eq(odbox_model_type_verify(f.r, &GHOST_T, &e), ODBOX_EINVAL);
    assert_names(&e, "no_such_table", "does not exist");
    ck_assert_int_eq(odbox_model_type_verify(f.r, &NO_SCHEMA_T, &e), ODBOX_EINVAL);
    assert_names(&e, "no_such_schema.plain", "does not exist");

    /* an entity needs no dates; once the column is there the same
     * registry accepts the type (refusals are not remembered) */
    ck_assert_msg(odbox_model_type_verify(f.r, &PLAIN_T, &e) == ODBOX_OK, "%s", e.message);
    itest_exec(f.c, "ALTER TABLE plain ADD COLUMN color VARCHAR(10) NULL");
    ck_assert_msg(odbox_model_type_verify(f.r, &COLOR_T, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(add_one(f.r, &COLOR_T, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(itest_count(f.c, "SELECT COUNT(*) FROM plain"), 1);

    ck_assert_int_eq(odbox_model_type_verify(NULL, &PLAIN_T, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_type_verify(f.r, NULL, &e), ODBOX_EINVAL);
    const odbox_model_type bad = {"Bad", "x; DROP TABLE plain", ODBOX_KIND_ENTITY, label_only, 1};
    ck_assert_int_eq(odbox_model_type_verify(f.r, &bad, &e), ODBOX_EINVAL);
    tfx_close(&f);
}
END_TEST

Suite *tables_suite(void)
{
    Suite *s = suite_create("tables");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, reserved_words_as_names);
    tcase_add_test(t, tables_checked_before_the_first_write);
    suite_add_tcase(s, t);
    return s;
}
