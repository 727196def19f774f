/* odbox — integration tests of the executor, part of the action suite
 * (test_action.c): what it refuses. Staged plans that cannot be written
 * (params and payloads that are not JSON objects, event-name collisions,
 * an id staged twice, a model type not registered, a NOT NULL column left
 * NULL) write nothing; bad namespaces, action names and event type names
 * are refused; perform gets an error to fill when execute's caller passed
 * none; serialising the params inside perform leaves them as they were.
 *
 * Uses the "dummies" fixture of dummies.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "actions.h"

START_TEST(params_and_payloads_must_be_objects)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_result res;
    odbox_error e;
    /* U+0000, which PostgreSQL's jsonb refuses, and text that is not
     * UTF-8 (a byte 0xff), which PostgreSQL and MySQL/MariaDB refuse:
     * refused on every database before anything is sent (before, they
     * failed those databases' commit, and SQLite stored them) */
    const char *bad_params[] = {"[1, 2]", "42", "\"text\"", "true", "{\"a\": \"x\\u0000y\"}", "{\"a\": \"x\xffy\"}"};
    for (size_t i = 0; i < sizeof bad_params / sizeof bad_params[0]; i++) {
        script s = {0};
        int rc = execute_script(exe, "Params", &s, bad_params[i], NULL, &res, &e);
        ck_assert_msg(rc == ODBOX_EINVAL, "params %s: %s", bad_params[i], odbox_errname(rc));
        ck_assert_int_eq(s.calls, 0);
        ck_assert_str_eq(res.action_id, "");
        odbox_result_clear(&res);
    }
    assert_empty(&f, 0);

    odbox_model *d = dfx_dummy(NULL, "p", 1);
    const char *bad_payloads[] = {"[1, 2]", "42", "\"text\"", "null", "{\"a\": \"\\u0000\"}", "{\"a\": \"\xc3(\"}"};
    for (size_t i = 0; i < sizeof bad_payloads / sizeof bad_payloads[0]; i++) {
        script s = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, bad_payloads[i]}}, .nemit = 1};
        int rc = execute_script(exe, "Payload", &s, NULL, NULL, &res, &e);
        ck_assert_msg(s.stage_rc == ODBOX_EINVAL, "payload %s: emit said %s", bad_payloads[i],
                      odbox_errname(s.stage_rc));
        ck_assert_int_eq(s.stage_step, 2); /* the emit, not the add */
        ck_assert_int_eq(rc, ODBOX_EINVAL);
        odbox_result_clear(&res);
    }
    assert_empty(&f, 0);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* MariaDB's JSON CHECK refuses 32 levels, and json-c reads back at most
 * 32 for the handlers: 31 is written on every database, 32 refused on
 * every one before anything is sent (before, MariaDB refused it at the
 * commit with a CONSTRAINT error, and the others stored an event whose
 * handlers could never be called). */
START_TEST(json_nested_deeper_than_every_database_stores_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_result res;
    odbox_error e;
    char deep[128], deepest[128];
    nested_json(deep, 32), nested_json(deepest, 31);
    script s = {0};
    ck_assert_int_eq(execute_script(exe, "Params", &s, deep, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "params are nested 32 levels deep; at most 31"), "%s", e.message);
    ck_assert_int_eq(s.calls, 0);
    odbox_result_clear(&res);
    odbox_model *d = dfx_dummy(NULL, "p", 1);
    script deep_payload = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, deep}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "Payload", &deep_payload, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(deep_payload.stage_rc, ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "the payload is nested 32 levels deep"), "%s", e.message);
    odbox_result_clear(&res);
    assert_empty(&f, 0);
    script ok = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, deepest}}, .nemit = 1};
    int rc = execute_script(exe, "Payload", &ok, deepest, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "31 levels: %s", e.message);
    odbox_result_clear(&res);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE event_type = '%s'", itest_evt(f.ev[0], "events"),
                                 EV_CREATED.name),
                     1);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(event_name_collisions_are_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_error e;
    static const odbox_event_type a1 = {"Collide"}, a2 = {"Collide"};
    ck_assert_int_eq(odbox_executor_register_event(exe, &a1, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_event(exe, &a1, &e), ODBOX_OK); /* the same descriptor again */
    ck_assert_int_eq(odbox_executor_register_event(exe, &a2, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "Collide") != NULL, "%s", e.message);

    /* registered by emitting: the first descriptor wins, the second fails */
    static const odbox_event_type t1 = {"Twin"}, t2 = {"Twin"};
    odbox_model *d1 = dfx_dummy(NULL, "one", 1), *d2 = dfx_dummy(NULL, "two", 2);
    script s1 = {.add = {d1}, .nadd = 1, .emit = {{d1, &t1, "{}"}}, .nemit = 1};
    odbox_result res;
    execute_script_ok(exe, "First", &s1, NULL, &res);
    odbox_result_clear(&res);
    script s2 = {.add = {d2}, .nadd = 1, .emit = {{d2, &t2, "{}"}}, .nemit = 1};
    int rc = execute_script(exe, "Second", &s2, NULL, NULL, &res, &e);
    ck_assert_int_eq(s2.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    /* two same-named descriptors in one plan */
    static const odbox_event_type u1 = {"Triplet"}, u2 = {"Triplet"};
    script s3 = {.add = {d2}, .nadd = 1, .emit = {{d2, &u1, "{}"}, {d2, &u2, "{}"}}, .nemit = 2};
    rc = execute_script(exe, "Third", &s3, NULL, NULL, &res, &e);
    ck_assert_int_eq(s3.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(s3.stage_step, 3);
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_model_free(&d1);
    odbox_model_free(&d2);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(staging_an_id_twice_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "twice", 1);
    odbox_model *same = odbox_model_copy(d); /* another object, the same id */
    ck_assert_ptr_nonnull(same);
    struct {
        const char *what;
        int nadd, nupd;
    } cases[] = {{"add+add", 2, 0}, {"add+update", 1, 1}, {"update+update", 0, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        script s = {0};
        const odbox_model *pair[2] = {d, same};
        int k = 0;
        for (int j = 0; j < cases[i].nadd; j++)
            s.add[s.nadd++] = pair[k++];
        for (int j = 0; j < cases[i].nupd; j++)
            s.upd[s.nupd++] = pair[k++];
        s.emit[s.nemit++] = (emit_spec){d, &EV_CREATED, "{}"};
        odbox_result res;
        odbox_error e;
        int rc = execute_script(exe, "Twice", &s, NULL, NULL, &res, &e);
        ck_assert_msg(s.stage_rc == ODBOX_EINVAL, "%s: staging said %s", cases[i].what, odbox_errname(s.stage_rc));
        ck_assert_msg(s.stage_step == 2, "%s: refused at step %d", cases[i].what, s.stage_step);
        ck_assert_int_eq(rc, ODBOX_EINVAL);
        odbox_result_clear(&res);
        assert_empty(&f, 0);
    }
    /* the very same object added twice */
    script s = {.add = {d, d}, .nadd = 2};
    odbox_result res;
    odbox_error e;
    ck_assert_int_eq(execute_script(exe, "Twice", &s, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    assert_empty(&f, 0);
    odbox_model_free(&d);
    odbox_model_free(&same);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(unregistered_model_type_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = NULL;
    odbox_error e;
    ck_assert_int_eq(odbox_executor_open(NS, f.r, NULL, &exe, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_executor_register_model(exe, &TAG_T, &e), ODBOX_OK);
    /* DUMMY_T is not registered with this executor */
    odbox_model *d = dfx_dummy(NULL, "stranger", 1);
    odbox_model *t = NULL;
    ck_assert_int_eq(odbox_model_new(&TAG_T, NULL, &t, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_text(t, "label", "ok", &e), ODBOX_OK);
    odbox_result res;
    int rc;
    script s = {.add = {t, d}, .nadd = 2};
    ck_assert_int_eq(execute_script(exe, "AddStranger", &s, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_step, 2);
    odbox_result_clear(&res);
    script s2 = {.upd = {d}, .nupd = 1};
    ck_assert_int_eq(execute_script(exe, "UpdateStranger", &s2, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s2.stage_rc, ODBOX_EINVAL);
    odbox_result_clear(&res);
    assert_empty(&f, 0);
    /* registering a type that fails its check */
    const odbox_column dup[] = {{"label", ODBOX_TYPE_TEXT, 1, 0}, {"label", ODBOX_TYPE_TEXT, 1, 0}};
    const odbox_model_type bad = {"Bad", "tags", ODBOX_KIND_ENTITY, dup, 2};
    ck_assert_int_eq(odbox_executor_register_model(exe, &bad, &e), ODBOX_EINVAL);
    const odbox_model_type quoted = {"Quoted", "ta'gs", ODBOX_KIND_ENTITY, dup, 1};
    ck_assert_int_eq(odbox_executor_register_model(exe, &quoted, &e), ODBOX_EINVAL);
    /* registering makes it work */
    ck_assert_int_eq(odbox_executor_register_model(exe, &DUMMY_T, &e), ODBOX_OK);
    script s3 = {.add = {t, d}, .nadd = 2};
    execute_script_ok(exe, "AddKnown", &s3, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_rows(&f, 0, "tags"), 1);
    odbox_result_clear(&res);
    /* emitting on a model of an unregistered type is using that type too */
    static const odbox_column other_cols[] = {{"name", ODBOX_TYPE_TEXT, 1, 0}};
    static const odbox_model_type OTHER_T = {"Other", "others", ODBOX_KIND_MODEL, other_cols, 1};
    odbox_model *o = NULL;
    ck_assert_int_eq(odbox_model_new(&OTHER_T, NULL, &o, &e), ODBOX_OK);
    script s4 = {.emit = {{o, &EV_CREATED, "{}"}}, .nemit = 1};
    rc = execute_script(exe, "EmitOnStranger", &s4, NULL, NULL, &res, &e);
    ck_assert_msg(s4.stage_rc == ODBOX_EINVAL, "emit on unregistered type %s: %s", OTHER_T.name,
                  odbox_errname(s4.stage_rc));
    ck_assert_int_eq(rc, ODBOX_EINVAL);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&o);
    odbox_model_free(&d);
    odbox_model_free(&t);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

START_TEST(not_null_column_left_null_writes_nothing)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = NULL, *ok = dfx_dummy(NULL, "fine", 1);
    odbox_error e;
    ck_assert_int_eq(odbox_model_new(&DUMMY_T, NULL, &d, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_model_set_int64(d, "amount", 1, &e), ODBOX_OK); /* name stays NULL */
    script s = {.add = {ok, d}, .nadd = 2, .emit = {{ok, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_result res;
    int rc = execute_script(exe, "Unnamed", &s, NULL, NULL, &res, &e);
    /* refused as it is staged, in one message on every database, not by
     * the database's constraint (ODBOX_EDB) */
    ck_assert_msg(rc == ODBOX_EINVAL, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(s.stage_rc, ODBOX_EINVAL);
    char want[160];
    snprintf(want, sizeof want, "plan add: Dummy %s: column name is NOT NULL and was never set",
             odbox_model_id(d));
    ck_assert_str_eq(e.message, want);
    ck_assert_int_eq(res.ncommitted, 0);
    assert_empty(&f, 0);
    odbox_result_clear(&res);
    script s2 = {.add = {ok}, .nadd = 1};
    execute_script_ok(exe, "Named", &s2, NULL, &res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_result_clear(&res);
    odbox_model_free(&d);
    odbox_model_free(&ok);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

static int count_calls(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    ++*(int *)user;
    return 0;
}

START_TEST(bad_input_is_refused)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_error e;
    odbox_executor *exe = NULL;
    char long_name[300];

    /* namespaces: dotted identifiers, no hyphens, <= 255 */
    memset(long_name, 'n', 256);
    long_name[256] = '\0';
    const char *bad_ns[] = {"com.example-shop", "", ".com", "com.", "com..x", "1com", "com.1x", "a b", long_name, NULL};
    for (size_t i = 0; i < sizeof bad_ns / sizeof bad_ns[0]; i++) {
        ck_assert_msg(odbox_executor_open(bad_ns[i], f.r, NULL, &exe, &e) == ODBOX_EINVAL, "namespace '%s' accepted",
                      bad_ns[i] ? bad_ns[i] : "(null)");
        ck_assert_ptr_null(exe);
    }
    long_name[255] = '\0';
    const char *good_ns[] = {"default", "com.example.shop", "_a._b1", long_name};
    for (size_t i = 0; i < sizeof good_ns / sizeof good_ns[0]; i++) {
        ck_assert_msg(odbox_executor_open(good_ns[i], f.r, NULL, &exe, &e) == ODBOX_OK, "namespace %s: %s",
                      good_ns[i], e.message);
        odbox_executor_free(&exe);
    }
    ck_assert_int_eq(odbox_executor_open(NS, NULL, NULL, &exe, &e), ODBOX_EINVAL);
    odbox_executor_free(&exe); /* NULL-safe */
    exe = open_exe(&f);

    /* action names */
    int calls = 0;
    memset(long_name, 'A', 256);
    long_name[256] = '\0';
    const char *bad_names[] = {NULL, "", "Bad-Name", "1Action", "with space", ".Leading", long_name};
    odbox_result res;
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        odbox_action a = {.name = bad_names[i], .perform = count_calls, .user = &calls};
        memset(&res, 0, sizeof res);
        ck_assert_msg(odbox_execute(exe, &a, NULL, NULL, &res, &e) == ODBOX_EINVAL, "action name '%s' accepted",
                      bad_names[i] ? bad_names[i] : "(null)");
        ck_assert_str_eq(res.action_id, "");
        odbox_result_clear(&res);
    }
    odbox_action no_perform = {.name = "NoPerform", .perform = NULL};
    ck_assert_int_eq(odbox_execute(exe, &no_perform, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(odbox_execute(exe, NULL, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(calls, 0);
    assert_empty(&f, 0);
    /* valid: dots and a 255-character name; res may be NULL */
    long_name[255] = '\0';
    odbox_action dotted = {.name = "shop.v2.Deposit_1", .perform = count_calls, .user = &calls};
    ck_assert_int_eq(odbox_execute(exe, &dotted, NULL, NULL, NULL, &e), ODBOX_OK);
    odbox_action longest = {.name = long_name, .perform = count_calls, .user = &calls};
    ck_assert_msg(odbox_execute(exe, &longest, NULL, NULL, NULL, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_int_eq(calls, 2);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE action_name = 'shop.v2.Deposit_1'",
                                 itest_evt(f.ev[0], "events")),
                     1);

    /* event type names */
    memset(long_name, 'E', 256);
    long_name[256] = '\0';
    const odbox_event_type bad_et[] = {{long_name}, {""}, {"Bad-Event"}, {NULL}, {"9Lives"}};
    for (size_t i = 0; i < sizeof bad_et / sizeof bad_et[0]; i++)
        ck_assert_msg(odbox_executor_register_event(exe, &bad_et[i], &e) == ODBOX_EINVAL, "event %zu accepted", i);
    ck_assert_int_eq(odbox_executor_register_event(exe, NULL, &e), ODBOX_EINVAL);
    odbox_model *d = dfx_dummy(NULL, "long", 1);
    script s = {.add = {d}, .nadd = 1, .emit = {{d, &bad_et[0], "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "LongEvent", &s, NULL, NULL, &res, &e), ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_rc, ODBOX_EINVAL);
    ck_assert_int_eq(s.stage_step, 2);
    odbox_result_clear(&res);
    long_name[255] = '\0';
    const odbox_event_type longest_et = {long_name};
    script s2 = {.add = {d}, .nadd = 1, .emit = {{d, &longest_et, "{}"}}, .nemit = 1};
    execute_script_ok(exe, "LongestEvent", &s2, NULL, &res);
    ck_assert_int_eq(itest_count(f.c[0], "SELECT COUNT(*) FROM %s WHERE event_type = '%s'", itest_evt(f.ev[0], "events"), long_name),
                     1);
    odbox_result_clear(&res);
    /* NULL model / event type / plan arguments inside perform */
    script s3 = {.emit = {{d, NULL, "{}"}}, .nemit = 1};
    ck_assert_int_eq(execute_script(exe, "NullEvent", &s3, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    script s4 = {.add = {NULL}, .nadd = 1};
    ck_assert_int_eq(execute_script(exe, "NullModel", &s4, NULL, NULL, &res, &e), ODBOX_EINVAL);
    odbox_result_clear(&res);
    ck_assert_int_eq(dfx_rows(&f, 0, "dummies"), 1);
    ck_assert_int_eq(dfx_events(&f, 0), 3);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* perform's contract is "a negative code with err filled": the executor
 * must hand perform an error to fill even when its own caller passed none. */
START_TEST(execute_without_an_error_struct)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    odbox_model *d = dfx_dummy(NULL, "no-err", 1);
    script s = {.add = {d}, .nadd = 1, .codes = {ODBOX_ENOTFOUND}};
    odbox_action a = {.name = "NoErr", .perform = scripted, .user = &s};
    ck_assert_int_eq(odbox_execute(exe, &a, NULL, NULL, NULL, NULL), ODBOX_ENOTFOUND);
    assert_empty(&f, 0);
    script ok = {.add = {d}, .nadd = 1, .emit = {{d, &EV_CREATED, "{}"}}, .nemit = 1};
    odbox_action b = {.name = "NoErrOk", .perform = scripted, .user = &ok};
    ck_assert_int_eq(odbox_execute(exe, &b, NULL, NULL, NULL, NULL), ODBOX_OK);
    ck_assert_int_eq(dfx_events(&f, 0), 1);
    odbox_model_free(&d);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* A perform that logs its params (json_object_to_json_string re-serialises
 * the object into its own buffer) must not change what is written as
 * action_params. */
static int log_params(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    const char *pretty = json_object_to_json_string_ext(params, JSON_C_TO_STRING_PRETTY);
    const char *spaced = json_object_to_json_string(params);
    ++*(int *)user;
    return pretty && spaced ? 0 : ODBOX_ENOMEM;
}

START_TEST(perform_may_serialise_its_params)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    json_object *params = json_object_new_object();
    for (int i = 0; i < 40; i++) {
        char k[16];
        snprintf(k, sizeof k, "key_%02d", i);
        json_object *arr = json_object_new_array();
        for (int j = 0; j < 4; j++)
            json_object_array_add(arr, json_object_new_int(i * 10 + j));
        json_object_object_add(params, k, arr);
    }
    char *want = strdup(json_object_to_json_string_ext(params, JSON_C_TO_STRING_PLAIN));
    int calls = 0;
    odbox_action a = {.name = "LogsParams", .perform = log_params, .user = &calls};
    odbox_result res;
    odbox_error e;
    int rc = odbox_execute(exe, &a, params, NULL, &res, &e);
    ck_assert_msg(rc == ODBOX_OK, "%s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(calls, 1);
    evrow rows[2];
    ck_assert_int_eq(read_events(&f, 0, rows, 2), 1);
    ck_assert_msg(dfx_json_same(rows[0].params, want), "stored %s, want %s", rows[0].params, want);
    odbox_result_clear(&res);
    free(want);
    json_object_put(params);
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST
START_TEST(action_names_follow_the_header_pattern)
{
    dfx f;
    dfx_open(&f, 1, 0);
    odbox_executor *exe = open_exe(&f);
    const char *names[] = {"Deposit", "_x", "shop.Deposit", "shop.v2", "shop.2fa.Verify", "a..b", "trailing."};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int calls = 0;
        odbox_action a = {.name = names[i], .perform = count_calls, .user = &calls};
        odbox_error e;
        int rc = odbox_execute(exe, &a, NULL, NULL, NULL, &e);
        ck_assert_msg(rc == ODBOX_OK, "action name '%s' refused: %s", names[i], e.message);
        ck_assert_int_eq(calls, 1);
    }
    ck_assert_int_eq(dfx_events(&f, 0), (int64_t)(sizeof names / sizeof names[0]));
    odbox_executor_free(&exe);
    dfx_close(&f);
}
END_TEST

/* The action suite's tests, added to its tcase where they were listed. */
void action_add_staging_refusals(TCase *t)
{
    tcase_add_test(t, params_and_payloads_must_be_objects);
    tcase_add_test(t, json_nested_deeper_than_every_database_stores_is_refused);
    tcase_add_test(t, event_name_collisions_are_refused);
    tcase_add_test(t, staging_an_id_twice_is_refused);
    tcase_add_test(t, unregistered_model_type_is_refused);
    tcase_add_test(t, not_null_column_left_null_writes_nothing);
}

void action_add_input_refusals(TCase *t)
{
    tcase_add_test(t, bad_input_is_refused);
    tcase_add_test(t, execute_without_an_error_struct);
    tcase_add_test(t, perform_may_serialise_its_params);
    tcase_add_test(t, action_names_follow_the_header_pattern);
}
