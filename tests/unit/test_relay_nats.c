/* odbox — unit tests of the NATS relay that need no server: settings,
 * subjects refused per row before any connection, an unreachable server
 * failing within the timeout, and the build without libnats. */
#include <limits.h>
#include <string.h>
#include <json-c/json.h>
#include "odbox/odbox.h"
#include "relay_nats_internal.h"
#include "unit.h"

static int open_text(const char *json, void **broker, odbox_error *err)
{
    json_object *o = json_tokener_parse(json);
    int rc = odbox_relay_nats_open_json(o, broker, err);
    json_object_put(o);
    return rc;
}

START_TEST(nats_settings_are_checked_and_unknown_keys_named)
{
    odbox_error e = {0};
    void *b = (void *)&e;
    ck_assert_int_eq(open_text("{\"subject\": \"a.b\", \"urll\": \"x\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown key \"urll\""));
    ck_assert_int_eq(open_text("{\"url\": \"nats://127.0.0.1:1\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "\"subject\" is required"));
    ck_assert_int_eq(open_text("{\"subject\": 3}", &b, &e), ODBOX_EINVAL);
    ck_assert_int_eq(open_text("{\"subject\": \"a\", \"timeout_ms\": \"10\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_int_eq(open_text("{\"subject\": \"a\", \"timeout_ms\": -1}", &b, &e), ODBOX_EINVAL);
    ck_assert_int_eq(open_text("[]", &b, &e), ODBOX_EINVAL);
    ck_assert_int_eq(open_text("{\"subject\": \"a.{nope}\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown placeholder {nope}"));
    ck_assert_int_eq(odbox_relay_nats_open(NULL, &b, &e), ODBOX_EINVAL);
    /* what the C config can hold and the JSON reader already refuses */
    odbox_relay_nats_config negative = {.subject = "a", .timeout_ms = -1}, empty_url = {.url = "", .subject = "a"};
    ck_assert_int_eq(odbox_relay_nats_open(&negative, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "timeout_ms -1 is negative"), "%s", e.message);
    ck_assert_int_eq(odbox_relay_nats_open(&empty_url, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "url is empty"), "%s", e.message);
    ck_assert_ptr_null(b);
    /* the JSON reader's cap, from C too: the deadlines add to it in int */
    odbox_relay_nats_config huge = {.subject = "a", .timeout_ms = INT_MAX};
    ck_assert_int_eq(odbox_relay_nats_open(&huge, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "timeout_ms 2147483647 is over 3600000"), "%s", e.message);
    ck_assert_ptr_null(b);
    odbox_relay_nats_ops.close(NULL);
    ck_assert_str_eq(odbox_relay_nats_ops.kind, "nats");
}
END_TEST

START_TEST(nats_bad_subjects_fail_their_row_and_a_dead_server_fails_in_time)
{
    odbox_error e = {0};
    void *b = NULL;
    odbox_relay_nats_config c = {.url = "nats://127.0.0.1:1", .subject = "ev.{model_type}.{event_type}",
                                 .timeout_ms = 500};
    int rc = odbox_relay_nats_open(&c, &b, &e);
    if (rc == ODBOX_EUNSUPPORTED) { /* built without libnats: says how to get it */
        ck_assert_ptr_nonnull(strstr(e.message, "libnats-dev"));
        ck_assert_ptr_nonnull(strstr(e.message, "--with-nats"));
        ck_assert_ptr_null(b);
        return;
    }
    ck_assert_int_eq(rc, ODBOX_OK);
    odbox_envelope env = {.event_id = "7f1c2d3e-0000-4000-8000-000000000001", .event_type = "Placed",
                          .model_type = "Order"};
    static const char *const bad[][2] = {{NULL, "empty token"}, {"a b", "white space"}, {"a*", "wildcard"},
                                         {"a>", "wildcard"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        env.model_type = bad[i][0];
        ck_assert_int_eq(odbox_relay_nats_ops.publish(b, &env, "{}", 2, &e), ODBOX_EDISCARD);
        ck_assert_ptr_nonnull(strstr(e.message, bad[i][1]));
    }
    /* over nats-server's max_control_line the server would close the
     * connection, and libnats would close it for good */
    char long_type[1100];
    memset(long_type, 'x', sizeof long_type - 1);
    long_type[sizeof long_type - 1] = 0;
    env.model_type = long_type;
    ck_assert_int_eq(odbox_relay_nats_ops.publish(b, &env, "{}", 2, &e), ODBOX_EDISCARD);
    ck_assert_msg(strstr(e.message, "is 1109 bytes: over the 1024"), "%s", e.message);
    env.model_type = "Order";
    ck_assert_int_eq(odbox_relay_nats_ops.publish(b, &env, "{}", 2, &e), ODBOX_ECONNECT);
    ck_assert_ptr_nonnull(strstr(e.message, "cannot connect to nats://127.0.0.1:1"));
    /* within a second the same answer, without connecting again */
    odbox_error e2 = {0};
    ck_assert_int_eq(odbox_relay_nats_ops.publish(b, &env, "{}", 2, &e2), ODBOX_ECONNECT);
    ck_assert_str_eq(e2.message, e.message);
    odbox_relay_nats_ops.close(b);
}
END_TEST

/* The URL's userinfo (user:password, or a token) of each server is in no
 * message: a publish's error, the round's errors. */
START_TEST(nats_url_password_is_in_no_message)
{
    odbox_error e = {0};
    void *b = NULL;
    odbox_relay_nats_config c = {.url = "nats://alice:S3cret@127.0.0.1:1, tok3n@127.0.0.1:2",
                                 .subject = "ev.{event_type}", .timeout_ms = 500};
    int rc = odbox_relay_nats_open(&c, &b, &e);
    if (rc == ODBOX_EUNSUPPORTED)
        return;
    ck_assert_int_eq(rc, ODBOX_OK);
    odbox_envelope env = {.event_id = "7f1c2d3e-0000-4000-8000-000000000002", .event_type = "Placed"};
    const odbox_envelope *envs[] = {&env, &env};
    const char *bodies[] = {"{}", "{}"};
    size_t lens[] = {2, 2};
    int rcs[2] = {0};
    odbox_error errs[2] = {{0}};
    ck_assert_int_eq(odbox_relay_nats_ops.publish(b, &env, "{}", 2, &e), ODBOX_ECONNECT);
    odbox_relay_nats_ops.publish_batch(b, 2, envs, bodies, lens, rcs, errs);
    const char *msgs[] = {e.message, errs[0].message, errs[1].message};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_msg(!strstr(msgs[i], "S3cret") && !strstr(msgs[i], "tok3n"), "%s", msgs[i]);
        ck_assert_msg(strstr(msgs[i], "nats://***@127.0.0.1:1, ***@127.0.0.1:2"), "%s", msgs[i]);
    }
    odbox_relay_nats_ops.close(b);
    /* a URL without userinfo is quoted as it is */
    c.url = "nats://127.0.0.1:1";
    ck_assert_int_eq(odbox_relay_nats_open(&c, &b, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_relay_nats_ops.publish(b, &env, "{}", 2, &e), ODBOX_ECONNECT);
    ck_assert_msg(strstr(e.message, "cannot connect to nats://127.0.0.1:1:"), "%s", e.message);
    odbox_relay_nats_ops.close(b);
}
END_TEST

/* No url: the documented default, not libnats's NATS_DEFAULT_URL
 * (nats://localhost:4222), whose header once replaced ours silently. */
START_TEST(nats_default_url_is_127_0_0_1)
{
    odbox_error e = {0};
    void *b = NULL;
    odbox_relay_nats_config c = {.subject = "a"};
    int rc = odbox_relay_nats_open(&c, &b, &e);
    if (rc == ODBOX_EUNSUPPORTED)
        return;
    ck_assert_int_eq(rc, ODBOX_OK);
    ck_assert_str_eq(odbox_relay_nats_url_shown(b), "nats://127.0.0.1:4222");
    odbox_relay_nats_ops.close(b);
    ck_assert_ptr_null(odbox_relay_nats_url_shown(NULL));
}
END_TEST

/* A url list entry libnats would take but no server could be (another
 * scheme, no host, a bad port) is refused at open, naming the entry
 * without its password; in every build. */
START_TEST(nats_bad_urls_are_refused_at_open)
{
    static const char *const bad[][2] = {
        {"http://127.0.0.1:1", "'http://127.0.0.1:1' has a scheme other than nats:// or tls://"},
        {"::::", "'::::' has no host[:port]"},
        {"nats://", "'nats://' has no host"},
        {"nats://:4222", "has no host"},
        {"nats://h:", "'nats://h:' has an empty port"},
        {"nats://h:42x", "has a port that is not a number"},
        {"nats://h:70000", "has a port over 65535"},
        {"nats://h:0", "has port 0"},
        {"nats://[::1", "has no host (an IPv6 address"},
        {"nats://a:1,,nats://b:2", "server '' is empty"},
        {"nats://a:1, ", "server ' ' is empty"},
        {"nats://alice:S3cret@127.0.0.1:1, http://bob:Pw0rd@h:2", "server ' http://***@h:2' has a scheme"},
        /* a ',' in a password splits it: the piece before is not quoted */
        {"nats://alice:S3c,ret@127.0.0.1:4222", "server 1 of 2 has a port that is not a number; not quoted"},
        {"nats://h:1,nats://alice:S3c,ret@h:2", "server 2 of 3 has a port that is not a number; not quoted"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        odbox_error e = {0};
        void *b = (void *)&e;
        odbox_relay_nats_config c = {.url = bad[i][0], .subject = "a"};
        ck_assert_msg(odbox_relay_nats_open(&c, &b, &e) == ODBOX_EINVAL, "%s: %s", bad[i][0], e.message);
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(e.message, bad[i][1]), "%s: '%s' lacks '%s'", bad[i][0], e.message, bad[i][1]);
        ck_assert_msg(!strstr(e.message, "S3c") && !strstr(e.message, "Pw0rd"), "%s", e.message);
    }
    static const char *const good[] = {"nats://127.0.0.1:4222", "tls://nats.example:4443", "127.0.0.1:4222",
                                       "NATS://h", "nats://[::1]:4222", "nats://u:p@h:1/ignored",
                                       " nats://a:1 ,tok3n@b:2", "nats://h,tls://[fe80::1]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        odbox_error e = {0};
        void *b = NULL;
        odbox_relay_nats_config c = {.url = good[i], .subject = "a"};
        int rc = odbox_relay_nats_open(&c, &b, &e);
        ck_assert_msg(rc == ODBOX_OK || rc == ODBOX_EUNSUPPORTED, "%s: %s", good[i], e.message);
        odbox_relay_nats_ops.close(b);
    }
}
END_TEST

/* A subject template without a placeholder is every row's subject: one
 * NATS refuses is refused at open; with a placeholder, per row. */
START_TEST(nats_a_fixed_subject_nats_refuses_is_refused_at_open)
{
    char long_subject[1100];
    memset(long_subject, 'x', sizeof long_subject - 1);
    long_subject[sizeof long_subject - 1] = 0;
    const char *const bad[][2] = {{"a.*", "it has a wildcard"}, {"a.>", "it has a wildcard"},
                                  {"a b", "it has white space"}, {"a..b", "it has an empty token"},
                                  {".a", "it has an empty token"}, {"", "it is empty"},
                                  {long_subject, "is 1099 bytes: over the 1024"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        odbox_error e = {0};
        void *b = (void *)&e;
        odbox_relay_nats_config c = {.subject = bad[i][0]};
        ck_assert_msg(odbox_relay_nats_open(&c, &b, &e) == ODBOX_EINVAL, "%s: %s", bad[i][0], e.message);
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(e.message, bad[i][1]), "'%s' lacks '%s'", e.message, bad[i][1]);
    }
    /* from JSON too */
    json_object *o = json_tokener_parse("{\"subject\": \"events.*\"}");
    odbox_error e = {0};
    void *b = NULL;
    ck_assert_int_eq(odbox_relay_nats_open_json(o, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "subject 'events.*' is not a subject to publish to"), "%s", e.message);
    json_object_put(o);
    /* "{{" is a brace, not a placeholder; a placeholder leaves it to the row */
    const char *const good[] = {"a.{{b}}", "bad.{event_type}.*", "{model_type}"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        odbox_relay_nats_config c = {.subject = good[i]};
        int rc = odbox_relay_nats_open(&c, &b, &e);
        ck_assert_msg(rc == ODBOX_OK || rc == ODBOX_EUNSUPPORTED, "%s: %s", good[i], e.message);
        odbox_relay_nats_ops.close(b);
    }
}
END_TEST

/* open and open_json without a broker, publish without a broker, an
 * event or a body: EINVAL, nothing connected */
START_TEST(nats_null_arguments_are_refused)
{
    odbox_error e = {0};
    odbox_relay_nats_config c = {.url = "nats://127.0.0.1:1", .subject = "a.{event_type}", .timeout_ms = 500};
    ck_assert_int_eq(odbox_relay_nats_open(&c, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "broker is NULL"), "%s", e.message);
    json_object *o = json_tokener_parse("{\"subject\": \"a\"}");
    ck_assert_int_eq(odbox_relay_nats_open_json(o, NULL, &e), ODBOX_EINVAL);
    json_object_put(o);
    void *b = (void *)&e;
    ck_assert_int_eq(odbox_relay_nats_open_json(NULL, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "not a JSON object"), "%s", e.message);
    ck_assert_ptr_null(b);
    int rc = odbox_relay_nats_open(&c, &b, &e);
    if (rc == ODBOX_EUNSUPPORTED)
        return;
    ck_assert_int_eq(rc, ODBOX_OK);
    odbox_envelope env = {.event_id = "7f1c2d3e-0000-4000-8000-000000000003", .event_type = "Placed"};
    ck_assert_int_eq(odbox_relay_nats_ops.publish(NULL, &env, "{}", 2, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "publish without broker, event or body"), "%s", e.message);
    ck_assert_int_eq(odbox_relay_nats_ops.publish(b, NULL, "{}", 2, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_relay_nats_ops.publish(b, &env, NULL, 0, &e), ODBOX_EINVAL);
    odbox_relay_nats_ops.close(b);
}
END_TEST

Suite *relay_nats_suite(void)
{
    Suite *s = suite_create("relay_nats");
    TCase *t = tcase_create("relay_nats");
    tcase_add_test(t, nats_settings_are_checked_and_unknown_keys_named);
    tcase_add_test(t, nats_bad_subjects_fail_their_row_and_a_dead_server_fails_in_time);
    tcase_add_test(t, nats_url_password_is_in_no_message);
    tcase_add_test(t, nats_default_url_is_127_0_0_1);
    tcase_add_test(t, nats_bad_urls_are_refused_at_open);
    tcase_add_test(t, nats_a_fixed_subject_nats_refuses_is_refused_at_open);
    tcase_add_test(t, nats_null_arguments_are_refused);
    suite_add_tcase(s, t);
    return s;
}
