/* odbox — integration tests of the executor: the outbox guarantee.
 *
 * Domain rows and event rows land together or not at all (failures
 * injected after the domain write, after the event write, inside the
 * events INSERT, in perform); every row of an execution shares its action
 * id, namespace, name, params and dates; sentinel rows; optimistic-lock
 * races between threads with and without retries; batch updates; per-code
 * retry counters. What the executor refuses (staging errors, bad input):
 * test_action_refusals.c, in this suite too. How a shard is written:
 * test_persist.c; several shards: test_shards.c.
 *
 * Uses the "dummies" fixture of dummies.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "actions.h"

START_TEST(execute_writes_rows_and_events)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "alice", 5);
    script s = {.add = {d},
                .nadd = 1,
                .emit = {{d, &EV_CREATED, "{\"amount\": 5, \"who\": \"alice\"}"},
                         {d, &EV_CHANGED, "{\"note\": \"x\", \"list\": [1, {\"a\": null}]}"}},
                .nemit = 2,
                .result = "{\"ok\": true, \"id\": 7}"};
    const char *params = "{\"amount\": 5, \"who\": \"alice\", \"nested\": {\"k\": [1, 2]}}";
    odbox_result res;
    int64_t t0 = dfx_now_us();
    execute_script_ok(exe, "shop.CreateDummy", &s, params, &res);
    int64_t t1 = dfx_now_us();

    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(s.attempts_seen[0], 0);
    ck_assert_ptr_eq(s.registry_seen, f.r);
    ck_assert(odbox_uuid_is_valid(s.action_ids[0]));
    ck_assert_str_eq(res.action_id, s.action_ids[0]);
    ck_assert_int_eq(res.attempts, 1);
    ck_assert_int_eq(res.retries[0], 0);
    ck_assert_ptr_nonnull(res.value);
    ck_assert_int_eq(json_object_get_int(json_object_object_get(res.value, "id")), 7);
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    ck_assert_int_eq(res.has_failed_shard, 0);

    /* the domain row, as staged */
    odbox_model *got = find_dummy(&f, odbox_model_id(d));
    dfx_assert_same(d, got);
    odbox_model_free(&got);

    /* two event rows, one per emit, sharing the execution's context */
    evrow rows[4];
    ck_assert_int_eq(read_events(&f, 0, rows, 4), 2);
    check_rows(rows, 2, res.action_id, "shop.CreateDummy", params, t0, t1);
    assert_event(&rows[0], d, "DummyChanged", "{\"note\": \"x\", \"list\": [1, {\"a\": null}]}");
    assert_event(&rows[1], d, "DummyCreated", "{\"amount\": 5, \"who\": \"alice\"}");
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(DISTINCT action_id) FROM %s", itest_evt(f.ev[0], "events")), 1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE delivered = FALSE", itest_evt(f.ev[0], "events")), 2);

    odbox_result_clear(&res);
    ck_assert_ptr_null(res.value);
    ck_assert_int_eq(res.attempts, 0);
    ck_assert_str_eq(res.action_id, "");
    /* and a second execution gets its own action id */
    script s2 = {0};
    execute_script_ok(exe, "shop.Noop", &s2, NULL, &res);
    ck_assert_str_ne(res.action_id, rows[0].action_id);
    ck_assert_ptr_null(res.value);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(DISTINCT action_id) FROM %s", itest_evt(f.ev[0], "events")), 2);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    ck_assert_ptr_null(exe);
    dfx_close(&f);
}
END_TEST

START_TEST(hooks_run_inside_the_transaction)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    hookrec h = {.fail_group = -1, .fail_member = -1, .f = &f};
    odbox_executor_set_hook(exe, record_hook, &h);
    odbox_model *d = dfx_dummy(NULL, "h", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}, {d, &EV_CHANGED, "{}"}}, .nemit = 2};
    odbox_result res;
    execute_script_ok(exe, "HookedCreate", &s, NULL, &res);
    ck_assert_int_eq(h.n, 3);
    ck_assert_int_eq(h.at[0], ODBOX_HOOK_DOMAIN_WRITTEN);
    ck_assert_int_eq(h.at[1], ODBOX_HOOK_EVENTS_WRITTEN);
    ck_assert_int_eq(h.at[2], ODBOX_HOOK_COMMITTED);
    for (int i = 0; i < 3; i++)
        ck_assert(h.shard[i].group == 0 && h.shard[i].member == 0);
    /* the hook's connection is the transaction's: it sees the row that
     * nobody else sees before the commit */
    ck_assert_int_eq(h.dummies_inside, 1);
    ck_assert_int_eq(h.dummies_outside, 0);
    ck_assert_int_eq(h.events_inside, 2);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    /* a failure reported after the commit does not undo it */
    hookrec late = {.fail_at = ODBOX_HOOK_COMMITTED, .fail_group = -1, .fail_member = -1, .fail_code = ODBOX_EDB};
    odbox_executor_set_hook(exe, record_hook, &late);
    script s2 = {0};
    odbox_error e;
    int rc = execute_script(exe, "AfterCommit", &s2, NULL, NULL, &res, &e);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    ck_assert_msg(rc == ODBOX_OK, "a committed action reported %s: %s", odbox_errname(rc), e.message);
    odbox_result_clear(&res);
    odbox_executor_set_hook(exe, NULL, NULL);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(sentinel_row_for_an_empty_plan)
{
    dfx f;
    dfx_open(&f, 2, 0);
    odbox_executor *exe = open_exe(&f);
    script s = {0};
    odbox_result res;
    int64_t t0 = dfx_now_us();
    execute_script_ok(exe, "DoNothing", &s, NULL, &res);
    int64_t t1 = dfx_now_us();
    evrow rows[2];
    ck_assert_int_eq(read_events(&f, 0, rows, 2), 1);
    check_rows(rows, 1, res.action_id, "DoNothing", "{}", t0, t1); /* params NULL: {} */
    assert_sentinel(&rows[0]);
    ck_assert_int_eq(dfx_events(&f, 1), 0); /* on the default shard only */
    ck_assert_int_eq(res.ncommitted, 1);
    ck_assert(res.committed[0].group == 0 && res.committed[0].member == 0);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE event_type IS NULL AND model_id IS NULL "
                                         "AND model_type IS NULL AND payload IS NULL AND delivered = FALSE",
                                 itest_evt(f.ev[0], "events")),
                     1);
    odbox_result_clear(&res);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(sentinel_row_for_rows_without_events)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *t = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(t, "label", "vip", &e), ODBOX_OK);
    script s = {.add = {t}, .nadd = 1};
    odbox_result res;
    int64_t t0 = dfx_now_us();
    execute_script_ok(exe, "AddTag", &s, "{\"label\": \"vip\"}", &res);
    int64_t t1 = dfx_now_us();
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM tags WHERE label = 'vip' AND version = 1 "
                                         "AND state = 'ACTIVE' AND id = '%s'",
                                 odbox_model_id(t)),
                     1);
    evrow rows[4];
    ck_assert_int_eq(read_events(&f, 0, rows, 4), 1);
    check_rows(rows, 1, res.action_id, "AddTag", "{\"label\": \"vip\"}", t0, t1);
    assert_sentinel(&rows[0]);
    odbox_result_clear(&res);

    /* a model added without an event: one sentinel row too */
    odbox_model *d = dfx_dummy(NULL, "quiet", 1);
    script s2 = {.add = {d}, .nadd = 1};
    execute_script_ok(exe, "AddQuietly", &s2, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND event_type IS NULL",
                                 itest_evt(f.ev[0], "events"), res.action_id),
                     1);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    /* a model updated without an event: the sentinel row beside the update */
    odbox_model *cur = find_dummy(&f, odbox_model_id(d));
    ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 2, &e), ODBOX_OK);
    script s4 = {.upd = {cur}, .nupd = 1};
    execute_script_ok(exe, "UpdateQuietly", &s4, NULL, &res);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(d)), 2);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND event_type IS NULL "
                                         "AND model_id IS NULL AND payload IS NULL",
                                 itest_evt(f.ev[0], "events"), res.action_id),
                     1);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_result_clear(&res);
    odbox_model_free(&cur);
    /* entities cannot emit */
    script s3 = {.emit = {{t, &EV_CREATED, "{}"}}, .nemit = 1};
    int rc = execute_script(exe, "EmitOnEntity", &s3, NULL, NULL, &res, &e);
    ck_assert_int_eq(s3.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_result_clear(&res);
    odbox_model_free(&t);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(update_advances_version_and_updated_date)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "u", 10);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    execute_script_ok(exe, "Create", &s, NULL, &res);
    odbox_result_clear(&res);
    odbox_model *v1 = find_dummy(&f, odbox_model_id(d));
    ck_assert_int_eq(odbox_model_version(v1), 1);
    const int64_t created = odbox_model_created(v1);
    ck_assert_int_eq(odbox_model_updated(v1), created);

    for (int round = 2; round <= 3; round++) {
        odbox_model *cur = find_dummy(&f, odbox_model_id(d));
        int64_t before_upd = odbox_model_updated(cur);
        ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 10 * round, NULL), ODBOX_OK);
        script u = {.upd = {cur}, .nupd = 1, .emit = {{cur, &EV_CHANGED, "{\"round\": 1}"}}, .nemit = 1};
        int64_t t0 = dfx_now_us();
        execute_script_ok(exe, "Update", &u, NULL, &res);
        int64_t t1 = dfx_now_us();
        ck_assert_int_eq(u.next_version[0], round);
        odbox_model *after = find_dummy(&f, odbox_model_id(d));
        ck_assert_int_eq(odbox_model_version(after), round);
        ck_assert_int_eq(odbox_model_created(after), created);
        ck_assert_msg(odbox_model_updated(after) > before_upd, "updated_date %lld did not advance past %lld",
                      (long long)odbox_model_updated(after), (long long)before_upd);
        ck_assert(odbox_model_updated(after) >= t0 - SLACK_US && odbox_model_updated(after) <= t1 + SLACK_US);
        dfx_assert_columns(cur, after);
        /* the update's event is this execution's */
        ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND model_id = '%s' "
                                             "AND event_type = 'DummyChanged'",
                                     itest_evt(f.ev[0], "events"), res.action_id, odbox_model_id(d)),
                         1);
        odbox_result_clear(&res);
        odbox_model_free(&cur);
        odbox_model_free(&after);
    }
    /* staging an update of a version that is no longer current is stale */
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    cfg.nretries = 0;
    ck_assert_int_eq(odbox_model_set_int64(v1, "amount", 999, NULL), ODBOX_OK);
    script stale = {.upd = {v1}, .nupd = 1, .emit = {{v1, &EV_CHANGED, "{}"}}, .nemit = 1};
    odbox_error e;
    ck_assert_int_eq(execute_script(exe, "StaleUpdate", &stale, NULL, &cfg, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(amount_of(&f, odbox_model_id(d)), 30);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_result_clear(&res);
    /* a soft delete through an action: reads no longer see the row */
    odbox_model *cur = find_dummy(&f, odbox_model_id(d));
    ck_assert_int_eq(odbox_model_set_state(cur, "DELETED", NULL), ODBOX_OK);
    script del = {.upd = {cur}, .nupd = 1, .emit = {{cur, &EV_CHANGED, "{\"deleted\": true}"}}, .nemit = 1};
    execute_script_ok(exe, "Delete", &del, NULL, &res);
    odbox_result_clear(&res);
    odbox_model *gone = NULL;
    ck_assert_int_eq(odbox_repo_find(f.r, &DUMMY_T, odbox_model_id(d), ODBOX_READ_PRIMARY, &gone, &e), ODBOX_ENOTFOUND);
    ck_assert_ptr_null(gone);
    int64_t n = -1;
    ck_assert_int_eq(odbox_repo_count_where(f.r, &DUMMY_T, NULL, NULL, ODBOX_READ_PRIMARY, &n, &e), ODBOX_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM dummies WHERE state = 'DELETED' AND version = 4"), 1);
    odbox_model_free(&cur);
    odbox_model_free(&v1);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(batch_update_of_five_in_one_plan)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    enum { N = 5 };
    odbox_model *d[N];
    const int64_t base = 1767225600000000LL;
    script s = {0};
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", i);
        d[i] = dfx_dummy(NULL, name, i);
        ck_assert_int_eq(odbox_model_set_timestamp(d[i], "seen_at", base + i * 1000003LL + 123456, NULL), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_double(d[i], "ratio", 0.25 * i, NULL), ODBOX_OK);
        s.add[s.nadd++] = d[i];
    }
    odbox_result res;
    execute_script_ok(exe, "CreateFive", &s, NULL, &res);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), N);
    ck_assert_int_eq(dfx_events(&f, 0), 1); /* one sentinel */

    /* one plan updating all five: new microsecond timestamps, NULLs kept
     * (reward_points, flag, aliases NULL in every row), ratio NULL in all */
    odbox_model *cur[N];
    script u = {0};
    char payloads[N][64];
    for (int i = 0; i < N; i++) {
        cur[i] = find_dummy(&f, odbox_model_id(d[i]));
        ck_assert_int_eq(odbox_model_set_int64(cur[i], "amount", 100 + i, NULL), ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_timestamp(cur[i], "seen_at", base + 86400000000LL + i * 11 + 654321, NULL),
                         ODBOX_OK);
        ck_assert_int_eq(odbox_model_set_null(cur[i], "ratio", NULL), ODBOX_OK);
        u.upd[u.nupd++] = cur[i];
        snprintf(payloads[i], sizeof payloads[i], "{\"i\": %d}", i);
        u.emit[u.nemit++] = (emit_spec){cur[i], &EV_CHANGED, payloads[i]};
    }
    execute_script_ok(exe, "UpdateFive", &u, NULL, &res);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(u.next_version[i], 2);
        odbox_model *got = find_dummy(&f, odbox_model_id(d[i]));
        ck_assert_int_eq(odbox_model_version(got), 2);
        ck_assert_int_eq(odbox_model_created(got), odbox_model_created(d[i]));
        ck_assert(odbox_model_updated(got) > odbox_model_created(got));
        dfx_assert_columns(cur[i], got);
        ck_assert(odbox_model_is_null(got, "reward_points") && odbox_model_is_null(got, "flag") &&
                  odbox_model_is_null(got, "aliases") && odbox_model_is_null(got, "ratio"));
        int64_t ts = 0;
        ck_assert_int_eq(odbox_model_get_timestamp(got, "seen_at", &ts, NULL), ODBOX_OK);
        ck_assert(ts == base + 86400000000LL + i * 11 + 654321);
        odbox_model_free(&got);
    }
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s' AND event_type = "
                                         "'DummyChanged' AND model_type = 'Dummy'",
                                 itest_evt(f.ev[0], "events"), res.action_id),
                     N);
    ck_assert_int_eq(dfx_events(&f, 0), 1 + N);
    odbox_result_clear(&res);
    for (int i = 0; i < N; i++) {
        odbox_model_free(&d[i]);
        odbox_model_free(&cur[i]);
    }
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(injected_failures_write_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *base = dfx_dummy(NULL, "existing", 1);
    script s0 = {.add = {base}, .nadd = 1, .emit = {{base, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    execute_script_ok(exe, "Seed", &s0, NULL, &res);
    odbox_result_clear(&res);

    const int points[] = {ODBOX_HOOK_DOMAIN_WRITTEN, ODBOX_HOOK_EVENTS_WRITTEN};
    for (int p = 0; p < 2; p++) {
        hookrec h = {.fail_at = points[p], .fail_group = -1, .fail_member = -1, .fail_code = ODBOX_EDB};
        odbox_executor_set_hook(exe, record_hook, &h);
        /* an add, an update of the existing row and events */
        odbox_model *d = dfx_dummy(NULL, "doomed", 2);
        odbox_model *cur = find_dummy(&f, odbox_model_id(base));
        ck_assert_int_eq(odbox_model_set_int64(cur, "amount", 77, NULL), ODBOX_OK);
        script s = {.add = {d},
                    .nadd = 1,
                    .upd = {cur},
                    .nupd = 1,
                    .emit = {{d, &EV_CREATED, "{}"}, {cur, &EV_CHANGED, "{}"}},
                    .nemit = 2};
        odbox_error e;
        int rc = execute_script(exe, "Doomed", &s, NULL, NULL, &res, &e);
        ck_assert_msg(rc == ODBOX_EDB, "hook at %d: %s %s", points[p], odbox_errname(rc), e.message);
        ck_assert_int_eq(s.calls, 1);
        ck_assert_int_eq(h.n, p + 1); /* no COMMITTED call */
        ck_assert_int_eq(res.ncommitted, 0);
        ck_assert_int_eq(res.has_failed_shard, 1);
        ck_assert(res.failed_shard.group == 0 && res.failed_shard.member == 0);
        ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
        ck_assert_int_eq(dfx_events(&f, 0), 1);
        odbox_model *after = find_dummy(&f, odbox_model_id(base));
        ck_assert_int_eq(odbox_model_version(after), 1);
        ck_assert_int_eq(amount_of(&f, odbox_model_id(base)), 1);
        odbox_model_free(&after);
        odbox_result_clear(&res);
        odbox_model_free(&d);
        odbox_model_free(&cur);
    }
    odbox_executor_set_hook(exe, NULL, NULL);
    /* the executor is still usable and the connections were cleaned */
    script s2 = {0};
    execute_script_ok(exe, "After", &s2, NULL, &res);
    ck_assert_int_eq(dfx_events(&f, 0), 2);
    odbox_result_clear(&res);
    odbox_model_free(&base);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(failing_events_insert_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    if (itest_is("sqlite")) /* no ALTER TABLE ... ADD CONSTRAINT: a trigger refuses it instead */
        itest_exec(f.c[0],
                   "CREATE TRIGGER %s_no_poison BEFORE INSERT ON %s WHEN NEW.event_type = 'PoisonEvent' "
                   "BEGIN SELECT RAISE(ABORT, 'no poison'); END",
                   f.ev[0], itest_evt(f.ev[0], "events"));
    else
        itest_exec(f.c[0],
                   "ALTER TABLE %s ADD CONSTRAINT no_poison CHECK (event_type IS NULL OR event_type <> 'PoisonEvent')",
                   itest_evt(f.ev[0], "events"));
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "poisoned", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}, {d, &EV_POISON, "{}"}}, .nemit = 2};
    odbox_result res;
    odbox_error e;
    int rc = execute_script(exe, "Poison", &s, NULL, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_EDB, "%s %s", odbox_errname(rc), e.message);
    ck_assert(e.message[0]);
    ck_assert_int_eq(strlen(e.sqlstate), 5);
    assert_empty(&f, 0);
    odbox_result_clear(&res);
    /* the constraint blocks only the poison */
    script ok = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "Antidote", &ok, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(perform_failure_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "never", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1, .codes = {ODBOX_ENOTFOUND}};
    odbox_result res;
    odbox_error e;
    int rc = execute_script(exe, "Fails", &s, "{\"x\": 1}", NULL, &res, &e);
    ck_assert_int_eq(rc, ODBOX_ENOTFOUND);
    ck_assert_msg(strstr(e.message, "scripted failure") != NULL, "perform's message lost: %s", e.message);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(res.attempts, 1);
    ck_assert_str_eq(res.action_id, s.action_ids[0]);
    ck_assert_int_eq(res.ncommitted, 0);
    assert_empty(&f, 0);
    odbox_result_clear(&res);
    /* a failing perform's result is not leaked either */
    script s2 = {.result = "{\"partial\": 1}", .codes = {ODBOX_EINVAL}};
    ck_assert_int_eq(execute_script(exe, "FailsWithResult", &s2, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    assert_empty(&f, 0);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- optimistic-lock races ------------------------------------------------ */

typedef struct racer {
    odbox_executor *exe;
    const char *id;
    int64_t delta;
    pthread_barrier_t *barrier;
    const odbox_exec_config *cfg;
    int rc;
    odbox_result res;
    char message[ODBOX_ERROR_MESSAGE_MAX];
    int calls;
} racer;

static int bump(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    racer *r = user;
    r->calls++;
    odbox_model *m = NULL;
    int rc = odbox_repo_find(odbox_context_registry(ctx), &DUMMY_T, r->id, ODBOX_READ_PRIMARY, &m, err);
    if (odbox_context_attempt(ctx) == 0)
        pthread_barrier_wait(r->barrier); /* both have read before either writes */
    if (rc)
        return rc;
    int64_t amount = 0;
    char payload[64];
    snprintf(payload, sizeof payload, "{\"delta\": %lld}", (long long)r->delta);
    json_object *p = json_tokener_parse(payload);
    if (!(rc = odbox_model_get_int64(m, "amount", &amount, err)) &&
        !(rc = odbox_model_set_int64(m, "amount", amount + r->delta, err)) &&
        !(rc = odbox_plan_update(plan, m, NULL, err)))
        rc = odbox_plan_emit(plan, m, &EV_CHANGED, p, err);
    json_object_put(p);
    odbox_model_free(&m);
    return rc;
}

static void *race(void *ud)
{
    racer *r = ud;
    odbox_action a = {.name = "Bump", .perform = bump, .user = r};
    odbox_error e = {0};
    r->rc = odbox_execute(r->exe, &a, NULL, r->cfg, &r->res, &e);
    snprintf(r->message, sizeof r->message, "%s", e.message);
    return NULL;
}

static void race_rounds(int with_retry)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config cfg;
    odbox_exec_config_default(&cfg);
    if (!with_retry)
        cfg.nretries = 0;
    for (int round = 0; round < 4; round++) {
        odbox_model *d = dfx_dummy(NULL, "raced", 100);
        script s = {.add = {d}, .nadd = 1};
        odbox_result res;
        execute_script_ok(exe, "Seed", &s, NULL, &res);
        odbox_result_clear(&res);
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, 2);
        racer r[2] = {{.exe = exe, .id = odbox_model_id(d), .delta = 1, .barrier = &barrier, .cfg = &cfg},
                      {.exe = exe, .id = odbox_model_id(d), .delta = 10, .barrier = &barrier, .cfg = &cfg}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&barrier);
        int64_t amount = amount_of(&f, odbox_model_id(d));
        odbox_model *final = find_dummy(&f, odbox_model_id(d));
        int64_t updates = itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE model_id = '%s'", itest_evt(f.ev[0], "events"),
                                      odbox_model_id(d));
        if (!with_retry) {
            int winners = (r[0].rc == ODBOX_OK) + (r[1].rc == ODBOX_OK);
            ck_assert_msg(winners == 1, "round %d: rc %s / %s (%s / %s)", round, odbox_errname(r[0].rc),
                          odbox_errname(r[1].rc), r[0].message, r[1].message);
            racer *w = r[0].rc == ODBOX_OK ? &r[0] : &r[1], *l = w == &r[0] ? &r[1] : &r[0];
            ck_assert_msg(l->rc == ODBOX_ESTALE, "round %d: loser got %s: %s", round, odbox_errname(l->rc), l->message);
            ck_assert_int_eq(l->calls, 1);
            ck_assert_int_eq(l->res.attempts, 1);
            ck_assert_int_eq(amount, 100 + w->delta);
            ck_assert_int_eq(odbox_model_version(final), 2);
            ck_assert_int_eq(updates, 1);
            /* the loser's action left no rows */
            ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s'", itest_evt(f.ev[0], "events"),
                                         l->res.action_id),
                             0);
        } else {
            ck_assert_msg(r[0].rc == ODBOX_OK && r[1].rc == ODBOX_OK, "round %d: rc %s / %s (%s / %s)", round,
                          odbox_errname(r[0].rc), odbox_errname(r[1].rc), r[0].message, r[1].message);
            ck_assert_int_eq(amount, 111);
            ck_assert_int_eq(odbox_model_version(final), 3);
            ck_assert_int_eq(updates, 2);
            int retried = (r[0].res.attempts == 2) + (r[1].res.attempts == 2);
            ck_assert_msg(retried == 1, "round %d: attempts %d / %d", round, r[0].res.attempts, r[1].res.attempts);
            racer *l = r[0].res.attempts == 2 ? &r[0] : &r[1], *w = l == &r[0] ? &r[1] : &r[0];
            ck_assert_int_eq(l->res.retries[0], 1);
            ck_assert_int_eq(l->calls, 2);
            ck_assert_int_eq(w->res.attempts, 1);
            ck_assert_int_eq(w->res.retries[0], 0);
            ck_assert_str_ne(l->res.action_id, w->res.action_id);
        }
        odbox_result_clear(&r[0].res);
        odbox_result_clear(&r[1].res);
        odbox_model_free(&final);
        odbox_model_free(&d);
    }
    odbox_executor_free(&exe);
    dfx_close(&f);
}

START_TEST(optimistic_race_without_retries)
{
    race_rounds(0);
}
END_TEST

START_TEST(optimistic_race_with_default_retry)
{
    race_rounds(1);
}
END_TEST

/* ---- retry rules ---------------------------------------------------------- */

/* Each rule of cfg has its own budget: deadlock once and stale twice go
 * through, a third stale or a second deadlock is the error; a code without
 * a rule, or no rules at all, is not retried. d is written once. */
static void retries_within_each_rule_budget(dfx *f, odbox_executor *exe, odbox_model *d)
{
    odbox_exec_config cfg = {.retries = {{ODBOX_ESTALE, 2, 0}, {ODBOX_EDEADLOCK, 1, 0}}, .nretries = 2};
    odbox_result res;
    odbox_error e;

    /* deadlock once, stale twice, then through: each rule has its budget */
    script a = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1,
                .codes = {ODBOX_EDEADLOCK, ODBOX_ESTALE, ODBOX_ESTALE, 0}};
    int rc = execute_script(exe, "Retried", &a, NULL, &cfg, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(a.calls, 4);
    ck_assert_int_eq(res.attempts, 4);
    ck_assert_int_eq(res.retries[0], 2);
    ck_assert_int_eq(res.retries[1], 1);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(a.attempts_seen[k], k);
        for (int j = 0; j < k; j++)
            ck_assert_str_ne(a.action_ids[j], a.action_ids[k]); /* a new action id per attempt */
    }
    ck_assert_str_eq(res.action_id, a.action_ids[3]);
    ck_assert_int_eq(dfx_rows(f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(f, 0), 1);
    ck_assert_int_eq(itest_count(f->c[0], "SELECT COUNT(*) FROM %s WHERE action_id = '%s'", itest_evt(f->ev[0], "events"),
                                 res.action_id),
                     1);
    odbox_result_clear(&res);

    /* stale three times: two retries, then the error */
    script b = {.codes = {ODBOX_ESTALE, ODBOX_ESTALE, ODBOX_ESTALE, ODBOX_ESTALE}};
    ck_assert_int_eq(execute_script(exe, "Stale", &b, NULL, &cfg, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(b.calls, 3);
    ck_assert_int_eq(res.attempts, 3);
    ck_assert_int_eq(res.retries[0], 2);
    ck_assert_int_eq(res.retries[1], 0);
    ck_assert_str_eq(res.action_id, b.action_ids[2]);
    odbox_result_clear(&res);

    /* deadlock twice: one retry */
    script c = {.codes = {ODBOX_EDEADLOCK, ODBOX_EDEADLOCK, ODBOX_EDEADLOCK}};
    ck_assert_int_eq(execute_script(exe, "Deadlock", &c, NULL, &cfg, &res, &e), ODBOX_EDEADLOCK);
    ck_assert_int_eq(c.calls, 2);
    ck_assert_int_eq(res.attempts, 2);
    ck_assert_int_eq(res.retries[0], 0);
    ck_assert_int_eq(res.retries[1], 1);
    odbox_result_clear(&res);

    /* a code without a rule is not retried */
    script g = {.codes = {ODBOX_EUNIQUE, 0}};
    ck_assert_int_eq(execute_script(exe, "Unique", &g, NULL, &cfg, &res, &e), ODBOX_EUNIQUE);
    ck_assert_int_eq(g.calls, 1);
    odbox_result_clear(&res);

    /* no rules */
    odbox_exec_config none = {.nretries = 0};
    script h = {.codes = {ODBOX_ESTALE, 0}};
    ck_assert_int_eq(execute_script(exe, "NoRetry", &h, NULL, &none, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(h.calls, 1);
    ck_assert_int_eq(res.attempts, 1);
    odbox_result_clear(&res);
}

/* The defaults (cfg NULL): one stale retry after 100 ms; a rule's delay is
 * honoured; malformed configurations are refused before perform runs. */
static void retry_delays_and_bad_configs(odbox_executor *exe)
{
    odbox_result res;
    odbox_error e;

    /* defaults (cfg NULL): one stale retry after 100 ms */
    script i = {.codes = {ODBOX_ESTALE, 0}};
    int64_t t0 = dfx_now_us();
    ck_assert_int_eq(execute_script(exe, "DefaultRetry", &i, NULL, NULL, &res, &e), ODBOX_OK);
    int64_t took = dfx_now_us() - t0;
    ck_assert_int_eq(i.calls, 2);
    ck_assert_int_eq(res.attempts, 2);
    ck_assert_int_eq(res.retries[0], 1);
    ck_assert_msg(took >= 95000, "retried after %lld us, not 100 ms", (long long)took);
    odbox_result_clear(&res);
    script j = {.codes = {ODBOX_ESTALE, ODBOX_ESTALE, 0}};
    ck_assert_int_eq(execute_script(exe, "DefaultRetry", &j, NULL, NULL, &res, &e), ODBOX_ESTALE);
    ck_assert_int_eq(j.calls, 2);
    odbox_result_clear(&res);

    /* the rule's delay is honoured */
    odbox_exec_config slow = {.retries = {{ODBOX_EDEADLOCK, 1, 250}}, .nretries = 1};
    script k = {.codes = {ODBOX_EDEADLOCK, 0}};
    t0 = dfx_now_us();
    ck_assert_int_eq(execute_script(exe, "Slow", &k, NULL, &slow, &res, &e), ODBOX_OK);
    took = dfx_now_us() - t0;
    ck_assert_msg(took >= 240000, "retried after %lld us, not 250 ms", (long long)took);
    odbox_result_clear(&res);

    /* malformed configurations are refused before perform runs */
    odbox_exec_config too_many = {.nretries = ODBOX_MAX_RETRY_RULES + 1};
    script l = {0};
    ck_assert_int_eq(execute_script(exe, "Bad", &l, NULL, &too_many, &res, &e), ODBOX_EINVAL);
    odbox_exec_config negative = {.retries = {{ODBOX_ESTALE, -1, 0}}, .nretries = 1};
    ck_assert_int_eq(execute_script(exe, "Bad", &l, NULL, &negative, &res, &e), ODBOX_EINVAL);
    odbox_exec_config neg_n = {.nretries = -1};
    ck_assert_int_eq(execute_script(exe, "Bad", &l, NULL, &neg_n, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(l.calls, 0);
    odbox_result_clear(&res);
}

START_TEST(retry_counters_are_per_code)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_exec_config def;
    odbox_exec_config_default(&def);
    ck_assert_int_eq(def.nretries, 1);
    ck_assert_int_eq(def.retries[0].code, ODBOX_ESTALE);
    ck_assert_int_eq(def.retries[0].max_retries, 1);
    ck_assert_int_eq(def.retries[0].delay_ms, 100);
    ck_assert_int_eq(def.allow_cross_shard, 0);

    odbox_model *d = dfx_dummy(NULL, "retried", 1);
    retries_within_each_rule_budget(&f, exe, d);
    retry_delays_and_bad_configs(exe);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    /* only the successful executions left rows */
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

Suite *action_suite(void)
{
    Suite *s = suite_create("action");
    TCase *t = tcase_create("action");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, execute_writes_rows_and_events);
    tcase_add_test(t, hooks_run_inside_the_transaction);
    tcase_add_test(t, sentinel_row_for_an_empty_plan);
    tcase_add_test(t, sentinel_row_for_rows_without_events);
    tcase_add_test(t, update_advances_version_and_updated_date);
    tcase_add_test(t, batch_update_of_five_in_one_plan);
    tcase_add_test(t, injected_failures_write_nothing);
    tcase_add_test(t, failing_events_insert_writes_nothing);
    tcase_add_test(t, perform_failure_writes_nothing);
    action_add_staging_refusals(t);
    tcase_add_test(t, optimistic_race_without_retries);
    tcase_add_test(t, optimistic_race_with_default_retry);
    tcase_add_test(t, retry_counters_are_per_code);
    action_add_input_refusals(t);
    suite_add_tcase(s, t);
    return s;
}
