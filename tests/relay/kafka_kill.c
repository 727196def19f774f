/* odbox — the processes of kafka.test's kill -9 check, sharing names
 * through $KAFKA_TEST_RUN:
 *   kafka-relay mock TOPIC...     a mock cluster (3 brokers, each TOPIC
 *                                 with 6 partitions): prints its bootstrap
 *                                 servers, stays up until killed; SIGUSR1
 *                                 takes its brokers down for 3 s
 *   kafka-relay worker BOOT TAG   a relay process: the delivery's jobs
 *                                 with the relay, until killed
 *   kafka-relay write TAG N PAUSE_MS  N events (an action each,
 *                                 PAUSE_MS apart)
 *   kafka-relay count BOOT TAG N  waits until N rows SUCCEEDED (60 s),
 *                                 consumes the topic, prints what
 *                                 arrived; exit 0 when every event did
 * and for bench/relay_kafka.sh:
 *   kafka-relay raw BOOT TOPIC N THREADS BYTES  a raw producer's N messages
 *                                 (kfx_raw_run); prints msgs/s
 *   kafka-relay consume BOOT TOPIC N  the topic's messages, distinct event
 *                                 ids and bytes per body; exit 0 when N
 *                                 distinct arrived */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "kafka_fx.h"

static int mock_main(int ntopics, char **topics)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "2", errstr, sizeof errstr);
    rd_kafka_t *host = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    KCHECK(host, "%s", errstr);
    rd_kafka_mock_cluster_t *mock = rd_kafka_mock_cluster_new(host, 3);
    KCHECK(mock, "mock cluster");
    for (int i = 0; i < ntopics; i++)
        rd_kafka_mock_topic_create(mock, topics[i], KFX_PARTITIONS, 3);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    printf("%s\n", rd_kafka_mock_cluster_bootstraps(mock));
    fflush(stdout);
    for (;;) { /* the test kills it */
        int sig = 0;
        sigwait(&set, &sig);
        /* what a restart of every broker looks like to the clients; the
         * partitions' logs stay, as a restarted broker's would */
        for (int32_t id = 1; id <= 3; id++)
            rd_kafka_mock_broker_set_down(mock, id);
        fprintf(stderr, "mock: brokers down\n");
        sleep(3);
        for (int32_t id = 1; id <= 3; id++)
            rd_kafka_mock_broker_set_up(mock, id);
        fprintf(stderr, "mock: brokers up\n");
    }
}

static int worker_main(const char *boot, const char *tag)
{
    /* a killed worker's claimed rows are claimed again after the lease */
    g_lease_ms = 3000;
    rig g;
    odbox_error e = {0};
    odbox_jobs *jobs = NULL;
    rig_open(&g, tag, boot, 5000, 0, 8);
    odbox_jobs_config jc = {.poll_interval_ms = 200, .heartbeat_interval_ms = 500, .dead_after_ms = 1500};
    KOK(odbox_jobs_open(g.f.reg, &jc, &jobs, &e), e);
    KOK(odbox_delivery_add_jobs(g.d, jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e), e);
    KOK(odbox_jobs_start(jobs, &e), e);
    for (;;)
        pause(); /* the test kills it */
}

static int count_main(const char *boot, const char *tag, int n)
{
    kfx f;
    kfx_open(&f, getenv("ODBOX_TEST_PG_DSN"), tag);
    char handler[64], topic[128];
    snprintf(handler, sizeof handler, "kafka_%s_%d", tag, kfx_run_id());
    snprintf(topic, sizeof topic, "odbox.%s", f.event_name);
    long ok = 0;
    for (int i = 0; i < 600 && (ok = kfx_count(&f, handler, "SUCCEEDED")) < n; i++)
        usleep(100000);
    kmsg *m = NULL;
    size_t got = kfx_consume(boot, topic, (size_t)n, 30000, &m);
    json_object *seen = json_object_new_object();
    for (size_t i = 0; i < got; i++)
        json_object_object_add(seen, m[i].h_id, NULL);
    int distinct = json_object_object_length(seen);
    printf("kill: %d events written, %ld rows SUCCEEDED, %zu messages, %d distinct, %zu duplicates, %d lost\n", n,
           ok, got, distinct, got - (size_t)distinct, n - distinct);
    json_object_put(seen);
    kfx_msgs_free(m, got);
    kfx_close(&f);
    return ok == n && distinct == n ? 0 : 1;
}

static int consume_main(const char *boot, const char *topic, int n)
{
    kmsg *m = NULL;
    size_t got = kfx_consume(boot, topic, (size_t)n, 30000, &m), bytes = 0;
    json_object *seen = json_object_new_object();
    for (size_t i = 0; i < got; i++) {
        json_object_object_add(seen, m[i].h_id ? m[i].h_id : "", NULL);
        bytes += m[i].value ? strlen(m[i].value) : 0;
    }
    int distinct = json_object_object_length(seen);
    printf("consume: %zu messages, %d distinct, %zu bytes per body\n", got, distinct, got ? bytes / got : 0);
    json_object_put(seen);
    kfx_msgs_free(m, got);
    return distinct == n ? 0 : 1;
}

int kafka_kill_main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "raw")) {
        double rate = kfx_raw_run(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), (size_t)atol(argv[6]));
        printf("raw: %.0f msgs/s\n", rate);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "consume"))
        return consume_main(argv[2], argv[3], atoi(argv[4]));
    if (argc >= 3 && !strcmp(argv[1], "mock"))
        return mock_main(argc - 2, argv + 2);
    if (argc == 4 && !strcmp(argv[1], "worker"))
        return worker_main(argv[2], argv[3]);
    if (argc == 5 && !strcmp(argv[1], "write")) {
        kfx f;
        g_write_pause_us = atoi(argv[4]) * 1000;
        kfx_open(&f, getenv("ODBOX_TEST_PG_DSN"), argv[2]);
        kfx_write(&f, atoi(argv[3]), 100);
        kfx_close(&f);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "count"))
        return count_main(argv[2], argv[3], atoi(argv[4]));
    fprintf(stderr, "usage: kafka-relay [bench N | mock TOPIC... | worker BOOT TAG | write TAG N PAUSE_MS | count BOOT "
                    "TAG N | raw BOOT TOPIC N THREADS BYTES | consume BOOT TOPIC N]\n");
    return 2;
}
