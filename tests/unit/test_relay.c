/* odbox — unit tests of the relay core: the message body (schema 1),
 * templates, and a relay's handler publishing through a broker's ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <json-c/json.h>
#include "odbox/odbox.h"
#include "unit.h"

static odbox_envelope sample(json_object *payload)
{
    return (odbox_envelope){.notification_id = "n-1",
                            .event_id = "7f1c2d3e-0000-4000-8000-000000000001",
                            .ns = "shop",
                            .action_id = "7f1c2d3e-0000-4000-8000-0000000000a1",
                            .action_name = "PlaceOrder",
                            .payload = payload,
                            .event_us = INT64_C(1767225600123456), /* 2026-01-01T00:00:00.123456Z */
                            .model_id = "order-42",
                            .model_type = "Order",
                            .event_type = "OrderPlaced",
                            .handler_name = "to-nats",
                            .attempt = 1};
}

START_TEST(the_body_is_the_event_in_schema_1)
{
    json_object *payload = json_tokener_parse("{\"total\": 12.5, \"note\": \"caf\\u00e9 / 'q'\"}");
    odbox_envelope env = sample(payload);
    char *body = NULL;
    size_t len = 0;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_relay_body(&env, &body, &len, &e), ODBOX_OK);
    ck_assert_uint_eq(len, strlen(body));
    json_object *o = json_tokener_parse(body);
    ck_assert_ptr_nonnull(o);
    json_object *v;
    ck_assert(json_object_object_get_ex(o, "schema_version", &v) && json_object_get_int(v) == 1);
    ck_assert(json_object_object_get_ex(o, "id", &v));
    ck_assert_str_eq(json_object_get_string(v), env.event_id);
    ck_assert(json_object_object_get_ex(o, "aggregatetype", &v));
    ck_assert_str_eq(json_object_get_string(v), "Order");
    ck_assert(json_object_object_get_ex(o, "aggregateid", &v));
    ck_assert_str_eq(json_object_get_string(v), "order-42");
    ck_assert(json_object_object_get_ex(o, "type", &v));
    ck_assert_str_eq(json_object_get_string(v), "OrderPlaced");
    ck_assert(json_object_object_get_ex(o, "event_date", &v));
    ck_assert_str_eq(json_object_get_string(v), "2026-01-01T00:00:00.123456Z");
    ck_assert(json_object_object_get_ex(o, "namespace", &v));
    ck_assert_str_eq(json_object_get_string(v), "shop");
    ck_assert(json_object_object_get_ex(o, "action_name", &v));
    ck_assert_str_eq(json_object_get_string(v), "PlaceOrder");
    ck_assert(json_object_object_get_ex(o, "action_id", &v));
    ck_assert_str_eq(json_object_get_string(v), env.action_id);
    ck_assert(json_object_object_get_ex(o, "payload", &v));
    ck_assert(json_object_equal(v, payload));
    ck_assert_int_eq(json_object_object_length(o), 10); /* docs/relays.md's ten fields, no more */
    /* slashes are not escaped */
    ck_assert_ptr_nonnull(strstr(body, "caf\u00e9 / 'q'"));
    json_object_put(o);
    free(body);

    /* no model, no payload: JSON null */
    env.model_id = env.model_type = NULL;
    env.payload = NULL;
    ck_assert_int_eq(odbox_relay_body(&env, &body, &len, &e), ODBOX_OK);
    ck_assert_ptr_nonnull(strstr(body, "\"aggregateid\":null"));
    ck_assert_ptr_nonnull(strstr(body, "\"aggregatetype\":null"));
    ck_assert_ptr_nonnull(strstr(body, "\"payload\":null"));
    free(body);
    /* a date before 1970 keeps its microseconds positive */
    env.event_us = -1;
    ck_assert_int_eq(odbox_relay_body(&env, &body, &len, &e), ODBOX_OK);
    ck_assert_ptr_nonnull(strstr(body, "1969-12-31T23:59:59.999999Z"));
    free(body);

    env.event_id = NULL;
    ck_assert_int_eq(odbox_relay_body(&env, &body, &len, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(body);
    ck_assert_int_eq(odbox_relay_body(NULL, &body, &len, &e), ODBOX_EINVAL);
    json_object_put(payload);
}
END_TEST

START_TEST(templates_expand_and_refuse_what_they_cannot)
{
    odbox_envelope env = sample(NULL);
    char *out = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_relay_expand("events.{model_type}.{event_type}", &env, &out, &e), ODBOX_OK);
    ck_assert_str_eq(out, "events.Order.OrderPlaced");
    free(out);
    ck_assert_int_eq(odbox_relay_expand("{namespace}/{action_name}/{action_id}/{model_id}/{event_id}/{handler}", &env,
                                        &out, &e),
                     ODBOX_OK);
    ck_assert_str_eq(out, "shop/PlaceOrder/7f1c2d3e-0000-4000-8000-0000000000a1/order-42/"
                          "7f1c2d3e-0000-4000-8000-000000000001/to-nats");
    free(out);
    ck_assert_int_eq(odbox_relay_expand("{{literal}} {event_type}", &env, &out, &e), ODBOX_OK);
    ck_assert_str_eq(out, "{literal} OrderPlaced");
    free(out);
    ck_assert_int_eq(odbox_relay_expand("", &env, &out, &e), ODBOX_OK);
    ck_assert_str_eq(out, "");
    free(out);
    env.model_type = NULL;
    ck_assert_int_eq(odbox_relay_expand("x.{model_type}.y", &env, &out, &e), ODBOX_OK);
    ck_assert_str_eq(out, "x..y");
    free(out);

    ck_assert_int_eq(odbox_relay_template_check("events.{model_type}", &e), ODBOX_OK);
    ck_assert_int_eq(odbox_relay_template_check("events.{modeltype}", &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "unknown placeholder {modeltype}"));
    ck_assert_int_eq(odbox_relay_template_check("events.{model_type", &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "without its '}'"));
    ck_assert_int_eq(odbox_relay_template_check("events.}", &e), ODBOX_EINVAL);
    ck_assert_ptr_nonnull(strstr(e.message, "without its '{'"));
    ck_assert_int_eq(odbox_relay_template_check(NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(odbox_relay_expand("{nope}", &env, &out, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(out);
}
END_TEST

/* A broker that records what it was given and fails when told to. */
typedef struct fake_broker {
    int publishes, closed, fail;
    char last[1024];
} fake_broker;

static int fake_publish(void *b, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    fake_broker *f = b;
    (void)env;
    f->publishes++;
    snprintf(f->last, sizeof f->last, "%.*s", (int)len, body);
    return f->fail ? odbox_error_set(err, ODBOX_ECONNECT, "fake broker: down") : 0;
}

static void fake_close(void *b)
{
    if (b)
        ((fake_broker *)b)->closed++;
}

static const odbox_relay_ops fake_ops = {ODBOX_RELAY_OPS_VERSION, "fake", fake_publish, fake_close, NULL};

/* Refusals close the broker (nothing added); an added relay is one
 * handler; free closes the broker. Publishing is tested with each
 * broker, through a delivery. */
START_TEST(a_relay_is_added_as_a_handler_or_closes_its_broker)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    fake_broker fb = {0};
    odbox_relay *r = NULL;
    const char *types[] = {"OrderPlaced", "OrderPaid", NULL};
    odbox_relay_config cfg = {.name = "to-fake", .event_types = types, .ordered = 1};

    odbox_relay_ops bad = fake_ops;
    bad.version = 99;
    ck_assert_int_eq(odbox_relay_add(h, &cfg, &bad, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "relay add: ops of version 99 without publish or close (want version 1 to 2)");
    ck_assert_int_eq(fb.closed, 1);
    bad.version = 0;
    ck_assert_int_eq(odbox_relay_add(h, &cfg, &bad, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_int_eq(fb.closed, 2);
    fb.closed = 1;
    odbox_relay_config none = {.name = "to-fake", .event_types = (const char *[]){NULL}};
    ck_assert_int_eq(odbox_relay_add(h, &none, &fake_ops, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_int_eq(fb.closed, 2);
    odbox_relay_config badname = {.name = "to fake", .event_types = types};
    ck_assert_int_eq(odbox_relay_add(h, &badname, &fake_ops, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_int_eq(fb.closed, 3);
    odbox_relay_config negative = {.name = "to-fake", .event_types = types, .max_in_flight = -1};
    ck_assert_int_eq(odbox_relay_add(h, &negative, &fake_ops, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_int_eq(fb.closed, 4);
    ck_assert_ptr_null(r);
    ck_assert_uint_eq(odbox_handlers_count(h), 0);

    ck_assert_msg(odbox_relay_add(h, &cfg, &fake_ops, &fb, &r, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(odbox_handlers_count(h), 1);
    /* a second relay of that name: refused, its broker closed */
    fake_broker other = {0};
    odbox_relay *r2 = NULL;
    ck_assert_int_eq(odbox_relay_add(h, &cfg, &fake_ops, &other, &r2, &e), ODBOX_EINVAL);
    ck_assert_int_eq(other.closed, 1);
    ck_assert_ptr_null(r2);
    ck_assert_int_eq(odbox_relay_published(r), 0);
    /* a table of version 1 (before publish_batch) is still taken */
    odbox_relay_ops v1 = {1, "fake", fake_publish, fake_close, NULL};
    odbox_relay_config cfg1 = {.name = "to-fake-v1", .event_types = types};
    odbox_relay *r1 = NULL;
    fake_broker fb1 = {0};
    ck_assert_msg(odbox_relay_add(h, &cfg1, &v1, &fb1, &r1, &e) == ODBOX_OK, "%s", e.message);
    ck_assert_uint_eq(odbox_handlers_count(h), 2);
    odbox_relay_free(&r1);
    ck_assert_int_eq(fb1.closed, 1);
    odbox_relay_free(&r);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(fb.closed, 5);
    odbox_relay_free(&r);
    odbox_handlers_free(&h);
}
END_TEST

/* NULL arguments are EINVAL and the broker given is closed (when the
 * ops can close it: with no ops or no close nothing can); once a
 * delivery uses h, ESTATE, the broker closed too. */
START_TEST(relay_add_refuses_null_arguments_and_a_delivered_registry)
{
    odbox_handlers *h = NULL;
    odbox_error e = {0};
    ck_assert_int_eq(odbox_handlers_new(&h, &e), ODBOX_OK);
    fake_broker fb = {0};
    odbox_relay *r = (odbox_relay *)&fb;
    const char *types[] = {"OrderPlaced", NULL};
    odbox_relay_config cfg = {.name = "to-fake", .event_types = types};

    ck_assert_int_eq(odbox_relay_add(NULL, &cfg, &fake_ops, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "relay add: handlers, config, ops or out is NULL");
    ck_assert_ptr_null(r);
    ck_assert_int_eq(fb.closed, 1);
    ck_assert_int_eq(odbox_relay_add(h, NULL, &fake_ops, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_int_eq(fb.closed, 2);
    ck_assert_int_eq(odbox_relay_add(h, &cfg, &fake_ops, &fb, NULL, &e), ODBOX_EINVAL);
    ck_assert_int_eq(fb.closed, 3);
    ck_assert_int_eq(odbox_relay_add(h, &cfg, NULL, &fb, &r, &e), ODBOX_EINVAL); /* no close to call */
    ck_assert_int_eq(fb.closed, 3);
    /* a valid version without publish, or without close */
    odbox_relay_ops no_publish = {ODBOX_RELAY_OPS_VERSION, "fake", NULL, fake_close, NULL};
    ck_assert_int_eq(odbox_relay_add(h, &cfg, &no_publish, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "ops of version 2 without publish or close"), "%s", e.message);
    ck_assert_int_eq(fb.closed, 4);
    odbox_relay_ops no_close = {1, "fake", fake_publish, NULL, NULL};
    ck_assert_int_eq(odbox_relay_add(h, &cfg, &no_close, &fb, &r, &e), ODBOX_EINVAL);
    ck_assert_msg(strstr(e.message, "ops of version 1 without publish or close"), "%s", e.message);
    ck_assert_int_eq(fb.closed, 4);
    ck_assert_ptr_null(r);
    ck_assert_uint_eq(odbox_handlers_count(h), 0);
    /* with NULL err too */
    ck_assert_int_eq(odbox_relay_add(NULL, &cfg, &fake_ops, &fb, &r, NULL), ODBOX_EINVAL);
    ck_assert_int_eq(fb.closed, 5);

    /* once a delivery uses h */
    ck_assert_msg(odbox_relay_add(h, &cfg, &fake_ops, &fb, &r, &e) == ODBOX_OK, "%s", e.message);
    odbox_registry *reg = NULL;
    odbox_delivery *d = NULL;
    ck_assert_int_eq(odbox_registry_open_dsn("sqlite:///nonexistent-dir/relay.db", &reg, &e), ODBOX_OK);
    ck_assert_msg(odbox_delivery_open(reg, h, NULL, &d, &e) == ODBOX_OK, "%s", e.message);
    fake_broker late = {0};
    odbox_relay *r2 = (odbox_relay *)&late;
    odbox_relay_config cfg2 = {.name = "to-fake-late", .event_types = types};
    ck_assert_int_eq(odbox_relay_add(h, &cfg2, &fake_ops, &late, &r2, &e), ODBOX_ESTATE);
    ck_assert_msg(strstr(e.message, "a delivery uses these handlers already"), "%s", e.message);
    ck_assert_ptr_null(r2);
    ck_assert_int_eq(late.closed, 1);
    ck_assert_uint_eq(odbox_handlers_count(h), 1);
    odbox_delivery_free(&d);
    odbox_relay_free(&r);
    ck_assert_int_eq(fb.closed, 6);
    odbox_handlers_free(&h);
    odbox_registry_free(&reg);
}
END_TEST

START_TEST(body_and_expand_refuse_null_arguments)
{
    odbox_envelope env = sample(NULL);
    odbox_error e = {0};
    char *out = (char *)&e;
    size_t len = 7;
    ck_assert_int_eq(odbox_relay_body(&env, NULL, &len, &e), ODBOX_EINVAL);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(odbox_relay_body(&env, &out, NULL, &e), ODBOX_EINVAL);
    ck_assert_ptr_null(out);
    env.event_type = NULL;
    out = (char *)&e;
    ck_assert_int_eq(odbox_relay_body(&env, &out, &len, &e), ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "relay body: a NULL argument, event id or event type");
    ck_assert_ptr_null(out);
    env.event_type = "OrderPlaced";
    out = (char *)&e;
    ck_assert_int_eq(odbox_relay_expand("{event_type}", NULL, &out, &e), ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "relay template: envelope or out is NULL");
    ck_assert_ptr_null(out);
    ck_assert_int_eq(odbox_relay_expand("{event_type}", &env, NULL, &e), ODBOX_EINVAL);
    out = (char *)&e;
    ck_assert_int_eq(odbox_relay_expand(NULL, &env, &out, &e), ODBOX_EINVAL);
    ck_assert_str_eq(e.message, "relay template: NULL");
    ck_assert_ptr_null(out);
}
END_TEST

Suite *relay_suite(void)
{
    Suite *s = suite_create("relay");
    TCase *t = tcase_create("relay");
    tcase_add_test(t, the_body_is_the_event_in_schema_1);
    tcase_add_test(t, templates_expand_and_refuse_what_they_cannot);
    tcase_add_test(t, a_relay_is_added_as_a_handler_or_closes_its_broker);
    tcase_add_test(t, relay_add_refuses_null_arguments_and_a_delivered_registry);
    tcase_add_test(t, body_and_expand_refuse_null_arguments);
    suite_add_tcase(s, t);
    return s;
}
