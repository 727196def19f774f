/* odbox — the Kafka relay against librdkafka's mock cluster, with the
 * outbox on PostgreSQL (ODBOX_TEST_PG_DSN). Run by tests/relay/kafka.test;
 * prints one line per check, exits 1 on the first failure. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kafka_fx.h"
#include "relay_kafka_internal.h"

static const char *g_dsn;
rd_kafka_mock_cluster_t *g_mock;
const char *g_boot;

/* ops that count publishes and keep each body by event id, around the
 * Kafka relay's */
int g_lease_ms;
static atomic_long g_attempts;
static atomic_size_t g_body_len;
static atomic_int g_inflight, g_max_inflight;

int kfx_max_inflight(void)
{
    return atomic_exchange(&g_max_inflight, 0);
}
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static json_object *g_bodies;
static char g_fatal_error[512]; /* a publish's error that names a fatal error */
static atomic_int g_refusals_named; /* failed publishes naming TOPIC_AUTHORIZATION_FAILED */
static atomic_int g_refusals_unnamed; /* failed publishes telling of it without its code */
static char g_other_error[512];     /* the last failed publish's error that does not (g_mu) */
static json_object *g_keys_in_flight; /* model_id -> publishes unconfirmed (g_mu) */
static int g_key_overlaps;            /* a publish began while its model_id had one unconfirmed (g_mu) */

/* Counts model_id in (delta 1) or out (-1) of flight. */
static void key_in_flight(const char *model_id, int delta)
{
    if (!model_id)
        return;
    json_object *v = NULL;
    int now = (json_object_object_get_ex(g_keys_in_flight, model_id, &v) ? json_object_get_int(v) : 0) + delta;
    if (delta > 0 && now > 1)
        g_key_overlaps++;
    json_object_object_add(g_keys_in_flight, model_id, json_object_new_int(now));
}

/* A failed publish's error (g_mu held): kept when it names a fatal
 * error, counted when it names the refusal, else kept as another's. */
static void note_failure(const char *message)
{
    if (strstr(message, "fatal error"))
        snprintf(g_fatal_error, sizeof g_fatal_error, "%s", message);
    if (strstr(message, "TOPIC_AUTHORIZATION_FAILED")) { /* also a timeout's "(last error: ...)" */
        atomic_fetch_add(&g_refusals_named, 1);
    } else {
        if (strstr(message, "uthorization"))
            atomic_fetch_add(&g_refusals_unnamed, 1);
        snprintf(g_other_error, sizeof g_other_error, "%s", message);
    }
}

/* Before n publishes: counted, each body kept by event id, each model_id
 * in flight, and the most publishes at once. */
static void publishes_begin(size_t n, const odbox_envelope *const *envs, const char *const *bodies, const size_t *lens)
{
    atomic_fetch_add(&g_attempts, (long)n);
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < n; i++) {
        atomic_store(&g_body_len, lens[i]);
        json_object_object_add(g_bodies, envs[i]->event_id, json_object_new_string_len(bodies[i], (int)lens[i]));
        key_in_flight(envs[i]->model_id, 1);
    }
    pthread_mutex_unlock(&g_mu);
    int c = atomic_fetch_add(&g_inflight, (int)n) + (int)n, m = atomic_load(&g_max_inflight);
    while (c > m && !atomic_compare_exchange_weak(&g_max_inflight, &m, c))
        ;
}

/* After them: out of flight, and each failure's error noted (errs may be
 * NULL: no messages). */
static void publishes_end(size_t n, const odbox_envelope *const *envs, const int *rcs, const odbox_error *errs)
{
    atomic_fetch_sub(&g_inflight, (int)n);
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < n; i++) {
        key_in_flight(envs[i]->model_id, -1);
        if (rcs[i] != ODBOX_OK && errs)
            note_failure(errs[i].message);
    }
    pthread_mutex_unlock(&g_mu);
}

static int rec_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    publishes_begin(1, &env, &body, &len);
    int rc = odbox_relay_kafka_ops.publish(broker, env, body, len, err);
    publishes_end(1, &env, &rc, err);
    return rc;
}

/* The same records for a round's rows, published through the relay's
 * batch (what `odbox relay` runs). */
static void rec_publish_batch(void *broker, size_t n, const odbox_envelope *const *envs, const char *const *bodies,
                              const size_t *lens, int *rcs, odbox_error *errs)
{
    publishes_begin(n, envs, bodies, lens);
    odbox_relay_kafka_ops.publish_batch(broker, n, envs, bodies, lens, rcs, errs);
    publishes_end(n, envs, rcs, errs);
}

static void rec_close(void *broker)
{
    odbox_relay_kafka_ops.close(broker);
}

static const odbox_relay_ops rec_ops = {ODBOX_RELAY_OPS_VERSION, "kafka", rec_publish, rec_close, rec_publish_batch};

size_t kfx_body_len(void)
{
    return atomic_load(&g_body_len);
}

void rig_open(rig *g, const char *tag, const char *servers, int timeout_ms, int ordered, int workers)
{
    odbox_error e = {0};
    kfx_open(&g->f, g_dsn, tag);
    snprintf(g->handler, sizeof g->handler, "kafka_%s_%d", tag, kfx_run_id());
    snprintf(g->topic, sizeof g->topic, "odbox.%s", g->f.event_name);
    if (g_mock)
        rd_kafka_mock_topic_create(g_mock, g->topic, KFX_PARTITIONS, 3);
    odbox_relay_kafka_config kc = {.bootstrap_servers = servers, .topic = "odbox.{event_type}",
                                   .timeout_ms = timeout_ms};
    void *broker = NULL;
    KOK(odbox_relay_kafka_open(&kc, &broker, &e), e);
    g->broker = broker;
    KOK(odbox_handlers_new(&g->h, &e), e);
    const char *types[] = {g->f.event_name, NULL};
    odbox_relay_config rc = {.name = g->handler, .event_types = types, .ordered = ordered};
    KOK(odbox_relay_add(g->h, &rc, &rec_ops, broker, &g->relay, &e), e);
    odbox_delivery_config dc = {.workers = workers, .backoff_base_ms = 1000, .backoff_cap_ms = 2000,
                                .cross_process_wakeup = -1, .handling_batch = 200, .lease_ms = g_lease_ms};
    KOK(odbox_delivery_open(g->f.reg, g->h, &dc, &g->d, &e), e);
    atomic_store(&g_attempts, 0);
}

void rig_close(rig *g)
{
    odbox_delivery_free(&g->d);
    odbox_handlers_free(&g->h);
    odbox_relay_free(&g->relay);
    kfx_close(&g->f);
}

/* Every event arrives once at least; body, key, headers and partition as
 * documented. */
static void check_all_arrive(void)
{
    enum { N = 2000, KEYS = 200 };
    rig g;
    rig_open(&g, "All", g_boot, 10000, 0, 8);
    kfx_write(&g.f, N, KEYS);
    long ok = kfx_drain(&g.f, g.d, 60000);
    KCHECK(ok == N, "succeeded %ld of %d", ok, N);
    KCHECK(kfx_count(&g.f, g.handler, "SUCCEEDED") == N, "rows SUCCEEDED");
    /* the producer that published them, as librdkafka reads its settings
     * back: idempotent, every in-sync replica's ack, Java's partitioner */
    static const char *const want[] = {"enable.idempotence", "true", "acks", "-1", "partitioner", "murmur2_random"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i += 2) {
        char v[64] = "";
        KCHECK(odbox_relay_kafka_test_setting(g.broker, want[i], v, sizeof v) == ODBOX_OK, "no setting %s", want[i]);
        KCHECK(!strcmp(v, want[i + 1]), "the producer's %s is %s, want %s", want[i], v, want[i + 1]);
    }
    kmsg *m = NULL;
    size_t n = kfx_consume(g_boot, g.topic, N, 30000, &m);
    json_object *seen = json_object_new_object();
    size_t dups = 0;
    for (size_t i = 0; i < n; i++) {
        KCHECK(m[i].h_id && m[i].h_type && m[i].h_action && m[i].key, "message %zu lacks a header or its key", i);
        if (json_object_object_get_ex(seen, m[i].h_id, NULL))
            dups++;
        json_object_object_add(seen, m[i].h_id, NULL);
        json_object *body = NULL;
        KCHECK(json_object_object_get_ex(g_bodies, m[i].h_id, &body), "an event never published: %s", m[i].h_id);
        KCHECK(!strcmp(json_object_get_string(body), m[i].value), "body differs from odbox_relay_body's");
        KCHECK(!strcmp(m[i].h_type, g.f.event_name), "type header %s", m[i].h_type);
        json_object *parsed = json_tokener_parse(m[i].value), *v = NULL;
        KCHECK(json_object_object_get_ex(parsed, "aggregateid", &v) && !strcmp(json_object_get_string(v), m[i].key),
               "key is not the model id");
        KCHECK(json_object_object_get_ex(parsed, "action_id", &v) && !strcmp(json_object_get_string(v), m[i].h_action),
               "action_id header");
        json_object_put(parsed);
        KCHECK(m[i].partition == kfx_java_partition(m[i].key, KFX_PARTITIONS), "key %s in partition %d, Java: %d",
               m[i].key, m[i].partition, kfx_java_partition(m[i].key, KFX_PARTITIONS));
    }
    size_t unique = (size_t)json_object_object_length(seen);
    printf("ok all_arrive: %d events, %zu messages, %zu distinct, %zu duplicates, %ld rows SUCCEEDED; the producer: "
           "enable.idempotence true, acks -1 (all), partitioner murmur2_random\n",
           N, n, unique, dups, ok);
    KCHECK(unique == N, "%zu of %d events arrived", unique, N);
    json_object_put(seen);
    kfx_msgs_free(m, n);
    rig_close(&g);
}

/* Java's murmur2 (Kafka's UtilsTest vectors) and its partitions of a few
 * keys, as librdkafka's murmur2_random put them. */
static void check_murmur2(void)
{
    static const struct {
        const char *s;
        int32_t h;
    } v[] = {{"21", -973932308},
             {"foobar", -790332482},
             {"a-little-bit-long-string", -985981536},
             {"a-little-bit-longer-string", -1486304829},
             {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
             {"abc", 479470107}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        KCHECK(kfx_murmur2(v[i].s, strlen(v[i].s)) == v[i].h, "murmur2(%s) = %d, Java: %d", v[i].s,
               kfx_murmur2(v[i].s, strlen(v[i].s)), v[i].h);
    printf("ok murmur2: Java's vectors; partitions of key-0..key-4 of 6:");
    for (int k = 0; k < 5; k++) {
        char key[16];
        snprintf(key, sizeof key, "key-%d", k);
        printf(" %d", kfx_java_partition(key, KFX_PARTITIONS));
    }
    printf(" (every keyed message of all_arrive checked)\n");
}

static void set_brokers(int up)
{
    for (int32_t id = 1; id <= 3; id++)
        up ? rd_kafka_mock_broker_set_up(g_mock, id) : rd_kafka_mock_broker_set_down(g_mock, id);
}

/* Brokers down: rows stay due, retried with backoff only; all arrive once
 * they are back. */
static void check_broker_down(void)
{
    enum { N = 16, WINDOW_S = 8 };
    rig g;
    rig_open(&g, "Down", g_boot, 1000, 0, 8);
    set_brokers(0);
    kfx_write(&g.f, N, 10);
    odbox_error e = {0};
    long t0 = (long)time(NULL), rounds = 0, ok = 0;
    while ((long)time(NULL) - t0 < WINDOW_S) {
        odbox_delivery_round fr = {0}, hr = {0};
        KOK(odbox_delivery_fanout_round(g.d, g.f.shard, &fr, &e), e);
        KOK(odbox_delivery_handling_round(g.d, g.f.shard, &hr, &e), e);
        ok += (long)hr.succeeded;
        rounds++;
        usleep(50000);
    }
    long attempts = atomic_load(&g_attempts);
    KCHECK(ok == 0 && kfx_count(&g.f, g.handler, "SUCCEEDED") == 0, "SUCCEEDED while the brokers were down");
    /* calls of 1-3 s, then 1 s and 2 s of backoff: at most 4 tries each
     * in WINDOW_S (a loop without backoff: one every 50 ms round) */
    KCHECK(attempts >= N && attempts <= 4 * N, "%ld publishes in %d s for %d rows", attempts, WINDOW_S, N);
    set_brokers(1);
    long after = 0, t1 = (long)time(NULL);
    while (after < N && (long)time(NULL) - t1 < 40) {
        after += kfx_drain(&g.f, g.d, 5000);
        usleep(200000);
    }
    kmsg *m = NULL;
    size_t n = kfx_consume(g_boot, g.topic, N, 20000, &m);
    json_object *seen = json_object_new_object();
    for (size_t i = 0; i < n; i++)
        json_object_object_add(seen, m[i].h_id, NULL);
    printf("ok broker_down: %ld publishes in %d s (%ld rounds) for %d rows, none SUCCEEDED; after set_up: %ld "
           "SUCCEEDED, %zu messages, %d distinct\n",
           attempts, WINDOW_S, rounds, N, after, n, json_object_object_length(seen));
    KCHECK(after == N && json_object_object_length(seen) == N, "after the brokers came back");
    json_object_put(seen);
    kfx_msgs_free(m, n);
    rig_close(&g);
}

/* An unreachable cluster and bad topics: clear errors, nothing SUCCEEDED. */
static void check_errors(void)
{
    rig g;
    rig_open(&g, "Unreach", "127.0.0.1:1", 1000, 0, 8);
    kfx_write(&g.f, 5, 5);
    odbox_error e = {0};
    odbox_delivery_round fr = {0}, hr = {0};
    KOK(odbox_delivery_fanout_round(g.d, g.f.shard, &fr, &e), e);
    KOK(odbox_delivery_handling_round(g.d, g.f.shard, &hr, &e), e);
    KCHECK(hr.failed == 5 && hr.succeeded == 0, "unreachable: %zu failed, %zu succeeded", hr.failed, hr.succeeded);
    KCHECK(kfx_count(&g.f, g.handler, "SUCCEEDED") == 0, "SUCCEEDED on an unreachable cluster");
    rig_close(&g);
    /* the error a publish gives */
    void *b = NULL;
    odbox_relay_kafka_config kc = {.bootstrap_servers = "127.0.0.1:1", .topic = "t", .timeout_ms = 1000};
    KOK(odbox_relay_kafka_open(&kc, &b, &e), e);
    odbox_envelope env = {.event_id = "e1", .event_type = "T", .model_id = "m1"};
    int rc = odbox_relay_kafka_ops.publish(b, &env, "{}", 2, &e);
    KCHECK(rc == ODBOX_ETIMEDOUT && strstr(e.message, "127.0.0.1:1") && strstr(e.message, "not acknowledged"),
           "unreachable: %s: %s", odbox_errname(rc), e.message);
    printf("ok unreachable: 5 rows FAILED, none SUCCEEDED; the error: %s\n", e.message);
    odbox_relay_kafka_ops.close(b);
    kc.topic = "odbox.{nope}";
    rc = odbox_relay_kafka_open(&kc, &b, &e);
    KCHECK(rc == ODBOX_EINVAL && strstr(e.message, "{nope}"), "bad template: %s", e.message);
    printf("ok bad_template: %s\n", e.message);
    kc.topic = "bad topic {event_type}";
    kc.bootstrap_servers = g_boot;
    KOK(odbox_relay_kafka_open(&kc, &b, &e), e);
    rc = odbox_relay_kafka_ops.publish(b, &env, "{}", 2, &e);
    KCHECK(rc == ODBOX_EDISCARD && strstr(e.message, "not a Kafka topic name"), "bad topic: %s", e.message);
    printf("ok bad_topic: %s\n", e.message);
    odbox_relay_kafka_ops.close(b);
    /* a body over message.max.bytes is never taken, whatever the cluster's
     * state: discarded */
    const char *const small[] = {"message.max.bytes", "1000", NULL};
    kc.topic = "t";
    kc.properties = small;
    KOK(odbox_relay_kafka_open(&kc, &b, &e), e);
    char big[2001];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    rc = odbox_relay_kafka_ops.publish(b, &env, big, sizeof big - 1, &e);
    KCHECK(rc == ODBOX_EDISCARD && strstr(e.message, "MSG_SIZE_TOO_LARGE"), "too large: %s: %s", odbox_errname(rc),
           e.message);
    printf("ok too_large: %s\n", e.message);
    odbox_relay_kafka_ops.close(b);
}

/* A round of many rows to a cluster that answers nothing: it ends within
 * about its timeout (each distinct topic's metadata asked for once, never
 * past the round's deadline; before, every row waited half the timeout),
 * and every row fails, naming the cluster. servers NULL: the mock
 * cluster with its brokers down. */
static void check_batch_unreachable(const char *servers)
{
    enum { N = 40, TOPICS = 4, TIMEOUT_MS = 1000, GRACE_MS = 2000, SLACK_MS = 1500 };
    odbox_error e = {0};
    void *b = NULL;
    odbox_relay_kafka_config kc = {.bootstrap_servers = servers ? servers : g_boot, .topic = "odbox.{event_type}",
                                   .timeout_ms = TIMEOUT_MS};
    KOK(odbox_relay_kafka_open(&kc, &b, &e), e);
    if (!servers)
        set_brokers(0);
    odbox_envelope envs[N];
    const odbox_envelope *ep[N];
    const char *bodies[N];
    size_t lens[N];
    int rcs[N];
    odbox_error errs[N];
    char ids[N][16], types[TOPICS][32];
    for (int t = 0; t < TOPICS; t++)
        snprintf(types[t], sizeof types[t], "BatchDown%d_%d", t, kfx_run_id());
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "e%d", i);
        envs[i] = (odbox_envelope){.event_id = ids[i], .event_type = types[i % TOPICS], .model_id = "m1"};
        ep[i] = &envs[i], bodies[i] = "{}", lens[i] = 2, rcs[i] = -1, errs[i] = (odbox_error){0};
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    odbox_relay_kafka_ops.publish_batch(b, N, ep, bodies, lens, rcs, errs);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000L + (t1.tv_nsec - t0.tv_nsec) / 1000000L;
    int failed = 0;
    for (int i = 0; i < N; i++) {
        KCHECK(rcs[i] != ODBOX_OK, "row %d SUCCEEDED on an unreachable cluster", i);
        KCHECK(strstr(errs[i].message, kc.bootstrap_servers) && strstr(errs[i].message, "odbox.BatchDown"),
               "row %d: %s", i, errs[i].message);
        failed++;
    }
    printf("ok batch_unreachable (%s): %d rows to %d topics failed in %ld ms (timeout %d ms); row 0: %s: %s\n",
           servers ? servers : "mock, brokers down", failed, TOPICS, ms, TIMEOUT_MS, odbox_errname(rcs[0]),
           errs[0].message);
    KCHECK(ms <= TIMEOUT_MS + GRACE_MS + SLACK_MS, "a round of %d rows took %ld ms with timeout_ms %d", N, ms,
           TIMEOUT_MS);
    odbox_relay_kafka_ops.close(b);
    if (!servers)
        set_brokers(1);
}

/* The subscription's last error (what odbox handlers shows), or "". */
static void last_error_of(rig *g, char *out, size_t cap)
{
    odbox_subscription *subs = NULL;
    size_t n = 0;
    odbox_error e = {0};
    KOK(odbox_subscriptions_list(g->f.reg, NULL, 0, &subs, &n, &e), e);
    out[0] = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(subs[i].name, g->handler) && subs[i].last_error)
            snprintf(out, cap, "%s", subs[i].last_error);
    odbox_subscriptions_free(&subs, n);
}

/* Produce requests the brokers refuse with a non-retriable error (every
 * one answered TOPIC_AUTHORIZATION_FAILED, as a broker whose ACLs deny
 * the relay's principal): the round's rows all fail, none SUCCEEDED, and
 * the broker's error is named in the rows' errors and in the
 * subscription's last error (odbox handlers); once the brokers take
 * produces again, rows written after succeed, and so do the failed ones
 * on their retry. A refusal comes back two ways, in the delivery report
 * or at once from the produce call (the topic's error, cached after the
 * first), and either way the row's error names its code. Some rows
 * behind a refused one may not be reported before their timeout (6 of 10
 * in one CI run under ASan): their error names the refusal as the last error. */
static void check_refused(void)
{
    enum { N = 10, REFUSALS = 200, PRODUCE_API = 0 /* ProduceRequest */ };
    pthread_mutex_lock(&g_mu); /* the checks before failed publishes too */
    g_other_error[0] = '\0';
    pthread_mutex_unlock(&g_mu);
    atomic_store(&g_refusals_named, 0);
    atomic_store(&g_refusals_unnamed, 0);
    rig g;
    rig_open(&g, "Refused", g_boot, 5000, 0, 4);
    kfx_write(&g.f, N, 5);
    rd_kafka_resp_err_t refusals[REFUSALS];
    for (int i = 0; i < REFUSALS; i++)
        refusals[i] = RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
    rd_kafka_mock_push_request_errors_array(g_mock, PRODUCE_API, REFUSALS, refusals);
    odbox_error e = {0};
    odbox_delivery_round fr = {0}, hr = {0};
    KOK(odbox_delivery_fanout_round(g.d, g.f.shard, &fr, &e), e);
    KOK(odbox_delivery_handling_round(g.d, g.f.shard, &hr, &e), e);
    char last[1024];
    last_error_of(&g, last, sizeof last);
    long refused_ok = kfx_count(&g.f, g.handler, "SUCCEEDED"), failed_rows = kfx_count(&g.f, g.handler, "FAILED");
    rd_kafka_mock_clear_request_errors(g_mock, PRODUCE_API);
    int named = atomic_load(&g_refusals_named);
    pthread_mutex_lock(&g_mu);
    printf("ok refused: %zu rows failed (%d naming the refusal; another's error: '%s'), %zu succeeded, %ld "
           "FAILED; last error: %s\n",
           hr.failed, named, g_other_error, hr.succeeded, failed_rows, last);
    pthread_mutex_unlock(&g_mu);
    KCHECK(hr.failed == N && hr.succeeded == 0 && refused_ok == 0 && failed_rows == N,
           "refused: %zu failed, %zu succeeded, %ld SUCCEEDED, %ld FAILED", hr.failed, hr.succeeded, refused_ok,
           failed_rows);
    KCHECK(named >= 1, "refused: no row's error names TOPIC_AUTHORIZATION_FAILED");
    KCHECK(atomic_load(&g_refusals_unnamed) == 0, "refused: %d rows' errors tell of the refusal without its code",
           atomic_load(&g_refusals_unnamed));
    KCHECK(strstr(last, "TOPIC_AUTHORIZATION_FAILED") && strstr(last, "Topic authorization failed") &&
               strstr(last, g.topic),
           "refused: the last error does not name the broker's refusal: '%s'", last);
    kfx_write(&g.f, N, 5);
    long ok = 0;
    for (int i = 0; i < 20 && ok < 2 * N; i++) { /* the failed rows' backoff: 1-2 s */
        ok += kfx_drain(&g.f, g.d, 5000);
        usleep(200000);
    }
    kmsg *m = NULL;
    size_t n = kfx_consume(g_boot, g.topic, 2 * N, 20000, &m);
    json_object *seen = json_object_new_object();
    for (size_t i = 0; i < n; i++)
        json_object_object_add(seen, m[i].h_id, NULL);
    printf("ok refused_then_accepted: %ld rows SUCCEEDED, %zu messages, %d distinct of %d\n", ok, n,
           json_object_object_length(seen), 2 * N);
    KCHECK(ok == 2 * N && kfx_count(&g.f, g.handler, "SUCCEEDED") == 2 * N, "after the refusals: %ld SUCCEEDED", ok);
    KCHECK(json_object_object_length(seen) == 2 * N, "after the refusals: %d of %d arrived",
           json_object_object_length(seen), 2 * N);
    json_object_put(seen);
    kfx_msgs_free(m, n);
    rig_close(&g);
}

/* An ordered relay: per key, the consumer sees seq 0, 1, 2... */
static void check_ordered(void)
{
    enum { N = 300, KEYS = 10 };
    rig g;
    rig_open(&g, "Order", g_boot, 10000, 1, 8);
    kfx_write(&g.f, N, KEYS);
    pthread_mutex_lock(&g_mu);
    g_key_overlaps = 0;
    pthread_mutex_unlock(&g_mu);
    long ok = 0;
    for (int i = 0; i < 100 && ok < N; i++)
        ok += kfx_drain(&g.f, g.d, 20000);
    KCHECK(ok == N, "ordered: %ld of %d SUCCEEDED", ok, N);
    pthread_mutex_lock(&g_mu);
    int overlaps = g_key_overlaps;
    pthread_mutex_unlock(&g_mu);
    KCHECK(overlaps == 0, "ordered: %d publishes began while their model_id had one unconfirmed", overlaps);
    kmsg *m = NULL;
    size_t n = kfx_consume(g_boot, g.topic, N, 20000, &m);
    int last[KEYS];
    memset(last, -1, sizeof last);
    size_t repeats = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *p = json_tokener_parse(m[i].value), *pl = NULL, *s = NULL;
        json_object_object_get_ex(p, "payload", &pl);
        json_object_object_get_ex(pl, "seq", &s);
        int seq = json_object_get_int(s), k = atoi(m[i].key + 24);
        json_object_put(p);
        KCHECK(seq >= last[k], "key %s: seq %d after %d", m[i].key, seq, last[k]);
        repeats += seq == last[k];
        last[k] = seq;
    }
    for (int k = 0; k < KEYS; k++)
        KCHECK(last[k] == N / KEYS - 1, "key %d ends at %d", k, last[k]);
    printf("ok ordered: %d events on %d keys, %zu messages, in order per key (%zu repeats), never two of one key "
           "unconfirmed\n",
           N, KEYS, n, repeats);
    kfx_msgs_free(m, n);
    rig_close(&g);
}

/* the log lines that name the fabricated fatal error */
static atomic_int g_fatal_logged, g_replaced;

static void fatal_log(void *ud, odbox_log_level level, const char *message)
{
    (void)ud;
    if (level >= ODBOX_LOG_WARN && strstr(message, "fatal") && strstr(message, "odbox-test-fatal"))
        atomic_fetch_add(&g_fatal_logged, 1);
    if (strstr(message, "kafka relay: a new producer"))
        atomic_fetch_add(&g_replaced, 1);
}

/* check_fatal's delivery runs at most FATAL_LOOP_S; the thread that
 * raises the fatal error waits for its publishes at most FATAL_WAIT_S (the
 * loop's bound and a margin), so that a delivery that ended with fewer
 * publishes fails the check instead of leaving pthread_join waiting for
 * ever. */
enum { FATAL_LOOP_S = 40, FATAL_WAIT_S = FATAL_LOOP_S + 20 };

typedef struct fatal_arg {
    rig *g;
    long after;
    int rc;
    int gave_up; /* FATAL_WAIT_S passed with fewer than `after` publishes */
    long seen;   /* the publishes by then */
} fatal_arg;

static void *raise_fatal(void *arg)
{
    fatal_arg *a = arg;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&g_attempts) < a->after) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= FATAL_WAIT_S) {
            a->seen = atomic_load(&g_attempts);
            a->gave_up = 1;
            return NULL;
        }
        usleep(1000);
    }
    a->rc = odbox_relay_kafka_test_fatal(a->g->broker, "odbox-test-fatal");
    return NULL;
}

/* A fatal producer error during a delivery run: the relay replaces its
 * producer, the publishes it failed are retried, every event arrives. */
static void check_fatal(void)
{
    enum { N = 1000, KEYS = 100 };
    rig g;
    rig_open(&g, "Fatal", g_boot, 10000, 0, 8);
    kfx_write(&g.f, N, KEYS);
    odbox_log_set(fatal_log, NULL, ODBOX_LOG_INFO);
    fatal_arg a = {&g, N / 3, -1, 0, 0};
    pthread_t th;
    KCHECK(pthread_create(&th, NULL, raise_fatal, &a) == 0, "thread");
    odbox_error e = {0};
    long ok = 0, failed = 0;
    for (time_t t0 = time(NULL); ok < N && time(NULL) - t0 < FATAL_LOOP_S;) {
        odbox_delivery_round fr = {0}, hr = {0};
        KOK(odbox_delivery_fanout_round(g.d, g.f.shard, &fr, &e), e);
        KOK(odbox_delivery_handling_round(g.d, g.f.shard, &hr, &e), e);
        ok += (long)hr.succeeded;
        failed += (long)hr.failed;
        if (!hr.read)
            usleep(100000); /* the failed rows' backoff (1-2 s) */
    }
    pthread_join(th, NULL);
    odbox_log_set(NULL, NULL, ODBOX_LOG_WARN);
    KCHECK(!a.gave_up,
           "fatal: the fatal error was never raised: %ld publishes in %d s (%ld rows SUCCEEDED, %ld failed), "
           "it was due after %ld",
           a.seen, FATAL_WAIT_S, ok, failed, a.after);
    KCHECK(a.rc == ODBOX_OK, "rd_kafka_test_fatal_error was not raised");
    kmsg *m = NULL;
    size_t n = kfx_consume(g_boot, g.topic, N, 30000, &m);
    json_object *seen = json_object_new_object();
    for (size_t i = 0; i < n; i++)
        json_object_object_add(seen, m[i].h_id, NULL);
    int distinct = json_object_object_length(seen);
    printf("ok fatal: a fatal error after %ld publishes; %ld publishes failed and were retried, %ld rows SUCCEEDED, "
           "%zu messages, %d distinct of %d, %d log lines name it, %d producer replaced; a publish's error: %s\n",
           a.after, failed, ok, n, distinct, N, atomic_load(&g_fatal_logged), atomic_load(&g_replaced),
           g_fatal_error);
    KCHECK(ok == N && kfx_count(&g.f, g.handler, "SUCCEEDED") == N, "%ld of %d SUCCEEDED", ok, N);
    KCHECK(distinct == N, "%d of %d events arrived", distinct, N);
    KCHECK(failed > 0, "no publish failed on the fatal error");
    KCHECK(atomic_load(&g_fatal_logged) > 0, "no log line names the fatal error");
    KCHECK(atomic_load(&g_replaced) == 1, "%d producers replaced", atomic_load(&g_replaced));
    KCHECK(strstr(g_fatal_error, "odbox-test-fatal"), "no publish failed naming the fatal error");
    json_object_put(seen);
    kfx_msgs_free(m, n);
    rig_close(&g);
}

int main(int argc, char **argv)
{
    g_dsn = getenv("ODBOX_TEST_PG_DSN");
    if (!g_dsn || !*g_dsn) {
        fprintf(stderr, "kafka-relay: ODBOX_TEST_PG_DSN is not set\n");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_bodies = json_object_new_object();
    g_keys_in_flight = json_object_new_object();
    if (argc >= 2 && strcmp(argv[1], "bench") && strcmp(argv[1], "fatal")) {
        int rc = kafka_kill_main(argc, argv);
        json_object_put(g_bodies);
        json_object_put(g_keys_in_flight);
        return rc;
    }
    /* a real broker (tests/docker): the checks that need no mock cluster */
    const char *real = getenv("ODBOX_TEST_KAFKA_BOOTSTRAP");
    if (real && *real && argc == 1) {
        g_boot = real;
        printf("kafka broker: %s (ODBOX_TEST_KAFKA_BOOTSTRAP)\n", g_boot);
        check_murmur2();
        check_batch_unreachable("127.0.0.1:1");
        check_all_arrive();
        check_ordered();
        check_fatal();
        check_errors();
        json_object_put(g_bodies);
        json_object_put(g_keys_in_flight);
        return 0;
    }
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "2", errstr, sizeof errstr);
    rd_kafka_t *host = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    KCHECK(host, "%s", errstr);
    g_mock = rd_kafka_mock_cluster_new(host, 3);
    KCHECK(g_mock, "mock cluster");
    g_boot = rd_kafka_mock_cluster_bootstraps(g_mock);
    printf("mock cluster: %s\n", g_boot);
    if (argc == 3 && !strcmp(argv[1], "bench")) {
        kafka_bench(atoi(argv[2]));
    } else if (argc == 2 && !strcmp(argv[1], "fatal")) {
        kafka_fatal_checks();
    } else {
        check_murmur2();
        check_batch_unreachable("127.0.0.1:1");
        check_batch_unreachable(NULL);
        check_all_arrive();
        check_ordered();
        check_fatal();
        kafka_fatal_checks();
        check_errors();
        check_refused();
        check_broker_down();
    }
    json_object_put(g_bodies);
    json_object_put(g_keys_in_flight);
    rd_kafka_mock_cluster_destroy(g_mock);
    rd_kafka_destroy(host);
    return 0;
}
