/* odbox — idempotency keys (odbox_execute_keyed) on every dialect: eight
 * processes with one key at the same moment commit once and get eight
 * equal results; the same key with other params is refused and writes
 * nothing; a perform that refuses leaves the key unspent; a purge past
 * the keys' window forgets a key, which then executes again; a keyed
 * action off the default shard is refused; a domain row's unique conflict
 * beside the key is that conflict; after ODBOX_EINDOUBT the same call
 * again runs (it had not committed) or replays (it had). Every check
 * counts rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "actions.h"

#define DAY (INT64_C(86400) * 1000000)
#define CALLERS 8

static int64_t count_where(dfx *f, const char *table, const char *where)
{
    return itest_count(f->c[0], "SELECT COUNT(*) FROM %s WHERE %s", table, where);
}

static int64_t keys(dfx *f) { return itest_count(f->c[0], "SELECT COUNT(*) FROM %s", itest_evt(f->ev[0], "idempotency_keys")); }
static int64_t dummies(dfx *f, const char *name)
{
    char where[128];
    snprintf(where, sizeof where, "name = '%s'", name);
    return count_where(f, "dummies", where);
}

/* ---- eight processes, one key --------------------------------------------------- */

typedef struct outcome {
    char code[32], action_id[64], result[256];
    int replayed, attempts;
} outcome;

/* Starts CALLERS idem-caller processes with key on f's shard 0.0 (on
 * dummy update_id, or adding dummies named name), lets them go together,
 * and asserts one commit and equal results: returns the commit's
 * action_id in o[0]. Then asserts that the database decided between
 * them: where keys are claimed first (the dialect's way, or claim_first:
 * odbox_executor_claim_keys_first in each caller), the losers waited for
 * the winner at the key's INSERT and none ran perform; elsewhere each read
 * the key as free, so at least one met it at the claim, after perform. */
static void run_callers(dfx *f, const char *key, const char *name, const char *update_id, int claim_first,
                        outcome *o)
{
    char extra[128], barrier[64], cmd[4096];
    snprintf(extra, sizeof extra, "eventlog=%s", f->ev[0]);
    itest_barrier_name(barrier, sizeof barrier, "idem");
    char *dsn = itest_dsn_with(1, extra);
    const char *build = getenv("ODBOX_BUILDDIR");
    /* each perform pauses 300 ms: all eight reach the key's INSERT
     * while the first holds it uncommitted, and the unique key decides */
    snprintf(cmd, sizeof cmd,
             "IDEM_CLAIM_KEYS_FIRST=%d '%s/tests/integration/idem-caller' '%s' '%s' '%s' 7 '%s' 300 %s", claim_first,
             build ? build : ".", dsn, key, name, barrier, update_id ? update_id : "");
    free(dsn);
    FILE *p[CALLERS];
    itest_start_together(p, CALLERS, cmd, barrier);
    int replayed = 0, at_claim = 0;
    for (int k = 0; k < CALLERS; k++) {
        memset(&o[k], 0, sizeof o[k]);
        ck_assert_int_eq(fscanf(p[k], "%31s %63s %d %d %255s", o[k].code, o[k].action_id, &o[k].replayed,
                                &o[k].attempts, o[k].result),
                         5);
        ck_assert_int_eq(pclose(p[k]), 0);
        ck_assert_str_eq(o[k].code, "ODBOX_OK");
        replayed += o[k].replayed;
        at_claim += o[k].replayed && o[k].attempts > 0;
    }
    unlink(barrier);
    for (int k = 1; k < CALLERS; k++) {
        ck_assert_str_eq(o[k].action_id, o[0].action_id);
        ck_assert_str_eq(o[k].result, o[0].result);
    }
    printf("%s (%s%s): 1 commit, %d replayed (%d met the key after perform ran), action_id %s\n",
           update_id ? "eight processes, one key, one UPDATE" : "eight processes, one key, one INSERT",
           itest_dialect(), claim_first ? ", keys claimed first" : "", replayed, at_claim, o[0].action_id);
    ck_assert_int_eq(replayed, CALLERS - 1);
    if (claim_first || odbox_dialect_find(itest_dialect())->claims_keys_first)
        ck_assert_int_eq(at_claim, 0);
    else
        ck_assert_int_ge(at_claim, 1);
}

START_TEST(eight_processes_one_key_one_commit)
{
    dfx f;
    dfx_open(&f, 1, 0);
    char name[64], key[80];
    itest_name(name, sizeof name, "idem");
    snprintf(key, sizeof key, "req-%s", name);
    outcome o[CALLERS];
    run_callers(&f, key, name, NULL, 0, o);
    /* exactly one commit: one domain row, one event, one key */
    char where[128];
    snprintf(where, sizeof where, "action_id = '%s'", o[0].action_id);
    ck_assert_int_eq(dummies(&f, name), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(count_where(&f, itest_evt(f.ev[0], "events"), where), 1);
    ck_assert_int_eq(keys(&f), 1);
    dfx_close(&f);
}
END_TEST

/* The same with an optimistic UPDATE of one row: on PostgreSQL the
 * one-statement write, where a caller may meet the winner's row version
 * before its key. */
static void eight_callers_one_update(const char *key, const char *name, int claim_first)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_model *seed = dfx_dummy(NULL, name, 100);
    dfx_insert(&f, 0, &seed, 1);
    outcome o[CALLERS];
    run_callers(&f, key, name, odbox_model_id(seed), claim_first, o);
    ck_assert_ptr_nonnull(strstr(o[0].result, "\"amount\":107"));
    ck_assert_int_eq(amount_of(&f, odbox_model_id(seed)), 107);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(keys(&f), 1);
    odbox_model_free(&seed);
    dfx_close(&f);
}

START_TEST(eight_processes_one_key_one_update)
{
    eight_callers_one_update("req-update", "upd", 0);
}
END_TEST

/* odbox_executor_claim_keys_first: on every dialect the seven others wait
 * for the first at the key's INSERT and none runs perform (attempts 0),
 * where PostgreSQL's and SQLite's default lets some run it. */
START_TEST(eight_processes_one_key_claimed_first_perform_once)
{
    odbox_executor_claim_keys_first(NULL, 1); /* does nothing */
    eight_callers_one_update("req-first", "first", 1);
}
END_TEST

/* ---- in this process ---------------------------------------------------------------- */

static int run_keyed(odbox_executor *exe, maker *mk, const char *key, const char *params, odbox_result *res,
                     odbox_error *e)
{
    return execute_keyed_json(exe, "MakeDummy", make_dummy, mk, key, params, res, e);
}

START_TEST(same_key_other_params_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    maker mk = {0};
    odbox_result r1, r2, r3;
    odbox_error e = {0};
    ck_assert_msg(run_keyed(exe, &mk, "k-1", "{\"name\":\"a\",\"amount\":1}", &r1, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(r1.replayed, 0);
    /* the same call again: the first outcome, perform not run */
    ck_assert_msg(run_keyed(exe, &mk, "k-1", "{\"name\":\"a\",\"amount\":1}", &r2, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(r2.replayed, 1);
    ck_assert_str_eq(r2.action_id, r1.action_id);
    ck_assert_int_eq(r2.ncommitted, 1);
    ck_assert_ptr_nonnull(r2.value);
    ck_assert_int_eq(json_object_equal(r1.value, r2.value), 1);
    ck_assert_int_eq(mk.calls, 1);
    /* other params: another amount, or the same ones in another order */
    ck_assert_int_eq(run_keyed(exe, &mk, "k-1", "{\"name\":\"a\",\"amount\":2}", &r3, &e), ODBOX_EUNIQUE);
    ck_assert_msg(strstr(e.message, "other parameters") && strstr(e.message, r1.action_id), "%s", e.message);
    odbox_result_clear(&r3);
    ck_assert_int_eq(run_keyed(exe, &mk, "k-1", "{\"amount\":1,\"name\":\"a\"}", &r3, &e), ODBOX_EUNIQUE);
    ck_assert_int_eq(r3.replayed, 0);
    ck_assert_ptr_null(r3.value);
    ck_assert_int_eq(mk.calls, 1);
    ck_assert_int_eq(dummies(&f, "a"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(keys(&f), 1);
    /* another key, the same params: executes */
    odbox_result_clear(&r3);
    ck_assert_msg(run_keyed(exe, &mk, "k-2", "{\"name\":\"a\",\"amount\":1}", &r3, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(r3.replayed, 0);
    ck_assert_str_ne(r3.action_id, r1.action_id);
    ck_assert_int_eq(dummies(&f, "a"), 2);
    ck_assert_int_eq(keys(&f), 2);
    odbox_result_clear(&r1);
    odbox_result_clear(&r2);
    odbox_result_clear(&r3);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(a_refused_perform_does_not_spend_the_key)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    maker mk = {.refuse = 1};
    odbox_result res;
    odbox_error e = {0};
    ck_assert_int_eq(run_keyed(exe, &mk, "k-refused", "{\"name\":\"r\",\"amount\":1}", &res, &e), ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "refused: a business rule");
    ck_assert_int_eq(keys(&f), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(dummies(&f, "r"), 0);
    odbox_result_clear(&res);
    /* the rule no longer refuses: the same key executes */
    mk.refuse = 0;
    ck_assert_msg(run_keyed(exe, &mk, "k-refused", "{\"name\":\"r\",\"amount\":1}", &res, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(res.replayed, 0);
    ck_assert_int_eq(mk.calls, 2);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(dummies(&f, "r"), 1);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- one connection ------------------------------------------------------------------- */

/* Reads the dummy params.id on the primary, adds params.amount to it, and
 * returns the new amount. */
static int add_to_dummy(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (*(int *)user)++;
    const char *id = json_object_get_string(json_object_object_get(params, "id"));
    int64_t add = json_object_get_int64(json_object_object_get(params, "amount")), was = 0;
    odbox_model *m = NULL;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &DUMMY_T, id, ODBOX_READ_PRIMARY, &m, err);
    if (rc == ODBOX_OK && (rc = odbox_model_get_int64(m, "amount", &was, err)) == ODBOX_OK &&
        (rc = odbox_model_set_int64(m, "amount", was + add, err)) == ODBOX_OK)
        rc = odbox_plan_update(plan, m, NULL, err);
    json_object *payload = json_object_new_object();
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &EV_CHANGED, payload, err);
    json_object_put(payload);
    if (rc == ODBOX_OK)
        odbox_plan_set_result(plan, json_object_new_int64(was + add));
    odbox_model_free(&m);
    return rc;
}

/* A pool of one connection: where the key's transaction begins before
 * perform, perform's reads run on that transaction's connection instead
 * of waiting for a second one; the result and the replay are as on any
 * dialect. */
START_TEST(a_keyed_action_needs_one_connection)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_model *seed = dfx_dummy(NULL, "one", 10);
    dfx_insert(&f, 0, &seed, 1);
    odbox_shard_config sc = {.id = {0, 0}, .primary_dsn = itest_dsn(1), .eventlog = f.ev[0],
                             .pool = {.size = 1, .acquire_timeout_ms = 2000}};
    odbox_registry_config rcfg = {.shards = &sc, .nshards = 1, .has_default = 1, .default_shard = {0, 0}};
    odbox_registry *r = NULL;
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    ck_assert_msg(odbox_registry_open(&rcfg, &r, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_executor_open("com.example.one", r, NULL, &exe, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_msg(odbox_executor_register_model(exe, &DUMMY_T, &e) == ODBOX_OK, "%s", e.message);
    char params[160];
    snprintf(params, sizeof params, "{\"id\":\"%s\",\"amount\":5}", odbox_model_id(seed));
    odbox_action a = {.name = "AddToDummy", .perform = add_to_dummy};
    int calls = 0;
    a.user = &calls;
    odbox_result r1, r2;
    for (int i = 0; i < 2; i++) {
        json_object *p = json_tokener_parse(params);
        int rc = odbox_execute_keyed(exe, &a, p, "k-one", NULL, i ? &r2 : &r1, &e);
        json_object_put(p);
        ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
    }
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(r1.replayed, 0);
    ck_assert_int_eq(r2.replayed, 1);
    ck_assert_str_eq(r2.action_id, r1.action_id);
    ck_assert_int_eq(json_object_get_int64(r1.value), 15);
    ck_assert_int_eq(json_object_get_int64(r2.value), 15);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(seed)), 15);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(keys(&f), 1);
    /* the connection went back to the pool: another key executes */
    json_object *p = json_tokener_parse(params);
    odbox_result r3;
    ck_assert_msg(odbox_execute_keyed(exe, &a, p, "k-two", NULL, &r3, &e) == ODBOX_OK, "%s", e.message);
    json_object_put(p);
    ck_assert_int_eq(json_object_get_int64(r3.value), 20);
    ck_assert_int_eq(keys(&f), 2);
    odbox_result_clear(&r1);
    odbox_result_clear(&r2);
    odbox_result_clear(&r3);
    odbox_executor_free(&exe);
    odbox_registry_free(&r);
    odbox_model_free(&seed);
    dfx_close(&f);
}
END_TEST

/* A perform that executes another action (unkeyed, adding dummy
 * "inner") and then adds its own dummy. */
typedef struct nesting {
    odbox_executor *exe;
    int inner_rc, tx_rc, keyed_tx_rc;
    int refuse; /* perform refuses after the inner action */
    char tx_message[sizeof ((odbox_error *)0)->message];
    char keyed_tx_message[sizeof ((odbox_error *)0)->message];
    maker mk;
} nesting;

static int nested(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    nesting *n = user;
    odbox_action inner = {.name = "MakeInner", .perform = make_dummy, .user = &n->mk};
    json_object *p = json_tokener_parse("{\"name\":\"inner\",\"amount\":1}");
    odbox_error e = {0};
    n->inner_rc = odbox_execute(n->exe, &inner, p, NULL, NULL, &e);
    json_object_put(p);
    odbox_tx *tx = NULL;
    n->tx_rc = odbox_tx_begin(n->exe, (odbox_shard_id){0, 0}, NULL, &tx, &e);
    snprintf(n->tx_message, sizeof n->tx_message, "%s", e.message);
    odbox_tx_rollback(&tx);
    odbox_tx_config keyed = {.idempotency_key = "k-inner-tx"};
    n->keyed_tx_rc = odbox_tx_begin(n->exe, (odbox_shard_id){0, 0}, &keyed, &tx, &e);
    snprintf(n->keyed_tx_message, sizeof n->keyed_tx_message, "%s", e.message);
    odbox_tx_rollback(&tx);
    if (n->refuse)
        return odbox_error_set(err, ODBOX_EINVAL, "refused after the inner action");
    return make_dummy(ctx, params, plan, &n->mk, err);
}

/* Where keys are claimed first, an action executed from a keyed perform
 * meets the key's transaction on its connection: ODBOX_ESTATE, and the
 * keyed action's transaction is untouched (it commits whole, and only
 * its own rows). Elsewhere the inner action commits on a connection of
 * its own. */
START_TEST(an_action_inside_a_keyed_perform)
{
    dfx f;
    dfx_open(&f, 1, 0);
    nesting n = {.exe = open_exe(&f)};
    odbox_action a = {.name = "MakeOuter", .perform = nested, .user = &n};
    json_object *p = json_tokener_parse("{\"name\":\"outer\",\"amount\":2}");
    odbox_result res;
    odbox_error e = {0};
    int rc = odbox_execute_keyed(n.exe, &a, p, "k-nested", NULL, &res, &e);
    json_object_put(p);
    ck_assert_msg(rc == ODBOX_OK, "%s", e.message);
    int first = odbox_dialect_find(itest_dialect())->claims_keys_first;
    ck_assert_int_eq(n.inner_rc, first ? ODBOX_ESTATE : ODBOX_OK);
    /* an own transaction begun there: refused, saying why */
    ck_assert_int_eq(n.tx_rc, first ? ODBOX_ESTATE : ODBOX_OK);
    ck_assert_msg(!first || strstr(n.tx_message, "keyed action's perform"), "%s", n.tx_message);
    /* a keyed one too, saying the same */
    ck_assert_int_eq(n.keyed_tx_rc, first ? ODBOX_ESTATE : ODBOX_OK);
    ck_assert_msg(!first || strstr(n.keyed_tx_message, "keyed action's perform"), "%s", n.keyed_tx_message);
    ck_assert_int_eq(dummies(&f, "outer"), 1);
    ck_assert_int_eq(dummies(&f, "inner"), first ? 0 : 1);
    ck_assert_int_eq(dfx_events(&f, 0), first ? 1 : 2);
    ck_assert_int_eq(keys(&f), 1);
    odbox_result_clear(&res);
    odbox_executor_free(&n.exe);
    dfx_close(&f);
}
END_TEST

/* Claimed first because the executor asks (odbox_executor_claim_keys_first)
 * on a dialect that writes a shard in one statement (PostgreSQL): the
 * action executed from the keyed perform is refused as where the dialect
 * claims first. Before, its one statement ran on the lent connection,
 * inside the keyed action's transaction, and returned ODBOX_OK: when the
 * keyed action then refused, its rollback took the inner action's row and
 * event with it, though that action had been reported committed. */
START_TEST(an_action_inside_a_keyed_perform_claimed_first_on_request)
{
    dfx f;
    dfx_open(&f, 1, 0);
    nesting n = {.exe = open_exe(&f), .refuse = 1};
    odbox_executor_claim_keys_first(n.exe, 1);
    odbox_action a = {.name = "MakeOuter", .perform = nested, .user = &n};
    json_object *p = json_tokener_parse("{\"name\":\"outer\",\"amount\":2}");
    odbox_result res;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_execute_keyed(n.exe, &a, p, "k-nested-asked", NULL, &res, &e), ODBOX_EINVAL);
    json_object_put(p);
    ck_assert_msg(n.inner_rc != ODBOX_OK || dummies(&f, "inner") == 1,
                  "the inner action returned ODBOX_OK but its row was rolled back with the keyed action");
    ck_assert_int_eq(n.inner_rc, ODBOX_ESTATE);
    ck_assert_int_eq(n.tx_rc, ODBOX_ESTATE);
    ck_assert_int_eq(n.keyed_tx_rc, ODBOX_ESTATE);
    ck_assert_msg(strstr(n.keyed_tx_message, "keyed action's perform"), "%s", n.keyed_tx_message);
    ck_assert_int_eq(dummies(&f, "inner"), 0);
    ck_assert_int_eq(dummies(&f, "outer"), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(keys(&f), 0);
    odbox_result_clear(&res);
    odbox_executor_free(&n.exe);
    dfx_close(&f);
}
END_TEST

static int64_t purge_keys_at(dfx *f, int64_t now_us, int64_t window_us)
{
    odbox_manual_clock *m = NULL;
    ck_assert_int_eq(odbox_manual_clock_new(now_us, &m, NULL), ODBOX_OK);
    /* events: only what is older than a year, none here */
    odbox_purge_options o = {.older_than_us = 365 * DAY, .clock = odbox_manual_clock_clock(m),
                             .keys_older_than_us = window_us};
    odbox_purge_result *res = NULL;
    size_t n = 0;
    odbox_error e = {0};
    ck_assert_msg(odbox_purge_run(f->r, &o, &res, &n, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(res[0].events + res[0].sentinels + res[0].notifications, 0);
    int64_t removed = res[0].keys;
    odbox_purge_results_free(&res);
    odbox_manual_clock_free(&m);
    return removed;
}

START_TEST(a_purge_past_the_window_forgets_the_key)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    maker mk = {0};
    odbox_result r1, r2;
    odbox_error e = {0};
    ck_assert_msg(run_keyed(exe, &mk, "k-old", "{\"name\":\"o\",\"amount\":1}", &r1, &e) == ODBOX_OK, "%s", e.message);
    int64_t now = dfx_now_us();
    /* the default window, 7 days: kept 6 days on, gone 8 days on */
    ck_assert_int_eq(purge_keys_at(&f, now + 6 * DAY, 0), 0);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(purge_keys_at(&f, now + 8 * DAY, 0), 1);
    ck_assert_int_eq(keys(&f), 0);
    /* forgotten: the same call executes again */
    ck_assert_msg(run_keyed(exe, &mk, "k-old", "{\"name\":\"o\",\"amount\":1}", &r2, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(r2.replayed, 0);
    ck_assert_str_ne(r2.action_id, r1.action_id);
    ck_assert_int_eq(mk.calls, 2);
    ck_assert_int_eq(dummies(&f, "o"), 2);
    ck_assert_int_eq(keys(&f), 1);
    /* a window of one day */
    ck_assert_int_eq(purge_keys_at(&f, now + 2 * DAY, DAY), 1);
    ck_assert_int_eq(keys(&f), 0);
    odbox_result_clear(&r1);
    odbox_result_clear(&r2);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

static int add_seeded(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params;
    odbox_model *m = dfx_dummy(odbox_model_id(user), "again", 1);
    json_object *payload = json_object_new_object();
    int rc = odbox_plan_add(plan, m, err);
    if (rc == ODBOX_OK)
        rc = odbox_plan_emit(plan, m, &EV_CREATED, payload, err);
    json_object_put(payload);
    odbox_model_free(&m);
    return rc;
}

/* A domain row's unique conflict beside the key (on PostgreSQL in the
 * same statement as the key's INSERT) is that conflict, and spends no key. */
START_TEST(a_domain_conflict_beside_the_key_spends_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *seed = dfx_dummy(NULL, "seed", 1);
    dfx_insert(&f, 0, &seed, 1);
    odbox_action a = {.name = "AddSeeded", .perform = add_seeded, .user = seed};
    odbox_result res;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_execute_keyed(exe, &a, NULL, "k-conflict", NULL, &res, &e), ODBOX_EUNIQUE);
    ck_assert_msg(!strstr(e.message, "other parameters"), "%s", e.message);
    ck_assert_int_eq(res.replayed, 0);
    ck_assert_int_eq(keys(&f), 0);
    ck_assert_int_eq(dfx_events(&f, 0), 0);
    ck_assert_int_eq(dummies(&f, "again"), 0);
    odbox_result_clear(&res);
    odbox_model_free(&seed);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- in doubt: the same call again ------------------------------------------ */

/* The session ends before its COMMIT: in doubt, and it did not commit, so
 * the key is unspent and the same call again runs. */
START_TEST(a_keyed_call_again_after_a_lost_commit_runs)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_executor_set_hook(exe, kill_before_commit, &f);
    maker mk = {0};
    odbox_result r1, r2;
    odbox_error e = {0};
    ck_assert_int_eq(run_keyed(exe, &mk, "k-lost", "{\"name\":\"l\",\"amount\":1}", &r1, &e), ODBOX_EINDOUBT);
    int yes = -1;
    ck_assert_int_eq(odbox_action_committed(f.r, (odbox_shard_id){0, 0}, r1.action_id, &yes, &e), ODBOX_OK);
    ck_assert_int_eq(yes, 0);
    ck_assert_int_eq(keys(&f), 0);
    odbox_executor_set_hook(exe, NULL, NULL);
    ck_assert_msg(run_keyed(exe, &mk, "k-lost", "{\"name\":\"l\",\"amount\":1}", &r2, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(r2.replayed, 0);
    ck_assert_int_eq(mk.calls, 2);
    ck_assert_int_eq(dummies(&f, "l"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    ck_assert_int_eq(keys(&f), 1);
    odbox_result_clear(&r1);
    odbox_result_clear(&r2);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A one-statement write (PostgreSQL) whose row count is not the one sent
 * (a trigger drops the event row): in doubt, but it committed, key and
 * all, so the same call again returns its outcome. */
START_TEST(a_keyed_call_again_after_a_commit_in_doubt_replays)
{
    dfx f;
    dfx_open(&f, 1, 0);
    if (!odbox_conn_dialect(f.c[0])->join_writes_sql) {
        printf("SKIPPED on %s: a_keyed_call_again_after_a_commit_in_doubt_replays: a transaction's COMMIT "
               "that commits always says so here (no one-statement write)\n", itest_dialect());
        dfx_close(&f);
        return;
    }
    itest_exec(f.c[0],
               "CREATE FUNCTION %s.drop_created() RETURNS trigger LANGUAGE plpgsql AS "
               "$$BEGIN IF NEW.event_type = 'DummyCreated' THEN RETURN NULL; END IF; RETURN NEW; END$$",
               f.ev[0]);
    itest_exec(f.c[0], "CREATE TRIGGER drop_created BEFORE INSERT ON %s.events FOR EACH ROW EXECUTE FUNCTION "
               "%s.drop_created()", f.ev[0], f.ev[0]);
    odbox_executor *exe = open_exe(&f);
    maker mk = {0};
    odbox_result r1, r2;
    odbox_error e = {0};
    ck_assert_int_eq(run_keyed(exe, &mk, "k-doubt", "{\"name\":\"dbt\",\"amount\":1}", &r1, &e), ODBOX_EINDOUBT);
    ck_assert_int_eq(keys(&f), 1);
    ck_assert_int_eq(dummies(&f, "dbt"), 1);
    ck_assert_msg(run_keyed(exe, &mk, "k-doubt", "{\"name\":\"dbt\",\"amount\":1}", &r2, &e) == ODBOX_OK, "%s",
                  e.message);
    ck_assert_int_eq(r2.replayed, 1);
    ck_assert_str_eq(r2.action_id, r1.action_id);
    ck_assert_int_eq(mk.calls, 1);
    ck_assert_int_eq(dummies(&f, "dbt"), 1);
    ck_assert_int_eq(keys(&f), 1);
    odbox_result_clear(&r1);
    odbox_result_clear(&r2);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

static int on_shard_one(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)ctx, (void)params, (void)user;
    odbox_model *m = dfx_dummy_in((odbox_shard_id){0, 1}, "s1", 1);
    int rc = odbox_plan_add(plan, m, err);
    odbox_model_free(&m);
    return rc;
}

START_TEST(a_keyed_action_off_the_default_shard_is_refused)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_action a = {.name = "OnShardOne", .perform = on_shard_one};
    odbox_result res;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_execute_keyed(exe, &a, NULL, "k-shard", NULL, &res, &e), ODBOX_ECROSSSHARD);
    ck_assert_msg(strstr(e.message, "idempotency key"), "%s", e.message);
    ck_assert_int_eq(keys(&f), 0);
    ck_assert_int_eq(dfx_events(&f, 0) + dfx_events(&f, 1), 0);
    ck_assert_int_eq(dfx_rows(&f, 1, "dummies"), 0);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

Suite *idempotency_suite(void)
{
    Suite *s = suite_create("idempotency");
    TCase *t = tcase_create("keys");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, eight_processes_one_key_one_commit);
    tcase_add_test(t, eight_processes_one_key_one_update);
    tcase_add_test(t, eight_processes_one_key_claimed_first_perform_once);
    tcase_add_test(t, same_key_other_params_is_refused);
    tcase_add_test(t, a_refused_perform_does_not_spend_the_key);
    tcase_add_test(t, a_keyed_action_needs_one_connection);
    tcase_add_test(t, an_action_inside_a_keyed_perform);
    tcase_add_test(t, an_action_inside_a_keyed_perform_claimed_first_on_request);
    tcase_add_test(t, a_purge_past_the_window_forgets_the_key);
    tcase_add_test(t, a_keyed_action_off_the_default_shard_is_refused);
    tcase_add_test(t, a_domain_conflict_beside_the_key_spends_nothing);
    tcase_add_test(t, a_keyed_call_again_after_a_lost_commit_runs);
    tcase_add_test(t, a_keyed_call_again_after_a_commit_in_doubt_replays);
    idempotency_add_refusal_tests(t);
    suite_add_tcase(s, t);
    return s;
}
