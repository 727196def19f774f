/* odbox — integration tests with a real server restart
 * (tests/db/restart-server.sh): connections pooled before it are used at
 * once after it, by a plain read and by an action that reads and then
 * writes. The caller never sees the restart. On PostgreSQL, a wake-up
 * listener also outlives it (test_wake.c). Needs ODBOX_DB_STATE_DIR
 * (set by tests/db/with-servers.sh); without it the tests say so and
 * pass, except under CI=true, where they fail. A restart cuts every
 * session on the server, so this suite runs only when ODBOX_TEST_RESTARTS
 * is set, from tests/integration/restart.test, after the other tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "actions.h"

/* (a) odbox_pool_acquire and a read on connections pooled before the
 * restart. */
START_TEST(reads_after_a_restart_on_pooled_connections)
{
    odbox_pool *p = NULL;
    odbox_pool_config cfg = {.size = 2, .acquire_timeout_ms = 30000};
    odbox_error e;
    ck_assert_int_eq(odbox_pool_open(itest_dsn(1), &cfg, &p, &e), ODBOX_OK);
    odbox_conn *a = NULL, *b = NULL;
    ck_assert_int_eq(odbox_pool_acquire(p, &a, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_pool_acquire(p, &b, &e), ODBOX_OK);
    int64_t before = itest_session_id(a); /* also leaves a prepared statement cached on each */
    itest_session_id(b);
    odbox_pool_release(p, &b);
    odbox_pool_release(p, &a);
    if (!itest_restart_server()) {
        odbox_pool_free(&p);
        return;
    }
    for (int i = 0; i < 2; i++) { /* both pooled connections, one after the other */
        odbox_conn *c = NULL;
        int64_t v = 0;
        int rc = odbox_pool_acquire(p, &c, &e);
        ck_assert_msg(rc == ODBOX_OK, "acquire %d: %s: %s", i, odbox_errname(rc), e.message);
        rc = odbox_conn_query_int64(c, "SELECT 7", &v, &e);
        ck_assert_msg(rc == ODBOX_OK && v == 7, "read %d: %s: %s", i, odbox_errname(rc), e.message);
        ck_assert_int_ne(itest_session_id(c), before);
        if (i)
            b = c;
        else
            a = c;
    }
    odbox_pool_release(p, &a);
    odbox_pool_release(p, &b);
    odbox_pool_free(&p);
}
END_TEST

/* Reads the dummy named by user, adds 1 to its amount and emits. */
static int bump(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    (void)params;
    odbox_model *m = NULL;
    int64_t amount = 0;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &DUMMY_T, user, ODBOX_READ_PRIMARY, &m, err);
    if (rc == 0 && (rc = odbox_model_get_int64(m, "amount", &amount, err)) == 0 &&
        (rc = odbox_model_set_int64(m, "amount", amount + 1, err)) == 0 &&
        (rc = odbox_plan_update(plan, m, NULL, err)) == 0) {
        json_object *payload = json_object_new_object();
        rc = odbox_plan_emit(plan, m, &EV_CHANGED, payload, err);
        json_object_put(payload);
    }
    odbox_model_free(&m);
    return rc;
}

/* (b) an action that reads and then writes, on connections pooled before
 * the restart, lands on its first attempt, without a retry rule. */
START_TEST(an_action_after_a_restart_lands)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "restart", 10);
    script seed = {.add = {d}, .nadd = 1};
    odbox_result res;
    execute_script_ok(exe, "Seed", &seed, NULL, &res);
    odbox_result_clear(&res);
    odbox_action bump_action = {"BumpAction", bump, (void *)odbox_model_id(d)};
    odbox_error e;
    int rc = odbox_execute(exe, &bump_action, NULL, NULL, &res, &e); /* pools its connection, statements cached */
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    odbox_result_clear(&res);
    if (itest_restart_server()) {
        rc = odbox_execute(exe, &bump_action, NULL, NULL, &res, &e);
        ck_assert_msg(rc == ODBOX_OK, "after the restart: %s: %s", odbox_errname(rc), e.message);
        for (size_t i = 0; i < sizeof res.retries / sizeof res.retries[0]; i++)
            ck_assert_int_eq(res.retries[i], 0);
        odbox_result_clear(&res);
        odbox_conn_close(&f.c[0]); /* the fixture's own connection died in the restart */
        f.c[0] = itest_connect(1);
        ck_assert_int_eq(amount_of(&f, odbox_model_id(d)), 12);
        ck_assert_int_eq(dfx_events(&f, 0), 3); /* the seed's sentinel and two changes */
    }
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

Suite *restart_suite(void)
{
    Suite *s = suite_create("restart");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 180);
    tcase_add_test(t, reads_after_a_restart_on_pooled_connections);
    tcase_add_test(t, an_action_after_a_restart_lands);
    wake_add_restart_tests(t);
    suite_add_tcase(s, t);
    return s;
}
