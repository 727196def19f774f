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
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One publish's stages share its timeout_ms T. The only place (one
 * connection, one publish in flight on it) is held by a publish that the
 * node answers, 0.2 T after it, by closing the connection; a second
 * publish waits for the place (0.2 T), opens a new connection (the node
 * answers channel.open and confirm.select 0.2 T late each, the exchange
 * check's channel.open too) and publishes there, and the node never
 * confirms: it fails within T (and some slack), not after the stages'
 * own bounds added up (before, each stage had T of its own: 1.8 T, 1797
 * ms here; the relay's handler_timeout_ms, the longest timeout_ms +
 * 5 s, abandoned such calls). */
START_TEST(a_publish_ends_within_timeout_ms_over_its_stages)
{
    enum { TIMEOUT_MS = 1000, SLACK_MS = 500 };
    rabbit_fake_script s = {.slow_open_ms = TIMEOUT_MS / 5, .close_after_ms = TIMEOUT_MS / 5,
                            .never_ack = 1};
    rabbit_fake *f = rabbit_fake_start(&s);
    ck_assert_ptr_nonnull(f);
    odbox_relay_rabbitmq_config cfg = {.url = rabbit_fake_url(f), .exchange = "{model_type}", .routing_key = "k",
                                       .timeout_ms = TIMEOUT_MS, .max_connections = 1,
                                       .max_in_flight_per_connection = 1};
    odbox_error e = {0};
    publisher first = {0};
    ck_assert_int_eq(odbox_relay_rabbitmq_open(&cfg, &first.broker, &e), ODBOX_OK);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, publish_held, &first), 0);
    /* until the first publish is on the connection: within its T */
    for (int i = 0; i < TIMEOUT_MS / 10 && rabbit_fake_published(f, 0) == 0; i++)
        usleep(10 * 1000);
    ck_assert_int_eq(rabbit_fake_published(f, 0), 1);
    odbox_envelope env = envelope("e-late", "ok");
    long long t0 = now_ms();
    int rc = odbox_relay_rabbitmq_ops.publish(first.broker, &env, "{}", 2, &e);
    long long took = now_ms() - t0;
    pthread_join(th, NULL);
    ck_assert_msg(first.rc != ODBOX_OK && strstr(first.err.message, "320 CONNECTION_FORCED"),
                  "the first publish: %s: %s", odbox_errname(first.rc), first.err.message);
    ck_assert_msg((rc == ODBOX_ETIMEDOUT || rc == ODBOX_ECONNECT) && took <= TIMEOUT_MS + SLACK_MS,
                  "took %lld ms, timeout_ms %d: %s: %s", took, TIMEOUT_MS, odbox_errname(rc), e.message);
    ck_assert_msg(!strstr(e.message, "guest:"), "%s", e.message);
    ck_assert_int_eq(rabbit_fake_connections(f), 2);
    odbox_relay_rabbitmq_ops.close(first.broker);
    rabbit_fake_stop(f);
}
END_TEST

/* The only connection allowed is still being opened (the node answers
 * channel.open and confirm.select 0.75 T late each: together more than
 * the opening publish's timeout_ms T) when a second publish comes: it
 * fails as a connect does, ODBOX_ECONNECT naming the node (still
 * connecting to it, or its own attempt in what was left of its T once the
 * first gave up), within its T (before 4b87ab9: "1 connections with 16
 * publishes in flight each, none free", as if the node were busy). */
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
    long long t0 = now_ms();
    int rc = odbox_relay_rabbitmq_ops.publish(first.broker, &env, "{}", 2, &e);
    long long took = now_ms() - t0;
    pthread_join(th, NULL);
    char still[80], own[80];
    snprintf(still, sizeof still, "still connecting to 127.0.0.1:%d", rabbit_fake_port(f));
    snprintf(own, sizeof own, "127.0.0.1:%d vhost /: ", rabbit_fake_port(f));
    ck_assert_msg(rc == ODBOX_ECONNECT && (strstr(e.message, still) || strstr(e.message, own)) &&
                      took <= TIMEOUT_MS + 500,
                  "took %lld ms: %s: %s", took, odbox_errname(rc), e.message);
    ck_assert_msg(first.rc == ODBOX_ECONNECT && strstr(first.err.message, "ran out while connecting"),
                  "the first publish: %s: %s", odbox_errname(first.rc), first.err.message);
    ck_assert_int_eq(rabbit_fake_published(f, 0), 0);
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
    /* the lookup gets what is left of the call's timeout_ms: 500 ms, or
     * a few less on a loaded machine (499 seen under ASan in CI) */
    const char *within = strstr(e.message, "not resolved within ");
    int left = within ? atoi(within + strlen("not resolved within ")) : -1;
    ck_assert_msg(rc == ODBOX_ECONNECT && strstr(e.message, "cannot connect to " SLOW_HOST ":5672") && left > 0 &&
                      left <= 500,
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
    tcase_add_test(t, a_publish_ends_within_timeout_ms_over_its_stages);
    return t;
}
