/* odbox — integration tests of models and the generic repository: model
 * type checks, setters, insert / find round trips of every column type
 * (microsecond timestamps, typed NULLs), batch updates and stale versions,
 * soft-deleted rows, find_many / find_where / count, id routing to shards
 * and replica reads.
 *
 * Uses the "dummies" fixture of dummies.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <json-c/json.h>
#include "dummies.h"

static odbox_model *find_ok(odbox_registry *r, const odbox_model_type *t, const char *id, odbox_read_from from)
{
    odbox_model *m = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_repo_find(r, t, id, from, &m, &e) == ODBOX_OK, "find %s: %s", id, e.message);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* list is in the database's own ORDER BY id of the rows matching where
 * (MariaDB's UUID type does not sort like the text). */
static void assert_db_order(odbox_conn *c, const char *where, const odbox_models *list)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT id FROM dummies WHERE %s ORDER BY id", where);
    odbox_stmt *s = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_stmt_prepare(c, sql, &s, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_stmt_execute(s, &e), ODBOX_OK);
    size_t i = 0;
    while (odbox_stmt_fetch(s, &e) == 1) {
        const char *id = NULL;
        ck_assert_int_eq(odbox_stmt_get_text(s, 1, &id, NULL, &e), ODBOX_OK);
        ck_assert_msg(i < list->n, "more rows than listed");
        ck_assert_msg(!strcmp(id, odbox_model_id(list->items[i])), "row %zu: %s vs %s", i, id,
                      odbox_model_id(list->items[i]));
        i++;
    }
    ck_assert_uint_eq(i, list->n);
    odbox_stmt_free(&s);
}

static void free_all(odbox_model **m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        odbox_model_free(&m[i]);
}

/* ---- model types and models (no server needed, kept with the repo) ------ */

START_TEST(model_type_checks)
{
    odbox_error e = {0};
    ck_assert_int_eq(odbox_model_type_check(&DUMMY_T, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_type_check(&TAG_T, &e), ODBOX_OK);

    const odbox_column bad_name[] = {{"Bad-Col", ODBOX_TYPE_TEXT, 1, 0}};
    const odbox_column upper[] = {{"Name", ODBOX_TYPE_TEXT, 1, 0}};
    const odbox_column dup[] = {{"label", ODBOX_TYPE_TEXT, 1, 0}, {"label", ODBOX_TYPE_INT64, 1, 0}};
    const odbox_column common[] = {{"version", ODBOX_TYPE_INT64, 0, 0}};
    const odbox_column common2[] = {{"updated_date", ODBOX_TYPE_TIMESTAMP, 0, 0}};
    const odbox_column bad_type[] = {{"label", (odbox_type)99, 1, 0}};
    const odbox_column ok[] = {{"label", ODBOX_TYPE_TEXT, 0, 50}};
    char long_name[300];
    memset(long_name, 'A', 256);
    long_name[256] = '\0';
    const odbox_model_type bad[] = {
        {"T", "t", ODBOX_KIND_ENTITY, bad_name, 1},
        {"T", "t", ODBOX_KIND_ENTITY, upper, 1},
        {"T", "t", ODBOX_KIND_ENTITY, dup, 2},
        {"T", "t", ODBOX_KIND_ENTITY, common, 1},
        {"T", "t", ODBOX_KIND_MODEL, common2, 1},
        {"T", "t", ODBOX_KIND_ENTITY, bad_type, 1},
        {"T", "t'; DROP TABLE x; --", ODBOX_KIND_ENTITY, ok, 1},
        {"T", "ta\"bles", ODBOX_KIND_ENTITY, ok, 1},
        {"T", "a.b.c", ODBOX_KIND_ENTITY, ok, 1},
        {"T", "", ODBOX_KIND_ENTITY, ok, 1},
        {"T", NULL, ODBOX_KIND_ENTITY, ok, 1},
        {"Bad-Type", "t", ODBOX_KIND_ENTITY, ok, 1},
        {"", "t", ODBOX_KIND_ENTITY, ok, 1},
        {NULL, "t", ODBOX_KIND_ENTITY, ok, 1},
        {long_name, "t", ODBOX_KIND_ENTITY, ok, 1},
        {"T", "t", (odbox_model_kind)7, ok, 1},
        {"T", "t", ODBOX_KIND_ENTITY, NULL, 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        odbox_error_clear(&e);
        ck_assert_msg(odbox_model_type_check(&bad[i], &e) == ODBOX_EINVAL, "bad type %zu accepted", i);
        ck_assert_msg(e.message[0], "bad type %zu: no reason", i);
    }
    ck_assert_int_eq(odbox_model_type_check(NULL, &e), ODBOX_EINVAL);
    /* the reason names what is wrong */
    ck_assert_int_eq(odbox_model_type_check(&bad[2], &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "label") != NULL, "%s", e.message);
    /* schema-qualified table and a 255-character type name are fine */
    long_name[255] = '\0';
    const odbox_model_type good[] = {
        {"T", "public_x.tags", ODBOX_KIND_ENTITY, ok, 1},
        {long_name, "t", ODBOX_KIND_ENTITY, ok, 1},
        {"T", "t", ODBOX_KIND_ENTITY, NULL, 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(odbox_model_type_check(&good[i], &e) == ODBOX_OK, "good type %zu: %s", i, e.message);
}
END_TEST

/* The setters of a new dummy m refuse a wrong type, an unknown column, a
 * NULL in a NOT NULL column, overlong text and bad JSON; its state may be
 * set (up to 24 characters). */
static void model_setters_refuse(odbox_model *m)
{
    odbox_error e = {0};

    ck_assert_int_eq(odbox_model_set_int64(m, "name", 5, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_text(m, "amount", "5", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_bool(m, "ratio", 1, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_double(m, "flag", 1.0, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_text(m, "aliases", "{}", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_json(m, "name", "{}", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_int64(m, "seen_at", 5, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_text(m, "nope", "x", &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "nope"));
    ck_assert_int_eq(odbox_model_set_null(m, "nope", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_text(m, "version", "x", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_null(m, "name", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_null(m, "amount", &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_text(m, "name", NULL, &e), ODBOX_EINVAL);
    char text[200];
    memset(text, 'x', 101);
    text[101] = '\0';
    ck_assert_int_eq(odbox_model_set_text(m, "name", text, &e), ODBOX_EINVAL);
    text[100] = '\0';
    ck_assert_int_eq(odbox_model_set_text(m, "name", text, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", "{\"a\": ", &e), ODBOX_EINVAL);
    /* refused here, where PostgreSQL and MySQL/MariaDB refused them at the
     * commit (and SQLite stored them) */
    ck_assert_int_eq(odbox_model_set_text(m, "name", "caf\xe9", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "column name: not valid UTF-8 (byte 3)"), "%s", e.message);
    const char *kept = NULL;
    ck_assert_int_eq(odbox_model_get_text(m, "name", &kept, &e), ODBOX_OK);
    ck_assert_str_eq(kept, text); /* the value before stays */
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", "[\"\xc3\"]", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "column aliases is not valid UTF-8"), "%s", e.message);
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", "[\"a\\u0000\"]", &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "U+0000"), "%s", e.message);
    ck_assert(odbox_model_is_null(m, "aliases"));
    odbox_value v = {.type = ODBOX_TYPE_TEXT, .s = "x"};
    ck_assert_int_eq(odbox_model_set(m, "amount", &v, &e), ODBOX_EINVAL);
    char state[40];
    memset(state, 'S', 25);
    state[25] = '\0';
    ck_assert_int_eq(odbox_model_set_state(m, state, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_set_state(m, NULL, &e), ODBOX_EINVAL);
    ck_assert_str_eq(odbox_model_state(m), "ACTIVE");
    state[24] = '\0';
    ck_assert_int_eq(odbox_model_set_state(m, state, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_model_state(m), state);
}

/* m's values round-trip through the getters (name left "copied"); the
 * setters copy; a typed NULL through the generic setter, and back. */
static void model_values_round_trip(odbox_model *m)
{
    odbox_error e = {0};

    char buf[32];
    strcpy(buf, "copied");
    ck_assert_int_eq(odbox_model_set_text(m, "name", buf, &e), ODBOX_OK);
    strcpy(buf, "changed");
    const char *s = NULL;
    ck_assert_int_eq(odbox_model_get_text(m, "name", &s, &e), ODBOX_OK);
    ck_assert_str_eq(s, "copied");
    ck_assert_int_eq(odbox_model_set_int64(m, "reward_points", -7, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_double(m, "ratio", 0.25, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m, "flag", 0, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", "{\"k\": [1, 2]}", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_timestamp(m, "seen_at", 1767225600123456LL, &e), ODBOX_OK);
    int64_t i64 = 0;
    double d = 0;
    int b = 7;
    ck_assert_int_eq(odbox_model_get_int64(m, "reward_points", &i64, &e), ODBOX_OK);
    ck_assert_int_eq(i64, -7);
    ck_assert_int_eq(odbox_model_get_double(m, "ratio", &d, &e), ODBOX_OK);
    ck_assert_double_eq(d, 0.25);
    ck_assert_int_eq(odbox_model_get_bool(m, "flag", &b, &e), ODBOX_OK);
    ck_assert_int_eq(b, 0);
    ck_assert(!odbox_model_is_null(m, "flag"));
    ck_assert_int_eq(odbox_model_get_timestamp(m, "seen_at", &i64, &e), ODBOX_OK);
    ck_assert(i64 == 1767225600123456LL);
    ck_assert_int_eq(odbox_model_get_int64(m, "name", &i64, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_model_get_int64(m, "nope", &i64, &e), ODBOX_EINVAL);
    odbox_value got;
    ck_assert_int_eq(odbox_model_get(m, "aliases", &got, &e), ODBOX_OK);
    ck_assert_int_eq(got.type, ODBOX_TYPE_JSON);
    ck_assert(dfx_json_same(got.s, "{\"k\": [1, 2]}"));
    /* the generic setter, a typed NULL, and back */
    odbox_value nv = {.type = ODBOX_TYPE_INT64, .is_null = 1};
    ck_assert_int_eq(odbox_model_set(m, "reward_points", &nv, &e), ODBOX_OK);
    ck_assert(odbox_model_is_null(m, "reward_points"));
    ck_assert_int_eq(odbox_model_set_null(m, "seen_at", &e), ODBOX_OK);
    ck_assert(odbox_model_is_null(m, "seen_at"));
}

/* Given ids: valid UUIDs only; shard-aware ids carry their shard; and
 * entities have no dates. */
static void model_ids_and_entities(void)
{
    odbox_error e = {0};
    odbox_model *m = NULL;

    ck_assert_int_eq(odbox_model_new(&DUMMY_T, "not-a-uuid", &m, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(odbox_model_new(&DUMMY_T, "0192f0c1-7a3e-7abc-8def-0123456789ab", &m, &e), ODBOX_OK);
    ck_assert_str_eq(odbox_model_id(m), "0192f0c1-7a3e-7abc-8def-0123456789ab");
    odbox_model_free(&m);
    ck_assert_int_eq(odbox_model_new_in_shard(&DUMMY_T, (odbox_shard_id){17, 42}, &m, &e), ODBOX_OK);
    odbox_shard_id sid;
    ck_assert_int_eq(odbox_uuid_version(odbox_model_id(m)), 7);
    ck_assert_int_eq(odbox_uuid_shard(odbox_model_id(m), &sid), 1);
    ck_assert(sid.group == 17 && sid.member == 42);
    odbox_model_free(&m);
    ck_assert_int_eq(odbox_model_new_in_shard(&DUMMY_T, (odbox_shard_id){0, 64}, &m, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(m);

    /* entities have no dates */
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &m, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(m, "label", "l", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_timestamp(m, "created_date", 1, &e), ODBOX_EINVAL);
    odbox_model_free(&m);
}

START_TEST(model_setters_and_getters)
{
    odbox_error e = {0};
    odbox_model *m = NULL;
    int64_t before = dfx_now_us();
    ck_assert_int_eq(odbox_model_new(&DUMMY_T, NULL, &m, &e), ODBOX_OK);
    int64_t after = dfx_now_us();
    ck_assert_int_eq(odbox_uuid_version(odbox_model_id(m)), 4);
    ck_assert_int_eq(odbox_model_version(m), 1);
    ck_assert_str_eq(odbox_model_state(m), "ACTIVE");
    ck_assert(odbox_model_created(m) >= before && odbox_model_created(m) <= after);
    ck_assert_int_eq(odbox_model_updated(m), odbox_model_created(m));
    ck_assert_ptr_eq(odbox_model_get_type(m), &DUMMY_T);
    for (size_t i = 0; i < DUMMY_T.ncolumns; i++)
        ck_assert_msg(odbox_model_is_null(m, DUMMY_T.columns[i].name), "%s", DUMMY_T.columns[i].name);
    ck_assert_int_eq(odbox_model_is_null(m, "no_such_column"), 0);

    model_setters_refuse(m);
    model_values_round_trip(m);

    /* a copy is deep */
    const char *s = NULL;
    odbox_model *cp = odbox_model_copy(m);
    ck_assert_ptr_nonnull(cp);
    dfx_assert_same(m, cp);
    ck_assert_int_eq(odbox_model_set_text(m, "name", "other", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_get_text(cp, "name", &s, &e), ODBOX_OK);
    ck_assert_str_eq(s, "copied");
    odbox_model_free(&cp);
    ck_assert_ptr_null(cp);
    odbox_model_free(&m);
    odbox_model_free(&m); /* NULL-safe */
    model_ids_and_entities();
}
END_TEST

/* JSON columns take objects only (model.h: "invalid JSON or a JSON value
 * that is not an object" is ODBOX_EINVAL), through every setter. */
START_TEST(model_json_columns_take_whole_documents)
{
    odbox_error e = {0};
    odbox_model *m = NULL;
    ck_assert_int_eq(odbox_model_new(&DUMMY_T, NULL, &m, &e), ODBOX_OK);
    const char *bad[] = {"{\"a\": ", "", "   ", "null", "{\"a\": 1} trailing", "{\"a\": 1}}", "{}x",
                         "[1, 2", "tru"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = odbox_model_set_json(m, "aliases", bad[i], &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "set_json(%s) returned %s", bad[i], odbox_errname(rc));
        odbox_value v = {.type = ODBOX_TYPE_JSON, .s = bad[i]};
        rc = odbox_model_set(m, "aliases", &v, &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "set(JSON %s) returned %s", bad[i], odbox_errname(rc));
        ck_assert(odbox_model_is_null(m, "aliases"));
    }
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", " {\"a\": [1, {\"b\": null}]} ", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_json(m, "aliases", "{}", &e), ODBOX_OK);
    /* any JSON document: lists of aliases, scalars */
    const char *good[] = {"[1, 2]", "42", "\"text\"", "true", "[]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(odbox_model_set_json(m, "aliases", good[i], &e) == ODBOX_OK, "set_json(%s): %s", good[i], e.message);
    odbox_model_free(&m);
}
END_TEST

/* ---- the repository against the server ------------------------------------ */

START_TEST(insert_and_find_round_trip)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e = {0};
    odbox_model *m[3];
    m[0] = dfx_dummy(NULL, "alpha 'quoted' \xc3\xa9 ; --", 9007199254740993LL);
    ck_assert_int_eq(odbox_model_set_int64(m[0], "reward_points", -5, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_double(m[0], "ratio", 1234.5678, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m[0], "flag", 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_json(m[0], "aliases", "{\"nick\": [\"a\", \"b\"], \"n\": 1}", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_timestamp(m[0], "seen_at", 1767225600123456LL, &e), ODBOX_OK);
    m[1] = dfx_dummy(NULL, "beta", 0); /* every nullable column NULL */
    m[2] = dfx_dummy(NULL, "gamma", INT64_MIN + 1);
    ck_assert_int_eq(odbox_model_set_int64(m[2], "reward_points", 0, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_double(m[2], "ratio", 0.0, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m[2], "flag", 0, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_json(m[2], "aliases", "{}", &e), ODBOX_OK);
    /* before the epoch: 1940-06-15 12:34:56.123457 UTC */
    ck_assert_int_eq(odbox_model_set_timestamp(m[2], "seen_at", -932383503876543LL, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_state(m[2], "FROZEN", &e), ODBOX_OK);
    dfx_insert(&f, 0, m, 3);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 3);
    /* the repository writes no events */
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE version = 1 AND reward_points IS NULL "
                                         "AND ratio IS NULL AND flag IS NULL AND aliases IS NULL AND seen_at IS NULL"),
                     1);
    for (int i = 0; i < 3; i++) {
        odbox_model *got = find_ok(f.r, &DUMMY_T, odbox_model_id(m[i]), ODBOX_READ_PRIMARY);
        dfx_assert_same(m[i], got);
        odbox_model_free(&got);
    }
    /* the stored dates are the model's, to the microsecond */
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE seen_at = '2026-01-01 00:00:00.123456'"), 1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE seen_at = '1940-06-15 12:34:56.123457'"), 1);

    /* missing ids, bad ids */
    odbox_model *none = NULL;
    char id[ODBOX_UUID_LEN + 1];
    odbox_uuid_v4(id);
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, id, ODBOX_READ_PRIMARY, &none, &e), ODBOX_ENOTFOUND);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, NULL, ODBOX_READ_PRIMARY, &none, &e), ODBOX_EINVAL);

    /* a second insert of the same id is a unique conflict; nothing changes */
    odbox_model *again = dfx_dummy(odbox_model_id(m[1]), "beta again", 1);
    odbox_shard *s = odbox_registry_default_shard(f.r);
    odbox_conn *c = NULL;
    ck_assert_int_eq(odbox_pool_acquire(odbox_shard_primary(s), &c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_repo_insert(c, &DUMMY_T, &again, 1, &e), ODBOX_EUNIQUE);
    /* a NOT NULL column left NULL: the database refuses the row */
    odbox_model *unnamed = NULL;
    ck_assert_int_eq(odbox_model_new(&DUMMY_T, NULL, &unnamed, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(unnamed, "amount", 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_repo_insert(c, &DUMMY_T, &unnamed, 1, &e), ODBOX_EDB);
    odbox_pool_release(odbox_shard_primary(s), &c);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 3);

    /* a connection lost under a write (its statement already prepared, so
     * that the loss shows at the execute): inside a transaction nothing
     * was committed; in autocommit the write may have been */
    odbox_model *lost = dfx_dummy(NULL, "lost", 1);
    int warmed = 0;
    for (int autocommit = 0; autocommit < 2 && !itest_part_skipped("insert_and_find_round_trip/lost_under_a_write");
         autocommit++, warmed++) {
        c = itest_connect(1);
        odbox_model *warm = dfx_dummy(NULL, "warm", 1);
        ck_assert_int_eq(odbox_repo_insert(c, &DUMMY_T, &warm, 1, &e), ODBOX_OK);
        odbox_model_free(&warm);
        if (!autocommit)
            ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
        itest_kill_session(f.c[0], itest_session_id(c));
        int rc = odbox_repo_insert(c, &DUMMY_T, &lost, 1, &e);
        ck_assert_msg(rc == (autocommit ? ODBOX_EINDOUBT : ODBOX_ECONNLOST), "autocommit %d: %s: %s", autocommit,
                      odbox_errname(rc), e.message);
        odbox_conn_close(&c);
    }
    odbox_model_free(&lost);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 3 + warmed);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE name = 'lost'"), 0);
    odbox_model *got = find_ok(f.r, &DUMMY_T, odbox_model_id(m[1]), ODBOX_READ_PRIMARY);
    dfx_assert_same(m[1], got);
    odbox_model_free(&got);
    odbox_model_free(&again);
    odbox_model_free(&unnamed);
    free_all(m, 3);
    dfx_close(&f);
}
END_TEST

START_TEST(batch_update_preserves_values)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e = {0};
    enum { N = 5 };
    odbox_model *m[N];
    const int64_t base = 1767225600000000LL; /* 2026-01-01 00:00:00 UTC */
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "d%d", i);
        m[i] = dfx_dummy(NULL, name, 100 + i);
        ck_assert_int_eq(odbox_model_set_double(m[i], "ratio", 0.5 + i, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_timestamp(m[i], "seen_at", base + i * 1000001LL + 123456, &e), ODBOX_OK);
    }
    dfx_insert(&f, 0, m, N);
    int64_t created[N];
    for (int i = 0; i < N; i++)
        created[i] = odbox_model_created(m[i]);

    /* one UPDATE for all five: new amounts and microsecond timestamps,
     * a column that becomes NULL in every row (typed NULLs only), one
     * that stays NULL, and a JSON column that gets a value in one row */
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(odbox_model_set_int64(m[i], "amount", 1000 + i, &e), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_timestamp(m[i], "seen_at", base + 86400000000LL + i * 7 + 654321, &e),
                         ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_null(m[i], "ratio", &e), ODBOX_OK);
    }
    ck_assert_int_eq(odbox_model_set_json(m[3], "aliases", "{\"x\": true}", &e), ODBOX_OK);
    odbox_shard *s = odbox_registry_default_shard(f.r);
    odbox_conn *c = NULL;
    ck_assert_int_eq(odbox_pool_acquire(odbox_shard_primary(s), &c, &e), ODBOX_OK);
    const int64_t upd = dfx_now_us() + 1500; /* later than created, sub-millisecond */
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    ck_assert_msg(odbox_repo_update(c, &DUMMY_T, m, N, upd, &e) == ODBOX_OK, "update: %s", e.message);
    ck_assert_int_eq(odbox_conn_commit(c, &e), ODBOX_OK);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(odbox_model_version(m[i]), 2);
        ck_assert_int_eq(odbox_model_updated(m[i]), upd);
        ck_assert_int_eq(odbox_model_created(m[i]), created[i]);
        odbox_model *got = find_ok(f.r, &DUMMY_T, odbox_model_id(m[i]), ODBOX_READ_PRIMARY);
        dfx_assert_same(m[i], got);
        ck_assert(odbox_model_is_null(got, "reward_points") && odbox_model_is_null(got, "flag") &&
                  odbox_model_is_null(got, "ratio"));
        ck_assert_int_eq(odbox_model_is_null(got, "aliases"), i != 3);
        odbox_model_free(&got);
    }
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE version = 2 AND ratio IS NULL "
                                         "AND reward_points IS NULL AND flag IS NULL"),
                     N);

    /* one row changed behind our back: the batch is stale and, rolled
     * back, leaves every row as it was; the models are not advanced */
    itest_exec(f.c[0], "UPDATE dummies SET version = 3 WHERE id = '%s'", odbox_model_id(m[2]));
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(odbox_model_set_int64(m[i], "amount", 5000 + i, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_conn_begin(c, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_repo_update(c, &DUMMY_T, m, N, upd + 10, &e), ODBOX_ESTALE);
    ck_assert_int_eq(odbox_conn_rollback(c, &e), ODBOX_OK);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(odbox_model_version(m[i]), 2);
        ck_assert_int_eq(odbox_model_updated(m[i]), upd);
    }
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE amount >= 5000"), 0);
    /* the same in autocommit: the batch runs in a transaction of its own,
     * so the rows that did match are not written either (before, they
     * were, and the models said otherwise) */
    ck_assert_int_eq(odbox_repo_update(c, &DUMMY_T, m, N, upd + 15, &e), ODBOX_ESTALE);
    ck_assert_int_eq(odbox_conn_in_transaction(c), 0);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE amount >= 5000"), 0);
    /* a single-row update of a stale version is stale too */
    ck_assert_int_eq(odbox_repo_update(c, &DUMMY_T, &m[2], 1, upd + 20, &e), ODBOX_ESTALE);
    /* and a single-row update of a current one works (autocommit) */
    ck_assert_msg(odbox_repo_update(c, &DUMMY_T, &m[0], 1, upd + 30, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_model_version(m[0]), 3);
    odbox_pool_release(odbox_shard_primary(s), &c);
    odbox_model *got = find_ok(f.r, &DUMMY_T, odbox_model_id(m[0]), ODBOX_READ_PRIMARY);
    dfx_assert_same(m[0], got);
    odbox_model_free(&got);
    free_all(m, N);
    dfx_close(&f);
}
END_TEST

/* An insert in autocommit too large for one statement (more rows than
 * the dialect's parameter limit allows in one) whose last row fails
 * writes none of its rows: its statements run in a transaction of their
 * own. Before, every statement before the failing one stayed committed. */
START_TEST(a_large_insert_in_autocommit_is_all_or_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e = {0};
    odbox_shard *s = odbox_registry_default_shard(f.r);
    odbox_conn *c = NULL;
    ck_assert_int_eq(odbox_pool_acquire(odbox_shard_primary(s), &c, &e), ODBOX_OK);
    size_t n = (size_t)odbox_conn_dialect(c)->max_params + 1; /* more than one statement's rows */
    odbox_model **m = calloc(n, sizeof *m);
    ck_assert_ptr_nonnull(m);
    for (size_t i = 0; i < n; i++)
        m[i] = dfx_dummy(i == n - 1 ? odbox_model_id(m[0]) : NULL, "bulk", (int64_t)i);
    ck_assert_int_eq(odbox_repo_insert(c, &DUMMY_T, m, n, &e), ODBOX_EUNIQUE);
    ck_assert_int_eq(odbox_conn_in_transaction(c), 0);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE name = 'bulk'"), 0);
    /* without the duplicate, every row lands */
    ck_assert_msg(odbox_repo_insert(c, &DUMMY_T, m, n - 1, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE name = 'bulk'"), (int64_t)(n - 1));
    odbox_pool_release(odbox_shard_primary(s), &c);
    free_all(m, n);
    free(m);
    dfx_close(&f);
}
END_TEST

START_TEST(reads_skip_deleted_rows)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e = {0};
    odbox_model *m[3] = {dfx_dummy(NULL, "x", 1), dfx_dummy(NULL, "x", 2), dfx_dummy(NULL, "x", 3)};
    dfx_insert(&f, 0, m, 3);
    ck_assert_int_eq(odbox_model_set_state(m[1], "DELETED", &e), ODBOX_OK);
    odbox_shard *s = odbox_registry_default_shard(f.r);
    odbox_conn *c = NULL;
    ck_assert_int_eq(odbox_pool_acquire(odbox_shard_primary(s), &c, &e), ODBOX_OK);
    ck_assert_msg(odbox_repo_update(c, &DUMMY_T, &m[1], 1, dfx_now_us(), &e) == ODBOX_OK, "%s", e.message);
    odbox_pool_release(odbox_shard_primary(s), &c);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE state = 'DELETED'"), 1);

    odbox_model *got = NULL;
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, odbox_model_id(m[1]), ODBOX_READ_PRIMARY, &got, &e),
                     ODBOX_ENOTFOUND);
    ck_assert_ptr_null(got);
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, odbox_model_id(m[1]), ODBOX_READ_REPLICA, &got, &e),
                     ODBOX_ENOTFOUND);
    const char *ids[3] = {odbox_model_id(m[0]), odbox_model_id(m[1]), odbox_model_id(m[2])};
    odbox_models list = {0};
    ck_assert_int_eq(odbox_repo_find_many(f.r, &DUMMY_T, ids, 3, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    for (size_t i = 0; i < list.n; i++)
        ck_assert_str_ne(odbox_model_id(list.items[i]), ids[1]);
    odbox_models_free(&list);
    odbox_value x = {.type = ODBOX_TYPE_TEXT, .s = "x"};
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, "name", &x, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    odbox_models_free(&list);
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    odbox_models_free(&list);
    int64_t n = -1;
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "name", &x, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 2);
    /* the row itself is still there (soft delete) */
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 3);
    free_all(m, 3);
    dfx_close(&f);
}
END_TEST

START_TEST(find_many_where_and_count)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e = {0};
    odbox_model *m[4] = {dfx_dummy(NULL, "a", 1), dfx_dummy(NULL, "b", 2), dfx_dummy(NULL, "c", 2),
                         dfx_dummy(NULL, "d", 3)};
    ck_assert_int_eq(odbox_model_set_int64(m[0], "reward_points", 10, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(m[3], "reward_points", 30, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m[1], "flag", 1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_bool(m[2], "flag", 0, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_timestamp(m[2], "seen_at", 1767225600123456LL, &e), ODBOX_OK);
    dfx_insert(&f, 0, m, 4);

    /* by ids: duplicates ignored, missing skipped */
    char missing[ODBOX_UUID_LEN + 1];
    odbox_uuid_v4(missing);
    const char *ids[] = {odbox_model_id(m[0]), odbox_model_id(m[2]), missing, odbox_model_id(m[0])};
    odbox_models list = {0};
    ck_assert_int_eq(odbox_repo_find_many(f.r, &DUMMY_T, ids, 4, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    int seen0 = 0, seen2 = 0;
    for (size_t i = 0; i < list.n; i++) {
        if (!strcmp(odbox_model_id(list.items[i]), ids[0])) {
            seen0++;
            dfx_assert_same(m[0], list.items[i]);
        } else if (!strcmp(odbox_model_id(list.items[i]), ids[1])) {
            seen2++;
            dfx_assert_same(m[2], list.items[i]);
        }
    }
    ck_assert(seen0 == 1 && seen2 == 1);
    odbox_models_free(&list);
    ck_assert_ptr_null(list.items);
    ck_assert_uint_eq(list.n, 0);
    ck_assert_int_eq(odbox_repo_find_many(f.r, &DUMMY_T, &ids[2], 1, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 0);
    odbox_models_free(&list);

    /* column = value, ordered by id */
    odbox_value two = {.type = ODBOX_TYPE_INT64, .i = 2};
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, "amount", &two, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    assert_db_order(f.c[0], "amount = 2", &list);
    odbox_models_free(&list);
    int64_t n = -1;
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "amount", &two, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 2);
    odbox_value bname = {.type = ODBOX_TYPE_TEXT, .s = "b"};
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, "name", &bname, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 1);
    dfx_assert_same(m[1], list.items[0]);
    odbox_models_free(&list);
    odbox_value yes = {.type = ODBOX_TYPE_BOOL, .b = 1}, no = {.type = ODBOX_TYPE_BOOL, .b = 0};
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "flag", &yes, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "flag", &no, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 1);
    odbox_value when = {.type = ODBOX_TYPE_TIMESTAMP, .i = 1767225600123456LL};
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, "seen_at", &when, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 1);
    ck_assert_str_eq(odbox_model_id(list.items[0]), odbox_model_id(m[2]));
    odbox_models_free(&list);

    /* NULL (either form) is IS NULL */
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, "reward_points", NULL, ODBOX_READ_PRIMARY, &list, &e),
                     ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    for (size_t i = 0; i < list.n; i++)
        ck_assert(odbox_model_is_null(list.items[i], "reward_points"));
    odbox_models_free(&list);
    odbox_value null_int = {.type = ODBOX_TYPE_INT64, .is_null = 1};
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "reward_points", &null_int, ODBOX_READ_PRIMARY, &n, &e),
                     ODBOX_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "flag", NULL, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 2);

    /* every row */
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 4);
    assert_db_order(f.c[0], "1 = 1", &list);
    odbox_models_free(&list);
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_REPLICA, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 4);

    /* a value of another type than the column's */
    odbox_value text2 = {.type = ODBOX_TYPE_TEXT, .s = "2"};
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "amount", &text2, ODBOX_READ_PRIMARY, &n, &e), ODBOX_EINVAL);
    /* a column that is not the type's (or an injection attempt) */
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, "nope", &two, ODBOX_READ_PRIMARY, &list, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "amount = 2 OR 1", &two, ODBOX_READ_PRIMARY, &n, &e),
                     ODBOX_EINVAL);
    /* a value stays a value */
    odbox_value inj = {.type = ODBOX_TYPE_TEXT, .s = "a' OR '1'='1"};
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "name", &inj, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 0);
    free_all(m, 4);
    dfx_close(&f);
}
END_TEST

START_TEST(entity_round_trip)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e = {0};
    odbox_model *t = NULL;
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(t, "label", "first", &e), ODBOX_OK);
    dfx_insert(&f, 0, &t, 1);
    odbox_model *got = find_ok(f.r, &TAG_T, odbox_model_id(t), ODBOX_READ_PRIMARY);
    dfx_assert_same(t, got);
    odbox_model_free(&got);
    ck_assert_int_eq(odbox_model_set_text(t, "label", "second", &e), ODBOX_OK);
    odbox_shard *s = odbox_registry_default_shard(f.r);
    odbox_conn *c = NULL;
    ck_assert_int_eq(odbox_pool_acquire(odbox_shard_primary(s), &c, &e), ODBOX_OK);
    ck_assert_msg(odbox_repo_update(c, &TAG_T, &t, 1, dfx_now_us(), &e) == ODBOX_OK, "%s", e.message);
    odbox_pool_release(odbox_shard_primary(s), &c);
    ck_assert_int_eq(odbox_model_version(t), 2);
    got = find_ok(f.r, &TAG_T, odbox_model_id(t), ODBOX_READ_PRIMARY);
    dfx_assert_same(t, got);
    odbox_model_free(&got);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM tags WHERE label = 'second' AND version = 2"), 1);
    odbox_model_free(&t);
    dfx_close(&f);
}
END_TEST

START_TEST(routing_by_id)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_error e = {0};
    odbox_shard *s0 = odbox_registry_shard(f.r, (odbox_shard_id){0, 0});
    odbox_shard *s1 = odbox_registry_shard(f.r, (odbox_shard_id){0, 1});
    ck_assert_ptr_eq(odbox_registry_default_shard(f.r), s0);

    odbox_model *v4 = dfx_dummy(NULL, "v4", 1);
    odbox_model *on1 = dfx_dummy_in((odbox_shard_id){0, 1}, "on1", 2);
    odbox_model *unreg = dfx_dummy_in((odbox_shard_id){9, 9}, "unregistered", 3);
    odbox_model *on0 = dfx_dummy_in((odbox_shard_id){0, 0}, "on0", 4);
    ck_assert_ptr_eq(odbox_registry_shard_for_id(f.r, odbox_model_id(v4)), s0);
    ck_assert_ptr_eq(odbox_registry_shard_for_id(f.r, odbox_model_id(on1)), s1);
    ck_assert_ptr_eq(odbox_registry_shard_for_id(f.r, odbox_model_id(unreg)), s0);
    ck_assert_ptr_eq(odbox_registry_shard_for_id(f.r, odbox_model_id(on0)), s0);
    ck_assert_ptr_eq(odbox_registry_shard_for_id(f.r, "not an id"), s0);
    /* a v1-style id (not v7) goes to the default shard whatever its bits */
    ck_assert_ptr_eq(odbox_registry_shard_for_id(f.r, "0192f0c1-7a3e-1abc-8041-0123456789ab"), s0);

    odbox_model *in0[] = {v4, unreg, on0};
    dfx_insert(&f, 0, in0, 3);
    dfx_insert(&f, 1, &on1, 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 3);
    ck_assert_int_eq(dfx_rows(&f, 1, "dummies"), 1);
    /* reads route by id: each is found where it lives */
    odbox_model *all[] = {v4, on1, unreg, on0};
    for (int i = 0; i < 4; i++) {
        odbox_model *got = find_ok(f.r, &DUMMY_T, odbox_model_id(all[i]), ODBOX_READ_PRIMARY);
        dfx_assert_same(all[i], got);
        odbox_model_free(&got);
    }
    /* ids in upper case are the same ids, routed the same way */
    for (int i = 0; i < 4; i++) {
        char up[ODBOX_UUID_LEN + 1];
        snprintf(up, sizeof up, "%s", odbox_model_id(all[i]));
        for (char *p = up; *p; p++)
            if (*p >= 'a' && *p <= 'f')
                *p = (char)(*p - 'a' + 'A');
        ck_assert_ptr_eq(odbox_registry_shard_for_id(f.r, up), odbox_registry_shard_for_id(f.r, odbox_model_id(all[i])));
        odbox_model *got = find_ok(f.r, &DUMMY_T, up, ODBOX_READ_PRIMARY);
        ck_assert_str_eq(odbox_model_id(got), odbox_model_id(all[i]));
        odbox_model_free(&got);
    }
    /* a shard-0.1 id whose row sits on 0.0 is not found there */
    odbox_model *misplaced = dfx_dummy_in((odbox_shard_id){0, 1}, "misplaced", 5);
    dfx_insert(&f, 0, &misplaced, 1);
    odbox_model *none = NULL;
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, odbox_model_id(misplaced), ODBOX_READ_PRIMARY, &none, &e),
                     ODBOX_ENOTFOUND);
    /* find_many groups per shard; find_where / count scatter over all */
    const char *ids[] = {odbox_model_id(v4), odbox_model_id(on1), odbox_model_id(unreg)};
    odbox_models list = {0};
    ck_assert_int_eq(odbox_repo_find_many(f.r, &DUMMY_T, ids, 3, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 3);
    odbox_models_free(&list);
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_PRIMARY, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 5);
    odbox_models_free(&list);
    odbox_value two = {.type = ODBOX_TYPE_INT64, .i = 2};
    int64_t n = -1;
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, "amount", &two, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 5);
    odbox_model_free(&v4);
    odbox_model_free(&on1);
    odbox_model_free(&unreg);
    odbox_model_free(&on0);
    odbox_model_free(&misplaced);
    dfx_close(&f);
}
END_TEST

START_TEST(replica_reads)
{
    dfx f;
    dfx_open(&f, 1, 1); /* the replica DSN is the primary's database */
    odbox_error e = {0};
    odbox_shard *s = odbox_registry_default_shard(f.r);
    ck_assert_int_eq(odbox_shard_has_replica(s), 1);
    ck_assert_ptr_ne(odbox_shard_replica(s), odbox_shard_primary(s));
    odbox_model *m[2] = {dfx_dummy(NULL, "r1", 1), dfx_dummy(NULL, "r2", 2)};
    ck_assert_int_eq(odbox_model_set_timestamp(m[0], "seen_at", 1767225600000001LL, &e), ODBOX_OK);
    dfx_insert(&f, 0, m, 2);
    odbox_model *got = find_ok(f.r, &DUMMY_T, odbox_model_id(m[0]), ODBOX_READ_REPLICA);
    dfx_assert_same(m[0], got);
    odbox_model_free(&got);
    const char *ids[] = {odbox_model_id(m[0]), odbox_model_id(m[1])};
    odbox_models list = {0};
    ck_assert_int_eq(odbox_repo_find_many(f.r, &DUMMY_T, ids, 2, ODBOX_READ_REPLICA, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 2);
    odbox_models_free(&list);
    odbox_value r2 = {.type = ODBOX_TYPE_TEXT, .s = "r2"};
    ck_assert_int_eq(odbox_repo_find_where(f.r, &DUMMY_T, "name", &r2, ODBOX_READ_REPLICA, &list, &e), ODBOX_OK);
    ck_assert_uint_eq(list.n, 1);
    dfx_assert_same(m[1], list.items[0]);
    odbox_models_free(&list);
    int64_t n = -1;
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_REPLICA, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 2);
    free_all(m, 2);
    dfx_close(&f);
}
END_TEST

Suite *repo_suite(void)
{
    Suite *s = suite_create("repo");
    TCase *t = tcase_create("repo");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, model_type_checks);
    tcase_add_test(t, model_setters_and_getters);
    tcase_add_test(t, model_json_columns_take_whole_documents);
    tcase_add_test(t, insert_and_find_round_trip);
    tcase_add_test(t, batch_update_preserves_values);
    tcase_add_test(t, a_large_insert_in_autocommit_is_all_or_nothing);
    tcase_add_test(t, reads_skip_deleted_rows);
    tcase_add_test(t, find_many_where_and_count);
    tcase_add_test(t, entity_round_trip);
    tcase_add_test(t, routing_by_id);
    tcase_add_test(t, replica_reads);
    suite_add_tcase(s, t);
    return s;
}
