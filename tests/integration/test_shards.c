/* odbox — integration tests of the executor across shards: cross-shard
 * plans refused before any write, or committed shard by shard under one
 * action id; partial commits reported and never retried; routing by id;
 * replica reads inside perform. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "actions.h"

/* ---- shards --------------------------------------------------------------- */

START_TEST(cross_shard_plan_is_refused)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    hookrec h = {.fail_group = -1, .fail_member = -1};
    odbox_executor_set_hook(exe, record_hook, &h);
    odbox_model *d0 = dfx_dummy_in((odbox_shard_id){0, 0}, "zero", 1);
    odbox_model *d1 = dfx_dummy_in((odbox_shard_id){0, 1}, "one", 2);
    odbox_result res;
    odbox_error e;
    /* two adds on two shards */
    script s = {.add = {d0, d1}, .nadd = 2, .emit = {{d0, &EV_CREATED, "{}"}, {d1, &EV_CREATED, "{}"}}, .nemit = 2};
    ck_assert_int_eq(execute_script(exe, "Cross", &s, NULL, NULL, &res, &e), ODBOX_ECROSSSHARD);
    ck_assert(e.message[0]);
    ck_assert_int_eq(res.ncommitted, 0);
    odbox_result_clear(&res);
    /* an add on one shard and an event on a model of the other */
    script s2 = {.add = {d0}, .nadd = 1, .emit = {{d1, &EV_CHANGED, "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "CrossEmit", &s2, NULL, NULL, &res, &e), ODBOX_ECROSSSHARD);
    odbox_result_clear(&res);
    /* updates on two shards */
    script s3 = {.upd = {d0, d1}, .nupd = 2};
    ck_assert_int_eq(execute_script(exe, "CrossUpdate", &s3, NULL, NULL, &res, &e), ODBOX_ECROSSSHARD);
    odbox_result_clear(&res);
    ck_assert_int_eq(h.n, 0); /* no shard transaction was even opened */
    assert_empty(&f, 0);
    assert_empty(&f, 1);
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_model_free(&d0);
    odbox_model_free(&d1);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(cross_shard_plan_when_allowed)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d0 = dfx_dummy_in((odbox_shard_id){0, 0}, "zero", 1);
    odbox_model *d1 = dfx_dummy_in((odbox_shard_id){0, 1}, "one", 2);
    odbox_model *d1b = dfx_dummy_in((odbox_shard_id){0, 1}, "one-b", 3);
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    cfg.allow_cross_shard = 1;
    script s = {.add = {d0, d1, d1b},
                .nadd = 3,
                .emit = {{d0, &EV_CREATED, "{\"s\": 0}"}, {d1, &EV_CREATED, "{\"s\": 1}"}, {d1b, &EV_CREATED, "{}"}},
                .nemit = 3};
    odbox_result res;
    odbox_error e;
    int64_t t0 = dfx_now_us();
    int rc = execute_script(exe, "CrossAllowed", &s, "{\"x\": 1}", &cfg, &res, &e);
    int64_t t1 = dfx_now_us();
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(res.ncommitted, 2);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    ck_assert(res.committed[1].group == 0 && res.committed[1].member == 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_rows(&f, 1, "dummies"), 2);
    evrow r0[4], r1[4];
    ck_assert_int_eq(read_events(&f, 0, r0, 4), 1);
    ck_assert_int_eq(read_events(&f, 1, r1, 4), 2);
    check_rows(r0, 1, res.action_id, "CrossAllowed", "{\"x\": 1}", t0, t1);
    check_rows(r1, 2, res.action_id, "CrossAllowed", "{\"x\": 1}", t0, t1);
    assert_event(&r0[0], d0, "DummyCreated", "{\"s\": 0}");
    /* the same action id on both databases, and only that one */
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(DISTINCT action_id) FROM %s", itest_evt(f.ev[0], "events")), 1);
    ck_assert_int_eq(itest_count(f.c[1], "SELECT COUNT(DISTINCT action_id) FROM %s", itest_evt(f.ev[1], "events")), 1);
    ck_assert_int_eq(itest_count(f.c[1], "SELECT COUNT(*) FROM %s WHERE action_id = '%s'", itest_evt(f.ev[1], "events"), r0[0].action_id), 2);
    ck_assert_str_eq(r0[0].action_id, r1[0].action_id);
    /* the rows are found by id on their own shard */
    odbox_model *got = find_dummy(&f, odbox_model_id(d1));
    dfx_assert_same(d1, got);
    odbox_model_free(&got);
    odbox_result_clear(&res);

    /* a shard with rows but no events of its own gets a sentinel row */
    odbox_model *e0 = dfx_dummy_in((odbox_shard_id){0, 0}, "zero-2", 4);
    odbox_model *e1 = dfx_dummy_in((odbox_shard_id){0, 1}, "one-2", 5);
    script s2 = {.add = {e0, e1}, .nadd = 2, .emit = {{e0, &EV_CREATED, "{}"}}, .nemit = 1};
    rc = execute_script(exe, "CrossQuiet", &s2, NULL, &cfg, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(itest_count(f.c[1], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND event_type IS NULL "
                                         "AND model_id IS NULL",
                                 itest_evt(f.ev[1], "events"), res.action_id),
                     1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND event_type IS NOT NULL",
                                 itest_evt(f.ev[0], "events"), res.action_id),
                     1);
    odbox_result_clear(&res);
    odbox_model_free(&d0);
    odbox_model_free(&d1);
    odbox_model_free(&d1b);
    odbox_model_free(&e0);
    odbox_model_free(&e1);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

typedef struct logrec {
    pthread_mutex_t mu;
    int errors, warnings;
    char last_error[1024];
} logrec;

static void capture_log(void *ud, odbox_log_level level, const char *message)
{
    logrec *l = ud;
    pthread_mutex_lock(&l->mu);
    if (level == ODBOX_LOG_ERROR) {
        l->errors++;
        snprintf(l->last_error, sizeof l->last_error, "%s", message);
    } else if (level == ODBOX_LOG_WARN) {
        l->warnings++;
    }
    pthread_mutex_unlock(&l->mu);
}

START_TEST(partial_commit_is_reported_and_not_retried)
{
    logrec lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    odbox_log_set(capture_log, &lg, ODBOX_LOG_WARN);
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    hookrec h = {.fail_at = ODBOX_HOOK_DOMAIN_WRITTEN, .fail_group = 0, .fail_member = 1, .fail_code = ODBOX_EDB};
    odbox_executor_set_hook(exe, record_hook, &h);
    odbox_exec_config cfg = {.nretries = 0, .allow_cross_shard = 1};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            /* a rule for the very code that fails, and the default stale
             * rule (one for ODBOX_EPARTIAL is refused) */
            cfg.retries[0] = (odbox_retry_rule){ODBOX_EDB, 3, 0};
            cfg.retries[1] = (odbox_retry_rule){ODBOX_ESTALE, 3, 0};
            cfg.nretries = 2;
        }
        odbox_model *d0 = dfx_dummy_in((odbox_shard_id){0, 0}, "kept", 1);
        odbox_model *d1 = dfx_dummy_in((odbox_shard_id){0, 1}, "lost", 2);
        script s = {.add = {d0, d1}, .nadd = 2, .emit = {{d0, &EV_CREATED, "{}"}, {d1, &EV_CREATED, "{}"}}, .nemit = 2};
        odbox_result res;
        odbox_error e;
        h.n = 0;
        int rc = execute_script(exe, "Partial", &s, NULL, &cfg, &res, &e);
        ck_assert_msg(rc == ODBOX_EPARTIAL, "pass %d: %s: %s", pass, odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(res.attempts, 1);
        for (int i = 0; i < cfg.nretries; i++)
            ck_assert_int_eq(res.retries[i], 0);
        ck_assert_int_eq(res.ncommitted, 1);
        ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
        ck_assert_int_eq(res.has_failed_shard, 1);
        ck_assert(res.failed_shard.group == 0 && res.failed_shard.member == 1);
        ck_assert_str_eq(res.action_id, s.action_ids[0]);
        ck_assert_msg(strstr(e.message, "0.0") && strstr(e.message, "0.1"), "message: %s", e.message);
        /* the partial commit is logged as an error, naming both shards */
        ck_assert_int_eq(lg.errors, pass + 1);
        ck_assert_msg(strstr(lg.last_error, "CRITICAL") && strstr(lg.last_error, "PARTIALLY COMMITTED") &&
                          strstr(lg.last_error, res.action_id),
                      "logged: %s", lg.last_error);
        ck_assert_int_ge(lg.warnings, pass + 1); /* "spans 2 shards" */
        /* hook calls: 0.0 domain, events, committed; 0.1 domain (failed) */
        ck_assert_int_eq(h.n, 4);
        ck_assert(h.at[2] == ODBOX_HOOK_COMMITTED && h.shard[2].member == 0);
        ck_assert(h.at[3] == ODBOX_HOOK_DOMAIN_WRITTEN && h.shard[3].member == 1);
        /* shard 0.0 keeps its rows; shard 0.1 has nothing */
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), pass + 1);
        ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s'", itest_evt(f.ev[0], "events"),
                                     res.action_id),
                         1);
        ck_assert_int_eq(dfx_events(&f, 0), pass + 1);
        assert_empty(&f, 1);
        odbox_result_clear(&res);
        odbox_model_free(&d0);
        odbox_model_free(&d1);
    }
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_log_set(NULL, NULL, ODBOX_LOG_INFO);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(ids_route_to_their_shard_or_the_default)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    /* a v4 id and a v7 id naming an unregistered shard: both default (0.0),
     * so the plan is single-shard */
    odbox_model *v4 = dfx_dummy(NULL, "v4", 1);
    odbox_model *stray = dfx_dummy_in((odbox_shard_id){9, 9}, "stray", 2);
    script s = {.add = {v4, stray}, .nadd = 2, .emit = {{v4, &EV_CREATED, "{}"}, {stray, &EV_CREATED, "{}"}}, .nemit = 2};
    odbox_result res;
    execute_script_ok(exe, "Defaults", &s, NULL, &res);
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    assert_empty(&f, 1);
    /* a 0.1 id: rows and events on 0.1 only, no sentinel on the default */
    odbox_model *on1 = dfx_dummy_in((odbox_shard_id){0, 1}, "on1", 3);
    script s2 = {.add = {on1}, .nadd = 1, .emit = {{on1, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "OnOne", &s2, NULL, &res);
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 1);
    ck_assert_int_eq(dfx_rows(&f, 1, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 1), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    /* and an update read and staged inside perform goes back there */
    odbox_model *cur = find_dummy(&f, odbox_model_id(on1));
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 33, NULL), ODBOX_OK);
    script s3 = {.upd = {cur}, .nupd = 1};
    execute_script_ok(exe, "UpdateOnOne", &s3, NULL, &res);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(on1)), 33);
    ck_assert_int_eq(dfx_events(&f, 1), 2); /* a sentinel on 0.1 */
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    odbox_model_free(&cur);
    odbox_model_free(&v4);
    odbox_model_free(&stray);
    odbox_model_free(&on1);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(replica_reads_inside_perform)
{
    dfx f;
    dfx_open(&f, 1, 1);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "replicated", 1);
    dfx_insert(&f, 0, &d, 1);
    odbox_model *m = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, odbox_model_id(d), ODBOX_READ_REPLICA, &m, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(m, "amount", 2, &e), ODBOX_OK);
    script s = {.upd = {m}, .nupd = 1, .emit = {{m, &EV_CHANGED, "{}"}}, .nemit = 1};
    odbox_result res;
    execute_script_ok(exe, "FromReplica", &s, NULL, &res);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(d)), 2);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&m);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

Suite *shards_suite(void)
{
    Suite *s = suite_create("shards");
    TCase *t = tcase_create("shards");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, cross_shard_plan_is_refused);
    tcase_add_test(t, cross_shard_plan_when_allowed);
    tcase_add_test(t, partial_commit_is_reported_and_not_retried);
    tcase_add_test(t, ids_route_to_their_shard_or_the_default);
    tcase_add_test(t, replica_reads_inside_perform);
    suite_add_tcase(s, t);
    return s;
}
