/* odbox — network faults for the integration tests: a black-hole listener
 * and a proxy that can stall, each a thread polling its sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "odbox/dsn.h"
#include "netfault.h"

/* netfault runs inside Check's tests and in tests/relay/stall-proxy,
 * outside them (where any ck_assert exits): a failure is printed and
 * aborts, which a test reports as its signal. */
#define require(cond, ...)                                                                                 \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "netfault: " __VA_ARGS__);                                                       \
            fputc('\n', stderr);                                                                            \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

#define MAX_CONNS 64

struct netfault {
    pthread_t thread;
    pthread_mutex_t mu;
    int listen_fd, port;
    int ctl[2];              /* the test writes 's' (stall), 'c' (cut), 'x' (close) or 'q' (quit) */
    int proxy;               /* forward to upstream_port */
    int upstream_port;
    struct in_addr upstream;
    int stalled;
    int cut_armed;           /* netfault_cut_next_answer */
    int accepted;
    int close_seq;           /* netfault_close: which connection */
    int client[MAX_CONNS], server[MAX_CONNS]; /* -1: free slot */
    int seq[MAX_CONNS];      /* the order each was accepted in, from 0 */
};

static int listen_any_port(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    require(fd >= 0, "socket failed");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    require(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind failed");
    require(listen(fd, MAX_CONNS) == 0, "listen failed");
    socklen_t len = sizeof a;
    require(getsockname(fd, (struct sockaddr *)&a, &len) == 0, "getsockname failed");
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_upstream(netfault *n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)n->upstream_port)};
    a.sin_addr = n->upstream;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

static void close_pair(netfault *n, int i)
{
    if (n->client[i] >= 0)
        close(n->client[i]);
    if (n->server[i] >= 0)
        close(n->server[i]);
    n->client[i] = n->server[i] = -1;
}

/* Copies what from has to to; 0 when from closed or either failed. */
static int pump(int from, int to)
{
    char buf[65536];
    ssize_t got = read(from, buf, sizeof buf);
    if (got <= 0)
        return 0;
    for (ssize_t off = 0; off < got;) {
        ssize_t put = write(to, buf + off, (size_t)(got - off));
        if (put <= 0)
            return 0;
        off += put;
    }
    return 1;
}

static void *run(void *ud)
{
    netfault *n = ud;
    for (;;) {
        struct pollfd p[2 + 2 * MAX_CONNS];
        int slot[2 + 2 * MAX_CONNS], np = 0;
        p[np++] = (struct pollfd){.fd = n->ctl[0], .events = POLLIN};
        p[np++] = (struct pollfd){.fd = n->listen_fd, .events = POLLIN};
        for (int i = 0; n->proxy && !n->stalled && i < MAX_CONNS; i++) {
            if (n->client[i] < 0)
                continue;
            slot[np] = i;
            p[np++] = (struct pollfd){.fd = n->client[i], .events = POLLIN};
            slot[np] = i;
            p[np++] = (struct pollfd){.fd = n->server[i], .events = POLLIN};
        }
        if (poll(p, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[0].revents) {
            char cmd = 'q';
            if (read(n->ctl[0], &cmd, 1) != 1 || cmd == 'q')
                break;
            if (cmd == 'c') {
                n->cut_armed = 1;
            } else if (cmd == 'x') {
                pthread_mutex_lock(&n->mu);
                int seq = n->close_seq;
                pthread_mutex_unlock(&n->mu);
                for (int i = 0; i < MAX_CONNS; i++)
                    if (n->client[i] >= 0 && n->seq[i] == seq)
                        close_pair(n, i);
            } else
                n->stalled = 1;
            continue;
        }
        if (p[1].revents & POLLIN) {
            int fd = accept(n->listen_fd, NULL, NULL);
            int i = 0;
            while (i < MAX_CONNS && n->client[i] >= 0)
                i++;
            if (fd >= 0 && i < MAX_CONNS) {
                n->client[i] = fd;
                if (n->proxy && (n->server[i] = connect_upstream(n)) < 0)
                    close_pair(n, i);
                pthread_mutex_lock(&n->mu);
                n->seq[i] = n->accepted++;
                pthread_mutex_unlock(&n->mu);
            } else if (fd >= 0) {
                close(fd);
            }
        }
        for (int k = 2; k < np; k++) {
            int i = slot[k];
            if (!p[k].revents || n->client[i] < 0)
                continue;
            int from = p[k].fd, to = from == n->client[i] ? n->server[i] : n->client[i];
            if (n->cut_armed && from == n->server[i]) {
                n->cut_armed = 0;
                close_pair(n, i);
            } else if (!pump(from, to)) {
                close_pair(n, i);
            }
        }
    }
    return NULL;
}

static netfault *start(int proxy, const char *host, int port)
{
    netfault *n = calloc(1, sizeof *n);
    require(n != NULL, "out of memory");
    pthread_mutex_init(&n->mu, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        n->client[i] = n->server[i] = -1;
    n->proxy = proxy;
    if (proxy) {
        n->upstream_port = port;
        require(inet_pton(AF_INET, host, &n->upstream) == 1, "proxy: '%s' is not an IPv4 address", host);
    }
    n->listen_fd = listen_any_port(&n->port);
    require(pipe(n->ctl) == 0, "pipe failed");
    require(pthread_create(&n->thread, NULL, run, n) == 0, "pthread_create failed");
    return n;
}

netfault *netfault_black_hole(void) { return start(0, NULL, 0); }
netfault *netfault_proxy(const char *host, int port) { return start(1, host, port); }

netfault *netfault_proxy_to(const char *dsn)
{
    odbox_dsn *d = NULL;
    odbox_error e;
    require(odbox_dsn_parse(dsn, &d, &e) == 0, "%s", e.message);
    netfault *n = start(1, d->host, d->port);
    odbox_dsn_free(&d);
    return n;
}
int netfault_port(const netfault *n) { return n->port; }

int netfault_accepted(netfault *n)
{
    pthread_mutex_lock(&n->mu);
    int k = n->accepted;
    pthread_mutex_unlock(&n->mu);
    return k;
}

static void command(netfault *n, char cmd)
{
    require(write(n->ctl[1], &cmd, 1) == 1, "cannot reach the proxy thread");
}

/* Sends cmd and waits until the thread has read it: from then on it acts
 * on it, before it forwards anything more. */
static void command_taken(netfault *n, char cmd)
{
    command(n, cmd);
    for (int i = 0; i < 500; i++) {
        struct pollfd p = {.fd = n->ctl[0], .events = POLLIN};
        if (poll(&p, 1, 0) == 0)
            return;
        usleep(10 * 1000);
    }
    require(0, "proxy thread did not take the '%c' command", cmd);
}

void netfault_stall(netfault *n) { command_taken(n, 's'); }
void netfault_cut_next_answer(netfault *n) { command_taken(n, 'c'); }

void netfault_close(netfault *n, int seq)
{
    pthread_mutex_lock(&n->mu);
    n->close_seq = seq;
    pthread_mutex_unlock(&n->mu);
    command_taken(n, 'x');
}

void netfault_free(netfault **np)
{
    if (!np || !*np)
        return;
    netfault *n = *np;
    command(n, 'q');
    pthread_join(n->thread, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        close_pair(n, i);
    close(n->listen_fd);
    close(n->ctl[0]);
    close(n->ctl[1]);
    pthread_mutex_destroy(&n->mu);
    free(n);
    *np = NULL;
}

char *netfault_dsn(const char *text, int port, const char *extra)
{
    odbox_dsn *d = NULL;
    odbox_error e;
    require(odbox_dsn_parse(text, &d, &e) == 0, "%s", e.message);
    require(d->scheme && d->noptions == 0, "netfault_dsn: a URL without options is expected");
    char *out = malloc(1024);
    require(out != NULL, "out of memory");
    snprintf(out, 1024, "%s://%s%s%s@127.0.0.1:%d/%s%s%s", d->scheme, d->user ? d->user : "",
             d->password ? ":" : "", d->password ? d->password : "", port, d->database ? d->database : "",
             extra ? "?" : "", extra ? extra : "");
    odbox_dsn_free(&d);
    return out;
}
