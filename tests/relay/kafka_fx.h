/* odbox — fixtures of the Kafka relay tests (tests/relay/kafka.test): the
 * outbox on PostgreSQL, a writer, rounds until drained, a consumer that
 * counts what arrived on the mock cluster, and Java's murmur2. */
#ifndef ODBOX_TEST_KAFKA_FX_H
#define ODBOX_TEST_KAFKA_FX_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include "odbox/odbox.h"

/* _exit, not exit: librdkafka's threads are still running at a failed
 * check, and exit's handlers would free what they use (under ASan a
 * use-after-free, after which the program never ended). */
#define KFAIL(...)                                                                                                 \
    do {                                                                                                           \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
        fprintf(stderr, __VA_ARGS__);                                                                              \
        fputc('\n', stderr);                                                                                       \
        fflush(NULL);                                                                                              \
        _exit(1);                                                                                                  \
    } while (0)
#define KCHECK(cond, ...)                                                                                          \
    do {                                                                                                           \
        if (!(cond))                                                                                               \
            KFAIL(__VA_ARGS__);                                                                                    \
    } while (0)
#define KOK(rc, e) KCHECK((rc) == ODBOX_OK, "%s: %s", odbox_errname(rc), (e).message)

enum { KFX_PARTITIONS = 6 };

typedef struct kfx {
    odbox_registry *reg;
    odbox_executor *exe;
    odbox_shard *shard;
    odbox_model_type model;
    char model_name[64], event_name[64];
    odbox_event_type event;
} kfx;

/* Names of a run: $KAFKA_TEST_RUN (processes of one test share it), or
 * the pid. */
int kfx_run_id(void);
/* Opens the registry on dsn (migrated) and an executor whose events are
 * of type <tag>Evt<pid> on models of type <tag>Model<pid>. */
void kfx_open(kfx *f, const char *dsn, const char *tag);
void kfx_close(kfx *f);
/* n actions, one event each: action i's model id is the UUID ending in i % keys, its
 * payload {"seq": i / keys} (so a key's seq counts up in commit order). */
void kfx_write(kfx *f, int n, int keys);
/* kfx_write's pause after each action (0: none). */
extern int g_write_pause_us;
/* Fan-out and handling rounds until a handling round reads nothing, or
 * max_ms; the handling rounds' successes. */
long kfx_drain(kfx *f, odbox_delivery *d, int max_ms);
/* Notifications of handler in state (NULL: any). */
long kfx_count(kfx *f, const char *handler, const char *state);

/* A message as the consumer saw it. */
typedef struct kmsg {
    char *key, *value, *h_id, *h_type, *h_action;
    int partition;
    long long offset;
} kmsg;

/* Every message of topic (KFX_PARTITIONS partitions) from the beginning:
 * reads until `want` arrived and nothing more came for 1 s, or max_ms. */
size_t kfx_consume(const char *bootstraps, const char *topic, size_t want, int max_ms, kmsg **out);
void kfx_msgs_free(kmsg *m, size_t n);

/* Java's org.apache.kafka.common.utils.Utils.murmur2, and the partition
 * Java's default partitioner gives a key. */
int32_t kfx_murmur2(const void *data, size_t len);
int kfx_java_partition(const char *key, int partitions);

/* ---- kafka_relay.c: a relay over a fresh kfx on the mock cluster, or
 * on the broker of $ODBOX_TEST_KAFKA_BOOTSTRAP (g_mock NULL: its topics
 * are created on first use, with the broker's default partitions) ---- */
extern rd_kafka_mock_cluster_t *g_mock;
extern const char *g_boot;

typedef struct rig {
    kfx f;
    char handler[64], topic[128];
    odbox_handlers *h;
    odbox_relay *relay;
    odbox_delivery *d;
    void *broker; /* the Kafka relay's, owned by relay */
} rig;

/* A relay on the event type of a fresh kfx, to topic odbox.<event type>
 * (created with KFX_PARTITIONS partitions), delivered by `workers` threads. */
void rig_open(rig *g, const char *tag, const char *servers, int timeout_ms, int ordered, int workers);
void rig_close(rig *g);
/* The delivery's lease_ms for rig_open (0: the default). */
extern int g_lease_ms;
/* The length of a body the relay published last. */
size_t kfx_body_len(void);
/* The most publishes at once since the last call. */
int kfx_max_inflight(void);

/* kafka_bench.c */
void kafka_bench(int n);
/* A raw librdkafka producer as the relay's (acks=all, idempotent, linger 0)
 * producing n messages of body_len bytes to topic on `threads` threads,
 * each waiting for its message's delivery report; messages/s. */
double kfx_raw_run(const char *boot, const char *topic, int n, int threads, size_t body_len);
/* kafka_fatal.c: fatal errors meeting publishes in flight (kafka-relay
 * fatal runs these alone) */
void kafka_fatal_checks(void);
/* kafka_kill.c: the processes of the kill -9 check (kafka.test) */
int kafka_kill_main(int argc, char **argv);

#endif
