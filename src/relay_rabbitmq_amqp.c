/* odbox — the RabbitMQ relay's publishing side (librabbitmq): a pool of
 * connections, each on channel 1 in confirm mode and each carrying up to
 * `window` unconfirmed publishes from several worker threads.
 *
 * librabbitmq's connection state is not thread-safe, so every librabbitmq
 * call on a connection is made under its mutex. A publish takes the mutex,
 * sends basic.publish, records its delivery tag and waits for that tag's
 * confirm. One waiter at a time is the connection's reader (leader and
 * followers): it polls the socket WITHOUT the mutex (so that others keep
 * publishing), then reads the frames under it, settles the waiters whose
 * tags a basic.ack or basic.nack names (`multiple` included) and wakes
 * them; the others sleep on the condition variable. A connection that
 * broke (lost, closed by the server, no confirm within timeout_ms) fails
 * every publish waiting on it with the cause, leaves the pool at once and
 * is destroyed by the last publish still using it.
 *
 * A publish (one call, a round's batch too) has one deadline, timeout_ms
 * from its start, for all it waits for: a place on a connection, opening
 * one, the exchange's check and the confirm each get what is left (one
 * timeout_ms each, they added up to 3-4 times it, past the relay's
 * handler_timeout_ms).
 *
 * A publish to a missing exchange makes the server close the channel, and
 * with it every publish in flight: so before its first publish to an
 * exchange, a connection asks whether it exists (a passive
 * exchange.declare on a channel of its own, which a 404 closes instead)
 * and remembers the answer yes; the rows of a missing one fail alone.
 * Opening a connection: relay_rabbitmq_conn.c. */
#include "config.h"
#include <amqp.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "relay_rabbitmq_conn.h"
#include "relay_rabbitmq_internal.h"

/* The reader's poll slice: it re-checks librabbitmq's buffers (filled by
 * another call on the connection) at least this often. */
#define READ_SLICE_MS 20

typedef struct rbroker {
    char *url;                        /* amqp_parse_url's buffer: info points into it */
    struct amqp_connection_info info;
    char *exchange, *routing_key;
    int max, window, timeout_ms, max_body;
    pthread_mutex_t mu;
    pthread_cond_t freed; /* a publish left a connection, or one closed */
    rconn **conns;        /* max slots, NULL when free */
    int opening;          /* slots reserved by publishes opening a connection */
    char connect_why[256]; /* why the last opening failed, "" once one opened */
} rbroker;

/* Settles the waiters tag names (and those below it when multiple). */
static void settle(rconn *c, uint64_t tag, int multiple, int rc, const char *why)
{
    for (waiter **p = &c->waiting; *p;) {
        waiter *w = *p;
        if (w->tag == tag || (multiple && w->tag < tag)) {
            w->done = 1;
            if (w->returned && rc == ODBOX_OK) { /* acked, but it reached no queue: why says so */
                w->rc = ODBOX_EIO;
            } else {
                w->rc = rc;
                snprintf(w->why, sizeof w->why, "%s", why);
            }
            *p = w->next;
            pthread_cond_signal(w->cv);
        } else
            p = &w->next;
    }
}

/* Marks c broken and fails every publish waiting on it (c->mu held). */
static void conn_break(rconn *c, int rc, const char *fmt, ...)
{
    char why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!c->broken) /* the first cause; what follows is its consequence */
        snprintf(c->why, sizeof c->why, "%s", why);
    atomic_store(&c->broken, 1);
    while (c->waiting)
        settle(c, c->waiting->tag, 0, rc, why);
}

/* The broker returned the message of event id (a basic.return's header
 * frame): its waiter fails when the message's ack comes, which RabbitMQ
 * sends after the return. Returns come in publish order: of two publishes
 * of one event, the earlier. */
static void mark_returned(rconn *c, amqp_bytes_t id)
{
    waiter *first = NULL;
    for (waiter *w = c->waiting; w; w = w->next)
        if (!w->returned && strlen(w->id) == id.len && !memcmp(w->id, id.bytes, id.len) &&
            (!first || w->tag < first->tag))
            first = w;
    if (first) {
        first->returned = 1;
        snprintf(first->why, sizeof first->why, "%s", c->returned);
    }
}

/* ---- the exchanges' checks ------------------------------------------------------------- */

/* "" (the default exchange) always is. c->mu held. */
static int exchange_known(const rconn *c, const char *name)
{
    if (!*name)
        return 1;
    for (int i = 0; i < c->nknown; i++)
        if (!strcmp(c->known[i], name))
            return 1;
    return 0;
}

static void exchange_remember(rconn *c, const char *name)
{
    char *copy = strdup(name);
    if (!copy) /* asked again next time */
        return;
    if (c->nknown < KNOWN_MAX) {
        c->known[c->nknown++] = copy;
        return;
    }
    free(c->known[c->next_known]); /* the oldest */
    c->known[c->next_known] = copy;
    c->next_known = (c->next_known + 1) % KNOWN_MAX;
}

/* Whether exchange name is there (c->mu held), asked by end_us (the
 * publish's deadline): ODBOX_OK, ODBOX_ENOTFOUND (the server's 404) or
 * ODBOX_EIO (another refusal), why in why; a connection that broke
 * meanwhile fails its waiters and gives ODBOX_ECONNLOST, an answer that
 * did not come by end_us ODBOX_ETIMEDOUT (librabbitmq closes the socket
 * then: the connection broke too). Frames of the publishing channel that
 * arrive during the check are queued by librabbitmq for the reader. */
static int exchange_check(const rbroker *b, rconn *c, const char *name, int64_t end_us, char *why, size_t cap)
{
    if (exchange_known(c, name))
        return ODBOX_OK;
    if (c->broken) {
        snprintf(why, cap, "the connection broke: %.250s", c->why);
        return ODBOX_ECONNLOST;
    }
    int left = odbox_rabbitmq_left_ms(end_us);
    if (!left) { /* nothing sent: the connection stays as it is */
        snprintf(why, cap, "exchange.declare (passive): nothing was left of the call's timeout_ms (%d ms) to ask",
                 b->timeout_ms);
        return ODBOX_ETIMEDOUT;
    }
    struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
    amqp_set_rpc_timeout(c->st, &tv);
    amqp_rpc_reply_t r = {.reply_type = AMQP_RESPONSE_NORMAL};
    if (!c->check_open) {
        amqp_channel_open(c->st, CHECK_CHANNEL);
        r = amqp_get_rpc_reply(c->st);
        c->check_open = r.reply_type == AMQP_RESPONSE_NORMAL;
    }
    if (c->check_open) {
        amqp_exchange_declare(c->st, CHECK_CHANNEL, amqp_cstring_bytes(name), amqp_empty_bytes, 1, 0, 0, 0,
                              amqp_empty_table);
        r = amqp_get_rpc_reply(c->st);
    }
    char text[256];
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        exchange_remember(c, name);
        return ODBOX_OK;
    }
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        /* only the check's channel is closed: answered, it opens again for
         * the next check */
        const amqp_channel_close_t *cc = r.reply.decoded;
        int code = cc->reply_code;
        snprintf(why, cap, "exchange.declare (passive): %d %.*s", code, (int)cc->reply_text.len,
                 (char *)cc->reply_text.bytes);
        amqp_channel_close_ok_t ok = {0};
        c->check_open = 0;
        int st = amqp_send_method(c->st, CHECK_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        if (st != AMQP_STATUS_OK)
            conn_break(c, ODBOX_ECONNLOST, "channel.close-ok: %s", amqp_error_string2(st));
        return code == AMQP_NOT_FOUND ? ODBOX_ENOTFOUND : ODBOX_EIO;
    }
    /* the connection closed by the server, lost, or no answer in time
     * (librabbitmq then closes the socket) */
    conn_break(c, ODBOX_ECONNLOST, "exchange.declare (passive): %s", odbox_rabbitmq_reply_text(r, text, sizeof text));
    if (odbox_rabbitmq_timed_out(r)) {
        snprintf(why, cap,
                 "exchange.declare (passive): %.100s: no answer within the %d ms left of the call's timeout_ms "
                 "(%d ms)",
                 text, left, b->timeout_ms);
        return ODBOX_ETIMEDOUT;
    }
    snprintf(why, cap, "exchange.declare (passive): %s", text);
    return ODBOX_ECONNLOST;
}

/* What one frame read from the server means for the waiters. */
static void on_frame(rconn *c, const amqp_frame_t *f)
{
    if (f->frame_type == AMQP_FRAME_HEADER && c->returning) {
        const amqp_basic_properties_t *p = f->payload.properties.decoded;
        c->returning = 0;
        if (p && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
            mark_returned(c, p->message_id);
        return;
    }
    if (f->frame_type != AMQP_FRAME_METHOD) /* a returned message's body */
        return;
    const amqp_method_t *m = &f->payload.method;
    if (m->id == AMQP_BASIC_ACK_METHOD) {
        const amqp_basic_ack_t *a = m->decoded;
        settle(c, a->delivery_tag, a->multiple, ODBOX_OK, "");
    } else if (m->id == AMQP_BASIC_NACK_METHOD) {
        const amqp_basic_nack_t *n = m->decoded;
        settle(c, n->delivery_tag, n->multiple, ODBOX_EIO, "the broker refused the message (basic.nack)");
    } else if (m->id == AMQP_BASIC_RETURN_METHOD) {
        const amqp_basic_return_t *r = m->decoded;
        snprintf(c->returned, sizeof c->returned,
                 "unroutable: %d %.*s: the broker returned the message (published mandatory), no queue took it",
                 r->reply_code, (int)r->reply_text.len, (char *)r->reply_text.bytes);
        c->returning = 1;
    } else if (m->id == AMQP_CHANNEL_CLOSE_METHOD || m->id == AMQP_CONNECTION_CLOSE_METHOD) {
        char why[256];
        amqp_rpc_reply_t r = {.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION, .reply = *m};
        conn_break(c, ODBOX_EIO, "%s", odbox_rabbitmq_reply_text(r, why, sizeof why));
    }
}

/* The reader's turn (c->mu held, released while polling): the frames
 * librabbitmq has buffered, else those that arrive within slice_ms. */
static void read_frames(rconn *c, int slice_ms)
{
    while (!c->broken) {
        if (!amqp_frames_enqueued(c->st) && !amqp_data_in_buffer(c->st)) {
            struct pollfd p = {.fd = amqp_get_sockfd(c->st), .events = POLLIN};
            pthread_mutex_unlock(&c->mu);
            int n = poll(&p, 1, slice_ms);
            pthread_mutex_lock(&c->mu);
            if (n <= 0 || c->broken)
                break;
            slice_ms = 0; /* once read, only what is there already */
        }
        amqp_frame_t f;
        struct timeval now = {0, 0};
        int st = amqp_simple_wait_frame_noblock(c->st, &f, &now);
        if (st == AMQP_STATUS_TIMEOUT) /* a part of a frame: the rest comes later */
            break;
        if (st != AMQP_STATUS_OK) {
            conn_break(c, ODBOX_ECONNLOST, "connection lost: %s", amqp_error_string2(st));
            break;
        }
        c->silent_since_us = odbox_mono_us(), c->abandoned = 0; /* the node is there */
        on_frame(c, &f);
    }
    if (!c->broken)
        amqp_maybe_release_buffers(c->st);
}

/* Takes w out of the waiting list (c->mu held): its publish leaves
 * before its confirm, which is then read and dropped. */
static void unwait(rconn *c, waiter *w)
{
    for (waiter **p = &c->waiting; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            return;
        }
}

/* Waits (c->mu held) until w is settled or end_us (the publish's
 * deadline) passes: as the reader when nobody is, else asleep until the
 * reader settles it or hands it the role. At the deadline, a node that
 * has sent nothing for timeout_ms while it owed a confirm has stalled:
 * the connection breaks (its confirms no longer come). Else the publish
 * leaves alone: its call ran out of time (the wait for a place or the
 * connect took the rest), which says nothing of the connection, and
 * breaking it would fail every other publish in flight on it. */
static void await_confirm(const rbroker *b, rconn *c, waiter *w, int64_t end_us)
{
    struct timespec deadline = odbox_mono_at(end_us);
    int had_ms = odbox_rabbitmq_left_ms(end_us); /* for the message */
    int was_reader = 0, drained = 0;
    while (!w->done) {
        int64_t left_ms = (end_us - odbox_mono_us()) / 1000;
        if (left_ms <= 0 && !drained) {
            /* the confirm may have come already: librabbitmq queues the
             * frames it reads during another publish's exchange check
             * (which holds c->mu, maybe past our deadline), and the socket
             * may hold more. Once read, a late confirm is still a confirm
             * (else a duplicate on the retry); safe beside a reader in
             * poll, which finds less to read */
            drained = 1;
            read_frames(c, 0);
            continue;
        }
        if (left_ms <= 0) {
            if (odbox_mono_us() - c->silent_since_us >= (int64_t)b->timeout_ms * 1000) {
                conn_break(c, ODBOX_ETIMEDOUT, "no confirm within %d ms", b->timeout_ms);
                break;
            }
            unwait(c, w);
            c->abandoned = 1;
            w->done = 1, w->rc = ODBOX_ETIMEDOUT;
            snprintf(w->why, sizeof w->why,
                     "no confirm within the call's timeout_ms (%d ms; %d ms of it were left for the confirm)",
                     b->timeout_ms, had_ms);
            break;
        }
        if (c->reading) {
            pthread_cond_timedwait(w->cv, &c->mu, &deadline);
            continue;
        }
        c->reading = was_reader = 1;
        read_frames(c, left_ms < READ_SLICE_MS ? (int)left_ms : READ_SLICE_MS);
        c->reading = 0;
    }
    /* the role to a publish still waiting (settled ones left the list) */
    if (was_reader && c->waiting)
        pthread_cond_signal(c->waiting->cv);
}

/* Sends env's message on c (c->mu held): w waits for its confirm, or is
 * settled already (the connection broke). */
static void send_one(rconn *c, const odbox_envelope *env, amqp_bytes_t exchange, amqp_bytes_t rk, amqp_bytes_t body,
                     waiter *w)
{
    amqp_basic_properties_t props = {
        ._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                  AMQP_BASIC_TYPE_FLAG,
        .content_type = amqp_cstring_bytes("application/json"),
        .delivery_mode = AMQP_DELIVERY_PERSISTENT,
        .message_id = amqp_cstring_bytes(env->event_id),
        .type = amqp_cstring_bytes(env->event_type),
    };
    if (c->broken) {
        w->done = 1, w->rc = ODBOX_ECONNLOST, snprintf(w->why, sizeof w->why, "the connection broke: %.250s", c->why);
        return;
    }
    w->id = env->event_id;
    /* mandatory: a message no queue takes comes back (basic.return) instead
     * of being confirmed and dropped */
    int st = amqp_basic_publish(c->st, CHANNEL, exchange, rk, 1, 0, &props, body);
    if (st == AMQP_STATUS_BAD_AMQP_DATA) {
        /* a frame librabbitmq would not encode (a short string over 255
         * bytes): the message fails alone. names_for refuses every such
         * field first; were it one of the header frame's (type,
         * message_id), the method frame before it would have gone out and
         * the stream be broken: the next publish on it would then fail. */
        w->done = 1, w->rc = ODBOX_EINVAL;
        snprintf(w->why, sizeof w->why, "publish: %s", amqp_error_string2(st));
    } else if (st != AMQP_STATUS_OK) { /* w is not waiting: conn_break does not settle it */
        conn_break(c, ODBOX_ECONNLOST, "publish: %s", amqp_error_string2(st));
        w->done = 1, w->rc = ODBOX_ECONNLOST;
        snprintf(w->why, sizeof w->why, "publish: %s", amqp_error_string2(st));
    } else {
        if (!c->waiting && !c->abandoned) /* the node owes a confirm from now */
            c->silent_since_us = odbox_mono_us();
        w->tag = ++c->tag;
        w->next = c->waiting, c->waiting = w;
    }
}

/* Publishes on c and waits for the confirm, by end_us; 0 once acked. */
static int conn_publish(const rbroker *b, rconn *c, const odbox_envelope *env, const char *exchange,
                        amqp_bytes_t rk, amqp_bytes_t body, int64_t end_us, odbox_error *err)
{
    pthread_cond_t cv;
    odbox_cond_init_mono(&cv);
    waiter w = {.cv = &cv};
    pthread_mutex_lock(&c->mu);
    int rc = exchange_check(b, c, exchange, end_us, w.why, sizeof w.why);
    if (rc != ODBOX_OK)
        w.done = 1, w.rc = rc;
    else
        send_one(c, env, amqp_cstring_bytes(exchange), rk, body, &w);
    if (!w.done)
        await_confirm(b, c, &w, end_us);
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&cv);
    return w.rc == ODBOX_OK ? ODBOX_OK : odbox_fail(err, w.rc, "rabbitmq relay: %s", w.why);
}

/* ---- the pool ------------------------------------------------------------------------- */

/* The open connection with the fewest publishes in flight below the
 * window, or NULL (b->mu held). A broken one leaves the pool here if its
 * users have not left it yet: a publish now would only fail on it, and
 * its slot is free for a new one. */
static rconn *least_busy(rbroker *b)
{
    rconn *best = NULL;
    for (int i = 0; i < b->max; i++) {
        rconn *c = b->conns[i];
        if (c && atomic_load(&c->broken)) {
            b->conns[i] = NULL, c->retired = 1;
            if (c->users == 0) /* none to destroy it on leaving */
                odbox_rabbitmq_conn_free(c);
        } else if (c && c->users < b->window && (!best || c->users < best->users))
            best = c;
    }
    return best;
}

static int open_slots(const rbroker *b)
{
    int n = b->opening;
    for (int i = 0; i < b->max; i++)
        n += b->conns[i] != NULL;
    return n;
}

/* A new connection into a free slot (its reservation made by acquire),
 * opened by end_us. */
static int add_conn(rbroker *b, int64_t end_us, rconn **out, odbox_error *err)
{
    static const char prefix[] = "rabbitmq relay: ";
    rconn *c = NULL;
    odbox_error e = {0};
    int rc = odbox_rabbitmq_conn_open(&b->info, b->timeout_ms, end_us, &c, &e);
    pthread_mutex_lock(&b->mu);
    b->opening--;
    snprintf(b->connect_why, sizeof b->connect_why, "%s",
             rc == ODBOX_OK ? "" : e.message + (strncmp(e.message, prefix, strlen(prefix)) ? 0 : strlen(prefix)));
    if (rc == ODBOX_OK) {
        for (int i = 0; i < b->max; i++)
            if (!b->conns[i]) {
                b->conns[i] = c;
                break;
            }
        c->users = 1;
        *out = c;
    }
    pthread_cond_broadcast(&b->freed);
    pthread_mutex_unlock(&b->mu);
    if (rc != ODBOX_OK && err)
        *err = e;
    return rc;
}

/* A connection to publish on: the least busy one below the window; a new
 * one when all are full and fewer than max are open; else waits (until
 * end_us, the publish's deadline) for a place. */
static int acquire(rbroker *b, int64_t end_us, rconn **out, odbox_error *err)
{
    struct timespec deadline = odbox_mono_at(end_us);
    pthread_mutex_lock(&b->mu);
    rconn *c = NULL;
    int w = 0, open_new = 0, opening = 0, open = 0;
    char last[sizeof b->connect_why];
    for (;;) {
        if ((c = least_busy(b)) != NULL) {
            c->users++;
            break;
        }
        if (open_slots(b) < b->max) {
            b->opening++, open_new = 1; /* ours to open, outside the lock */
            break;
        }
        if (w == ETIMEDOUT)
            break;
        w = pthread_cond_timedwait(&b->freed, &b->mu, &deadline);
    }
    if (!c && !open_new) /* what the slots are doing, for the error */
        opening = b->opening, open = open_slots(b) - b->opening, memcpy(last, b->connect_why, sizeof last);
    pthread_mutex_unlock(&b->mu);
    if (c) {
        *out = c;
        return ODBOX_OK;
    }
    if (open_new)
        return add_conn(b, end_us, out, err);
    /* a node that is slow or unreachable must not read as a busy one */
    if (!open)
        return odbox_fail(err, ODBOX_ECONNECT,
                          "rabbitmq relay: no connection within %d ms: still connecting to %.100s:%d (%d of at most %d "
                          "connections being opened)%s%.200s",
                          b->timeout_ms, b->info.host, b->info.port, opening, b->max,
                          *last ? "; the last attempt: " : "", last);
    return odbox_fail(err, ODBOX_ETIMEDOUT,
                      "rabbitmq relay: %d connections with %d publishes in flight each, none free for %d ms%s", open,
                      b->window, b->timeout_ms, opening ? " (the others still connecting)" : "");
}

void (*odbox_relay_rabbitmq_test_leaving_broken)(void *broker);

/* Leaves c; a broken c leaves the pool at once (new publishes open
 * another) and is destroyed by its last user. */
static void release(rbroker *b, rconn *c)
{
    if (odbox_relay_rabbitmq_test_leaving_broken && atomic_load(&c->broken))
        odbox_relay_rabbitmq_test_leaving_broken(b);
    int broken = atomic_load(&c->broken);
    pthread_mutex_lock(&b->mu);
    c->users--;
    if (broken && !c->retired) {
        c->retired = 1;
        for (int i = 0; i < b->max; i++)
            if (b->conns[i] == c)
                b->conns[i] = NULL;
    }
    int destroy = c->retired && c->users == 0;
    pthread_cond_broadcast(&b->freed);
    pthread_mutex_unlock(&b->mu);
    if (destroy)
        odbox_rabbitmq_conn_free(c);
}

/* AMQP 0-9-1's short string: the exchange, the routing key, and the
 * message's type and message_id properties are at most this long. */
#define SHORTSTR_MAX 255

/* A name over SHORTSTR_MAX: ODBOX_EINVAL for env's row alone. librabbitmq
 * would refuse the frame, and breaking the connection for it would fail
 * every other publish in flight on it. */
static int too_long(const char *what, const char *tmpl, const char *value, const odbox_envelope *env, odbox_error *err)
{
    size_t len = strlen(value);
    if (len <= SHORTSTR_MAX)
        return ODBOX_OK;
    if (tmpl)
        return odbox_fail(err, ODBOX_EINVAL,
                          "rabbitmq relay: %s template '%.100s' gives %zu bytes for event %.64s ('%.60s...'): over "
                          "AMQP's limit of %d",
                          what, tmpl, len, env->event_id, value, SHORTSTR_MAX);
    return odbox_fail(err, ODBOX_EINVAL,
                      "rabbitmq relay: event %.64s: the message's %s property ('%.60s...', %zu bytes) is over "
                      "AMQP's limit of %d",
                      env->event_id, what, value, len, SHORTSTR_MAX);
}

/* The exchange and routing key of env's message (malloc'd, or NULL);
 * ODBOX_EDISCARD when one of them, or the event's type or id, is longer
 * than AMQP can carry, or its body (len bytes) is over max_message_bytes:
 * the server would close the channel for it, failing every publish in
 * flight on the connection, on every retry. */
static int names_for(const rbroker *b, const odbox_envelope *env, size_t len, char **exchange, char **rk,
                     odbox_error *err)
{
    *exchange = *rk = NULL;
    int rc = len <= (size_t)b->max_body
                 ? odbox_relay_expand(b->exchange, env, exchange, err)
                 : odbox_fail(err, ODBOX_EINVAL,
                              "rabbitmq relay: event %.64s: a body of %zu bytes is over max_message_bytes %d (a body "
                              "over the node's max_message_size makes it close the channel)",
                              env->event_id, len, b->max_body);
    /* "" is the default exchange, which routes by queue name: meant only
     * when the template says so, not when a placeholder came out empty */
    if (rc == ODBOX_OK && !**exchange && *b->exchange)
        rc = odbox_fail(err, ODBOX_EINVAL,
                        "rabbitmq relay: exchange template '%.100s' gives '' for event %.64s: the default exchange "
                        "is meant only by the template \"\" itself",
                        b->exchange, env->event_id);
    if (rc == ODBOX_OK)
        rc = odbox_relay_expand(b->routing_key, env, rk, err);
    if (rc == ODBOX_OK)
        rc = too_long("exchange", b->exchange, *exchange, env, err);
    if (rc == ODBOX_OK)
        rc = too_long("routing_key", b->routing_key, *rk, env, err);
    if (rc == ODBOX_OK)
        rc = too_long("type", NULL, env->event_type, env, err);
    if (rc == ODBOX_OK)
        rc = too_long("message_id", NULL, env->event_id, env, err);
    return rc == ODBOX_EINVAL ? odbox_error_discard(err) : rc;
}

static int rabbit_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    rbroker *b = broker;
    if (!b || !env || !body)
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: broker, envelope or body is NULL");
    /* the call's one deadline: every stage below gets what is left */
    int64_t end_us = odbox_mono_us() + (int64_t)b->timeout_ms * 1000;
    char *exchange = NULL, *rk = NULL;
    rconn *c = NULL;
    int rc = names_for(b, env, len, &exchange, &rk, err);
    if (rc == ODBOX_OK)
        rc = acquire(b, end_us, &c, err);
    if (rc == ODBOX_OK) {
        amqp_bytes_t msg = {.len = len, .bytes = (void *)body};
        rc = conn_publish(b, c, env, exchange, amqp_cstring_bytes(rk), msg, end_us, err);
        release(b, c);
        if (rc != ODBOX_OK)
            odbox_error_prefix(err, rc, "exchange '%.100s', routing key '%.100s'", exchange, rk);
    }
    free(exchange);
    free(rk);
    return rc;
}

/* Each distinct exchange of a round not known on c checked once (c->mu
 * held), by end_us: the rows of one that is not there fail before
 * anything is sent. */
static void check_exchanges(const rbroker *b, rconn *c, size_t n, char *const *names, int64_t end_us, int *rcs,
                            odbox_error *errs)
{
    char why[300];
    for (size_t i = 0; i < n; i++) {
        if (rcs[i] != ODBOX_OK || exchange_known(c, names[2 * i]))
            continue;
        int rc = exchange_check(b, c, names[2 * i], end_us, why, sizeof why);
        for (size_t j = i; rc != ODBOX_OK && j < n; j++)
            if (rcs[j] == ODBOX_OK && !strcmp(names[2 * j], names[2 * i]))
                rcs[j] = odbox_fail(&errs[j], rc, "rabbitmq relay: exchange '%.100s', routing key '%.100s': %s",
                                    names[2 * j], names[2 * j + 1], why);
    }
}

/* A round's rows on one connection: every message sent, then every
 * confirm awaited (a reader settles many at a time), all within one
 * timeout_ms. rcs[i] that is not ODBOX_OK on entry (its names did not
 * expand) is left as it is. */
static void rabbit_publish_batch(void *broker, size_t n, const odbox_envelope *const *envs,
                                 const char *const *bodies, const size_t *lens, int *rcs, odbox_error *errs)
{
    rbroker *b = broker;
    int64_t end_us = odbox_mono_us() + (int64_t)b->timeout_ms * 1000; /* the call's one deadline */
    char **names = calloc(2 * n, sizeof *names); /* exchange, routing key per row */
    waiter *ws = calloc(n, sizeof *ws);
    odbox_error e = {0};
    rconn *c = NULL;
    int rc = names && ws ? ODBOX_OK : odbox_fail(&e, ODBOX_ENOMEM, "rabbitmq relay: out of memory");
    for (size_t i = 0; i < n; i++)
        if ((rcs[i] = rc) == ODBOX_OK)
            rcs[i] = names_for(b, envs[i], lens[i], &names[2 * i], &names[2 * i + 1], &errs[i]);
        else
            errs[i] = e;
    if (rc == ODBOX_OK && (rc = acquire(b, end_us, &c, &e)) == ODBOX_OK) {
        pthread_cond_t cv;
        odbox_cond_init_mono(&cv);
        for (size_t i = 0; i < n; i++)
            ws[i].cv = &cv;
        pthread_mutex_lock(&c->mu);
        check_exchanges(b, c, n, names, end_us, rcs, errs);
        for (size_t i = 0; i < n; i++)
            if (rcs[i] == ODBOX_OK)
                send_one(c, envs[i], amqp_cstring_bytes(names[2 * i]), amqp_cstring_bytes(names[2 * i + 1]),
                         (amqp_bytes_t){.len = lens[i], .bytes = (void *)bodies[i]}, &ws[i]);
        for (size_t i = 0; i < n; i++)
            if (rcs[i] == ODBOX_OK && !ws[i].done)
                await_confirm(b, c, &ws[i], end_us);
        pthread_mutex_unlock(&c->mu);
        release(b, c);
        pthread_cond_destroy(&cv);
        for (size_t i = 0; i < n; i++) {
            if (rcs[i] == ODBOX_OK && ws[i].rc != ODBOX_OK)
                rcs[i] = odbox_fail(&errs[i], ws[i].rc, "rabbitmq relay: exchange '%.100s', routing key '%.100s': %s",
                                    names[2 * i], names[2 * i + 1], ws[i].why);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            if (rcs[i] == ODBOX_OK)
                rcs[i] = rc, errs[i] = e;
    }
    for (size_t i = 0; names && i < 2 * n; i++)
        free(names[i]);
    free(names);
    free(ws);
}

static void broker_free(rbroker *b)
{
    if (!b)
        return;
    if (b->conns)
        for (int i = 0; i < b->max; i++)
            odbox_rabbitmq_conn_free(b->conns[i]);
    free(b->conns);
    free(b->url);
    free(b->exchange);
    free(b->routing_key);
    free(b);
}

/* After the delivery is freed: no publish uses a connection any more. */
static void rabbit_close(void *broker)
{
    rbroker *b = broker;
    if (!b)
        return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->freed);
    broker_free(b);
}

const odbox_relay_ops odbox_relay_rabbitmq_ops = {ODBOX_RELAY_OPS_VERSION, "rabbitmq", rabbit_publish,
                                                  rabbit_close, rabbit_publish_batch};

static rbroker *broker_new(const odbox_rabbitmq_settings *s)
{
    const odbox_relay_rabbitmq_config *cfg = &s->cfg;
    rbroker *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : ODBOX_RABBITMQ_DEFAULT_TIMEOUT_MS;
    b->max = cfg->max_connections ? cfg->max_connections : ODBOX_RABBITMQ_DEFAULT_MAX_CONNECTIONS;
    b->window = cfg->max_in_flight_per_connection ? cfg->max_in_flight_per_connection
                                                  : ODBOX_RABBITMQ_DEFAULT_IN_FLIGHT;
    b->max_body = s->max_message_bytes ? s->max_message_bytes : ODBOX_RABBITMQ_DEFAULT_MAX_MESSAGE;
    b->url = strdup(cfg->url ? cfg->url : ODBOX_RABBITMQ_DEFAULT_URL);
    b->exchange = strdup(cfg->exchange ? cfg->exchange : "");
    b->routing_key = strdup(cfg->routing_key);
    b->conns = calloc((size_t)b->max, sizeof *b->conns);
    if (!b->url || !b->exchange || !b->routing_key || !b->conns) {
        broker_free(b);
        return NULL;
    }
    return b;
}

int odbox_relay_rabbitmq_open_settings(const odbox_rabbitmq_settings *s, void **broker, odbox_error *err)
{
    *broker = NULL;
    int rc = odbox_relay_rabbitmq_check(s, err);
    if (rc != ODBOX_OK)
        return rc;
    rbroker *b = broker_new(s);
    if (!b)
        return odbox_fail(err, ODBOX_ENOMEM, "rabbitmq relay: out of memory");
    amqp_default_connection_info(&b->info);
    if (amqp_parse_url(b->url, &b->info) != AMQP_STATUS_OK) {
        broker_free(b);
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: bad url (want amqp://user:pass@host:port/vhost)");
    }
    /* odbox_relay_rabbitmq_check refused amqps:// already: this is for a
     * spelling it missed, since the socket below would be plain TCP */
    if (b->info.ssl) {
        broker_free(b);
        return odbox_fail(err, ODBOX_EINVAL, "rabbitmq relay: amqps (TLS) is not supported: use amqp://");
    }
    if (!*b->info.vhost) /* amqp://host/ names the default vhost, as amqp://host does */
        b->info.vhost = (char *)"/";
    pthread_mutex_init(&b->mu, NULL);
    odbox_cond_init_mono(&b->freed);
    *broker = b;
    return ODBOX_OK;
}
