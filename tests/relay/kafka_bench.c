/* odbox — the Kafka relay's benchmark (kafka-relay bench N): events/s from
 * the outbox into the mock cluster through the relay, with 1 and 4 worker
 * threads, next to a raw librdkafka producer doing the same produces
 * (acks=all, idempotent, one message per thread in flight, each waiting
 * for its delivery report) with as many threads, and their ratio. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include "kafka_fx.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct raw {
    rd_kafka_t *rk;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    volatile int stop;
    const char *topic;
    size_t body_len;
    int per_thread;
    atomic_int next; /* the keys of consecutive events, as the outbox has them */
} raw;

typedef struct raw_wait {
    int done;
    rd_kafka_resp_err_t err;
} raw_wait;

static void raw_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    raw *r = opaque;
    raw_wait *w = m->_private;
    pthread_mutex_lock(&r->mu);
    w->done = 1;
    w->err = m->err;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void *raw_poll(void *arg)
{
    raw *r = arg;
    while (!r->stop)
        rd_kafka_poll(r->rk, 100);
    return NULL;
}

static void *raw_thread(void *arg)
{
    raw *r = arg;
    char *body = malloc(r->body_len);
    memset(body, 'x', r->body_len);
    for (int i = 0; i < r->per_thread; i++) {
        char key[40];
        snprintf(key, sizeof key, "00000000-0000-4000-8000-%012d", atomic_fetch_add(&r->next, 1) % 200);
        raw_wait w = {0};
        rd_kafka_headers_t *h = rd_kafka_headers_new(3);
        rd_kafka_header_add(h, "id", -1, key, -1);
        rd_kafka_header_add(h, "type", -1, "BenchEvt", -1);
        rd_kafka_header_add(h, "action_id", -1, key, -1);
        rd_kafka_resp_err_t e = rd_kafka_producev(r->rk, RD_KAFKA_V_TOPIC(r->topic), RD_KAFKA_V_KEY(key, strlen(key)),
                                                  RD_KAFKA_V_VALUE(body, r->body_len),
                                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                                                  RD_KAFKA_V_OPAQUE(&w), RD_KAFKA_V_END);
        KCHECK(!e, "raw produce: %s", rd_kafka_err2str(e));
        pthread_mutex_lock(&r->mu);
        while (!w.done)
            pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
        KCHECK(!w.err, "raw report: %s", rd_kafka_err2str(w.err));
    }
    free(body);
    return NULL;
}

/* n messages with `threads` producing threads; messages/s. */
double kfx_raw_run(const char *boot, const char *topic, int n, int threads, size_t body_len)
{
    char errstr[512];
    raw r = {.topic = topic, .body_len = body_len, .per_thread = n / threads};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    const char *kv[] = {"bootstrap.servers", boot, "enable.idempotence", "true", "acks", "all", "partitioner",
                        "murmur2_random", "linger.ms", "0", NULL}; /* as the relay's producer */
    for (int i = 0; kv[i]; i += 2)
        KCHECK(rd_kafka_conf_set(c, kv[i], kv[i + 1], errstr, sizeof errstr) == RD_KAFKA_CONF_OK, "%s", errstr);
    rd_kafka_conf_set_opaque(c, &r);
    rd_kafka_conf_set_dr_msg_cb(c, raw_report);
    r.rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof errstr);
    KCHECK(r.rk, "%s", errstr);
    pthread_t poller, t[16];
    pthread_create(&poller, NULL, raw_poll, &r);
    double t0 = now_s();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, raw_thread, &r);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double rate = r.per_thread * threads / (now_s() - t0);
    r.stop = 1;
    pthread_join(poller, NULL);
    rd_kafka_flush(r.rk, 5000);
    rd_kafka_destroy(r.rk);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return rate;
}

/* n events written, then drained through a relay with `workers` worker
 * threads by the delivery's own jobs (fan-out and handling loops, as a
 * relay process runs them): events/s from the jobs' start to the last
 * row SUCCEEDED. */
static double relay_run(int n, int workers, size_t *body_len)
{
    char tag[32];
    snprintf(tag, sizeof tag, "Bench%d", workers);
    rig g;
    odbox_error e = {0};
    odbox_jobs *jobs = NULL;
    rig_open(&g, tag, g_boot, 10000, 0, workers);
    kfx_write(&g.f, n, 200);
    /* a fan-out row held by a killed process (kafka.test's workers) is
     * taken over in 2 s, not 60 */
    odbox_jobs_config jc = {.heartbeat_interval_ms = 500, .dead_after_ms = 2000};
    KOK(odbox_jobs_open(g.f.reg, &jc, &jobs, &e), e);
    int which = ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING;
    if (getenv("KAFKA_BENCH_PREFANOUT")) {
        odbox_delivery_round fr = {0};
        do
            KOK(odbox_delivery_fanout_round(g.d, g.f.shard, &fr, &e), e);
        while (fr.read);
        which = ODBOX_DELIVERY_HANDLING;
    }
    KOK(odbox_delivery_add_jobs(g.d, jobs, which, &e), e);
    double t0 = now_s(), t1 = t0;
    KOK(odbox_jobs_start(jobs, &e), e);
    long ok = 0;
    while (ok < n && now_s() - t0 < 300) {
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        ok = kfx_count(&g.f, g.handler, "SUCCEEDED");
        t1 = now_s();
    }
    odbox_jobs_free(&jobs);
    KCHECK(ok == n, "bench: %ld of %d SUCCEEDED", ok, n);
    *body_len = kfx_body_len();
    printf("bench: relay, %d worker(s): at most %d publishes at once\n", workers, kfx_max_inflight());
    rig_close(&g);
    return ok / (t1 - t0);
}

void kafka_bench(int n)
{
    int threads[] = {1, 4};
    for (size_t i = 0; i < 2; i++) {
        size_t body_len = 0;
        double relay = relay_run(n, threads[i], &body_len);
        char topic[64];
        snprintf(topic, sizeof topic, "bench.raw.%d", threads[i]);
        rd_kafka_mock_topic_create(g_mock, topic, KFX_PARTITIONS, 3);
        double raw_rate = kfx_raw_run(g_boot, topic, n, threads[i], body_len);
        printf("bench: %d events, %d thread(s): relay %.0f events/s (outbox to acknowledged), raw librdkafka "
               "%.0f msgs/s (%zu-byte bodies), ratio %.2f\n",
               n, threads[i], relay, raw_rate, body_len, relay / raw_rate);
    }
}
