/* odbox — the RabbitMQ relay's pool against a fake node (rabbit_fake.c),
 * at the moments a real node cannot be made to pick: a connection the
 * node closed while a publish still holds it, a confirm read during
 * another publish's exchange check, a connection slow to open; and a
 * host name whose lookup hangs. */
#include "config.h"
#include <dlfcn.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <json-c/json.h>
#include "odbox/odbox.h"
#include "relay_rabbitmq_internal.h"
#include "rabbit_fake.h"

/* a broker on the fake node; exchange template {model_type} */
static void *fake_broker(const rabbit_fake *f, int timeout_ms, int max_connections)
{
    odbox_relay_rabbitmq_config cfg = {.url = rabbit_fake_url(f), .exchange = "{model_type}", .routing_key = "k",
                                       .timeout_ms = timeout_ms, .max_connections = max_connections};
    odbox_error e = {0};
    void *b = NULL;
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&cfg, &b, &e), ODBOX_OK);
    return b;
}

static odbox_envelope envelope(const char *id, const char *exchange)
{
    return (odbox_envelope){.event_id = id, .event_type = "Probed", .model_type = exchange, .model_id = "m"};
}

/* what a publish made while a broken connection is still held met */
static void *left_broker;
static int left_calls, left_rc;
static odbox_error left_err;

static void publish_meanwhile(void *broker)
{
    if (left_calls++)
        return;
    left_broker = broker;
    odbox_envelope env = envelope("e-2", "ex");
    left_rc = odbox_relay_rabbitmq_ops.publish(broker, &env, "{}", 2, &left_err);
}

/* The node closes the connection (320) instead of confirming; before the
 * publish that read the close leaves it, another publish comes: it goes
 * on a new connection and is confirmed (before, it took the broken one
 * from the pool and failed with "the connection broke"). One connection
 * at most: the broken one does not hold the slot. */
START_TEST(a_publish_meanwhile_skips_a_connection_the_node_closed)
{
    rabbit_fake_script s = {.close_on_publish = 1};
    rabbit_fake *f = rabbit_fake_start(&s);
    ck_assert_ptr_nonnull(f);
    void *b = fake_broker(f, 5000, 1);
    odbox_relay_rabbitmq_test_leaving_broken = publish_meanwhile;
    odbox_envelope env = envelope("e-1", "ex");
    odbox_error e = {0};
    int rc = odbox_relay_rabbitmq_ops.publish(b, &env, "{}", 2, &e);
    odbox_relay_rabbitmq_test_leaving_broken = NULL;
    ck_assert_int_ne(rc, ODBOX_OK);
    ck_assert_msg(strstr(e.message, "320 CONNECTION_FORCED"), "%s", e.message);
    ck_assert_msg(left_rc == ODBOX_OK, "the publish meanwhile: %s: %s", odbox_errname(left_rc), left_err.message);
    ck_assert_int_eq(left_calls, 1);
    ck_assert_int_eq(rabbit_fake_connections(f), 2);
    ck_assert_int_eq(rabbit_fake_published(f, 1), 1);
    odbox_relay_rabbitmq_ops.close(b);
    rabbit_fake_stop(f);
}
END_TEST

/* A round whose first exchange's check meets the node's close (320): the
 * row after it, on the same broken connection, names that cause too
 * (before: "the connection broke", nothing more). */
START_TEST(a_row_failing_on_a_broken_connection_names_the_cause)
{
    rabbit_fake_script s = {.close_on_declare = "gone"};
    rabbit_fake *f = rabbit_fake_start(&s);
    ck_assert_ptr_nonnull(f);
    void *b = fake_broker(f, 5000, 1);
    odbox_envelope e0 = envelope("e-1", "gone"), e1 = envelope("e-2", "other");
    const odbox_envelope *envs[] = {&e0, &e1};
    const char *bodies[] = {"{}", "{}"};
    size_t lens[] = {2, 2};
    int rcs[2] = {0};
    odbox_error errs[2] = {{0}};
    odbox_relay_rabbitmq_ops.publish_batch(b, 2, envs, bodies, lens, rcs, errs);
    ck_assert_int_eq(rcs[0], ODBOX_ECONNLOST);
    ck_assert_msg(strstr(errs[0].message, "320 CONNECTION_FORCED"), "%s", errs[0].message);
    ck_assert_int_eq(rcs[1], ODBOX_ECONNLOST);
    ck_assert_msg(strstr(errs[1].message, "exchange 'other'") && strstr(errs[1].message, "the connection broke: ") &&
                      strstr(errs[1].message, "320 CONNECTION_FORCED"),
                  "%s", errs[1].message);
    ck_assert_int_eq(rabbit_fake_published(f, 0), 0);
    odbox_relay_rabbitmq_ops.close(b);
    rabbit_fake_stop(f);
}
END_TEST

typedef struct {
    void *broker;
    int rc;
    odbox_error err;
} publisher;

static void *publish_held(void *p)
{
    publisher *a = p;
    odbox_envelope env = envelope("e-held", "ok");
    a->rc = odbox_relay_rabbitmq_ops.publish(a->broker, &env, "{}", 2, &a->err);
    return NULL;
}

/* A publish's ack comes while another publish holds the connection for
 * its exchange's check (the node answers that check late, the ack just
 * before the answer: librabbitmq reads the ack during that RPC and keeps
 * it), and the first publish's timeout_ms has passed by the time it may
 * read again: it is confirmed, not failed with "no confirm within" (a
 * duplicate on the retry), and the check's publish too. */
START_TEST(an_ack_read_during_another_publishs_check_confirms_after_the_deadline)
{
    enum { TIMEOUT_MS = 2000 };
    /* the check from half the timeout on, answered at 1.25 of it: after
     * the first publish's deadline, within the check's own */
    rabbit_fake_script s = {.slow_declare = "slow", .slow_declare_ms = TIMEOUT_MS * 5 / 4};
    rabbit_fake *f = rabbit_fake_start(&s);
    ck_assert_ptr_nonnull(f);
    publisher held = {.broker = fake_broker(f, TIMEOUT_MS, 1)};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, publish_held, &held), 0);
    usleep(TIMEOUT_MS / 2 * 1000);
    odbox_envelope env = envelope("e-check", "slow");
    odbox_error e = {0};
    int rc = odbox_relay_rabbitmq_ops.publish(held.broker, &env, "{}", 2, &e);
    pthread_join(th, NULL);
    ck_assert_msg(held.rc == ODBOX_OK, "the held publish: %s: %s", odbox_errname(held.rc), held.err.message);
    ck_assert_msg(rc == ODBOX_OK, "the checking publish: %s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(rabbit_fake_connections(f), 1);
    ck_assert_int_eq(rabbit_fake_published(f, 0), 2);
    odbox_relay_rabbitmq_ops.close(held.broker);
    rabbit_fake_stop(f);
}
END_TEST

/* The only connection allowed is still being opened (the node answers
 * channel.open and confirm.select late, each within timeout_ms) when a
 * second publish has waited timeout_ms for it: that publish says it is
 * still connecting to the node (before: "1 connections with 16 publishes
 * in flight each, none free", as if the node were busy); the first is
 * confirmed once the connection is open. */
START_TEST(a_publish_waiting_for_a_connection_being_opened_says_so)
{
    enum { TIMEOUT_MS = 2000 };
    rabbit_fake_script s = {.slow_open_ms = TIMEOUT_MS * 3 / 4};
    rabbit_fake *f = rabbit_fake_start(&s);
    ck_assert_ptr_nonnull(f);
    publisher first = {.broker = fake_broker(f, TIMEOUT_MS, 1)};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, publish_held, &first), 0);
    usleep(TIMEOUT_MS / 5 * 1000);
    odbox_envelope env = envelope("e-waiting", "ok");
    odbox_error e = {0};
    int rc = odbox_relay_rabbitmq_ops.publish(first.broker, &env, "{}", 2, &e);
    pthread_join(th, NULL);
    char want[80];
    snprintf(want, sizeof want, "still connecting to 127.0.0.1:%d", rabbit_fake_port(f));
    ck_assert_msg(rc == ODBOX_ECONNECT && strstr(e.message, want) && strstr(e.message, "2000 ms"), "%s: %s",
                  odbox_errname(rc), e.message);
    ck_assert_msg(first.rc == ODBOX_OK, "the first publish: %s: %s", odbox_errname(first.rc), first.err.message);
    ck_assert_int_eq(rabbit_fake_connections(f), 1);
    ck_assert_int_eq(rabbit_fake_published(f, 0), 1);
    odbox_relay_rabbitmq_ops.close(first.broker);
    rabbit_fake_stop(f);
}
END_TEST

/* A name whose lookup hangs for SLOW_DNS_MS, then fails: this program's
 * getaddrinfo is the one librabbitmq and the relay call (the executable's
 * symbol comes first); it hands every other name to the C library's. */
#define SLOW_HOST "slow-dns.odbox.invalid"
enum { SLOW_DNS_MS = 3000 };

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
    if (node && !strcmp(node, SLOW_HOST)) {
        usleep(SLOW_DNS_MS * 1000);
        return EAI_AGAIN;
    }
    int (*libc)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    *(void **)&libc = dlsym(RTLD_NEXT, "getaddrinfo");
    return libc ? libc(node, service, hints, res) : EAI_SYSTEM;
}

/* A broker whose host name's lookup hangs: the publish fails within
 * timeout_ms, saying the name was not resolved in time (before, it
 * waited for the lookup, however long: the resolver's own timeouts,
 * seconds to minutes, and said "hostname lookup failed"). */
START_TEST(a_host_name_lookup_is_bounded_by_timeout_ms)
{
    odbox_relay_rabbitmq_config cfg = {.url = "amqp://guest:guest@" SLOW_HOST ":5672/", .routing_key = "k",
                                       .timeout_ms = 500};
    odbox_error e = {0};
    void *b = NULL;
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&cfg, &b, &e), ODBOX_OK);
    odbox_envelope env = envelope("e-dns", "ok");
    int rc = odbox_relay_rabbitmq_ops.publish(b, &env, "{}", 2, &e);
    ck_assert_msg(rc == ODBOX_ECONNECT && strstr(e.message, "cannot connect to " SLOW_HOST ":5672") &&
                      strstr(e.message, "not resolved within 500 ms"),
                  "%s: %s", odbox_errname(rc), e.message);
    /* a name that resolves at once still connects as before */
    rabbit_fake_script s = {0};
    rabbit_fake *f = rabbit_fake_start(&s);
    ck_assert_ptr_nonnull(f);
    char url[80];
    snprintf(url, sizeof url, "amqp://guest:guest@localhost:%d/", rabbit_fake_port(f));
    odbox_relay_rabbitmq_config local = {.url = url, .exchange = "{model_type}", .routing_key = "k",
                                         .timeout_ms = 2000};
    void *lb = NULL;
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&local, &lb, &e), ODBOX_OK);
    rc = odbox_relay_rabbitmq_ops.publish(lb, &env, "{}", 2, &e);
    ck_assert_msg(rc == ODBOX_OK, "localhost: %s: %s", odbox_errname(rc), e.message);
    ck_assert_int_eq(rabbit_fake_published(f, 0), 1);
    odbox_relay_rabbitmq_ops.close(lb);
    odbox_relay_rabbitmq_ops.close(b);
    rabbit_fake_stop(f);
}
END_TEST

TCase *relay_rabbitmq_pool_tcase(void)
{
    TCase *t = tcase_create("relay_rabbitmq_pool");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, a_publish_meanwhile_skips_a_connection_the_node_closed);
    tcase_add_test(t, a_row_failing_on_a_broken_connection_names_the_cause);
    tcase_add_test(t, an_ack_read_during_another_publishs_check_confirms_after_the_deadline);
    tcase_add_test(t, a_publish_waiting_for_a_connection_being_opened_says_so);
    tcase_add_test(t, a_host_name_lookup_is_bounded_by_timeout_ms);
    return t;
}
