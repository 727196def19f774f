/* odbox — the RabbitMQ relay against a real node and PostgreSQL
 * (tests/relay/rabbitmq.test runs it on a fresh database per mode):
 *
 *   rabbitmq-check MODE DSN URL N [THREADS]
 *     deliver   N events through a relay (THREADS workers): all SUCCEEDED,
 *               all arrived (by message_id), properties as documented
 *     ordered   the same with an ordered relay: per model, queue order
 *               is commit order
 *     down      the broker stopped ($RABBIT_STOP_CMD) for a few seconds:
 *               nothing SUCCEEDED, attempts bounded by the backoff; then
 *               started ($RABBIT_START_CMD): everything arrives
 *     bad       an exchange that does not exist, then an unreachable
 *               broker: clear errors, nothing SUCCEEDED
 *     sever     the node closes every connection ($RABBIT_SEVER_CMD)
 *               again and again while the relay publishes (up to 10
 *               times): publishes broken, then everything SUCCEEDED and
 *               arrived; the duplicates are counted
 *     nack      a queue that holds 5 messages and rejects the rest
 *               (x-overflow reject-publish: the broker's basic.nack):
 *               5 SUCCEEDED, the refused retried and named in the log;
 *               as the queue is emptied, everything arrives
 *     long      a routing key over AMQP's 255 bytes for one row of a round
 *               (one publish_batch on one connection): that row fails
 *               alone with ODBOX_EINVAL naming the template, the others
 *               are confirmed and arrive; then the same through a
 *               delivery: the others SUCCEEDED and arrived
 *     write     N events, 50 ms between actions (PER_ACTION each;
 *               $RABBIT_WRITE_PAUSE_MS sets another pause)
 *     work      a relay process until SIGTERM (the test kill -9s it)
 *     verify    drains what write wrote: all SUCCEEDED, all arrived
 *     bench     deliver, then a raw librabbitmq loop publishing the same
 *               messages with confirms on one connection with THREADS
 *               unconfirmed (the relay's workers share one); the ratio
 *
 *   rabbitmq-check declare|count|raw|stall|route - URL N [CONNECTIONS WINDOW]
 *     (no database: bench/relay_rabbitmq.sh)
 *     declare   the exchange and the queue, purged
 *     count     reads the queue: N distinct events with their properties
 *     raw       N messages on CONNECTIONS connections (threads), each
 *               with up to WINDOW unconfirmed; msg/s
 *     stall     a publish while the node is stopped (rabbitmq_stall.c)
 *     route     a missing exchange, an unroutable message and an empty
 *               exchange in one round: each fails its row alone
 *               (rabbitmq_route.c)
 *
 * Prints "key=value" lines the script checks; exit 0 when the mode's
 * checks hold. Every wait is bounded. */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "odbox/odbox.h"
#include "rabbitmq_check.h"
#include "rabbitmq_stall.h"

#define PER_ACTION 10
#define MODELS 8
#define RELAY "rabbit_relay"
#define DRAIN_MS 60000

static const odbox_model_type PROBE_T = {"RabbitProbe", "rabbit_probes", ODBOX_KIND_MODEL, NULL, 0};
static const odbox_event_type EV = {"RabbitSent"};
static odbox_registry *reg;
static odbox_model *models[MODELS];
const char *url;
/* the long mode: row LONG_ROW of the writer's first action has an event
 * type of 250 bytes (when long_type.name is set), so its routing key is
 * 262, over AMQP's 255 */
#define LONG_ROW 3
#define LONG_KEY_TEMPLATE "{model_type}.{model_id}"
static odbox_event_type long_type;
int failures;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int die(const char *what, int rc, const odbox_error *e)
{
    fprintf(stderr, "rabbitmq-check: %s: %s: %s\n", what, odbox_errname(rc), e->message);
    exit(1);
}

/* ---- the writer: N events, PER_ACTION per action, model k % MODELS ------------------------- */

static int perform(odbox_context *ctx, json_object *params, odbox_plan *plan, void *user, odbox_error *err)
{
    int base = *(int *)user, rc = ODBOX_OK;
    for (int k = 0; k < PER_ACTION && rc == ODBOX_OK; k++) {
        json_object *p = json_object_new_object();
        json_object_object_add(p, "seq", json_object_new_int(base + k));
        const odbox_event_type *ev = long_type.name && base + k == LONG_ROW ? &long_type : &EV;
        rc = odbox_plan_emit(plan, models[(base + k) % MODELS], ev, p, err);
        json_object_put(p);
    }
    return rc;
}

/* pause_ms between actions: a writer's run that relay processes are
 * killed during */
static void write_events(int n, int pause_ms)
{
    odbox_executor *exe = NULL;
    odbox_error e = {0};
    int rc = odbox_executor_open("com.example.rabbit", reg, NULL, &exe, &e);
    if (rc == ODBOX_OK)
        rc = odbox_executor_register_model(exe, &PROBE_T, &e);
    for (int k = 0; k < MODELS && rc == ODBOX_OK; k++)
        rc = odbox_model_new(&PROBE_T, NULL, &models[k], &e);
    int base = 0;
    const odbox_action action = {"RabbitWrite", perform, &base};
    for (; base < n && rc == ODBOX_OK; base += PER_ACTION) {
        if (pause_ms)
            usleep((useconds_t)pause_ms * 1000);
        odbox_result res = {0};
        rc = odbox_execute(exe, &action, NULL, NULL, &res, &e);
        odbox_result_clear(&res);
    }
    if (rc != ODBOX_OK)
        die("write", rc, &e);
    odbox_executor_free(&exe);
}

/* ---- the consumer: a durable queue bound to the exchange ------------------------------------ */

amqp_connection_state_t amqp_connect_or_die(void)
{
    struct amqp_connection_info ci;
    char *u = strdup(url);
    amqp_parse_url(u, &ci);
    amqp_connection_state_t st = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(st);
    struct timeval tv = {10, 0};
    if (amqp_socket_open_noblock(s, ci.host, ci.port, &tv) != AMQP_STATUS_OK ||
        amqp_login(st, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password).reply_type !=
            AMQP_RESPONSE_NORMAL) {
        fprintf(stderr, "rabbitmq-check: cannot connect to %s\n", url);
        exit(1);
    }
    amqp_channel_open(st, 1);
    if (amqp_get_rpc_reply(st).reply_type != AMQP_RESPONSE_NORMAL)
        exit(1);
    free(u);
    return st;
}

void close_amqp(amqp_connection_state_t st)
{
    amqp_channel_close(st, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(st, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(st);
}

/* the exchange and a durable queue: both survive stop_app/start_app */
void declare(void)
{
    amqp_connection_state_t st = amqp_connect_or_die();
    amqp_exchange_declare(st, 1, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes("topic"), 0, 1, 0, 0,
                          amqp_empty_table);
    amqp_queue_declare(st, 1, amqp_cstring_bytes("odbox-q"), 0, 1, 0, 0, amqp_empty_table);
    amqp_queue_purge(st, 1, amqp_cstring_bytes("odbox-q"));
    amqp_queue_bind(st, 1, amqp_cstring_bytes("odbox-q"), amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes("#"),
                    amqp_empty_table);
    if (amqp_get_rpc_reply(st).reply_type != AMQP_RESPONSE_NORMAL) {
        fprintf(stderr, "rabbitmq-check: declare failed\n");
        exit(1);
    }
    close_amqp(st);
}

typedef struct {
    int arrived, distinct, dups, props_bad, order_bad;
} tally;

/* Reads the queue until it has been empty for 2 s: counts by message_id,
 * checks properties, and per model that seq grows (first arrivals). */
static tally consume(int n)
{
    tally t = {0};
    char *seen = calloc((size_t)n, 1);
    char **ids = calloc((size_t)n, sizeof *ids);
    int last[MODELS];
    for (int k = 0; k < MODELS; k++)
        last[k] = -1;
    amqp_connection_state_t st = amqp_connect_or_die();
    amqp_basic_qos(st, 1, 0, 1000, 0);
    amqp_basic_consume(st, 1, amqp_cstring_bytes("odbox-q"), amqp_empty_bytes, 0, 1, 0, amqp_empty_table);
    for (;;) {
        amqp_envelope_t env;
        struct timeval tv = {2, 0};
        amqp_maybe_release_buffers(st);
        amqp_rpc_reply_t r = amqp_consume_message(st, &env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            break;
        t.arrived++;
        amqp_basic_properties_t *p = &env.message.properties;
        /* the body is not NUL-terminated */
        json_tokener *tok = json_tokener_new();
        json_object *body = env.message.body.bytes ? json_tokener_parse_ex(tok, env.message.body.bytes,
                                                                           (int)env.message.body.len)
                                                   : NULL;
        json_tokener_free(tok);
        json_object *payload = NULL, *seq = NULL, *id = NULL, *ty = NULL;
        int s = -1;
        if (body && json_object_object_get_ex(body, "payload", &payload) &&
            json_object_object_get_ex(payload, "seq", &seq))
            s = json_object_get_int(seq);
        json_object_object_get_ex(body, "id", &id);
        json_object_object_get_ex(body, "type", &ty);
        int props_ok = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) &&
                       p->delivery_mode == 2 && (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG) &&
                       p->content_type.len == 16 && !memcmp(p->content_type.bytes, "application/json", 16) &&
                       (p->_flags & AMQP_BASIC_TYPE_FLAG) && ty && p->type.len == strlen(json_object_get_string(ty)) &&
                       !memcmp(p->type.bytes, json_object_get_string(ty), p->type.len) && id &&
                       p->message_id.len == strlen(json_object_get_string(id)) &&
                       !memcmp(p->message_id.bytes, json_object_get_string(id), p->message_id.len);
        if (!props_ok || s < 0 || s >= n)
            t.props_bad++;
        else if (seen[s]) {
            t.dups++;
            /* a redelivery is the same event: same message_id */
            if (strncmp(ids[s], p->message_id.bytes, p->message_id.len))
                t.props_bad++;
        } else {
            seen[s] = 1;
            ids[s] = strndup(p->message_id.bytes, p->message_id.len);
            t.distinct++;
            if (s < last[s % MODELS])
                t.order_bad++;
            last[s % MODELS] = s;
        }
        json_object_put(body);
        amqp_destroy_envelope(&env);
    }
    close_amqp(st);
    for (int i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(seen);
    return t;
}

/* ---- the relay and the delivery ---------------------------------------------------------------- */

typedef struct {
    odbox_handlers *h;
    odbox_relay *relay;
    odbox_delivery *d;
    odbox_jobs *jobs;
} run;

/* RABBIT_NOOP=1: a broker that confirms at once, for the delivery's own
 * ceiling beside the benchmark */
static int noop_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    return ODBOX_OK;
}
static void noop_close(void *broker)
{
}
static const odbox_relay_ops noop_ops = {ODBOX_RELAY_OPS_VERSION, "noop", noop_publish, noop_close, NULL};

static void start(run *r, const char *exchange, const char *broker_url, int ordered, int workers)
{
    odbox_error e = {0};
    void *broker = NULL;
    odbox_relay_rabbitmq_config rc_cfg = {.url = broker_url, .exchange = exchange,
                                          .routing_key = "{model_type}.{event_type}", .timeout_ms = 3000,
                                          /* RABBIT_MAX_CONN=1: workers wait their turn for the connection */
                                          .max_connections = getenv("RABBIT_MAX_CONN") ? atoi(getenv("RABBIT_MAX_CONN")) : 0,
                                          /* RABBIT_WINDOW: unconfirmed publishes per connection */
                                          .max_in_flight_per_connection =
                                              getenv("RABBIT_WINDOW") ? atoi(getenv("RABBIT_WINDOW")) : 0};
    const char *types[] = {EV.name, long_type.name, NULL};
    odbox_relay_config cfg = {.name = RELAY, .event_types = types, .ordered = ordered};
    /* short backoff: the down mode counts attempts over a few seconds */
    odbox_delivery_config dc = {.workers = workers, .backoff_base_ms = 200, .backoff_cap_ms = 1000,
                                .fanout_poll_ms = 100, .handling_poll_ms = 100};
    /* the benchmark's knobs (docs/relays.md) */
    if (getenv("RABBIT_BATCH"))
        dc.handling_batch = atoi(getenv("RABBIT_BATCH"));
    if (getenv("RABBIT_LOOPS"))
        dc.handling_loops = atoi(getenv("RABBIT_LOOPS"));
    /* a killed relay process's claims are taken over after 3 s */
    if (getenv("RABBIT_LEASE_MS"))
        dc.lease_ms = atoi(getenv("RABBIT_LEASE_MS")), dc.handler_timeout_ms = dc.lease_ms / 2;
    odbox_jobs_config jc = {.poll_interval_ms = 100, .heartbeat_interval_ms = 200, .shutdown_max_wait_ms = 20000};
    int rc = odbox_handlers_new(&r->h, &e);
    if (rc == ODBOX_OK && !getenv("RABBIT_NOOP"))
        rc = odbox_relay_rabbitmq_open(&rc_cfg, &broker, &e);
    if (rc == ODBOX_OK)
        rc = odbox_relay_add(r->h, &cfg, getenv("RABBIT_NOOP") ? &noop_ops : &odbox_relay_rabbitmq_ops, broker,
                             &r->relay, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_open(reg, r->h, &dc, &r->d, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_open(reg, &jc, &r->jobs, &e);
    if (rc == ODBOX_OK)
        rc = odbox_delivery_add_jobs(r->d, r->jobs, ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING, &e);
    if (rc == ODBOX_OK)
        rc = odbox_jobs_start(r->jobs, &e);
    if (rc != ODBOX_OK)
        die("start the relay", rc, &e);
}

static void stop(run *r)
{
    odbox_error e = {0};
    int rc = odbox_jobs_stop(r->jobs, &e);
    if (rc != ODBOX_OK)
        die("stop", rc, &e);
    odbox_jobs_free(&r->jobs);
    odbox_delivery_free(&r->d);
    odbox_handlers_free(&r->h);
    odbox_relay_free(&r->relay);
}

/* The relay's rows SUCCEEDED (expired: EXPIRED instead). */
static int64_t rows_in(int expired)
{
    odbox_notification_filter f = {.handler = RELAY};
    odbox_notification_stats *s = NULL;
    size_t n = 0;
    odbox_error e = {0};
    int rc = odbox_notifications_count(reg, &f, &s, &n, &e);
    if (rc != ODBOX_OK)
        die("count", rc, &e);
    int64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v += expired ? s[i].expired : s[i].succeeded;
    odbox_notification_stats_free(&s, n);
    return v;
}

static int64_t succeeded(void) { return rows_in(0); }

/* waits (bounded) until n rows SUCCEEDED; the seconds it took */
static double drain(int n, double t0)
{
    double t = t0;
    while (succeeded() < n && now_s() - t0 < DRAIN_MS / 1000.0)
        usleep(20 * 1000);
    t = now_s() - t0;
    return t;
}

/* ---- the modes ------------------------------------------------------------------------------------- */

static double deliver(int n, int ordered, int workers, int fresh)
{
    if (fresh) {
        declare();
        write_events(n, 0);
    }
    run r = {0};
    double t0 = now_s();
    start(&r, EXCHANGE, url, ordered, workers);
    double secs = drain(n, t0);
    int64_t ok = succeeded(), pub = odbox_relay_published(r.relay), fl = odbox_relay_failed(r.relay);
    stop(&r);
    tally t = consume(n);
    printf("events=%d succeeded=%lld published=%lld failed=%lld arrived=%d distinct=%d duplicates=%d "
           "props_bad=%d order_bad=%d secs=%.2f rate=%.0f\n",
           n, (long long)ok, (long long)pub, (long long)fl, t.arrived, t.distinct, t.dups, t.props_bad, t.order_bad,
           secs, n / secs);
    CHECK(ok == n, "%lld of %d rows SUCCEEDED", (long long)ok, n);
    CHECK(t.distinct == n, "%d of %d events arrived", t.distinct, n);
    CHECK(t.props_bad == 0, "%d messages with wrong properties or body", t.props_bad);
    CHECK(!ordered || t.order_bad == 0, "%d messages out of their model's order", t.order_bad);
    return n / secs;
}

static void down(int n)
{
    declare();
    write_events(n, 0);
    if (system(getenv("RABBIT_STOP_CMD")) != 0)
        CHECK(0, "RABBIT_STOP_CMD failed");
    run r = {0};
    start(&r, EXCHANGE, url, 0, 4);
    sleep(5);
    int64_t during = succeeded(), attempts = odbox_relay_failed(r.relay);
    printf("down: succeeded=%lld attempts=%lld per_row=%.1f over 5 s\n", (long long)during, (long long)attempts,
           (double)attempts / n);
    CHECK(during == 0, "%lld rows SUCCEEDED while the broker was down", (long long)during);
    /* 200 ms doubling to 1 s: about 7 attempts per row in 5 s; a busy loop makes thousands */
    CHECK(attempts > 0 && attempts <= 12 * n, "%lld attempts for %d rows in 5 s", (long long)attempts, n);
    if (system(getenv("RABBIT_START_CMD")) != 0)
        CHECK(0, "RABBIT_START_CMD failed");
    double secs = drain(n, now_s());
    int64_t ok = succeeded();
    stop(&r);
    tally t = consume(n);
    printf("up: succeeded=%lld arrived=%d distinct=%d duplicates=%d secs=%.2f\n", (long long)ok, t.arrived,
           t.distinct, t.dups, secs);
    CHECK(ok == n && t.distinct == n, "after the restart: %lld SUCCEEDED, %d of %d arrived", (long long)ok,
          t.distinct, n);
}

static void sever(int n)
{
    declare();
    write_events(n, 0);
    run r = {0};
    double t0 = now_s();
    start(&r, EXCHANGE, url, 0, 4);
    /* the first sever once rows are being confirmed: a close of every
     * connection (rabbitmqctl: about a second) before the relay connected
     * breaks nothing, and one relay drained 10,000 in 1.7 s */
    while (succeeded() == 0 && now_s() - t0 < DRAIN_MS / 1000.0)
        usleep(10 * 1000);
    int severed = 0, tries = 0;
    for (; tries < 10 && succeeded() < n; tries++)
        severed += system(getenv("RABBIT_SEVER_CMD")) == 0;
    int64_t during = succeeded();
    double secs = drain(n, t0);
    int64_t ok = succeeded(), fl = odbox_relay_failed(r.relay);
    stop(&r);
    tally t = consume(n);
    printf("sever: severed=%d succeeded_meanwhile=%lld succeeded=%lld failed=%lld arrived=%d distinct=%d "
           "duplicates=%d secs=%.2f\n",
           severed, (long long)during, (long long)ok, (long long)fl, t.arrived, t.distinct, t.dups, secs);
    CHECK(severed == tries && severed > 0, "RABBIT_SEVER_CMD failed %d times of %d", tries - severed, tries);
    CHECK(fl > 0, "no publish was broken: the relay was done before the first sever");
    CHECK(ok == n && t.distinct == n, "severed: %lld SUCCEEDED, %d of %d arrived", (long long)ok, t.distinct, n);
    CHECK(t.props_bad == 0, "%d messages with wrong properties or body", t.props_bad);
}

static volatile sig_atomic_t stopping;
static void on_term(int sig)
{
    (void)sig, stopping = 1;
}

/* a relay process until SIGTERM (the test kill -9s it) */
static void work(void)
{
    signal(SIGTERM, on_term);
    run r = {0};
    start(&r, EXCHANGE, url, 0, 4);
    while (!stopping)
        usleep(50 * 1000);
    stop(&r);
}

static char last_log[1024];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void log_line(void *ud, odbox_log_level level, const char *message)
{
    pthread_mutex_lock(&log_mu);
    if (strstr(message, "rabbitmq"))
        snprintf(last_log, sizeof last_log, "%s", message);
    pthread_mutex_unlock(&log_mu);
}

static void bad_one(const char *what, const char *exchange, const char *broker_url, const char *want)
{
    last_log[0] = 0;
    run r = {0};
    start(&r, exchange, broker_url, 0, 2);
    sleep(3);
    int64_t ok = succeeded(), fl = odbox_relay_failed(r.relay);
    stop(&r);
    printf("%s: succeeded=%lld failed=%lld log=%s\n", what, (long long)ok, (long long)fl, last_log);
    CHECK(ok == 0 && fl > 1, "%s: %lld SUCCEEDED, %lld failed publishes", what, (long long)ok, (long long)fl);
    CHECK(strstr(last_log, want), "%s: the log lacks '%s'", what, want);
}

/* Empties the full queue until n rows SUCCEEDED (bounded): the refused
 * ones are retried after their backoff and fit as room is made. */
static double empty_full_queue(amqp_connection_state_t st, int n)
{
    double t0 = now_s();
    while (succeeded() < n && now_s() - t0 < DRAIN_MS / 1000.0) {
        amqp_queue_purge(st, 1, amqp_cstring_bytes("odbox-q-full"));
        usleep(100 * 1000);
    }
    return now_s() - t0;
}

static void nack(int n)
{
    odbox_log_set(log_line, NULL, ODBOX_LOG_WARN);
    write_events(n, 0);
    amqp_connection_state_t st = amqp_connect_or_die();
    amqp_table_entry_t args[2];
    args[0].key = amqp_cstring_bytes("x-max-length");
    args[0].value.kind = AMQP_FIELD_KIND_I32;
    args[0].value.value.i32 = 5;
    args[1].key = amqp_cstring_bytes("x-overflow");
    args[1].value.kind = AMQP_FIELD_KIND_UTF8;
    args[1].value.value.bytes = amqp_cstring_bytes("reject-publish");
    amqp_table_t table = {2, args};
    amqp_exchange_declare(st, 1, amqp_cstring_bytes(EXCHANGE "-full"), amqp_cstring_bytes("topic"), 0, 0, 0, 0,
                          amqp_empty_table);
    amqp_queue_delete(st, 1, amqp_cstring_bytes("odbox-q-full"), 0, 0);
    amqp_queue_declare(st, 1, amqp_cstring_bytes("odbox-q-full"), 0, 0, 0, 0, table);
    amqp_queue_bind(st, 1, amqp_cstring_bytes("odbox-q-full"), amqp_cstring_bytes(EXCHANGE "-full"),
                    amqp_cstring_bytes("#"), amqp_empty_table);
    if (amqp_get_rpc_reply(st).reply_type != AMQP_RESPONSE_NORMAL) {
        fprintf(stderr, "rabbitmq-check: declaring the full queue failed\n");
        exit(1);
    }
    last_log[0] = 0;
    run r = {0};
    start(&r, EXCHANGE "-full", url, 0, 4);
    sleep(3);
    int64_t full = succeeded(), refused = odbox_relay_failed(r.relay);
    pthread_mutex_lock(&log_mu);
    printf("nack: succeeded=%lld refused=%lld log=%s\n", (long long)full, (long long)refused, last_log);
    CHECK(strstr(last_log, "basic.nack"), "nack: the log lacks basic.nack");
    pthread_mutex_unlock(&log_mu);
    CHECK(full == 5, "nack: %lld rows SUCCEEDED with room for 5", (long long)full);
    CHECK(refused >= n - 5, "nack: %lld refused publishes for %d rows", (long long)refused, n - 5);
    double secs = empty_full_queue(st, n);
    int64_t ok = succeeded();
    stop(&r);
    printf("emptied: succeeded=%lld secs=%.1f\n", (long long)ok, secs);
    CHECK(ok == n, "nack: %lld of %d SUCCEEDED once the queue had room", (long long)ok, n);
    amqp_queue_delete(st, 1, amqp_cstring_bytes("odbox-q-full"), 0, 0);
    close_amqp(st);
}

static void bad(int n)
{
    odbox_log_set(log_line, NULL, ODBOX_LOG_WARN);
    declare();
    write_events(n, 0);
    /* the exchange's check (a passive exchange.declare) fails its rows,
     * and the next round's asks again: failed > 1 */
    bad_one("bad_exchange", "no-such-exchange", url, "NOT_FOUND");
    bad_one("unreachable", EXCHANGE, "amqp://guest:guest@127.0.0.1:1/", "cannot connect");
}

/* One round straight through the relay's publish_batch, LONG_ROW's
 * routing key 262 bytes, every row on one connection: that row fails
 * alone (before, librabbitmq's refusal broke the connection and failed
 * every other row with it). */
static void long_key_batch(int n)
{
    odbox_error e = {0};
    void *b = NULL;
    odbox_relay_rabbitmq_config cfg = {.url = url, .exchange = EXCHANGE, .routing_key = LONG_KEY_TEMPLATE,
                                       .timeout_ms = 3000, .max_connections = 1};
    int rc = odbox_relay_rabbitmq_open(&cfg, &b, &e);
    if (rc != ODBOX_OK)
        die("long: open", rc, &e);
    char long_id[251];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0;
    odbox_envelope *envs = calloc((size_t)n, sizeof *envs);
    const odbox_envelope **ep = calloc((size_t)n, sizeof *ep);
    char **bodies = calloc((size_t)n, sizeof *bodies), (*ids)[40] = calloc((size_t)n, sizeof *ids);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int *rcs = calloc((size_t)n, sizeof *rcs);
    odbox_error *errs = calloc((size_t)n, sizeof *errs);
    if (!envs || !ep || !bodies || !ids || !lens || !rcs || !errs)
        exit(1);
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "long-%d-%d", (int)getpid(), i);
        envs[i] = (odbox_envelope){.event_id = ids[i], .event_type = EV.name, .model_type = PROBE_T.name,
                                   .model_id = i == LONG_ROW ? long_id : "m"};
        ep[i] = &envs[i];
        json_object *o = json_object_new_object(), *p = json_object_new_object();
        json_object_object_add(p, "seq", json_object_new_int(i));
        json_object_object_add(o, "id", json_object_new_string(ids[i]));
        json_object_object_add(o, "type", json_object_new_string(EV.name));
        json_object_object_add(o, "payload", p);
        bodies[i] = strdup(json_object_to_json_string(o));
        lens[i] = strlen(bodies[i]);
        json_object_put(o);
    }
    odbox_relay_rabbitmq_ops.publish_batch(b, (size_t)n, ep, (const char *const *)bodies, lens, rcs, errs);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        if (i == LONG_ROW)
            continue;
        ok += rcs[i] == ODBOX_OK;
        CHECK(rcs[i] == ODBOX_OK, "long: row %d beside the long one: %s: %s", i, odbox_errname(rcs[i]),
              errs[i].message);
    }
    printf("long_batch: rows=%d confirmed=%d long_row=%s: %s\n", n, ok, odbox_errname(rcs[LONG_ROW]),
           errs[LONG_ROW].message);
    const char *why = errs[LONG_ROW].message;
    CHECK(rcs[LONG_ROW] == ODBOX_EDISCARD && strstr(why, "routing_key template '" LONG_KEY_TEMPLATE "'") &&
              strstr(why, "limit of 255"),
          "long: the long row: %s: %s", odbox_errname(rcs[LONG_ROW]), errs[LONG_ROW].message);
    odbox_relay_rabbitmq_ops.close(b);
    for (int i = 0; i < n; i++)
        free(bodies[i]);
    free(envs), free(ep), free(bodies), free(ids), free(lens), free(rcs), free(errs);
}

/* long_key_batch, then rows of one commit through a delivery, one with an
 * event type that makes the relay's routing key too long: that row is
 * discarded at its first publish (EXPIRED, no retry can make the key
 * shorter), naming the template in the log; the others SUCCEEDED and
 * arrived. */
static void long_key(int n)
{
    odbox_log_set(log_line, NULL, ODBOX_LOG_WARN);
    declare();
    long_key_batch(n);
    tally t = consume(n);
    printf("long_batch: arrived=%d distinct=%d props_bad=%d\n", t.arrived, t.distinct, t.props_bad);
    CHECK(t.distinct == n - 1 && t.props_bad == 0, "long: %d of %d rows arrived, %d bad", t.distinct, n - 1,
          t.props_bad);
    char name[251];
    snprintf(name, sizeof name, "%s", EV.name);
    memset(name + strlen(EV.name), 'x', sizeof name - 1 - strlen(EV.name));
    name[sizeof name - 1] = 0;
    long_type.name = name;
    write_events(PER_ACTION, 0);
    last_log[0] = 0;
    run r = {0};
    start(&r, EXCHANGE, url, 0, 4);
    double t0 = now_s();
    while (succeeded() < PER_ACTION - 1 && now_s() - t0 < 20)
        usleep(20 * 1000);
    sleep(1); /* the long row's retries after their 200 ms backoff */
    int64_t ok = succeeded(), gone = rows_in(1), fl = odbox_relay_failed(r.relay), pub = odbox_relay_published(r.relay);
    stop(&r);
    pthread_mutex_lock(&log_mu);
    printf("long: succeeded=%lld published=%lld failed=%lld log=%s\n", (long long)ok, (long long)pub, (long long)fl,
           last_log);
    CHECK(strstr(last_log, "routing_key template '{model_type}.{event_type}' gives 262 bytes"),
          "long: the log lacks the template");
    pthread_mutex_unlock(&log_mu);
    CHECK(ok == PER_ACTION - 1 && pub == PER_ACTION - 1 && fl == 1 && gone == 1,
          "long: %lld of %d rows SUCCEEDED, %lld published, %lld failed publishes (want 1), %lld EXPIRED (want 1)",
          (long long)ok, PER_ACTION - 1, (long long)pub, (long long)fl, (long long)gone);
    t = consume(PER_ACTION);
    printf("long: arrived=%d distinct=%d props_bad=%d\n", t.arrived, t.distinct, t.props_bad);
    CHECK(t.distinct == PER_ACTION - 1 && t.props_bad == 0, "long: %d of %d rows arrived, %d bad", t.distinct,
          PER_ACTION - 1, t.props_bad);
    long_type.name = NULL;
}

/* ---- the raw publisher: the same messages with confirms, a window per connection ----------- */

typedef struct {
    int n, window;
} raw_arg;

/* Reads confirms until fewer than window are unconfirmed (or none with
 * window 0); *acked counts the tags settled so far (acks come in order). */
static void raw_confirms(amqp_connection_state_t st, int sent, int *acked, int window)
{
    while (sent - *acked > window) {
        amqp_frame_t f;
        struct timeval tv = {10, 0};
        if (amqp_simple_wait_frame_noblock(st, &f, &tv) != AMQP_STATUS_OK) {
            fprintf(stderr, "rabbitmq-check: raw: no confirm\n");
            exit(1);
        }
        if (f.frame_type == AMQP_FRAME_METHOD && f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = f.payload.method.decoded;
            *acked = a->multiple ? (int)a->delivery_tag : *acked + 1;
        }
        amqp_maybe_release_buffers(st);
    }
}

/* One connection: publishes while fewer than window are unconfirmed, as
 * window relay workers sharing a connection do. */
static void *raw_thread(void *p)
{
    raw_arg *a = p;
    amqp_connection_state_t st = amqp_connect_or_die();
    amqp_confirm_select(st, 1);
    amqp_get_rpc_reply(st);
    char body[512];
    int acked = 0;
    for (int i = 0; i < a->n; i++) {
        char id[40];
        snprintf(id, sizeof id, "raw-%p-%d", (void *)a, i);
        int len = snprintf(body, sizeof body,
                           "{\"schema_version\":1,\"id\":\"%s\",\"aggregatetype\":\"RabbitProbe\",\"aggregateid\":"
                           "\"00000000-0000-0000-0000-000000000000\",\"type\":\"RabbitSent\",\"payload\":{\"seq\":%d},"
                           "\"namespace\":\"com.example.rabbit\",\"action_id\":\"00000000-0000-0000-0000-0000000000"
                           "00\",\"action_name\":\"RabbitWrite\",\"event_date\":\"2026-01-01T00:00:00.000000Z\"}",
                           id, i);
        amqp_basic_properties_t props = {._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                                                   AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG,
                                         .content_type = amqp_cstring_bytes("application/json"),
                                         .delivery_mode = 2,
                                         .message_id = amqp_cstring_bytes(id),
                                         .type = amqp_cstring_bytes("RabbitSent")};
        amqp_basic_publish(st, 1, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes("RabbitProbe.RabbitSent"), 0, 0,
                           &props, (amqp_bytes_t){(size_t)len, body});
        raw_confirms(st, i + 1, &acked, a->window - 1);
    }
    raw_confirms(st, a->n, &acked, 0);
    close_amqp(st);
    return NULL;
}

/* n messages on conns connections, window unconfirmed on each: msg/s */
static double raw(int n, int conns, int window)
{
    declare();
    pthread_t th[16];
    raw_arg a[16];
    double t0 = now_s();
    for (int i = 0; i < conns; i++) {
        a[i] = (raw_arg){n / conns, window};
        pthread_create(&th[i], NULL, raw_thread, &a[i]);
    }
    for (int i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    double secs = now_s() - t0;
    tally t = consume(0);
    (void)t;
    return n / conns * conns / secs;
}

/* The modes that need no database (bench/relay_rabbitmq.sh): the
 * exchange and queue declared and purged; the queue counted; the raw
 * publisher. */
static int broker_only(const char *mode, int n, int conns, int window)
{
    if (!strcmp(mode, "declare"))
        declare();
    else if (!strcmp(mode, "count")) {
        tally t = consume(n);
        printf("arrived=%d distinct=%d duplicates=%d props_bad=%d\n", t.arrived, t.distinct, t.dups, t.props_bad);
        return t.distinct == n && t.props_bad == 0 ? 0 : 1;
    } else if (!strcmp(mode, "stall")) {
        declare(); /* its messages go to the queue */
        return rabbit_stall(url);
    } else if (!strcmp(mode, "route"))
        return rabbit_route();
    else if (!strcmp(mode, "raw"))
        printf("raw: %d messages, %d connections, %d unconfirmed each: %.0f msg/s\n", n, conns, window,
               raw(n, conns, window));
    else
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: rabbitmq-check deliver|ordered|down|bad|nack|long|sever|bench DSN URL N [THREADS]\n"
                        "       rabbitmq-check declare|count|raw|stall|route - URL N [CONNECTIONS WINDOW]\n");
        return 2;
    }
    url = argv[3];
    int n = atoi(argv[4]), threads = argc > 5 ? atoi(argv[5]) : 4;
    threads = threads < 1 ? 1 : threads > 16 ? 16 : threads;
    int rc0 = broker_only(argv[1], n, threads, argc > 6 ? atoi(argv[6]) : 1);
    if (rc0 >= 0)
        return rc0;
    n = n < PER_ACTION ? PER_ACTION : n / PER_ACTION * PER_ACTION;
    odbox_error e = {0};
    int rc = odbox_registry_open_dsn(argv[2], &reg, &e);
    odbox_migrate_options mo = {0};
    if (rc == ODBOX_OK)
        rc = odbox_migrate_registry(reg, &mo, &e);
    if (rc != ODBOX_OK)
        die("registry", rc, &e);
    if (!strcmp(argv[1], "deliver"))
        deliver(n, 0, threads, 1);
    else if (!strcmp(argv[1], "ordered"))
        deliver(n, 1, threads, 1);
    else if (!strcmp(argv[1], "down"))
        down(n);
    else if (!strcmp(argv[1], "write")) { /* N events, 50 ms between actions */
        declare();
        write_events(n, getenv("RABBIT_WRITE_PAUSE_MS") ? atoi(getenv("RABBIT_WRITE_PAUSE_MS")) : 50);
    } else if (!strcmp(argv[1], "work"))
        work();
    else if (!strcmp(argv[1], "verify")) /* drains what write wrote, counts what arrived */
        deliver(n, 0, threads, 0);
    else if (!strcmp(argv[1], "bad"))
        bad(n);
    else if (!strcmp(argv[1], "nack"))
        nack(n);
    else if (!strcmp(argv[1], "long"))
        long_key(n);
    else if (!strcmp(argv[1], "sever"))
        sever(n);
    else if (!strcmp(argv[1], "bench")) {
        double relay = deliver(n, 0, threads, 1);
        double rawr = raw(n, 1, threads); /* the relay's workers share one connection */
        printf("bench threads=%d relay=%.0f/s raw=%.0f/s ratio=%.2f\n", threads, relay, rawr, relay / rawr);
    } else {
        fprintf(stderr, "rabbitmq-check: unknown mode %s\n", argv[1]);
        return 2;
    }
    for (int k = 0; k < MODELS; k++)
        odbox_model_free(&models[k]);
    odbox_registry_free(&reg);
    return failures ? 1 : 0;
}
