/* odbox — the RabbitMQ relay's connections (librabbitmq): opening one,
 * the host name's lookup included, within what is left of the publish's
 * timeout_ms. The pool and the publishing are in relay_rabbitmq_amqp.c. */
#include "config.h"
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "internal.h"
#include "relay_rabbitmq_conn.h"

const char *odbox_rabbitmq_reply_text(amqp_rpc_reply_t r, char *buf, size_t cap)
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

void odbox_rabbitmq_conn_free(rconn *c)
{
    if (!c)
        return;
    /* no goodbye handshake: the connection may be the broken one, and a
     * dead peer would hold us for the rpc timeout */
    if (c->st)
        amqp_destroy_connection(c->st);
    for (int i = 0; i < c->nknown; i++)
        free(c->known[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int odbox_rabbitmq_left_ms(int64_t end_us)
{
    int64_t left_us = end_us - odbox_mono_us();
    if (left_us <= 0)
        return 0;
    return left_us / 1000 >= INT_MAX ? INT_MAX : (int)((left_us + 999) / 1000);
}

static rconn *conn_new(void)
{
    rconn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    if (!(c->st = amqp_new_connection())) {
        odbox_rabbitmq_conn_free(c);
        return NULL;
    }
    return c;
}

/* A host name's lookup, shared by the thread that makes it and the
 * publish that waits for it. getaddrinfo has no deadline (a resolver that
 * does not answer holds it for its own timeouts and retries, seconds to
 * minutes), so it runs on a detached thread and the publish waits at most
 * its timeout_ms; the last of the two to let go frees it, so a lookup that
 * outlives the wait ends on its own. */
typedef struct lookup {
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    int refs, done, rc;
    char *host;
    char port[8];
    struct addrinfo *res;
} lookup;

static void lookup_drop(lookup *l)
{
    pthread_mutex_lock(&l->mu);
    int last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (!last)
        return;
    if (l->res)
        freeaddrinfo(l->res);
    free(l->host);
    pthread_cond_destroy(&l->done_cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static void *lookup_main(void *p)
{
    lookup *l = p;
    /* librabbitmq's own hints */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(l->host, l->port, &hints, &res);
    pthread_mutex_lock(&l->mu);
    l->rc = rc, l->res = res, l->done = 1;
    pthread_cond_signal(&l->done_cv);
    pthread_mutex_unlock(&l->mu);
    lookup_drop(l);
    return NULL;
}

/* host's addresses into *out (freeaddrinfo), within timeout_ms (what is
 * left of the publish's). */
static int resolve(const char *host, int port, int timeout_ms, struct addrinfo **out, char *why, size_t cap)
{
    lookup *l = calloc(1, sizeof *l);
    if (!l || !(l->host = strdup(host))) {
        free(l);
        snprintf(why, cap, "out of memory");
        return ODBOX_ENOMEM;
    }
    snprintf(l->port, sizeof l->port, "%d", port);
    pthread_mutex_init(&l->mu, NULL);
    odbox_cond_init_mono(&l->done_cv);
    l->refs = 2;
    struct timespec deadline = odbox_mono_after(timeout_ms);
    pthread_attr_t attr;
    pthread_t t;
    int e = pthread_attr_init(&attr);
    if (e == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        e = pthread_create(&t, &attr, lookup_main, l);
        pthread_attr_destroy(&attr);
    }
    if (e != 0) {
        l->refs = 1;
        lookup_drop(l);
        snprintf(why, cap, "cannot start the host name's lookup: %s", strerror(e));
        return ODBOX_ECONNECT;
    }
    pthread_mutex_lock(&l->mu);
    int w = 0;
    while (!l->done && w != ETIMEDOUT)
        w = pthread_cond_timedwait(&l->done_cv, &l->mu, &deadline);
    int done = l->done, rc = l->rc;
    if (done && rc == 0)
        *out = l->res, l->res = NULL;
    pthread_mutex_unlock(&l->mu);
    lookup_drop(l);
    if (!done)
        snprintf(why, cap, "the host name was not resolved within %d ms", timeout_ms);
    else if (rc != 0)
        snprintf(why, cap, "hostname lookup failed: %s", rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return done && rc == 0 ? ODBOX_OK : ODBOX_ECONNECT;
}

/* sock connected to host:port by end_us: the name resolved here, each
 * address then handed to librabbitmq as a number (which it resolves at
 * once) with the time left. */
static int socket_open(amqp_socket_t *sock, const char *host, int port, int64_t end_us, char *why, size_t cap)
{
    struct addrinfo *res = NULL;
    int rc = resolve(host, port, odbox_rabbitmq_left_ms(end_us), &res, why, cap);
    if (rc != ODBOX_OK)
        return rc;
    int st = AMQP_STATUS_HOSTNAME_RESOLUTION_FAILED;
    int tried = 0;
    for (struct addrinfo *a = res; a && st != AMQP_STATUS_OK; a = a->ai_next) {
        char num[NI_MAXHOST];
        int64_t left_us = end_us - odbox_mono_us();
        if (left_us <= 0) { /* the last attempt's error, if there was one */
            st = st == AMQP_STATUS_HOSTNAME_RESOLUTION_FAILED ? AMQP_STATUS_TIMEOUT : st;
            break;
        }
        if (getnameinfo(a->ai_addr, a->ai_addrlen, num, sizeof num, NULL, 0, NI_NUMERICHOST) != 0)
            continue;
        struct timeval tv = {.tv_sec = left_us / 1000000, .tv_usec = left_us % 1000000};
        st = amqp_socket_open_noblock(sock, num, port, &tv);
        tried = 1;
    }
    freeaddrinfo(res);
    if (st == AMQP_STATUS_OK)
        return ODBOX_OK;
    if (!tried && st == AMQP_STATUS_TIMEOUT) /* the lookup took what was left */
        snprintf(why, cap, "the call's timeout_ms ran out after the host name's lookup");
    else
        snprintf(why, cap, "%s", amqp_error_string2(st));
    return ODBOX_ECONNECT;
}

/* A step not sent, nothing being left of the call's timeout_ms: as one
 * that ran out while it waited. */
#define NO_TIME_LEFT \
    ((amqp_rpc_reply_t){.reply_type = AMQP_RESPONSE_LIBRARY_EXCEPTION, .library_error = AMQP_STATUS_TIMEOUT})

int odbox_rabbitmq_timed_out(amqp_rpc_reply_t r)
{
    return r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT;
}

/* librabbitmq's bounds for the login and the RPCs after it: what is left
 * until end_us, 0 (nothing set) once it has passed. */
static int bound_rpcs(amqp_connection_state_t st, int64_t end_us)
{
    int left = odbox_rabbitmq_left_ms(end_us);
    struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
    if (left) {
        amqp_set_handshake_timeout(st, &tv);
        amqp_set_rpc_timeout(st, &tv);
    }
    return left;
}

int odbox_rabbitmq_conn_open(const struct amqp_connection_info *info, int timeout_ms, int64_t end_us, rconn **out,
                             odbox_error *err)
{
    char why[256];
    if (!odbox_rabbitmq_left_ms(end_us)) /* the wait for a place took it all */
        return odbox_fail(err, ODBOX_ECONNECT,
                          "rabbitmq relay: cannot connect to %.100s:%d: nothing was left of the call's timeout_ms "
                          "(%d ms) to connect in",
                          info->host, info->port, timeout_ms);
    rconn *c = conn_new();
    if (!c)
        return odbox_fail(err, ODBOX_ENOMEM, "rabbitmq relay: out of memory");
    amqp_socket_t *sock = amqp_tcp_socket_new(c->st);
    int rc = sock ? socket_open(sock, info->host, info->port, end_us, why, sizeof why) : ODBOX_ENOMEM;
    if (rc != ODBOX_OK) {
        odbox_rabbitmq_conn_free(c);
        return odbox_fail(err, rc, "rabbitmq relay: cannot connect to %.100s:%d: %s", info->host, info->port,
                          sock ? why : "out of memory");
    }
    /* librabbitmq sends a publish with no deadline (it polls for room in
     * the socket for ever), and we send under c->mu: a stalled peer would
     * hold the connection and every publisher on it. With this the kernel
     * aborts the connection once sent data (or a zero window's probes)
     * go unacknowledged for timeout_ms: the send fails and conn_break
     * fails the publishes waiting on it (tests/relay/rabbitmq_stall.c:
     * the node's processes stopped while a 32 MB message is sent). The
     * connection's, for its life: the whole timeout_ms, not the rest of
     * the publish that opens it. */
    int user_timeout = timeout_ms;
    if (setsockopt(amqp_get_sockfd(c->st), IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout) != 0) {
        int e = errno;
        odbox_rabbitmq_conn_free(c);
        return odbox_fail(err, ODBOX_ECONNECT,
                          "rabbitmq relay: %.100s:%d: cannot bound a send's wait (TCP_USER_TIMEOUT): %s", info->host,
                          info->port, strerror(e));
    }
    /* each step bounded by what is left of the publish's timeout_ms */
    amqp_rpc_reply_t r = NO_TIME_LEFT;
    const char *step = "login";
    if (bound_rpcs(c->st, end_us))
        r = amqp_login(c->st, info->vhost, 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN, info->user,
                       info->password);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        step = "channel.open";
        r = NO_TIME_LEFT;
        if (bound_rpcs(c->st, end_us)) {
            amqp_channel_open(c->st, CHANNEL);
            r = amqp_get_rpc_reply(c->st);
        }
    }
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        step = "confirm.select";
        r = NO_TIME_LEFT;
        if (bound_rpcs(c->st, end_us)) {
            amqp_confirm_select(c->st, CHANNEL);
            r = amqp_get_rpc_reply(c->st);
        }
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        /* a step that timed out ran out of the call's timeout_ms (its
         * bound was what was left of it) */
        int ran_out = odbox_rabbitmq_timed_out(r);
        odbox_rabbitmq_conn_free(c);
        return odbox_fail(err, ODBOX_ECONNECT, "rabbitmq relay: %.100s:%d vhost %.80s: %s: %s%s", info->host,
                          info->port, info->vhost, step, odbox_rabbitmq_reply_text(r, why, sizeof why),
                          ran_out ? " (the call's timeout_ms ran out while connecting)" : "");
    }
    *out = c;
    return ODBOX_OK;
}
