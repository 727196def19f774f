/* odbox — a fatal producer error meeting publishes in flight, against the
 * in-process mock cluster (kafka_relay.c's g_mock): what each of them
 * returns, and that none outlasts its documented bound (timeout_ms and 2 s
 * for the report). Run by kafka-relay (tests/relay/kafka.test). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kafka_fx.h"
#include "relay_kafka_internal.h"

/* The relay's 2 s for the report, and slack for a loaded 2-core machine
 * shared with other builds. */
enum { FX_GRACE_MS = 2000, FX_SLACK_MS = 1500 };

typedef struct timed_pub {
    void *broker;
    atomic_int *started; /* counted up as the publish starts; may be NULL */
    char id[32];
    int rc;
    long ms;
    odbox_error e;
} timed_pub;

static long ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000L + (t1.tv_nsec - t0->tv_nsec) / 1000000L;
}

static void *timed_publish(void *arg)
{
    timed_pub *t = arg;
    odbox_envelope env = {.event_id = t->id, .event_type = "Fx", .model_id = t->id};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (t->started)
        atomic_fetch_add(t->started, 1);
    t->rc = odbox_relay_kafka_ops.publish(t->broker, &env, "{}", 2, &t->e);
    t->ms = ms_since(&t0);
    return NULL;
}

static void start_pub(pthread_t *th, timed_pub *t, void *broker, const char *id, atomic_int *started)
{
    memset(t, 0, sizeof *t);
    t->broker = broker;
    t->started = started;
    snprintf(t->id, sizeof t->id, "%s", id);
    KCHECK(pthread_create(th, NULL, timed_publish, t) == 0, "thread");
}

/* A producer on a topic of its own (the partitions of keys[0..n-1] led by
 * brokers leaders[0..n-1]), its metadata asked for and its connections to
 * those brokers made by a publish that succeeded to each key. */
static void *open_warm(const char *tag, int timeout_ms, char *const *keys, const int *leaders, int n, char *topic,
                       size_t cap)
{
    snprintf(topic, cap, "odbox.%s%d", tag, kfx_run_id());
    rd_kafka_mock_topic_create(g_mock, topic, KFX_PARTITIONS, 3);
    for (int i = 0; i < n; i++)
        rd_kafka_mock_partition_set_leader(g_mock, topic, kfx_java_partition(keys[i], KFX_PARTITIONS), leaders[i]);
    odbox_relay_kafka_config kc = {.bootstrap_servers = g_boot, .topic = topic, .timeout_ms = timeout_ms};
    void *b = NULL;
    odbox_error e = {0};
    KOK(odbox_relay_kafka_open(&kc, &b, &e), e);
    for (int i = 0; i < (n ? n : 1); i++) {
        pthread_t th;
        timed_pub t;
        start_pub(&th, &t, b, n ? keys[i] : "warm", NULL);
        pthread_join(th, NULL);
        KOK(t.rc, t.e);
    }
    return b;
}

static void set_rtt(int ms)
{
    for (int32_t id = 1; id <= 3; id++)
        rd_kafka_mock_broker_set_rtt(g_mock, id, ms);
}

static void set_down(int down)
{
    for (int32_t id = 1; id <= 3; id++)
        down ? rd_kafka_mock_broker_set_down(g_mock, id) : rd_kafka_mock_broker_set_up(g_mock, id);
}

/* Publishes whose messages wait in the producer's queue (the brokers
 * down) when the fatal error comes: librdkafka purges them at once, and
 * each returns ODBOX_ECONNLOST naming the fatal error, its err's code the
 * same (a purge's report error is negative, as librdkafka's local errors
 * are: once read as "no report yet", which said ODBOX_ETIMEDOUT). */
static void check_fatal_queued(void)
{
    enum { N = 4, TIMEOUT_MS = 5000 };
    char topic[128];
    void *b = open_warm("FatalQueued", TIMEOUT_MS, NULL, NULL, 0, topic, sizeof topic);
    set_down(1);
    pthread_t th[N];
    timed_pub t[N];
    atomic_int started = 0;
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof id, "q%d", i);
        start_pub(&th[i], &t[i], b, id, &started);
    }
    for (int i = 0; i < 100 && atomic_load(&started) < N; i++)
        usleep(20000);
    usleep(1500000); /* their messages queued: they time out after 5 s */
    KCHECK(odbox_relay_kafka_test_fatal(b, "odbox-test-fatal-queued") == ODBOX_OK, "fatal not raised");
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    set_down(0);
    printf("ok fatal_queued: %d publishes queued at a fatal error: ", N);
    for (int i = 0; i < N; i++)
        printf("%s%s (err %s) in %ld ms", i ? ", " : "", odbox_errname(t[i].rc), odbox_errname(t[i].e.code), t[i].ms);
    printf("; the error: %s\n", t[0].e.message);
    for (int i = 0; i < N; i++) {
        KCHECK(t[i].rc == ODBOX_ECONNLOST && t[i].e.code == ODBOX_ECONNLOST &&
                   strstr(t[i].e.message, "fatal error") && strstr(t[i].e.message, "odbox-test-fatal-queued"),
               "fatal_queued: publish %d: %s (err %s): %s", i, odbox_errname(t[i].rc), odbox_errname(t[i].e.code),
               t[i].e.message);
        KCHECK(t[i].ms <= TIMEOUT_MS + FX_GRACE_MS + FX_SLACK_MS, "fatal_queued: publish %d took %ld ms", i, t[i].ms);
    }
    /* the replacement publishes */
    pthread_t th1;
    timed_pub after;
    start_pub(&th1, &after, b, "after", NULL);
    pthread_join(th1, NULL);
    KCHECK(after.rc == ODBOX_OK, "fatal_queued: after the replacement: %s: %s", odbox_errname(after.rc),
           after.e.message);
    odbox_relay_kafka_ops.close(b);
}

/* A fatal error while two publishes wait on messages the cluster has not
 * answered (every broker's round trip 30 s; a's and b's partitions led by
 * different brokers, so that a's request timing out does not end b's
 * connection): a's message sent at 0, b's 1 s before a's times out, the
 * fatal error 300 ms after b's. a meets the fatal error when its message
 * times out and replaces the producer, but it no longer waits for b, the
 * old producer's other publish, to end (once until b's own timeout:
 * about 2 x timeout_ms - 1 s, 11 s against a bound of 8). Each returns
 * ODBOX_ECONNLOST, naming the fatal error, within its bound. Then the
 * replacement publishes. */
static void check_fatal_bound(void)
{
    enum { TIMEOUT_MS = 6000, RTT_MS = 30000 };
    char ida[16] = "a", idb[16] = "";
    for (int i = 0; !idb[0] || kfx_java_partition(idb, KFX_PARTITIONS) == kfx_java_partition(ida, KFX_PARTITIONS);
         i++)
        snprintf(idb, sizeof idb, "b%d", i);
    char *keys[2] = {ida, idb}, topic[128];
    int leaders[2] = {1, 2};
    void *b = open_warm("FatalBound", TIMEOUT_MS, keys, leaders, 2, topic, sizeof topic);
    set_rtt(RTT_MS);
    pthread_t tha, thb;
    timed_pub a, bb;
    start_pub(&tha, &a, b, ida, NULL);
    usleep((TIMEOUT_MS - 1000) * 1000);
    start_pub(&thb, &bb, b, idb, NULL);
    usleep(300000);
    KCHECK(odbox_relay_kafka_test_fatal(b, "odbox-test-fatal-bound") == ODBOX_OK, "fatal not raised");
    pthread_join(tha, NULL);
    pthread_join(thb, NULL);
    set_rtt(0);
    printf("ok fatal_bound: timeout_ms %d, a: %s in %ld ms, b: %s in %ld ms; a's error: %s\n", TIMEOUT_MS,
           odbox_errname(a.rc), a.ms, odbox_errname(bb.rc), bb.ms, a.e.message);
    KCHECK(a.ms <= TIMEOUT_MS + FX_GRACE_MS + FX_SLACK_MS && bb.ms <= TIMEOUT_MS + FX_GRACE_MS + FX_SLACK_MS,
           "fatal_bound: a took %ld ms, b %ld ms, with timeout_ms %d (bound %d ms)", a.ms, bb.ms, TIMEOUT_MS,
           TIMEOUT_MS + FX_GRACE_MS);
    /* b may have started after the replacement on a loaded machine: then
     * it failed on the new producer, by the same round trip */
    KCHECK(a.rc == ODBOX_ECONNLOST && a.e.code == a.rc && strstr(a.e.message, "odbox-test-fatal-bound") &&
               bb.rc != ODBOX_OK && bb.e.code == bb.rc,
           "fatal_bound: a %s (err %s: %s), b %s (err %s)", odbox_errname(a.rc), odbox_errname(a.e.code),
           a.e.message, odbox_errname(bb.rc), odbox_errname(bb.e.code));
    pthread_t th1;
    timed_pub after;
    start_pub(&th1, &after, b, "after", NULL);
    pthread_join(th1, NULL);
    printf("ok fatal_bound_replaced: the new producer published in %ld ms\n", after.ms);
    KCHECK(after.rc == ODBOX_OK, "fatal_bound: after the replacement: %s: %s", odbox_errname(after.rc),
           after.e.message);
    odbox_relay_kafka_ops.close(b);
}

void kafka_fatal_checks(void)
{
    check_fatal_queued();
    check_fatal_bound();
}
