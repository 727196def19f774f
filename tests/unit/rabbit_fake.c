/* odbox — a fake AMQP 0-9-1 node (rabbit_fake.h). One thread accepts,
 * one per connection speaks the server's side through librabbitmq itself
 * (a connection state on the accepted socket reads the client's frames
 * and sends the node's methods). Every read is bounded (100 ms slices, a
 * stop flag), every sleep by the script's figures. */
#include "config.h"
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "rabbit_fake.h"

#define FAKE_CONNS 8
/* librabbitmq's frame type for a protocol header read in its initial
 * state (amqp_private.h, not installed) */
#define PROTOCOL_HEADER_FRAME 'A'

struct rabbit_fake {
    rabbit_fake_script script;
    int lfd, port;
    char url[64];
    atomic_int stop;
    pthread_t acceptor;
    pthread_mutex_t mu;
    int nconns;
    int fds[FAKE_CONNS];
    pthread_t threads[FAKE_CONNS];
    int published[FAKE_CONNS];
};

typedef struct {
    rabbit_fake *f;
    int k; /* the connection's index */
    amqp_connection_state_t st;
    uint64_t tag;       /* the last publish's delivery tag */
    int held;           /* the first ack is held */
    int64_t held_at_ms; /* ... since then */
} fake_conn;

static int64_t fake_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fake_sleep_ms(int64_t ms)
{
    if (ms > 0)
        usleep((useconds_t)ms * 1000);
}

/* The next frame, or 0 once the client left or the fake stops. */
static int next_frame(fake_conn *c, amqp_frame_t *fr)
{
    while (!atomic_load(&c->f->stop)) {
        struct timeval tv = {0, 100 * 1000};
        amqp_maybe_release_buffers(c->st);
        int st = amqp_simple_wait_frame_noblock(c->st, fr, &tv);
        if (st == AMQP_STATUS_OK)
            return 1;
        if (st != AMQP_STATUS_TIMEOUT)
            return 0;
    }
    return 0;
}

/* The next frame is method id (channel 0's handshake), else 0. */
static int expect(fake_conn *c, amqp_method_number_t id)
{
    amqp_frame_t fr;
    return next_frame(c, &fr) && fr.frame_type == AMQP_FRAME_METHOD && fr.payload.method.id == id;
}

static void send_ack(fake_conn *c, uint64_t tag)
{
    amqp_basic_ack_t ack = {.delivery_tag = tag, .multiple = 0};
    amqp_send_method(c->st, 1, AMQP_BASIC_ACK_METHOD, &ack);
}

static void send_close(fake_conn *c)
{
    amqp_connection_close_t cl = {.reply_code = AMQP_CONNECTION_FORCED,
                                  .reply_text = amqp_cstring_bytes("CONNECTION_FORCED - odbox fake: closed")};
    amqp_send_method(c->st, 0, AMQP_CONNECTION_CLOSE_METHOD, &cl);
}

static int handshake(fake_conn *c)
{
    amqp_frame_t fr;
    if (!next_frame(c, &fr) || fr.frame_type != PROTOCOL_HEADER_FRAME)
        return 0;
    amqp_connection_start_t start = {.version_major = 0,
                                     .version_minor = 9,
                                     .server_properties = amqp_empty_table,
                                     .mechanisms = amqp_cstring_bytes("PLAIN"),
                                     .locales = amqp_cstring_bytes("en_US")};
    amqp_send_method(c->st, 0, AMQP_CONNECTION_START_METHOD, &start);
    if (!expect(c, AMQP_CONNECTION_START_OK_METHOD))
        return 0;
    amqp_connection_tune_t tune = {.channel_max = 2047, .frame_max = 131072, .heartbeat = 0};
    amqp_send_method(c->st, 0, AMQP_CONNECTION_TUNE_METHOD, &tune);
    if (!expect(c, AMQP_CONNECTION_TUNE_OK_METHOD) || !expect(c, AMQP_CONNECTION_OPEN_METHOD))
        return 0;
    amqp_connection_open_ok_t ok = {.known_hosts = amqp_empty_bytes};
    amqp_send_method(c->st, 0, AMQP_CONNECTION_OPEN_OK_METHOD, &ok);
    return 1;
}

/* One method of the client's; 0 once the connection is closed. */
static int on_method(fake_conn *c, amqp_channel_t ch, const amqp_method_t *m)
{
    const rabbit_fake_script *s = &c->f->script;
    switch (m->id) {
    case AMQP_CHANNEL_OPEN_METHOD: {
        fake_sleep_ms(s->slow_open_ms);
        amqp_channel_open_ok_t ok = {.channel_id = amqp_empty_bytes};
        amqp_send_method(c->st, ch, AMQP_CHANNEL_OPEN_OK_METHOD, &ok);
        return 1;
    }
    case AMQP_CONFIRM_SELECT_METHOD: {
        fake_sleep_ms(s->slow_open_ms);
        amqp_confirm_select_ok_t ok = {0};
        amqp_send_method(c->st, ch, AMQP_CONFIRM_SELECT_OK_METHOD, &ok);
        return 1;
    }
    case AMQP_EXCHANGE_DECLARE_METHOD: {
        const amqp_exchange_declare_t *d = m->decoded;
        int named_close = s->close_on_declare && d->exchange.len == strlen(s->close_on_declare) &&
                          !memcmp(d->exchange.bytes, s->close_on_declare, d->exchange.len);
        if (named_close) {
            send_close(c);
            return 0;
        }
        if (s->slow_declare && d->exchange.len == strlen(s->slow_declare) &&
            !memcmp(d->exchange.bytes, s->slow_declare, d->exchange.len) && c->held) {
            fake_sleep_ms(c->held_at_ms + s->slow_declare_ms - fake_now_ms());
            send_ack(c, 1);
            c->held = 0;
        }
        amqp_exchange_declare_ok_t ok = {0};
        amqp_send_method(c->st, ch, AMQP_EXCHANGE_DECLARE_OK_METHOD, &ok);
        return 1;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
        amqp_channel_close_ok_t ok = {0};
        amqp_send_method(c->st, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        return 1;
    }
    case AMQP_BASIC_PUBLISH_METHOD:
        c->tag++;
        pthread_mutex_lock(&c->f->mu);
        c->f->published[c->k]++;
        pthread_mutex_unlock(&c->f->mu);
        if (c->k == 0 && (int)c->tag == s->close_on_publish) {
            send_close(c);
            return 0;
        }
        if (c->k == 0 && c->tag == 1 && s->close_after_ms) {
            fake_sleep_ms(s->close_after_ms);
            send_close(c);
            return 0;
        }
        if (s->never_ack)
            return 1;
        if (c->tag == 1 && s->slow_declare) {
            c->held = 1, c->held_at_ms = fake_now_ms();
            return 1;
        }
        send_ack(c, c->tag);
        return 1;
    case AMQP_CONNECTION_CLOSE_METHOD: {
        amqp_connection_close_ok_t ok = {0};
        amqp_send_method(c->st, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        return 0;
    }
    default: /* close-oks and the like */
        return 1;
    }
}

static void *conn_main(void *p)
{
    fake_conn *c = p;
    c->st = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(c->st);
    amqp_tcp_socket_set_sockfd(sock, c->f->fds[c->k]);
    int open = handshake(c);
    if (open) /* the client's frames may be as large as the tune said */
        amqp_tune_connection(c->st, 2047, 131072, 0);
    amqp_frame_t fr;
    while (open && next_frame(c, &fr))
        if (fr.frame_type == AMQP_FRAME_METHOD)
            open = on_method(c, fr.channel, &fr.payload.method);
    /* closed by the node: the client's socket stays open until it leaves
     * or the fake stops, as a node that waits for close-ok */
    while (!open && next_frame(c, &fr))
        ;
    amqp_destroy_connection(c->st); /* closes the socket */
    free(c);
    return NULL;
}

static void *accept_main(void *p)
{
    rabbit_fake *f = p;
    while (!atomic_load(&f->stop)) {
        struct pollfd pfd = {.fd = f->lfd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&f->mu);
        fake_conn *c = f->nconns < FAKE_CONNS ? calloc(1, sizeof *c) : NULL;
        if (c) {
            c->f = f, c->k = f->nconns, f->fds[c->k] = fd;
            if (pthread_create(&f->threads[c->k], NULL, conn_main, c) == 0)
                f->nconns++;
            else
                free(c), c = NULL;
        }
        pthread_mutex_unlock(&f->mu);
        if (!c)
            close(fd);
    }
    return NULL;
}

rabbit_fake *rabbit_fake_start(const rabbit_fake_script *script)
{
    rabbit_fake *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->script = *script;
    pthread_mutex_init(&f->mu, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(f->lfd, 16) != 0 ||
        getsockname(f->lfd, (struct sockaddr *)&a, &len) != 0 ||
        pthread_create(&f->acceptor, NULL, accept_main, f) != 0) {
        if (f->lfd >= 0)
            close(f->lfd);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return NULL;
    }
    f->port = ntohs(a.sin_port);
    snprintf(f->url, sizeof f->url, "amqp://guest:guest@127.0.0.1:%d/", f->port);
    return f;
}

int rabbit_fake_port(const rabbit_fake *f)
{
    return f->port;
}

const char *rabbit_fake_url(const rabbit_fake *f)
{
    return f->url;
}

int rabbit_fake_published(rabbit_fake *f, int k)
{
    pthread_mutex_lock(&f->mu);
    int n = k < FAKE_CONNS ? f->published[k] : 0;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int rabbit_fake_connections(rabbit_fake *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->nconns;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void rabbit_fake_stop(rabbit_fake *f)
{
    if (!f)
        return;
    atomic_store(&f->stop, 1);
    pthread_join(f->acceptor, NULL);
    for (int k = 0; k < f->nconns; k++)
        pthread_join(f->threads[k], NULL);
    close(f->lfd);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
