/* odbox — unit tests of the RabbitMQ relay's settings (no server): what
 * open and open_json refuse, and a lazy open whose publish cannot connect. */
#include "config.h"
#include <limits.h>
#include <string.h>
#include <json-c/json.h>
#include "odbox/odbox.h"
#include "unit.h"
#ifdef HAVE_RABBITMQ
#include "rabbit_fake.h"
#endif

/* open_json of text: the code, the message in e */
static int open_text(const char *text, void **broker, odbox_error *e)
{
    json_object *o = json_tokener_parse(text);
    int rc = odbox_relay_rabbitmq_open_json(o, broker, e);
    json_object_put(o);
    return rc;
}

START_TEST(open_json_refuses_unknown_keys_and_wrong_types_naming_them)
{
    odbox_error e = {0};
    void *b = (void *)&e;
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"exchang\": \"y\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(e.message, "unknown key \"exchang\""), "%s", e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"url\": 5}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "\"url\" must be a string"), "%s", e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"timeout_ms\": \"10s\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "\"timeout_ms\" must be an integer"), "%s", e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"max_connections\": -1}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "\"max_connections\" -1 is out of range"), "%s", e.message);
    /* a window of unconfirmed publishes per connection, bounded */
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"max_in_flight_per_connection\": 70000}", &b, &e),
                     ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "max_in_flight_per_connection 70000 is out of range"), "%s", e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"max_connections\": 5000}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "max_connections 5000 is out of range"), "%s", e.message);
    /* a body limit beyond RabbitMQ's own, or below 0 */
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"max_message_bytes\": 536870913}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "\"max_message_bytes\" 536870913 is out of range (0..536870912)"), "%s",
                  e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"max_message_bytes\": \"1M\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "\"max_message_bytes\" must be an integer"), "%s", e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"max_message_bytes\": -1}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "\"max_message_bytes\" -1 is out of range"), "%s", e.message);
    ck_assert_int_eq(open_text("[1]", &b, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_relay_rabbitmq_open_json(NULL, &b, &e), ODBOX_EINVAL);
    /* no routing key; a template with an unknown placeholder */
    ck_assert_int_eq(open_text("{\"exchange\": \"events\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "no routing_key"), "%s", e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"{model}.x\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "routing_key") && strstr(e.message, "unknown placeholder {model}"), "%s",
                  e.message);
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\", \"exchange\": \"ev{\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "exchange"), "%s", e.message);
    ck_assert_ptr_null(b);
}
END_TEST

/* the JSON reader's cap on timeout_ms, from C too (the deadlines add to
 * it in int), in every build */
START_TEST(a_timeout_over_an_hour_is_refused_from_c)
{
    odbox_error e = {0};
    void *b = (void *)&e;
    odbox_relay_rabbitmq_config cfg = {.routing_key = "x", .timeout_ms = INT_MAX};
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&cfg, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "timeout_ms 2147483647 is over 3600000"), "%s", e.message);
    ck_assert_ptr_null(b);
}
END_TEST

/* librabbitmq takes an amqps:// URL and then opens a plain TCP socket:
 * refused at open, in every build, from JSON and from C */
START_TEST(amqps_is_refused_at_open)
{
    odbox_error e = {0};
    void *b = (void *)&e;
    ck_assert_int_eq(open_text("{\"url\": \"amqps://u:p@rabbit.example:5671/\", \"routing_key\": \"x\"}", &b, &e),
                     ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "amqps (TLS) is not supported"), "%s", e.message);
    ck_assert_ptr_null(b);
    b = (void *)&e;
    odbox_relay_rabbitmq_config cfg = {.url = "AMQPS://rabbit.example/", .routing_key = "x"};
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&cfg, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "amqps (TLS) is not supported"), "%s", e.message);
    ck_assert_ptr_null(b);
}
END_TEST

#ifdef HAVE_RABBITMQ
START_TEST(open_is_lazy_and_a_publish_names_the_broker_it_cannot_reach)
{
    odbox_error e = {0};
    void *b = NULL;
    ck_assert_int_eq(open_text("{\"url\": \"http://nope\", \"routing_key\": \"x\"}", &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "bad url"), "%s", e.message);
    /* what the C config can hold and the JSON reader already refuses */
    odbox_relay_rabbitmq_config negative = {.routing_key = "x", .timeout_ms = -1};
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&negative, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "timeout_ms -1 is negative"), "%s", e.message);
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&negative, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(open_text("{\"url\": \"amqp://guest:guest@127.0.0.1:1/\", \"exchange\": \"ev\", "
                               "\"routing_key\": \"{model_type}.{event_type}\", \"timeout_ms\": 2000, "
                               "\"max_connections\": 2, \"max_in_flight_per_connection\": 4}",
                               &b, &e),
                     ODBOX_OK);
    ck_assert_ptr_nonnull(b);
    odbox_envelope env = {.event_id = "7f1c2d3e-0000-4000-8000-000000000001", .event_type = "OrderPlaced",
                          .model_type = "Order"};
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(b, &env, "{}", 2, &e), ODBOX_ECONNECT);
    ck_assert_msg(strstr(e.message, "cannot connect to 127.0.0.1:1"), "%s", e.message);
    /* an event type or id AMQP cannot carry: its row fails before any
     * connection, naming the message's property that is too long */
    char long_name[300];
    memset(long_name, 'T', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    odbox_envelope long_type = env, long_id = env;
    long_type.event_type = long_name;
    long_id.event_id = long_name;
    void *fixed = NULL; /* a routing key without the type */
    odbox_relay_rabbitmq_config fc = {.url = "amqp://guest:guest@127.0.0.1:1/", .routing_key = "x"};
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&fc, &fixed, &e), ODBOX_OK);
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(fixed, &long_type, "{}", 2, &e), ODBOX_EDISCARD);
    ck_assert_msg(strstr(e.message, "the message's type property ('TTT") && strstr(e.message, "299 bytes") &&
                      strstr(e.message, "limit of 255"),
                  "%s", e.message);
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(fixed, &long_id, "{}", 2, &e), ODBOX_EDISCARD);
    ck_assert_msg(strstr(e.message, "the message's message_id property ('TTT") && strstr(e.message, "299 bytes"),
                  "%s", e.message);
    odbox_relay_rabbitmq_ops.close(fixed);
    /* a body over max_message_bytes fails its row before any connection,
     * alone in a round: the node would close the channel for it */
    void *small = NULL;
    ck_assert_int_eq(open_text("{\"url\": \"amqp://guest:guest@127.0.0.1:1/\", \"routing_key\": \"x\", "
                               "\"max_message_bytes\": 10, \"timeout_ms\": 500}",
                               &small, &e),
                     ODBOX_OK);
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(small, &env, "{\"big\": \"xxx\"}", 14, &e), ODBOX_EDISCARD);
    ck_assert_msg(strstr(e.message, "a body of 14 bytes is over max_message_bytes 10"), "%s", e.message);
    const odbox_envelope *envs[] = {&env, &env};
    const char *bodies[] = {"{\"big\": \"xxx\"}", "{}"};
    size_t lens[] = {14, 2};
    int rcs[2] = {0};
    odbox_error errs[2] = {{0}};
    odbox_relay_rabbitmq_ops.publish_batch(small, 2, envs, bodies, lens, rcs, errs);
    ck_assert_int_eq(rcs[0], ODBOX_EDISCARD);
    ck_assert_msg(strstr(errs[0].message, "over max_message_bytes 10"), "%s", errs[0].message);
    ck_assert_int_eq(rcs[1], ODBOX_ECONNECT); /* the other row went on to connect */
    odbox_relay_rabbitmq_ops.close(small);
    /* the failed connection was given back: a second publish tries again */
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(b, &env, "{}", 2, &e), ODBOX_ECONNECT);
    ck_assert_str_eq(odbox_relay_rabbitmq_ops.kind, "rabbitmq");
    /* a publish without a broker, an event or a body */
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(NULL, &env, "{}", 2, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "broker, envelope or body is NULL"), "%s", e.message);
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(b, NULL, "{}", 2, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_relay_rabbitmq_ops.publish(b, &env, NULL, 0, &e), ODBOX_EINVAL);
    odbox_relay_rabbitmq_ops.close(b);
    odbox_relay_rabbitmq_ops.close(NULL);
}
END_TEST
#else
START_TEST(without_librabbitmq_open_names_the_package)
{
    odbox_error e = {0};
    void *b = NULL;
    ck_assert_int_eq(open_text("{\"routing_key\": \"x\"}", &b, &e), ODBOX_EUNSUPPORTED);
    ck_assert_msg(strstr(e.message, "librabbitmq-dev") && strstr(e.message, "--with-rabbitmq"), "%s", e.message);
    ck_assert_ptr_null(b);
    odbox_relay_rabbitmq_ops.close(NULL);
}
END_TEST
#endif

/* open and open_json without a config or a broker, in every build */
START_TEST(open_refuses_null_arguments)
{
    odbox_error e = {0};
    void *b = (void *)&e;
    ck_assert_int_eq(odbox_relay_rabbitmq_open(NULL, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "config or broker is NULL"), "%s", e.message);
    ck_assert_ptr_null(b);
    odbox_relay_rabbitmq_config cfg = {.routing_key = "x"};
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&cfg, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "config or broker is NULL"), "%s", e.message);
    json_object *o = json_tokener_parse("{\"routing_key\": \"x\"}");
    ck_assert_int_eq(odbox_relay_rabbitmq_open_json(o, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "broker is NULL"), "%s", e.message);
    json_object_put(o);
}
END_TEST

Suite *relay_rabbitmq_suite(void)
{
    Suite *s = suite_create("relay_rabbitmq");
    TCase *t = tcase_create("relay_rabbitmq");
    tcase_add_test(t, open_json_refuses_unknown_keys_and_wrong_types_naming_them);
    tcase_add_test(t, amqps_is_refused_at_open);
    tcase_add_test(t, a_timeout_over_an_hour_is_refused_from_c);
    tcase_add_test(t, open_refuses_null_arguments);
#ifdef HAVE_RABBITMQ
    tcase_add_test(t, open_is_lazy_and_a_publish_names_the_broker_it_cannot_reach);
#else
    tcase_add_test(t, without_librabbitmq_open_names_the_package);
#endif
    suite_add_tcase(s, t);
#ifdef HAVE_RABBITMQ
    suite_add_tcase(s, relay_rabbitmq_pool_tcase());
#endif
    return s;
}
