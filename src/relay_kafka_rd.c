/* odbox — the Kafka relay's producer (built with librdkafka; see
 * src/relay_kafka.c for the settings and odbox/relay_kafka.h). */
#include "config.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <librdkafka/rdkafka.h>
#include "internal.h"
#include "odbox/relay_kafka.h"
#include "relay_kafka_internal.h"

enum { KAFKA_DEFAULT_TIMEOUT_MS = 10000, KAFKA_REPORT_GRACE_MS = 2000, KAFKA_POLL_MS = 100, KAFKA_WARM_MAX = 256,
       KAFKA_TEARDOWN_MS = 5000 };
/* How a publish's message failed (report_failed): apart from the report's
 * error code, as librdkafka's own codes are negative and -1 is one. */
typedef enum { KAFKA_REPORTED, KAFKA_NO_REPORT, KAFKA_NOT_PRODUCED } kafka_outcome;
/* kafka_producer.stop: its poll thread polls, returns (the closer tears
 * the producer down), or tears it down itself (a replaced producer). */
enum { KAFKA_RUN, KAFKA_STOP, KAFKA_RETIRE };

/* One librdkafka producer and its poll thread. A fatal error (idempotence
 * broken) makes every later produce fail, so the broker replaces it. */
typedef struct kafka_producer {
    rd_kafka_t *rk;
    pthread_t poller;
    atomic_int stop;
    atomic_int gone; /* KAFKA_RETIRE: torn down, its poll thread ending */
    int refs;        /* under the broker's mu: the broker's while it is p, and each publish's */
    struct kafka_producer *next; /* in the broker's retired list */
    pthread_mutex_t warm_mu;     /* guards warm */
    char *warm[KAFKA_WARM_MAX];  /* topics whose metadata it has */
    size_t nwarm;
} kafka_producer;

typedef struct kafka_broker {
    kafka_producer *p;     /* NULL when a replacement failed to start one */
    rd_kafka_conf_t *conf; /* each producer gets a copy */
    char *topic;           /* the template */
    char *servers;         /* for error messages */
    int timeout_ms;
    pthread_mutex_t mu;  /* guards the waiters, last_error, p, the producers' refs, replacing, retired */
    pthread_cond_t cv;   /* a delivery report arrived */
    pthread_cond_t gate; /* a replacement ended */
    int replacing;
    kafka_producer *retired; /* replaced, unused: torn down by their poll threads, joined by reap */
    char last_error[256];
} kafka_broker;

/* One publish's delivery report. Both the publisher and the report hold it
 * (refs), since a publish that timed out leaves before its report comes. */
typedef struct kafka_waiter {
    int refs, done;
    rd_kafka_resp_err_t err;
} kafka_waiter;

static void waiter_release(kafka_waiter *w) /* under mu */
{
    if (--w->refs == 0)
        free(w);
}

/* librdkafka's handles destroyed (a broker handle it retires, a producer
 * odbox replaces or closes) and messages purged with them: not the
 * cluster's answer, and kept as the last error they hid the one that was
 * (CI: rows timed out behind refused ones said "last error: _DESTROY"). */
static int our_own_doing(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR__DESTROY || e == RD_KAFKA_RESP_ERR__PURGE_QUEUE ||
           e == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
}

/* A message the cluster refused: its error is kept (under mu) for the
 * message of a publish that then times out, which librdkafka may report
 * for rows behind a refused one (6 of 10 in one CI run under ASan). */
static void note_refusal(kafka_broker *b, rd_kafka_resp_err_t e)
{
    snprintf(b->last_error, sizeof b->last_error, "%s: %s", rd_kafka_err2name(e), rd_kafka_err2str(e));
}

static void on_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    kafka_broker *b = opaque;
    kafka_waiter *w = m->_private;
    if (!w)
        return;
    pthread_mutex_lock(&b->mu);
    if (m->err && m->err != RD_KAFKA_RESP_ERR__MSG_TIMED_OUT && !our_own_doing(m->err)) /* kept, as on_error's */
        note_refusal(b, m->err);
    w->done = 1;
    w->err = m->err;
    waiter_release(w);
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Connection errors are kept for the message of a publish that then times
 * out: "Local: Message timed out" alone does not say the cluster is away. */
static void on_error(rd_kafka_t *rk, int code, const char *reason, void *opaque)
{
    (void)rk;
    kafka_broker *b = opaque;
    if (our_own_doing((rd_kafka_resp_err_t)code))
        return;
    char fatal[200] = "";
    if (code == RD_KAFKA_RESP_ERR__FATAL) {
        rd_kafka_resp_err_t why = rd_kafka_fatal_error(rk, fatal, sizeof fatal);
        odbox_log(ODBOX_LOG_WARN, "kafka relay: fatal producer error %s: %s: the producer is replaced",
                  rd_kafka_err2name(why), fatal);
    }
    pthread_mutex_lock(&b->mu);
    snprintf(b->last_error, sizeof b->last_error, "%s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)code),
             fatal[0] ? fatal : reason);
    pthread_mutex_unlock(&b->mu);
}

/* The library prints nothing: librdkafka's log lines go to odbox's log. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    odbox_log(level <= 3 ? ODBOX_LOG_WARN : level <= 6 ? ODBOX_LOG_INFO : ODBOX_LOG_DEBUG, "kafka relay: %s: %s",
              fac, buf);
}

/* Destroys p's librdkafka handle, its poll thread stopped. What could not
 * be delivered is purged: its reports free the waiters. They are served by
 * a flush, which waits for every message librdkafka still counts, not one
 * poll of those queued by then: its timeout scan holds a topic's expired
 * messages in a list of its own, out of the purge's reach, until it queues
 * their reports, and destroy drops reports not served (CI under ASan: one
 * topic's 10 waiters leaked). */
static void producer_teardown(kafka_producer *p)
{
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(p->rk, KAFKA_TEARDOWN_MS);
    rd_kafka_destroy(p->rk);
    for (size_t i = 0; i < p->nwarm; i++)
        free(p->warm[i]);
    pthread_mutex_destroy(&p->warm_mu);
}

/* A replaced producer is torn down here, by its own thread: no publish
 * waits for librdkafka's destroy. */
static void *poll_loop(void *arg)
{
    kafka_producer *p = arg;
    while (atomic_load(&p->stop) == KAFKA_RUN)
        rd_kafka_poll(p->rk, KAFKA_POLL_MS);
    if (atomic_load(&p->stop) == KAFKA_RETIRE) {
        producer_teardown(p);
        atomic_store(&p->gone, 1);
    }
    return NULL;
}

static int conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, odbox_error *err)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK)
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: setting %.80s: %s", name, errstr);
    return ODBOX_OK;
}

/* name is one of n names, or "topic." and one: librdkafka applies a
 * topic setting given so to every topic, where odbox's then silently
 * overrode it. */
static int named(const char *name, const char *const *names, size_t n)
{
    const char *bare = strncmp(name, "topic.", 6) ? name : name + 6;
    for (size_t k = 0; k < n; k++)
        if (!strcmp(name, names[k]) || !strcmp(bare, names[k]))
            return 1;
    return 0;
}

/* The guarantees are odbox's: a property that would change them is
 * refused, under librdkafka's aliases too. */
static int user_properties(rd_kafka_conf_t *conf, const char *const *props, odbox_error *err)
{
    static const char *const ours[] = {"enable.idempotence", "acks", "request.required.acks", "partitioner",
                                       "bootstrap.servers", "metadata.broker.list", "message.timeout.ms",
                                       "delivery.timeout.ms"};
    /* A publish succeeds only on its message's delivery report: without the
     * reports of delivered messages every row would time out and fail while
     * Kafka stored it, and each retry would store it again. (librdkafka
     * refuses the callbacks as strings too; named here for the message.) */
    static const char *const reports[] = {"delivery.report.only.error", "dr_cb", "dr_msg_cb"};
    for (size_t i = 0; props && props[i]; i += 2) {
        if (!props[i + 1])
            return odbox_fail(err, ODBOX_EINVAL, "kafka relay: property %.80s has no value", props[i]);
        if (named(props[i], ours, sizeof ours / sizeof ours[0]))
            return odbox_fail(err, ODBOX_EINVAL,
                              "kafka relay: property %s is odbox's (bootstrap_servers, timeout_ms, "
                              "idempotence, acks=all, murmur2_random)",
                              props[i]);
        if (named(props[i], reports, sizeof reports / sizeof reports[0]))
            return odbox_fail(err, ODBOX_EINVAL,
                              "kafka relay: property %s is odbox's (a publish succeeds only on its message's "
                              "delivery report, so every message must have one)",
                              props[i]);
        int rc = conf_set(conf, props[i], props[i + 1], err);
        if (rc != ODBOX_OK)
            return rc;
    }
    return ODBOX_OK;
}

static int make_conf(kafka_broker *b, const odbox_relay_kafka_config *cfg, rd_kafka_conf_t **out, odbox_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf)
        return odbox_fail(err, ODBOX_ENOMEM, "kafka relay: out of memory");
    char timeout[24];
    snprintf(timeout, sizeof timeout, "%d", b->timeout_ms);
    /* each publish waits for its own delivery report, so a linger (the
     * default 5 ms, to fill batches) only adds to every call: none, unless
     * the properties set one */
    int rc = conf_set(conf, "linger.ms", "0", err);
    if (rc == ODBOX_OK)
        rc = user_properties(conf, cfg->properties, err);
    const char *const fixed[] = {"bootstrap.servers", cfg->bootstrap_servers, "enable.idempotence", "true",
                                 "acks", "all", "partitioner", "murmur2_random", "message.timeout.ms", timeout,
                                 NULL};
    for (size_t i = 0; rc == ODBOX_OK && fixed[i]; i += 2)
        rc = conf_set(conf, fixed[i], fixed[i + 1], err);
    if (rc != ODBOX_OK) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    rd_kafka_conf_set_opaque(conf, b);
    rd_kafka_conf_set_dr_msg_cb(conf, on_report);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    *out = conf;
    return ODBOX_OK;
}

static void broker_free(kafka_broker *b)
{
    if (b->conf)
        rd_kafka_conf_destroy(b->conf);
    free(b->topic);
    free(b->servers);
    pthread_cond_destroy(&b->gate);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static kafka_broker *broker_new(const odbox_relay_kafka_config *cfg)
{
    kafka_broker *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    odbox_cond_init_mono(&b->cv);
    odbox_cond_init_mono(&b->gate);
    pthread_mutex_init(&b->mu, NULL);
    b->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : KAFKA_DEFAULT_TIMEOUT_MS;
    b->topic = odbox_strdup(cfg->topic);
    b->servers = odbox_strdup(cfg->bootstrap_servers);
    if (!b->topic || !b->servers) {
        broker_free(b);
        return NULL;
    }
    return b;
}

static int producer_start(kafka_broker *b, kafka_producer **out, odbox_error *err)
{
    *out = NULL;
    kafka_producer *p = calloc(1, sizeof *p);
    rd_kafka_conf_t *conf = p ? rd_kafka_conf_dup(b->conf) : NULL;
    if (!conf) {
        free(p);
        return odbox_fail(err, ODBOX_ENOMEM, "kafka relay: out of memory");
    }
    char errstr[512];
    atomic_init(&p->stop, KAFKA_RUN);
    atomic_init(&p->gone, 0);
    p->refs = 1; /* the broker's */
    pthread_mutex_init(&p->warm_mu, NULL);
    if (!(p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr))) {
        rd_kafka_conf_destroy(conf);
        pthread_mutex_destroy(&p->warm_mu);
        free(p);
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: %s", errstr);
    }
    if (pthread_create(&p->poller, NULL, poll_loop, p) != 0) {
        rd_kafka_destroy(p->rk);
        pthread_mutex_destroy(&p->warm_mu);
        free(p);
        return odbox_fail(err, ODBOX_ENOMEM, "kafka relay: cannot start the poll thread");
    }
    *out = p;
    return ODBOX_OK;
}

/* Flushes for at most flush_ms, then destroys p. No publish may use p. */
static void producer_stop(kafka_producer *p, int flush_ms)
{
    if (!p)
        return;
    /* the poll thread serves the flush's reports too, so it stops after */
    if (flush_ms > 0)
        rd_kafka_flush(p->rk, flush_ms);
    atomic_store(&p->stop, KAFKA_STOP);
    pthread_join(p->poller, NULL);
    producer_teardown(p);
    free(p);
}

/* Drops a reference to p (under mu). The last, once p was replaced,
 * retires it: its poll thread tears it down. Who drops it does not wait. */
static void producer_unref(kafka_broker *b, kafka_producer *p)
{
    if (--p->refs > 0)
        return;
    p->next = b->retired;
    b->retired = p;
    atomic_store(&p->stop, KAFKA_RETIRE);
}

/* Joins and frees the retired producers torn down by now; with all, every
 * one, waiting for their teardowns (close: no publish is left to end). */
static void producers_reap(kafka_broker *b, int all)
{
    kafka_producer *done = NULL;
    pthread_mutex_lock(&b->mu);
    for (kafka_producer **pp = &b->retired; *pp;) {
        kafka_producer *p = *pp;
        if (all || atomic_load(&p->gone)) {
            *pp = p->next;
            p->next = done;
            done = p;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&b->mu);
    while (done) {
        kafka_producer *p = done;
        done = p->next;
        pthread_join(p->poller, NULL);
        free(p);
    }
}

/* Kafka's legal topic names: [A-Za-z0-9._-]{1,249}. */
static int topic_ok(const char *t)
{
    size_t n = strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");
    return n > 0 && n <= 249 && !t[n] && strcmp(t, ".") && strcmp(t, "..");
}

/* A topic template without a placeholder is every row's topic: one that
 * is not a Kafka topic name fails at open, not each row at publish. */
static int check_fixed_topic(const char *tmpl, odbox_error *err)
{
    char *fixed = NULL;
    int rc = odbox_relay_fixed_text(tmpl, &fixed, err);
    if (rc == ODBOX_OK && fixed && !topic_ok(fixed))
        rc = odbox_fail(err, ODBOX_EINVAL,
                        "kafka relay: topic '%.200s' is not a Kafka topic name ([A-Za-z0-9._-], 1 to 249 "
                        "characters, not . or ..)",
                        fixed);
    free(fixed);
    return rc;
}

int odbox_relay_kafka_open(const odbox_relay_kafka_config *cfg, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    if (!cfg || !broker)
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: config or broker is NULL");
    if (!cfg->bootstrap_servers || !*cfg->bootstrap_servers)
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: no bootstrap_servers");
    if (!cfg->topic || !*cfg->topic)
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: no topic");
    if (cfg->timeout_ms < 0)
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: timeout_ms %d is negative", cfg->timeout_ms);
    if (cfg->timeout_ms > ODBOX_RELAY_TIMEOUT_MAX_MS)
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: timeout_ms %d is over %d (an hour)", cfg->timeout_ms,
                          ODBOX_RELAY_TIMEOUT_MAX_MS);
    int rc = odbox_relay_template_check(cfg->topic, err);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "kafka relay: topic");
    if ((rc = check_fixed_topic(cfg->topic, err)) != ODBOX_OK)
        return rc;
    kafka_broker *b = broker_new(cfg);
    if (!b)
        return odbox_fail(err, ODBOX_ENOMEM, "kafka relay: out of memory");
    if ((rc = make_conf(b, cfg, &b->conf, err)) == ODBOX_OK)
        rc = producer_start(b, &b->p, err);
    if (rc != ODBOX_OK) {
        broker_free(b);
        return rc;
    }
    *broker = b;
    return ODBOX_OK;
}

/* The producer a publish uses (a reference to it) until gate_leave: waits
 * (until deadline) while a new one is being started. *p is NULL when a
 * replacement failed. */
static int gate_enter(kafka_broker *b, const struct timespec *deadline, kafka_producer **p, odbox_error *err)
{
    pthread_mutex_lock(&b->mu);
    while (b->replacing && pthread_cond_timedwait(&b->gate, &b->mu, deadline) == 0)
        ;
    int busy = b->replacing;
    *p = busy ? NULL : b->p;
    if (*p)
        (*p)->refs++;
    pthread_mutex_unlock(&b->mu);
    if (busy)
        return odbox_fail(err, ODBOX_ETIMEDOUT,
                          "kafka relay: the producer (replaced after a fatal error) was not back within %d ms",
                          b->timeout_ms + KAFKA_REPORT_GRACE_MS);
    return ODBOX_OK;
}

static void gate_leave(kafka_broker *b, kafka_producer *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&b->mu);
    producer_unref(b, p);
    pthread_mutex_unlock(&b->mu);
}

/* Replaces old (NULL: none) by a new producer at once; a no-op when
 * another thread replaced it already. The publishes still on old keep it
 * (their references) until each ends by its own deadline: waiting for
 * them would add up to a whole further timeout to this call. */
static void producer_replace(kafka_broker *b, kafka_producer *old)
{
    pthread_mutex_lock(&b->mu);
    if (b->p != old || b->replacing) {
        pthread_mutex_unlock(&b->mu);
        return;
    }
    b->replacing = 1;
    pthread_mutex_unlock(&b->mu);
    producers_reap(b, 0); /* those of earlier replacements, torn down by now */
    kafka_producer *p = NULL;
    odbox_error e = {0};
    if (producer_start(b, &p, &e) == ODBOX_OK)
        odbox_log(ODBOX_LOG_INFO, "kafka relay: a new producer for %s", b->servers);
    else
        odbox_log(ODBOX_LOG_ERROR, "kafka relay: no new producer: %s", e.message);
    pthread_mutex_lock(&b->mu);
    b->p = p;
    if (old)
        producer_unref(b, old); /* the broker's */
    b->replacing = 0;
    pthread_cond_broadcast(&b->gate);
    pthread_mutex_unlock(&b->mu);
}

static rd_kafka_headers_t *event_headers(const odbox_envelope *env)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(3);
    rd_kafka_header_add(h, "id", -1, env->event_id, -1);
    rd_kafka_header_add(h, "type", -1, env->event_type, -1);
    if (env->action_id)
        rd_kafka_header_add(h, "action_id", -1, env->action_id, -1);
    return h;
}

static int warm_known(kafka_producer *p, const char *topic) /* under warm_mu */
{
    for (size_t i = 0; i < p->nwarm; i++)
        if (!strcmp(p->warm[i], topic))
            return 1;
    return p->nwarm == KAFKA_WARM_MAX; /* full: no more warming */
}

/* librdkafka holds the first messages to a topic it has no metadata for
 * until its once-a-second topic scan (0.7-1 s on the mock cluster, where a
 * producer that had waited idle then took 1 s for its first report), so
 * the first publish to each topic of a producer asks for the topic's
 * metadata first. A failure is not remembered by the producer: the produce
 * then reports, and the next call tries again. The wait is half the
 * timeout (the other half is for the report) and never past deadline: an
 * unreachable cluster answers no metadata request, so every wait is spent
 * in full. */
static void topic_warm(kafka_producer *p, const char *topic, int timeout_ms, const struct timespec *deadline)
{
    int64_t left_ms = ((int64_t)deadline->tv_sec * 1000000 + deadline->tv_nsec / 1000 - odbox_mono_us()) / 1000;
    int wait_ms = left_ms < timeout_ms / 2 ? (int)left_ms : timeout_ms / 2;
    if (wait_ms <= 0)
        return;
    pthread_mutex_lock(&p->warm_mu);
    int known = warm_known(p, topic);
    pthread_mutex_unlock(&p->warm_mu);
    rd_kafka_topic_t *t = known ? NULL : rd_kafka_topic_new(p->rk, topic, NULL);
    if (!t)
        return;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 0, t, &md, wait_ms);
    rd_kafka_topic_destroy(t);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    rd_kafka_metadata_destroy(md);
    char *copy = odbox_strdup(topic);
    pthread_mutex_lock(&p->warm_mu);
    if (copy && !warm_known(p, topic)) {
        p->warm[p->nwarm++] = copy;
        copy = NULL;
    }
    pthread_mutex_unlock(&p->warm_mu);
    free(copy);
}

/* A round's distinct topics warmed once each, in row order: a failed warm
 * is not remembered by the producer, so without this every row of a round
 * to an unreachable cluster would wait again. Once deadline has passed
 * nothing is warmed (the rows then fail as not produced in time). */
static void topics_warm(kafka_broker *b, kafka_producer *p, size_t n, char *const *topics, const int *rcs,
                        const struct timespec *deadline)
{
    for (size_t i = 0; i < n && !odbox_mono_passed(deadline); i++) {
        if (rcs[i] != ODBOX_OK || !topics[i])
            continue;
        size_t j = 0;
        while (j < i && (rcs[j] != ODBOX_OK || !topics[j] || strcmp(topics[j], topics[i])))
            j++;
        if (j == i)
            topic_warm(p, topics[i], b->timeout_ms, deadline);
    }
}

/* Hands the message to the producer; a full local queue is waited out
 * until deadline (it drains as the cluster acknowledges). */
static rd_kafka_resp_err_t produce(rd_kafka_t *rk, const char *topic, const odbox_envelope *env, const char *body,
                                   size_t len, kafka_waiter *w, const struct timespec *deadline)
{
    for (;;) {
        rd_kafka_headers_t *h = event_headers(env);
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(env->model_id, env->model_id ? strlen(env->model_id) : 0),
            RD_KAFKA_V_VALUE((void *)body, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
            RD_KAFKA_V_OPAQUE(w), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return e;
        rd_kafka_headers_destroy(h); /* not taken on failure */
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || odbox_mono_passed(deadline))
            return e;
        odbox_sleep_ms(2);
    }
}

/* e: the report's error when how is KAFKA_REPORTED. */
static int report_failed(kafka_broker *b, const char *topic, kafka_outcome how, rd_kafka_resp_err_t e,
                         odbox_error *err)
{
    char last[256];
    pthread_mutex_lock(&b->mu);
    snprintf(last, sizeof last, "%s", b->last_error[0] ? b->last_error : "none");
    pthread_mutex_unlock(&b->mu);
    if (how == KAFKA_NOT_PRODUCED)
        return odbox_fail(err, ODBOX_ETIMEDOUT,
                          "kafka relay: topic %.200s at %.200s: not produced: the %d ms of the call passed while "
                          "asking the cluster for topic metadata (last error: %s)",
                          topic, b->servers, b->timeout_ms + KAFKA_REPORT_GRACE_MS, last);
    if (how == KAFKA_NO_REPORT || e == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
        return odbox_fail(err, ODBOX_ETIMEDOUT,
                          "kafka relay: topic %.200s at %.200s: not acknowledged within %d ms (last error: %s)",
                          topic, b->servers, b->timeout_ms, last);
    if (our_own_doing(e)) /* librdkafka's own teardown: the cluster's last word is the cause */
        return odbox_fail(err, ODBOX_ECONNLOST, "kafka relay: topic %.200s at %.200s: %s (%s; last error: %s)",
                          topic, b->servers, rd_kafka_err2str(e), rd_kafka_err2name(e), last);
    return odbox_fail(err, ODBOX_ECONNLOST, "kafka relay: topic %.200s at %.200s: %s (%s)", topic, b->servers,
                      rd_kafka_err2str(e), rd_kafka_err2name(e));
}

/* Waits for w's report until deadline: 0 when it says Kafka stored the
 * message, else report_failed's error. */
static int await_report(kafka_broker *b, kafka_waiter *w, const struct timespec *deadline, const char *topic,
                        odbox_error *err)
{
    pthread_mutex_lock(&b->mu);
    while (!w->done && pthread_cond_timedwait(&b->cv, &b->mu, deadline) == 0)
        ;
    int reported = w->done;
    rd_kafka_resp_err_t e = w->err;
    waiter_release(w);
    pthread_mutex_unlock(&b->mu);
    if (reported && e == RD_KAFKA_RESP_ERR_NO_ERROR)
        return ODBOX_OK;
    return report_failed(b, topic, reported ? KAFKA_REPORTED : KAFKA_NO_REPORT, e, err);
}

/* When p stopped on a fatal error: the publish's error names it. */
static int fatal_failed(kafka_broker *b, kafka_producer *p, const char *topic, odbox_error *err)
{
    char why[256];
    rd_kafka_resp_err_t e = rd_kafka_fatal_error(p->rk, why, sizeof why);
    if (!e)
        return 0;
    odbox_fail(err, ODBOX_ECONNLOST,
               "kafka relay: topic %.200s at %.200s: the producer stopped on a fatal error (%s: %s); it is "
               "replaced and the event retried",
               topic, b->servers, rd_kafka_err2name(e), why);
    return 1;
}

/* Produces on p (its topic warmed by the caller): *w waits for the
 * delivery report (await_report). Nothing is produced once deadline has
 * passed: its report could only say it timed out, and the message might
 * still go out after the row was failed. */
static int produce_on(kafka_broker *b, kafka_producer *p, const char *topic, const odbox_envelope *env,
                      const char *body, size_t len, const struct timespec *deadline, kafka_waiter **w,
                      odbox_error *err)
{
    if (odbox_mono_passed(deadline))
        return report_failed(b, topic, KAFKA_NOT_PRODUCED, RD_KAFKA_RESP_ERR_NO_ERROR, err);
    if (!(*w = calloc(1, sizeof **w)))
        return odbox_fail(err, ODBOX_ENOMEM, "kafka relay: out of memory");
    (*w)->refs = 2;
    rd_kafka_resp_err_t e = produce(p->rk, topic, env, body, len, *w, deadline);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        return ODBOX_OK;
    free(*w);
    *w = NULL;
    if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        pthread_mutex_lock(&b->mu);
        note_refusal(b, e);
        pthread_mutex_unlock(&b->mu);
    }
    /* a message over message.max.bytes is never taken: discarded */
    return odbox_fail(err,
                      e == RD_KAFKA_RESP_ERR__QUEUE_FULL          ? ODBOX_ETIMEDOUT
                      : e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? ODBOX_EDISCARD
                                                                  : ODBOX_EINVAL,
                      "kafka relay: topic %.200s at %.200s: produce: %s (%s)", topic, b->servers,
                      rd_kafka_err2str(e), rd_kafka_err2name(e));
}

/* The topic of env's message (*topic malloc'd), or ODBOX_EDISCARD naming
 * it: no retry makes it a topic name. */
static int topic_for(kafka_broker *b, const odbox_envelope *env, char **topic, odbox_error *err)
{
    int rc = odbox_relay_expand(b->topic, env, topic, err);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "kafka relay");
    if (topic_ok(*topic))
        return ODBOX_OK;
    return odbox_fail(err, ODBOX_EDISCARD,
                      "discarded: kafka relay: topic template '%.200s' gives '%.200s' for event %s: not a Kafka "
                      "topic name ([A-Za-z0-9._-], 1 to 249 characters)",
                      b->topic, *topic, env->event_id);
}

/* Enters b's gate for a publish until deadline: *p is the producer to
 * use, else the error (no producer, or one stopped on a fatal error).
 * *entered: gate_leave is owed. */
static int producer_for(kafka_broker *b, const struct timespec *deadline, const char *topic, kafka_producer **p,
                        int *entered, int *fatal, odbox_error *err)
{
    *entered = *fatal = 0;
    int rc = gate_enter(b, deadline, p, err);
    if (rc != ODBOX_OK)
        return rc;
    *entered = 1;
    if (!*p)
        return odbox_fail(err, ODBOX_ECONNLOST,
                          "kafka relay: no producer (its replacement after a fatal error failed, see the log): "
                          "another is started");
    return (*fatal = fatal_failed(b, *p, topic, err)) ? ODBOX_ECONNLOST : ODBOX_OK;
}

static int kafka_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    kafka_broker *b = broker;
    if (!b || !env || !env->event_id || !env->event_type || (!body && len))
        return odbox_fail(err, ODBOX_EINVAL, "kafka relay: publish: a NULL argument");
    char *topic = NULL;
    int rc = topic_for(b, env, &topic, err), entered = 0, fatal = 0;
    struct timespec deadline = odbox_mono_after(b->timeout_ms + KAFKA_REPORT_GRACE_MS);
    kafka_producer *p = NULL;
    kafka_waiter *w = NULL;
    if (rc == ODBOX_OK && (rc = producer_for(b, &deadline, topic, &p, &entered, &fatal, err)) == ODBOX_OK)
        topic_warm(p, topic, b->timeout_ms, &deadline);
    if (rc == ODBOX_OK && (rc = produce_on(b, p, topic, env, body, len, &deadline, &w, err)) == ODBOX_OK)
        rc = await_report(b, w, &deadline, topic, err);
    if (rc != ODBOX_OK && p && !fatal && (fatal = fatal_failed(b, p, topic, err)))
        rc = ODBOX_ECONNLOST; /* as its message says */
    if (entered && (fatal || !p))
        producer_replace(b, p);
    gate_leave(b, p);
    free(topic);
    return rc;
}

/* A round's rows: every message produced first, then every delivery
 * report awaited, all until one deadline. */
static void kafka_publish_batch(void *broker, size_t n, const odbox_envelope *const *envs, const char *const *bodies,
                                const size_t *lens, int *rcs, odbox_error *errs)
{
    kafka_broker *b = broker;
    char **topics = calloc(n, sizeof *topics);
    kafka_waiter **ws = calloc(n, sizeof *ws);
    odbox_error e = {0};
    int rc = topics && ws ? ODBOX_OK : odbox_fail(&e, ODBOX_ENOMEM, "kafka relay: out of memory");
    for (size_t i = 0; i < n; i++)
        rcs[i] = rc == ODBOX_OK ? topic_for(b, envs[i], &topics[i], &errs[i]) : rc;
    struct timespec deadline = odbox_mono_after(b->timeout_ms + KAFKA_REPORT_GRACE_MS);
    kafka_producer *p = NULL;
    int entered = 0, fatal = 0, failed = 0;
    if (rc == ODBOX_OK)
        rc = producer_for(b, &deadline, "(every topic of the round)", &p, &entered, &fatal, &e);
    if (rc == ODBOX_OK)
        topics_warm(b, p, n, topics, rcs, &deadline);
    for (size_t i = 0; i < n; i++)
        if (rcs[i] == ODBOX_OK && rc == ODBOX_OK)
            rcs[i] = produce_on(b, p, topics[i], envs[i], bodies[i], lens[i], &deadline, &ws[i], &errs[i]);
        else if (rcs[i] == ODBOX_OK) {
            rcs[i] = rc;
            errs[i] = e;
        }
    for (size_t i = 0; i < n; i++) {
        if (ws && ws[i])
            rcs[i] = await_report(b, ws[i], &deadline, topics[i], &errs[i]);
        failed |= rcs[i] != ODBOX_OK;
    }
    /* the rows the producer failed, not those whose topic is no topic name */
    if (failed && p && !fatal && (fatal = fatal_failed(b, p, "", &e)))
        for (size_t i = 0; i < n; i++)
            if (rcs[i] != ODBOX_OK && topics[i] && topic_ok(topics[i]) && fatal_failed(b, p, topics[i], &errs[i]))
                rcs[i] = ODBOX_ECONNLOST;
    if (entered && (fatal || !p))
        producer_replace(b, p);
    gate_leave(b, p);
    for (size_t i = 0; topics && i < n; i++)
        free(topics[i]);
    free(topics);
    free(ws);
}

static void kafka_close(void *broker)
{
    kafka_broker *b = broker;
    if (!b)
        return;
    producer_stop(b->p, b->timeout_ms);
    producers_reap(b, 1);
    broker_free(b);
}

/* Tests only (src/relay_kafka_internal.h): librdkafka's own fabricated
 * fatal error on the current producer. */
int odbox_relay_kafka_test_fatal(void *broker, const char *reason)
{
    kafka_broker *b = broker;
    struct timespec deadline = odbox_mono_after(b->timeout_ms);
    kafka_producer *p = NULL;
    if (gate_enter(b, &deadline, &p, NULL) != ODBOX_OK)
        return ODBOX_ETIMEDOUT;
    rd_kafka_resp_err_t e = p ? rd_kafka_test_fatal_error(p->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, reason)
                              : RD_KAFKA_RESP_ERR__STATE;
    gate_leave(b, p);
    return e ? ODBOX_EINVAL : ODBOX_OK;
}

int odbox_relay_kafka_test_setting(void *broker, const char *name, char *out, size_t cap)
{
    kafka_broker *b = broker;
    struct timespec deadline = odbox_mono_after(b->timeout_ms);
    kafka_producer *p = NULL;
    if (gate_enter(b, &deadline, &p, NULL) != ODBOX_OK)
        return ODBOX_ETIMEDOUT;
    size_t size = cap;
    rd_kafka_conf_res_t r = p ? rd_kafka_conf_get(rd_kafka_conf(p->rk), name, out, &size) : RD_KAFKA_CONF_INVALID;
    gate_leave(b, p);
    return r == RD_KAFKA_CONF_OK ? ODBOX_OK : ODBOX_ENOTFOUND;
}

const odbox_relay_ops odbox_relay_kafka_ops = {ODBOX_RELAY_OPS_VERSION, "kafka", kafka_publish, kafka_close,
                                               kafka_publish_batch};
