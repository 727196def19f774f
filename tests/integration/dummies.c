/* odbox — the "dummies" fixture shared by the repository and executor
 * suites (declared in dummies.h): a registry of one or two shards with
 * unique eventlogs, migrated with the framework set plus
 * tests/fixtures/dummies-migrations (tables dummies and tags). */
#include <string.h>
#include <time.h>
#include <json-c/json.h>
#include "dummies.h"

static const odbox_column dummy_columns[] = {
    {"name", ODBOX_TYPE_TEXT, 0, 100},
    {"amount", ODBOX_TYPE_INT64, 0, 0},
    {"reward_points", ODBOX_TYPE_INT64, 1, 0},
    {"ratio", ODBOX_TYPE_DOUBLE, 1, 0},
    {"flag", ODBOX_TYPE_BOOL, 1, 0},
    {"aliases", ODBOX_TYPE_JSON, 1, 0},
    {"seen_at", ODBOX_TYPE_TIMESTAMP, 1, 0},
};
const odbox_model_type DUMMY_T = {"Dummy", "dummies", ODBOX_KIND_MODEL, dummy_columns,
                                  sizeof dummy_columns / sizeof dummy_columns[0]};
static const odbox_column tag_columns[] = {{"label", ODBOX_TYPE_TEXT, 0, 50}};
const odbox_model_type TAG_T = {"Tag", "tags", ODBOX_KIND_ENTITY, tag_columns, 1};

int64_t dfx_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void drop_tables(odbox_conn *c)
{
    itest_exec(c, "DROP TABLE IF EXISTS dummies");
    itest_exec(c, "DROP TABLE IF EXISTS tags");
}

void dfx_open(dfx *f, int nshards, int with_replica)
{
    memset(f, 0, sizeof *f);
    f->nshards = nshards;
    odbox_shard_config sc[2];
    memset(sc, 0, sizeof sc);
    for (int i = 0; i < nshards; i++) {
        itest_name(f->ev[i], sizeof f->ev[i], i ? "ev_dfx_b" : "ev_dfx_a");
        f->c[i] = itest_connect(i + 1);
        drop_tables(f->c[i]);
        sc[i].id = (odbox_shard_id){0, i};
        sc[i].primary_dsn = itest_dsn(i + 1);
        sc[i].replica_dsn = with_replica ? itest_dsn(i + 1) : NULL;
        sc[i].eventlog = f->ev[i];
    }
    odbox_registry_config cfg = {.shards = sc, .nshards = (size_t)nshards, .has_default = 1,
                                 .default_shard = {0, 0}};
    odbox_error e = {0};
    ck_assert_msg(odbox_registry_open(&cfg, &f->r, &e) == ODBOX_OK, "%s", e.message);
    odbox_migrate_options o = {.user_dir = itest_src("tests/fixtures/dummies-migrations"), .user_set = "dummies"};
    ck_assert_msg(odbox_migrate_registry(f->r, &o, &e) == ODBOX_OK, "migrate: %s", e.message);
    /* the checks the executor makes at a shard's first use, made now: a
     * test that cuts a connection then sees its own statement meet it */
    ck_assert_msg(odbox_model_type_verify(f->r, &DUMMY_T, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_model_type_verify(f->r, &TAG_T, &e) == ODBOX_OK, "%s", e.message);
    for (int i = 0; i < nshards; i++) {
        char owner[256];
        ck_assert_msg(odbox_migrate_check_owner(odbox_registry_shard_at(f->r, (size_t)i), owner, sizeof owner,
                                                &e) == ODBOX_OK, "%s", e.message);
        ck_assert_str_ne(owner, "");
    }
    for (int i = 0; i < nshards; i++) {
        ck_assert_int_eq(dfx_rows(f, i, "dummies"), 0);
        ck_assert_int_eq(dfx_events(f, i), 0);
    }
}

void dfx_close(dfx *f)
{
    for (int i = 0; i < f->nshards; i++) {
        drop_tables(f->c[i]);
        itest_drop_eventlog(f->c[i], f->ev[i]);
        odbox_conn_close(&f->c[i]);
    }
    odbox_registry_free(&f->r);
}

int64_t dfx_events(dfx *f, int shard)
{
    return itest_count(f->c[shard], "SELECT COUNT(*) FROM %s", itest_evt(f->ev[shard], "events"));
}

int64_t dfx_rows(dfx *f, int shard, const char *table)
{
    return itest_count(f->c[shard], "SELECT COUNT(*) FROM %s", table);
}

odbox_model *dfx_dummy(const char *id, const char *name, int64_t amount)
{
    odbox_model *m = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_model_new(&DUMMY_T, id, &m, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_model_set_text(m, "name", name, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_model_set_int64(m, "amount", amount, &e) == ODBOX_OK, "%s", e.message);
    return m;
}

odbox_model *dfx_dummy_in(odbox_shard_id shard, const char *name, int64_t amount)
{
    odbox_model *m = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_model_new_in_shard(&DUMMY_T, shard, &m, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_model_set_text(m, "name", name, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(m, "amount", amount, &e), ODBOX_OK);
    return m;
}

/* Inserts through the repository on a pooled connection of shard 0.<shard>. */
void dfx_insert(dfx *f, int shard, odbox_model *const *m, size_t n)
{
    odbox_shard *s = odbox_registry_shard(f->r, (odbox_shard_id){0, shard});
    ck_assert_ptr_nonnull(s);
    odbox_conn *c = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_pool_acquire(odbox_shard_primary(s), &c, &e) == ODBOX_OK, "%s", e.message);
    int rc = odbox_repo_insert(c, odbox_model_get_type(m[0]), m, n, &e);
    odbox_pool_release(odbox_shard_primary(s), &c);
    ck_assert_msg(rc == ODBOX_OK, "insert: %s", e.message);
}

int dfx_json_same(const char *a, const char *b)
{
    json_object *ja = json_tokener_parse(a), *jb = json_tokener_parse(b);
    int same = ja && jb && json_object_equal(ja, jb);
    json_object_put(ja);
    json_object_put(jb);
    return same;
}

/* Every column of the type holds the same value (or NULL) in a and b. */
void dfx_assert_columns(const odbox_model *a, const odbox_model *b)
{
    const odbox_model_type *t = odbox_model_get_type(a);
    ck_assert_ptr_eq(t, odbox_model_get_type(b));
    for (size_t i = 0; i < t->ncolumns; i++) {
        const char *col = t->columns[i].name;
        odbox_value va, vb;
        odbox_error e = {0};
        ck_assert_msg(odbox_model_get(a, col, &va, &e) == ODBOX_OK, "%s: %s", col, e.message);
        ck_assert_msg(odbox_model_get(b, col, &vb, &e) == ODBOX_OK, "%s: %s", col, e.message);
        ck_assert_msg(va.is_null == vb.is_null, "%s: NULL %d vs %d", col, va.is_null, vb.is_null);
        ck_assert_int_eq(odbox_model_is_null(a, col), va.is_null);
        if (va.is_null)
            continue;
        switch (t->columns[i].type) {
        case ODBOX_TYPE_TEXT:
        case ODBOX_TYPE_UUID:
            ck_assert_msg(!strcmp(va.s, vb.s), "%s: '%s' vs '%s'", col, va.s, vb.s);
            break;
        case ODBOX_TYPE_JSON:
            ck_assert_msg(dfx_json_same(va.s, vb.s), "%s: %s vs %s", col, va.s, vb.s);
            break;
        case ODBOX_TYPE_INT64:
        case ODBOX_TYPE_TIMESTAMP:
            ck_assert_msg(va.i == vb.i, "%s: %lld vs %lld", col, (long long)va.i, (long long)vb.i);
            break;
        case ODBOX_TYPE_DOUBLE:
            ck_assert_double_eq_tol(va.d, vb.d, 1e-9);
            break;
        case ODBOX_TYPE_BOOL:
            ck_assert_msg(!va.b == !vb.b, "%s: %d vs %d", col, va.b, vb.b);
            break;
        }
    }
}

/* Same id, version, state, dates and every column of the type. */
void dfx_assert_same(const odbox_model *a, const odbox_model *b)
{
    const odbox_model_type *t = odbox_model_get_type(a);
    ck_assert_str_eq(odbox_model_id(a), odbox_model_id(b));
    ck_assert_int_eq(odbox_model_version(a), odbox_model_version(b));
    ck_assert_str_eq(odbox_model_state(a), odbox_model_state(b));
    if (t->kind == ODBOX_KIND_MODEL) {
        ck_assert_int_eq(odbox_model_created(a), odbox_model_created(b));
        ck_assert_int_eq(odbox_model_updated(a), odbox_model_updated(b));
    }
    dfx_assert_columns(a, b);
}
