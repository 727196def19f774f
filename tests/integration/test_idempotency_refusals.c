/* odbox — idempotency keys refused on every dialect alike, writing
 * nothing: a key that another action (or own transaction) name used,
 * where its outcome used to be replayed as the second one's (a withdraw
 * reported done with the deposit's action id); a key that is not valid
 * UTF-8 (PostgreSQL's server refused it at the INSERT with a misleading
 * hint while MySQL/MariaDB and SQLite stored it). A key row written by a
 * build before migration V15 has no action name and still replays by its
 * params. Added to the idempotency suite (idempotency_add_refusal_tests).
 * Every check counts rows. */
#include <stdio.h>
#include <string.h>
#include "actions.h"
#include "idempotency.h"
#include "odbox/tx.h"

static int64_t keys(dfx *f)
{
    return itest_count(f->c[0], "SELECT COUNT(*) FROM %s", itest_evt(f->ev[0], "idempotency_keys"));
}

/* ---- another action's key ---------------------------------------------------------- */

typedef struct mover {
    int sign; /* +1 a deposit, -1 a withdrawal */
    int calls;
} mover;

/* Adds sign * params.amount to the dummy params.id; the result is the new
 * amount. */
static int move(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    mover *mv = user;
    mv->calls++;
    const char *id = json_object_get_string(json_object_object_get(params, "id"));
    int64_t amount = json_object_get_int64(json_object_object_get(params, "amount")), was = 0;
    odbox_model *m = NULL;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &DUMMY_T, id, ODBOX_READ_PRIMARY, &m, err);
    if (rc == ODBOX_OK && (rc = odbox_model_get_int64(m, "amount", &was, err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(m, "amount", was + mv->sign * amount, err)) == ODBOX_OK)
        rc = odbox_plan_update(plan, m, NULL, err);
    json_object *payload = json_object_new_object();
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &EV_CHANGED, payload, err);
    json_object_put(payload);
    if (rc == ODBOX_OK)
        odbox_plan_set_result(plan, json_object_new_int64(was + mv->sign * amount));
    odbox_model_free(&m);
    return rc;
}

static int64_t keys_named(dfx *f, const char *where)
{
    return itest_count(f->c[0], "SELECT COUNT(*) FROM %s WHERE %s", itest_evt(f->ev[0], "idempotency_keys"), where);
}

/* A deposit, then a withdrawal with the same key and the same params:
 * ODBOX_EUNIQUE naming both actions, perform not run, nothing written,
 * and the deposit's outcome still replays for the deposit. Before, the
 * withdrawal returned ODBOX_OK, replayed, with the deposit's action id:
 * not done, and reported as done. */
START_TEST(a_key_of_another_action_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *seed = dfx_dummy(NULL, "wallet", 100);
    dfx_insert(&f, 0, &seed, 1);
    char params[160], other[160];
    snprintf(params, sizeof params, "{\"id\":\"%s\",\"amount\":10}", odbox_model_id(seed));
    snprintf(other, sizeof other, "{\"id\":\"%s\",\"amount\":20}", odbox_model_id(seed));
    mover deposit = {.sign = 1}, withdraw = {.sign = -1};
    odbox_result r1, r2;
    odbox_error e = {0};
    ck_assert_msg(execute_keyed_json(exe, "Deposit", move, &deposit, "req-1", params, &r1, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(json_object_get_int64(r1.value), 110);
    for (int i = 0; i < 2; i++) { /* the same params, then others: the name decides first */
        int rc = execute_keyed_json(exe, "Withdraw", move, &withdraw, "req-1", i ? other : params, &r2, &e);
        ck_assert_msg(rc == ODBOX_EUNIQUE, "%s: %s (replayed %d)", odbox_errname(rc), e.message, r2.replayed);
        ck_assert_msg(strstr(e.message, "'req-1'") && strstr(e.message, "action Deposit") &&
                          strstr(e.message, "Withdraw") && strstr(e.message, r1.action_id) &&
                          strstr(e.message, "nothing written"),
                      "%s", e.message);
        ck_assert_int_eq(r2.replayed, 0);
        ck_assert_ptr_null(r2.value);
        odbox_result_clear(&r2);
    }
    ck_assert_int_eq(withdraw.calls, 0);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(seed)), 110);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(keys_named(&f, "action_name = 'Deposit'"), 1);
    /* the deposit's outcome is intact: it replays for the deposit */
    ck_assert_msg(execute_keyed_json(exe, "Deposit", move, &deposit, "req-1", params, &r2, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(r2.replayed, 1);
    ck_assert_str_eq(r2.action_id, r1.action_id);
    ck_assert_int_eq(json_object_get_int64(r2.value), 110);
    ck_assert_int_eq(deposit.calls, 1);
    odbox_result_clear(&r2);
    /* another key: the withdrawal runs */
    ck_assert_msg(execute_keyed_json(exe, "Withdraw", move, &withdraw, "req-2", params, &r2, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(json_object_get_int64(r2.value), 100);
    ck_assert_int_eq(keys_named(&f, "action_name = 'Withdraw'"), 1);
    odbox_result_clear(&r1);
    odbox_result_clear(&r2);
    odbox_model_free(&seed);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

static int keyed_begin(odbox_executor *exe, const char *name, const char *key, odbox_tx **tx, odbox_error *e)
{
    odbox_tx_config cfg = {.action_name = name, .idempotency_key = key}; /* params: {} for every one */
    return odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, tx, e);
}

/* Own transactions' params default to {}, so any two names with one key
 * had the same params: RefundOrder replayed PayOrder. Now refused, naming
 * both, nothing written; an action's key is refused to a transaction of
 * another name too. */
START_TEST(a_key_of_another_transaction_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_tx *tx = NULL;
    odbox_error e = {0};
    ck_assert_msg(keyed_begin(exe, "PayOrder", "order-7", &tx, &e) == ODBOX_OK, "%s", e.message);
    char first[37];
    snprintf(first, sizeof first, "%s", odbox_tx_action_id(tx));
    json_object *payload = json_object_new_object();
    ck_assert_int_eq(odbox_tx_emit(tx, "Order", "7", &EV_CREATED, payload, &e), ODBOX_OK);
    ck_assert_msg(odbox_tx_commit(&tx, &e) == ODBOX_OK, "%s", e.message);
    for (int i = 0; i < 2; i++) { /* the same answer every time */
        tx = (odbox_tx *)&f;
        int rc = keyed_begin(exe, "RefundOrder", "order-7", &tx, &e);
        ck_assert_msg(rc == ODBOX_EUNIQUE, "%s: %s", odbox_errname(rc), e.message);
        ck_assert_msg(strstr(e.message, "action PayOrder") && strstr(e.message, "RefundOrder") &&
                          strstr(e.message, first),
                      "%s", e.message);
        ck_assert_ptr_null(tx);
    }
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(keys(&f), 1);
    /* PayOrder again replays */
    ck_assert_msg(keyed_begin(exe, "PayOrder", "order-7", &tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_tx_replayed(tx), 1);
    ck_assert_str_eq(odbox_tx_action_id(tx), first);
    odbox_tx_rollback(&tx);
    /* an action's key, and a transaction of another name */
    odbox_model *seed = dfx_dummy(NULL, "w", 5);
    dfx_insert(&f, 0, &seed, 1);
    char params[160];
    snprintf(params, sizeof params, "{\"id\":\"%s\",\"amount\":1}", odbox_model_id(seed));
    mover deposit = {.sign = 1};
    odbox_result r;
    ck_assert_msg(execute_keyed_json(exe, "Deposit", move, &deposit, "order-8", params, &r, &e) == ODBOX_OK, "%s",
                  e.message);
    odbox_result_clear(&r);
    ck_assert_int_eq(keyed_begin(exe, "PayOrder", "order-8", &tx, &e), ODBOX_EUNIQUE);
    ck_assert_msg(strstr(e.message, "action Deposit") && strstr(e.message, "PayOrder"), "%s", e.message);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    ck_assert_int_eq(keys(&f), 2);
    json_object_put(payload);
    odbox_model_free(&seed);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A key row as a build before V15 writes it: its INSERT names the V11
 * columns only (so it keeps working with V15's column, which it leaves
 * NULL). */
static void old_build_key(dfx *f, const char *action_id, const char *key, const char *params_json,
                          const char *result_json)
{
    char sha[65];
    odbox_idem_params_sha256(params_json, sha);
    itest_exec(f->c[0],
               "INSERT INTO %s (id, namespace, idem_key, params_sha256, result, created_date) "
               "VALUES ('%s', '%s', '%s', '%s', '%s', %s)",
               itest_evt(f->ev[0], "idempotency_keys"), action_id, NS, key, sha, result_json,
               odbox_conn_dialect(f->c[0])->now_sql);
}

/* Keys with no action name (NULL: written before V15, or by an older
 * build during a rolling deploy) are compared by their params only, as
 * before: the same params replay under any name, for an action and an
 * own transaction; other params are still refused. */
START_TEST(a_key_without_an_action_name_replays_by_its_params)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *seed = dfx_dummy(NULL, "old", 50);
    dfx_insert(&f, 0, &seed, 1);
    char params[160], other[160];
    snprintf(params, sizeof params, "{\"id\":\"%s\",\"amount\":10}", odbox_model_id(seed));
    snprintf(other, sizeof other, "{\"id\":\"%s\",\"amount\":11}", odbox_model_id(seed));
    const char *old_id = "0191e5a4-0000-7000-8000-0000000000a1", *old_tx = "0191e5a4-0000-7000-8000-0000000000a2";
    old_build_key(&f, old_id, "old-1", params, "{\"n\":7}");
    old_build_key(&f, old_tx, "old-tx", "{}", "{}");
    ck_assert_int_eq(keys_named(&f, "action_name IS NULL"), 2);
    mover deposit = {.sign = 1}, withdraw = {.sign = -1};
    odbox_result r;
    odbox_error e = {0};
    for (int i = 0; i < 2; i++) {
        int rc = execute_keyed_json(exe, i ? "Withdraw" : "Deposit", move, i ? &withdraw : &deposit, "old-1", params,
                                    &r, &e);
        ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
        ck_assert_int_eq(r.replayed, 1);
        ck_assert_str_eq(r.action_id, old_id);
        ck_assert_int_eq(json_object_get_int64(json_object_object_get(r.value, "n")), 7);
        odbox_result_clear(&r);
    }
    ck_assert_int_eq(execute_keyed_json(exe, "Deposit", move, &deposit, "old-1", other, &r, &e), ODBOX_EUNIQUE);
    ck_assert_msg(strstr(e.message, "other parameters") && strstr(e.message, old_id), "%s", e.message);
    odbox_result_clear(&r);
    ck_assert_int_eq(deposit.calls + withdraw.calls, 0);
    odbox_tx *tx = NULL;
    ck_assert_msg(keyed_begin(exe, "RefundOrder", "old-tx", &tx, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(odbox_tx_replayed(tx), 1);
    ck_assert_str_eq(odbox_tx_action_id(tx), old_tx);
    odbox_tx_rollback(&tx);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(seed)), 50);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(keys(&f), 2);
    ck_assert_int_eq(keys_named(&f, "action_name IS NULL"), 2);
    odbox_model_free(&seed);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- keys that are not UTF-8 --------------------------------------------------------- */

/* "a\xffb" and a surrogate: ODBOX_EINVAL saying the key is not UTF-8,
 * before perform runs or anything is written, for an action and for an
 * own transaction; the same call with a valid key then executes. */
START_TEST(a_key_that_is_not_utf8_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    static const char *const bad[] = {"a\xff" "b", "req-\xed\xa0\x80", "\xc0\xaf"};
    maker mk = {0};
    odbox_result res;
    odbox_error e = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = execute_keyed_json(exe, "AddDummy", make_dummy, &mk, bad[i], "{\"name\":\"u8\",\"amount\":1}", &res,
                                    &e);
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
    ck_assert_int_eq(mk.calls, 0);
    ck_assert_int_eq(keys(&f), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    /* a valid key (not ASCII) with the same call executes */
    int rc = execute_keyed_json(exe, "AddDummy", make_dummy, &mk, "a\xc3\xbf" "b", "{\"name\":\"u8\",\"amount\":1}",
                                &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(mk.calls, 1);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- a key another caller holds, a broken row, no table ---------------------------- */

/* An own transaction holds a key, uncommitted: an action with that key
 * waits for it to the sessions' lock wait bound (shortened here from 50
 * s to 1 s) and returns ODBOX_ETIMEDOUT saying so, having written
 * nothing; once the holder commits, the same call replays it. */
START_TEST(a_keyed_call_behind_an_open_holder_times_out)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    dfx_short_lock_waits(&f, 1000);
    json_object *params = json_tokener_parse("{\"name\":\"held\",\"amount\":1}");
    odbox_tx_config cfg = {.action_name = "AddDummy", .params = params, .idempotency_key = "held-open"};
    odbox_tx *holder = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, &holder, &e) == ODBOX_OK, "%s", e.message);
    maker mk = {0};
    odbox_result res;
    int rc = execute_keyed_json(exe, "AddDummy", make_dummy, &mk, "held-open", "{\"name\":\"held\",\"amount\":1}",
                                &res, &e);
    ck_assert_msg(rc == ODBOX_ETIMEDOUT && strstr(e.message, "idempotency key 'held-open'") &&
                      strstr(e.message, "another transaction holds it"),
                  "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(res.replayed, 0);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    json_object *payload = json_object_new_object();
    ck_assert_int_eq(odbox_tx_emit(holder, "Dummy", "held", &EV_CHANGED, payload, &e), ODBOX_OK);
    json_object_put(payload);
    ck_assert_msg(odbox_tx_commit(&holder, &e) == ODBOX_OK, "%s", e.message);
    rc = execute_keyed_json(exe, "AddDummy", make_dummy, &mk, "held-open", "{\"name\":\"held\",\"amount\":1}", &res,
                            &e);
    ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res.replayed, 1);
    odbox_result_clear(&res);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    json_object_put(params);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A key row whose stored result is not JSON (written by hand, or cut):
 * the replay says so (ODBOX_EDB), and perform does not run again. */
START_TEST(a_stored_result_that_is_not_json_is_an_error)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    maker mk = {0};
    odbox_result res;
    odbox_error e = {0};
    const char *params = "{\"name\":\"r-1\",\"amount\":1}";
    ck_assert_msg(execute_keyed_json(exe, "AddDummy", make_dummy, &mk, "broken", params, &res, &e) == ODBOX_OK, "%s",
                  e.message);
    odbox_result_clear(&res);
    itest_exec(f.c[0], "UPDATE %s SET result = '{cut' WHERE idem_key = 'broken'",
               itest_evt(f.ev[0], "idempotency_keys"));
    int rc = execute_keyed_json(exe, "AddDummy", make_dummy, &mk, "broken", params, &res, &e);
    ck_assert_msg(rc == ODBOX_EDB && strstr(e.message, "stored result is not JSON"), "%s: %s", odbox_errname(rc),
                  e.message);
    odbox_result_clear(&res);
    ck_assert_int_eq(mk.calls, 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A keyed action whose result holds text that is not UTF-8: the key's
 * row keeps the result as text, which PostgreSQL and MySQL/MariaDB
 * refuse at its write (the action lost at its commit there) and SQLite
 * stores. Refused alike (ODBOX_EINVAL), nothing written and the key
 * unspent, so the same key runs once the result is fixed. */
START_TEST(a_keyed_result_that_is_not_utf8_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "u8", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1, .result = "{\"s\": \"a\xff" "b\"}"};
    odbox_action a = {.name = "Utf8Result", .perform = scripted, .user = &s};
    odbox_result res;
    odbox_error e = {0};
    int rc = odbox_execute_keyed(exe, &a, NULL, "utf8-result", NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, "UTF-8"), "%s: %s", odbox_errname(rc), e.message);
    odbox_result_clear(&res);
    ck_assert_int_eq(keys(&f), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    s.result = "{\"s\": \"ab\"}";
    ck_assert_msg(odbox_execute_keyed(exe, &a, NULL, "utf8-result", NULL, &res, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res.replayed, 0);
    odbox_result_clear(&res);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A keyed result nested 32 levels deep was stored, and its replay could
 * not read it back ("the stored result is not JSON": json-c reads at most
 * 32 levels, and the result is read inside an object). Refused like the
 * params (ODBOX_EINVAL, nothing written, the key unspent); 31 levels are
 * kept and replayed. */
START_TEST(a_keyed_result_nested_too_deep_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "deep", 1);
    char deep[128], deepest[128];
    nested_json(deep, 32), nested_json(deepest, 31);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1, .result = deep};
    odbox_action a = {.name = "DeepResult", .perform = scripted, .user = &s};
    odbox_result res;
    odbox_error e = {0};
    int rc = odbox_execute_keyed(exe, &a, NULL, "deep-result", NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_EINVAL && strstr(e.message, "nested 32 levels deep"), "%s: %s", odbox_errname(rc),
                  e.message);
    odbox_result_clear(&res);
    ck_assert_int_eq(keys(&f), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    s.result = deepest;
    ck_assert_msg(odbox_execute_keyed(exe, &a, NULL, "deep-result", NULL, &res, &e) == ODBOX_OK, "%s", e.message);
    odbox_result_clear(&res);
    ck_assert_msg(odbox_execute_keyed(exe, &a, NULL, "deep-result", NULL, &res, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(res.replayed, 1);
    ck_assert_ptr_nonnull(res.value);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* An eventlog without the keys' table (migration V11 not applied): a
 * keyed action and a keyed own transaction fail naming the migrations,
 * run nothing and write nothing. */
START_TEST(a_key_without_its_table_names_the_migrations)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    itest_exec(f.c[0], "DROP TABLE %s", itest_evt(f.ev[0], "idempotency_keys"));
    maker mk = {0};
    odbox_result res;
    odbox_error e = {0};
    int rc = execute_keyed_json(exe, "AddDummy", make_dummy, &mk, "no-table", "{\"name\":\"t\",\"amount\":1}", &res,
                                &e);
    ck_assert_msg(rc != ODBOX_OK && strstr(e.message, "migrations V11 and V15"), "%s: %s", odbox_errname(rc),
                  e.message);
    odbox_result_clear(&res);
    odbox_tx *tx = (odbox_tx *)&f;
    odbox_tx_config cfg = {.action_name = "PayOrder", .idempotency_key = "no-table"};
    rc = odbox_tx_begin(exe, (odbox_shard_id){0, 0}, &cfg, &tx, &e);
    ck_assert_msg(rc != ODBOX_OK && strstr(e.message, "migrations V11 and V15"), "%s: %s", odbox_errname(rc),
                  e.message);
    ck_assert_ptr_null(tx);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 0);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

void idempotency_add_refusal_tests(TCase *t)
{
    tcase_add_test(t, a_keyed_call_behind_an_open_holder_times_out);
    tcase_add_test(t, a_stored_result_that_is_not_json_is_an_error);
    tcase_add_test(t, a_keyed_result_that_is_not_utf8_is_refused);
    tcase_add_test(t, a_keyed_result_nested_too_deep_is_refused);
    tcase_add_test(t, a_key_without_its_table_names_the_migrations);
    tcase_add_test(t, a_key_of_another_action_is_refused);
    tcase_add_test(t, a_key_of_another_transaction_is_refused);
    tcase_add_test(t, a_key_without_an_action_name_replays_by_its_params);
    tcase_add_test(t, a_key_that_is_not_utf8_is_refused);
}
