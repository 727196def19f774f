/* odbox — unit tests of the Kafka relay's settings: what open_json and
 * open refuse before any connection (the relay against a cluster is
 * tests/relay/kafka.test). */
#include "config.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <json-c/json.h>
#include "odbox/odbox.h"
#include "unit.h"

#ifdef HAVE_KAFKA
#define ODBOX_HAVE_KAFKA_OR_UNSUPPORTED ODBOX_EINVAL
#else
#define ODBOX_HAVE_KAFKA_OR_UNSUPPORTED ODBOX_EUNSUPPORTED
#endif

/* open_json(text) fails with code and a message containing needle. */
static void refused(const char *text, int code, const char *needle)
{
    json_object *s = text ? json_tokener_parse(text) : NULL;
    ck_assert_msg(!text || s, "bad JSON in the test: %s", text);
    void *b = (void *)1;
    odbox_error e = {0};
    int rc = odbox_relay_kafka_open_json(s, &b, &e);
    ck_assert_msg(rc == code, "%s: %s (%s), want %s", text ? text : "NULL", odbox_errname(rc), e.message,
                  odbox_errname(code));
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(e.message, needle), "%s: '%s' lacks '%s'", text ? text : "NULL", e.message, needle);
    json_object_put(s);
}

START_TEST(kafka_settings_are_refused_by_name)
{
    refused(NULL, ODBOX_EINVAL, "not a JSON object");
    refused("[1]", ODBOX_EINVAL, "not a JSON object");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"brokers\": \"x\"}", ODBOX_EINVAL,
            "unknown key \"brokers\"");
    refused("{\"bootstrap_servers\": 9092, \"topic\": \"t\"}", ODBOX_EINVAL, "\"bootstrap_servers\" is not a string");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": [\"t\"]}", ODBOX_EINVAL, "\"topic\" is not a string");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"timeout_ms\": \"5\"}", ODBOX_EINVAL,
            "\"timeout_ms\"");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"timeout_ms\": -1}", ODBOX_EINVAL,
            "\"timeout_ms\"");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": [\"a\"]}", ODBOX_EINVAL,
            "\"properties\" is not an object");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": {\"linger.ms\": 5}}",
            ODBOX_EINVAL, "property \"linger.ms\" is not a string");
#ifdef HAVE_KAFKA
    refused("{\"topic\": \"t\"}", ODBOX_EINVAL, "no bootstrap_servers");
    refused("{\"bootstrap_servers\": \"h:9092\"}", ODBOX_EINVAL, "no topic");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"events.{nope}\"}", ODBOX_EINVAL, "{nope}");
    /* a topic template without a placeholder is every row's topic: one
     * that is no Kafka topic name is refused at open */
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"events/orders\"}", ODBOX_EINVAL,
            "topic 'events/orders' is not a Kafka topic name");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"a b\"}", ODBOX_EINVAL, "topic 'a b' is not");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"..\"}", ODBOX_EINVAL, "topic '..' is not");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"{{x}}\"}", ODBOX_EINVAL, "topic '{x}' is not");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": {\"acks\": \"1\"}}", ODBOX_EINVAL,
            "property acks is odbox's");
    /* librdkafka's other names for them: its aliases, and a topic
     * setting as "topic." and its name (once set, then silently
     * overridden by odbox's) */
    static const char *const aliases[] = {"request.required.acks", "delivery.timeout.ms", "metadata.broker.list",
                                          "topic.acks", "topic.request.required.acks", "topic.partitioner",
                                          "topic.message.timeout.ms", "topic.delivery.timeout.ms"};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        char text[256], needle[96];
        snprintf(text, sizeof text,
                 "{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": {\"%s\": \"1\"}}",
                 aliases[i]);
        snprintf(needle, sizeof needle, "property %s is odbox's", aliases[i]);
        refused(text, ODBOX_EINVAL, needle);
    }
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": {\"no.such.setting\": \"1\"}}",
            ODBOX_EINVAL, "no.such.setting");
    /* a publish succeeds on its delivery report: without the reports of
     * delivered messages every row would fail while Kafka stores it */
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": "
            "{\"delivery.report.only.error\": \"true\"}}",
            ODBOX_EINVAL, "property delivery.report.only.error is odbox's");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": "
            "{\"delivery.report.only.error\": \"false\"}}",
            ODBOX_EINVAL, "delivery.report.only.error");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": {\"dr_msg_cb\": \"x\"}}",
            ODBOX_EINVAL, "dr_msg_cb");
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\", \"properties\": {\"dr_cb\": \"x\"}}",
            ODBOX_EINVAL, "dr_cb");
#else
    refused("{\"bootstrap_servers\": \"h:9092\", \"topic\": \"t\"}", ODBOX_EUNSUPPORTED, "librdkafka-dev");
#endif
}
END_TEST

START_TEST(kafka_ops_are_versioned_and_close_is_null_safe)
{
    ck_assert_int_eq(odbox_relay_kafka_ops.version, ODBOX_RELAY_OPS_VERSION);
    ck_assert_str_eq(odbox_relay_kafka_ops.kind, "kafka");
    odbox_relay_kafka_ops.close(NULL);
    odbox_error e = {0};
    void *b = (void *)1;
    ck_assert_int_eq(odbox_relay_kafka_open(NULL, &b, &e), ODBOX_HAVE_KAFKA_OR_UNSUPPORTED);
    ck_assert_ptr_null(b);
#ifdef HAVE_KAFKA
    /* what the C config can hold and the JSON reader already refuses */
    static const char *const odd[] = {"linger.ms", NULL};
    odbox_relay_kafka_config no_value = {.bootstrap_servers = "h:9092", .topic = "t", .properties = odd};
    ck_assert_int_eq(odbox_relay_kafka_open(&no_value, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "property linger.ms has no value"), "%s", e.message);
    odbox_relay_kafka_config negative = {.bootstrap_servers = "h:9092", .topic = "t", .timeout_ms = -1};
    ck_assert_int_eq(odbox_relay_kafka_open(&negative, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "timeout_ms -1 is negative"), "%s", e.message);
    ck_assert_ptr_null(b);
    /* the JSON reader's cap: the deadlines add seconds to it in int */
    odbox_relay_kafka_config huge = {.bootstrap_servers = "127.0.0.1:1", .topic = "t", .timeout_ms = INT_MAX - 1000};
    ck_assert_int_eq(odbox_relay_kafka_open(&huge, &b, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "timeout_ms 2147482647 is over 3600000"), "%s", e.message);
    ck_assert_ptr_null(b);
    huge.timeout_ms = 3600000;
    ck_assert_int_eq(odbox_relay_kafka_open(&huge, &b, &e), ODBOX_OK);
    odbox_relay_kafka_ops.close(b);
    /* no broker to fill, from C and from JSON */
    ck_assert_int_eq(odbox_relay_kafka_open(&huge, NULL, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "config or broker is NULL"), "%s", e.message);
    json_object *o = json_tokener_parse("{\"bootstrap_servers\": \"127.0.0.1:1\", \"topic\": \"t\"}");
    ck_assert_int_eq(odbox_relay_kafka_open_json(o, NULL, &e), ODBOX_EINVAL);
    json_object_put(o);
    /* a publish without a broker, an event, its id or type, or a body of len bytes */
    huge.timeout_ms = 500;
    ck_assert_int_eq(odbox_relay_kafka_open(&huge, &b, &e), ODBOX_OK);
    odbox_envelope env = {.event_id = "7f1c2d3e-0000-4000-8000-000000000004", .event_type = "Placed"};
    ck_assert_int_eq(odbox_relay_kafka_ops.publish(NULL, &env, "{}", 2, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "publish: a NULL argument"), "%s", e.message);
    ck_assert_int_eq(odbox_relay_kafka_ops.publish(b, NULL, "{}", 2, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_relay_kafka_ops.publish(b, &env, NULL, 2, &e), ODBOX_EINVAL);
    odbox_envelope no_id = env, no_type = env;
    no_id.event_id = NULL;
    no_type.event_type = NULL;
    ck_assert_int_eq(odbox_relay_kafka_ops.publish(b, &no_id, "{}", 2, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_relay_kafka_ops.publish(b, &no_type, "{}", 2, &e), ODBOX_EINVAL);
    odbox_relay_kafka_ops.close(b);
    /* a setting of the producer's own whose name begins with "topic." */
    static const char *const refresh[] = {"topic.metadata.refresh.interval.ms", "60000", NULL};
    odbox_relay_kafka_config topic_prefix = {.bootstrap_servers = "127.0.0.1:1", .topic = "t", .properties = refresh};
    ck_assert_msg(odbox_relay_kafka_open(&topic_prefix, &b, &e) == ODBOX_OK, "%s", e.message);
    odbox_relay_kafka_ops.close(b);
    /* with a placeholder the topic is judged per row, at publish */
    odbox_relay_kafka_config per_row = {.bootstrap_servers = "127.0.0.1:1", .topic = "a/{model_type}"};
    ck_assert_int_eq(odbox_relay_kafka_open(&per_row, &b, &e), ODBOX_OK);
    odbox_relay_kafka_ops.close(b);
#endif
}
END_TEST

Suite *relay_kafka_suite(void)
{
    Suite *s = suite_create("relay_kafka");
    TCase *t = tcase_create("relay_kafka");
    tcase_add_test(t, kafka_settings_are_refused_by_name);
    tcase_add_test(t, kafka_ops_are_versioned_and_close_is_null_safe);
    suite_add_tcase(s, t);
    return s;
}
