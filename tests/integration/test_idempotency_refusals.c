/* odbox — idempotency keys refused on every dialect alike, writing
 * nothing: a key that is not valid UTF-8 (PostgreSQL's server refused it
 * at the INSERT with a misleading hint while MySQL/MariaDB and SQLite
 * stored it). Added to the idempotency suite
 * (idempotency_add_refusal_tests). Every check counts rows. */
#include <stdio.h>
#include <string.h>
#include "actions.h"
#include "odbox/tx.h"

static int64_t keys(dfx *f)
{
    return itest_count(f->c[0], "SELECT COUNT(*) FROM %s", itest_evt(f->ev[0], "idempotency_keys"));
}

/* Adds a dummy named params.name with params.amount; counts its calls. */
static int add_dummy(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx;
    (*(int *)user)++;
    odbox_model *m = dfx_dummy(NULL, json_object_get_string(json_object_object_get(params, "name")),
                               json_object_get_int64(json_object_object_get(params, "amount")));
    json_object *payload = json_object_new_object();
    int rc = odbox_plan_add(plan, m, err);
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &EV_CREATED, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

static int keyed(odbox_executor *exe, const char *name, int *calls, const char *key, const char *params_json,
                 odbox_result *res, odbox_error *e)
{
    odbox_action a = {.name = name, .perform = add_dummy, .user = calls};
    json_object *p = json_tokener_parse(params_json);
    ck_assert_ptr_nonnull(p);
    int rc = odbox_execute_keyed(exe, &a, p, key, NULL, res, e);
    json_object_put(p);
    return rc;
}

/* "a\xffb" and a surrogate: ODBOX_EINVAL saying the key is not UTF-8,
 * before perform runs or anything is written, for an action and for an
 * own transaction; the same call with a valid key then executes. */
START_TEST(a_key_that_is_not_utf8_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    static const char *const bad[] = {"a\xff" "b", "req-\xed\xa0\x80", "\xc0\xaf"};
    int calls = 0;
    odbox_result res;
    odbox_error e = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = keyed(exe, "AddDummy", &calls, bad[i], "{\"name\":\"u8\",\"amount\":1}", &res, &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "key %zu: %s: %s", i, odbox_errname(rc), e.message);
        ck_assert_msg(strstr(e.message, "not valid UTF-8") && !strstr(e.message, "migration"), "%s", e.message);
        ck_assert_int_eq(res.replayed, 0);
        odbox_result_clear(&res);
        odbox_tx *tx = (odbox_tx *)&f;
        odbox_tx_config cfg = {.action_name = "PayOrder", .idempotency_key = bad[i]};
        rc = odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, &tx, &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "key %zu: %s: %s", i, odbox_errname(rc), e.message);
        ck_assert_msg(strstr(e.message, "not valid UTF-8"), "%s", e.message);
        ck_assert_ptr_null(tx);
    }
    ck_assert_int_eq(calls, 0);
    ck_assert_int_eq(keys(&f), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    /* a valid key (not ASCII) with the same call executes */
    ck_assert_msg(keyed(exe, "AddDummy", &calls, "a\xc3\xbf" "b", "{\"name\":\"u8\",\"amount\":1}", &res, &e) ==
                      ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

void idempotency_add_refusal_tests(TCase *t)
{
    tcase_add_test(t, a_key_that_is_not_utf8_is_refused);
}
