/* odbox — the RabbitMQ relay's publishing side (librabbitmq): a pool of
 * connections, one per publish in flight (see relay_rabbitmq.c), each on
 * channel 1 in confirm mode. */
#include "config.h"
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "relay_rabbitmq_internal.h"

#define CHANNEL 1

typedef struct rconn {
    amqp_connection_state_t st;
    uint64_t tag; /* the delivery tag of the last publish on the channel */
    struct rconn *next;
} rconn;

typedef struct rbroker {
    char *url;                        /* amqp_parse_url's buffer: info points into it */
    struct amqp_connection_info info;
    char *exchange, *routing_key;
    int max, timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t freed; /* a connection went back to the pool or was closed */
    rconn *idle;
    int total; /* open connections, idle or publishing */
} rbroker;

static struct timeval ms_tv(int64_t ms)
{
    return (struct timeval){.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A failed RPC reply as text into buf. */
static const char *reply_text(amqp_rpc_reply_t r, char *buf, size_t cap)
{
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        snprintf(buf, cap, "%s", amqp_error_string2(r.library_error));
    else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *c = r.reply.decoded;
        snprintf(buf, cap, "connection closed by the server: %d %.*s", c->reply_code, (int)c->reply_text.len,
                 (char *)c->reply_text.bytes);
    } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *c = r.reply.decoded;
        snprintf(buf, cap, "channel closed by the server: %d %.*s", c->reply_code, (int)c->reply_text.len,
                 (char *)c->reply_text.bytes);
    } else
        snprintf(buf, cap, "no reply");
    return buf;
}

static void conn_close(rconn *c)
{
    if (!c)
        return;
    /* no goodbye handshake: the connection may be the broken one, and a
     * dead peer would hold us for the rpc timeout */
    amqp_destroy_connection(c->st);
    free(c);
}

static int conn_open(const rbroker *b, rconn **out, odbox_error *err)
{
    char why[256];
    rconn *c = calloc(1, sizeof *c);
    if (!c || !(c->st = amqp_new_connection())) {
        free(c);
        return odbox_fail(err, ODBOX_ENOMEM, "rabbitmq relay: out of memory");
    }
    struct timeval tv = ms_tv(b->timeout_ms);
    amqp_socket_t *sock = amqp_tcp_socket_new(c->st);
    int st = sock ? amqp_socket_open_noblock(sock, b->info.host, b->info.port, &tv) : AMQP_STATUS_NO_MEMORY;
    if (st != AMQP_STATUS_OK) {
        conn_close(c);
        return odbox_fail(err, ODBOX_ECONNECT, "rabbitmq relay: cannot connect to %.100s:%d: %s", b->info.host,
                          b->info.port, amqp_error_string2(st));
    }
    amqp_set_handshake_timeout(c->st, &tv);
    amqp_set_rpc_timeout(c->st, &tv);
    amqp_rpc_reply_t r = amqp_login(c->st, b->info.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN,
                                    b->info.user, b->info.password);
    const char *step = "login";
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        step = "channel.open";
        amqp_channel_open(c->st, CHANNEL);
        r = amqp_get_rpc_reply(c->st);
    }
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        step = "confirm.select";
        amqp_confirm_select(c->st, CHANNEL);
        r = amqp_get_rpc_reply(c->st);
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        conn_close(c);
        return odbox_fail(err, ODBOX_ECONNECT, "rabbitmq relay: %.100s:%d vhost %.80s: %s: %s", b->info.host,
                          b->info.port, b->info.vhost, step, reply_text(r, why, sizeof why));
    }
    *out = c;
    return ODBOX_OK;
}

/* An idle connection, or a new one while fewer than max are open; waits
 * (bounded by timeout_ms) for one to come back otherwise. */
static int acquire(rbroker *b, rconn **out, odbox_error *err)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += b->timeout_ms / 1000;
    until.tv_nsec += (long)(b->timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&b->mu);
    int w = 0;
    while (!b->idle && b->total >= b->max && w != ETIMEDOUT)
        w = pthread_cond_timedwait(&b->freed, &b->mu, &until);
    rconn *c = b->idle;
    int open_new = 0;
    if (c)
        b->idle = c->next;
    else if (b->total < b->max)
        b->total++, open_new = 1; /* ours to open, outside the lock */
    pthread_mutex_unlock(&b->mu);
    if (c) {
        *out = c;
        return ODBOX_OK;
    }
    if (!open_new)
        return odbox_fail(err, ODBOX_ETIMEDOUT, "rabbitmq relay: all %d connections busy for %d ms", b->max,
                          b->timeout_ms);
    int rc = conn_open(b, out, err);
    if (rc != ODBOX_OK) {
        pthread_mutex_lock(&b->mu);
        b->total--;
        pthread_cond_signal(&b->freed);
        pthread_mutex_unlock(&b->mu);
    }
    return rc;
}

/* Back to the pool, or closed when broken (the next publish opens another). */
static void release(rbroker *b, rconn *c, int broken)
{
    if (broken)
        conn_close(c);
    pthread_mutex_lock(&b->mu);
    if (broken)
        b->total--;
    else
        c->next = b->idle, b->idle = c;
    pthread_cond_signal(&b->freed);
    pthread_mutex_unlock(&b->mu);
}

/* Waits for the broker's ack or nack of c's last publish. *broken when the
 * connection cannot be used again (closed channel, timeout, lost). */
static int wait_confirm(rbroker *b, rconn *c, int *broken, odbox_error *err)
{
    int64_t deadline = now_ms() + b->timeout_ms;
    for (;;) {
        int64_t left = deadline - now_ms();
        amqp_frame_t f;
        struct timeval tv = ms_tv(left > 0 ? left : 0);
        int st = left > 0 ? amqp_simple_wait_frame_noblock(c->st, &f, &tv) : AMQP_STATUS_TIMEOUT;
        if (st != AMQP_STATUS_OK) {
            *broken = 1;
            return odbox_fail(err, st == AMQP_STATUS_TIMEOUT ? ODBOX_ETIMEDOUT : ODBOX_ECONNLOST,
                              "rabbitmq relay: no confirm within %d ms: %s", b->timeout_ms, amqp_error_string2(st));
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        amqp_method_t *m = &f.payload.method;
        if (m->id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = m->decoded;
            if (a->delivery_tag == c->tag || (a->multiple && a->delivery_tag >= c->tag))
                return ODBOX_OK;
        } else if (m->id == AMQP_BASIC_NACK_METHOD) {
            amqp_basic_nack_t *n = m->decoded;
            if (n->delivery_tag == c->tag || (n->multiple && n->delivery_tag >= c->tag))
                return odbox_fail(err, ODBOX_EIO, "rabbitmq relay: the broker refused the message (basic.nack)");
        } else if (m->id == AMQP_CHANNEL_CLOSE_METHOD || m->id == AMQP_CONNECTION_CLOSE_METHOD) {
            char why[256];
            amqp_rpc_reply_t r = {.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION, .reply = *m};
            *broken = 1;
            return odbox_fail(err, ODBOX_EIO, "rabbitmq relay: %s", reply_text(r, why, sizeof why));
        }
    }
}

static int publish_on(rbroker *b, rconn *c, const odbox_envelope *env, const char *exchange, const char *rk,
                      const char *body, size_t len, int *broken, odbox_error *err)
{
    amqp_basic_properties_t props = {
        ._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                  AMQP_BASIC_TYPE_FLAG,
        .content_type = amqp_cstring_bytes("application/json"),
        .delivery_mode = AMQP_DELIVERY_PERSISTENT,
        .message_id = amqp_cstring_bytes(env->event_id),
        .type = amqp_cstring_bytes(env->event_type),
    };
    amqp_bytes_t msg = {.len = len, .bytes = (void *)body};
    int st = amqp_basic_publish(c->st, CHANNEL, amqp_cstring_bytes(exchange), amqp_cstring_bytes(rk), 0, 0, &props,
                                msg);
    if (st != AMQP_STATUS_OK) {
        *broken = 1;
        return odbox_fail(err, ODBOX_ECONNLOST, "rabbitmq relay: publish to exchange '%.100s': %s", exchange,
                          amqp_error_string2(st));
    }
    c->tag++;
    int rc = wait_confirm(b, c, broken, err);
    amqp_maybe_release_buffers(c->st);
    return rc == ODBOX_OK ? rc : odbox_error_prefix(err, rc, "exchange '%.100s', routing key '%.100s'", exchange, rk);
}

static int rabbit_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    rbroker *b = broker;
    if (!b || !env || !body)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: broker, envelope or body is NULL");
    char *exchange = NULL, *rk = NULL;
    rconn *c = NULL;
    int broken = 0;
    int rc = odbox_relay_expand(b->exchange, env, &exchange, err);
    if (rc == ODBOX_OK)
        rc = odbox_relay_expand(b->routing_key, env, &rk, err);
    if (rc == ODBOX_OK)
        rc = acquire(b, &c, err);
    if (rc == ODBOX_OK) {
        rc = publish_on(b, c, env, exchange, rk, body, len, &broken, err);
        release(b, c, broken);
    }
    free(exchange);
    free(rk);
    return rc;
}

static void rabbit_close(void *broker)
{
    rbroker *b = broker;
    if (!b)
        return;
    while (b->idle) {
        rconn *c = b->idle;
        b->idle = c->next;
        conn_close(c);
    }
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->freed);
    free(b->url);
    free(b->exchange);
    free(b->routing_key);
    free(b);
}

const odbox_relay_ops odbox_relay_rabbitmq_ops = {ODBOX_RELAY_OPS_VERSION, "rabbitmq", rabbit_publish,
                                                  rabbit_close};

int odbox_relay_rabbitmq_open(const odbox_relay_rabbitmq_config *cfg, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    if (!cfg || !broker)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: config or broker is NULL");
    int rc = odbox_relay_rabbitmq_check(cfg, err);
    if (rc != ODBOX_OK)
        return rc;
    rbroker *b = calloc(1, sizeof *b);
    const char *url = cfg->url ? cfg->url : ODBOX_RABBITMQ_DEFAULT_URL;
    if (b) {
        b->url = strdup(url);
        b->exchange = strdup(cfg->exchange ? cfg->exchange : "");
        b->routing_key = strdup(cfg->routing_key);
    }
    if (!b || !b->url || !b->exchange || !b->routing_key) {
        if (b)
            free(b->url), free(b->exchange), free(b->routing_key), free(b);
        return odbox_fail(err, ODBOX_ENOMEM, "rabbitmq relay: out of memory");
    }
    amqp_default_connection_info(&b->info);
    if (amqp_parse_url(b->url, &b->info) != AMQP_STATUS_OK) {
        free(b->url), free(b->exchange), free(b->routing_key), free(b);
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: bad url (want amqp://user:pass@host:port/vhost)");
    }
    if (!*b->info.vhost) /* amqp://host/ names the default vhost, as amqp://host does */
        b->info.vhost = (char *)"/";
    b->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : ODBOX_RABBITMQ_DEFAULT_TIMEOUT_MS;
    b->max = cfg->max_connections ? cfg->max_connections : ODBOX_RABBITMQ_DEFAULT_MAX_CONNECTIONS;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->freed, NULL);
    *broker = b;
    return ODBOX_OK;
}
