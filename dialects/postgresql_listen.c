/* odbox — PostgreSQL's listening side of cross-process wake-ups, through
 * libpq: psqlODBC reads NOTIFY messages off the wire and drops them, so the
 * listener opens a libpq session of its own (psqlODBC is built on libpq, so
 * this adds no new dependency to a PostgreSQL setup).
 *
 * Nothing here blocks without a bound: the connect, the LISTEN and every
 * wait poll the session's socket with a deadline and return early when the
 * caller's cancel_fd becomes readable (its stop). */
#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "dialects.h"
#include "postgresql_listen.h"
#include "odbox/registry.h"

#define MAX_CHANNELS 32
#define MAX_PARAMS 48

struct odbox_listener {
    PGconn *pg;
    char *channels[MAX_CHANNELS];
    size_t n;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until fd is ready for events: 1 ready (or in error, which the
 * next libpq call reports), 0 deadline passed, -1 cancel_fd readable. */
static int wait_fd(int fd, short events, int64_t deadline_ms, int cancel_fd)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = cancel_fd, .events = POLLIN}};
        int64_t left = deadline_ms - mono_ms();
        if (left < 0)
            left = 0;
        int r = poll(p, cancel_fd >= 0 ? 2 : 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return 1; /* let libpq find out what is wrong with the socket */
        if (cancel_fd >= 0 && p[1].revents)
            return -1;
        if (p[0].revents)
            return 1;
        if (left == 0)
            return 0;
    }
}

/* libpq's message, one line, or a fixed text when it could hold the
 * password (libpq never prints it; this makes sure). */
static int pg_fail(odbox_error *err, int code, const char *what, PGconn *pg, const char *password)
{
    const char *m = pg ? PQerrorMessage(pg) : "";
    if (!m || !*m)
        m = "no detail";
    if (password && *password && strstr(m, password))
        m = "(detail withheld: it may contain the password)";
    int len = (int)strcspn(m, "\n");
    return odbox_fail(err, code, "wake-up listener: %s: %.*s", what, len, m);
}

/* ---- connection parameters ---------------------------------------------- */

typedef struct params {
    const char *keys[MAX_PARAMS + 1];
    const char *vals[MAX_PARAMS + 1];
    char *owned[MAX_PARAMS]; /* values this module allocated (raw strings) */
    size_t n, nowned;
} params;

static int has_key(const params *p, const char *key)
{
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->keys[i], key))
            return 1;
    return 0;
}

static void set(params *p, const char *key, const char *val)
{
    if (val && *val && p->n < MAX_PARAMS && !has_key(p, key)) {
        p->keys[p->n] = key;
        p->vals[p->n++] = val;
    }
}

/* A libpq keyword spelled as key (any case), or NULL. */
static const char *libpq_keyword(const PQconninfoOption *known, const char *key)
{
    for (const PQconninfoOption *o = known; o && o->keyword; o++)
        if (odbox_strcaseeq(o->keyword, key))
            return o->keyword;
    return NULL;
}

/* The value of a raw ODBC string's entry named by one of names (the
 * grammar was checked by odbox_dsn_parse): malloc'd, unbraced; NULL when
 * absent. *oom set when memory ran out. */
static char *raw_value(const char *raw, const char *const *names, int *oom)
{
    const char *t = raw;
    while (*t) {
        while (*t == ' ' || *t == ';')
            t++;
        const char *k = t;
        while (*t && *t != '=')
            t++;
        if (!*t)
            return NULL;
        const char *ke = t++;
        while (ke > k && ke[-1] == ' ')
            ke--;
        while (*t == ' ')
            t++;
        odbox_buf v = {0};
        if (*t == '{') {
            for (t++; *t && !(*t == '}' && t[1] != '}'); t++) {
                odbox_buf_appendn(&v, t, 1);
                if (*t == '}')
                    t++; /* "}}" is one '}' */
            }
            if (*t)
                t++;
            while (*t && *t != ';')
                t++;
        } else {
            const char *vs = t;
            while (*t && *t != ';')
                t++;
            const char *ve = t;
            while (ve > vs && ve[-1] == ' ')
                ve--;
            odbox_buf_appendn(&v, vs, (size_t)(ve - vs));
        }
        int match = 0;
        for (const char *const *nm = names; *nm && !match; nm++)
            match = strlen(*nm) == (size_t)(ke - k) && !strncasecmp(k, *nm, (size_t)(ke - k));
        if (match) {
            char *s = odbox_buf_take(&v);
            if (!s)
                *oom = 1;
            return s;
        }
        if (v.data && v.cap)
            memset(v.data, 0, v.cap); /* it may have been the password */
        odbox_buf_reset(&v);
    }
    return NULL;
}

static void params_free(params *p)
{
    for (size_t i = 0; i < p->nowned; i++)
        odbox_free_secret(p->owned[i]);
}

/* libpq's parameters for the server dsn names: a URL's parts and those of
 * its options that are libpq keywords (sslmode, ...), or a raw string's
 * Server, Port, Database, Uid and Pwd; then extra's keys and values
 * (NULL-terminated pairs) that the DSN did not set. */
static int build_params(const odbox_dsn *dsn, params *p, const PQconninfoOption *known, char *port_buf,
                        size_t port_cap, const char *const *extra, odbox_error *err)
{
    memset(p, 0, sizeof *p);
    if (dsn->raw) {
        static const char *const server[] = {"Server", "Servername", NULL}, *const port[] = {"Port", NULL},
                                 *const db[] = {"Database", NULL}, *const sslmode[] = {"SSLmode", "sslmode", NULL};
        struct {
            const char *key;
            const char *const *names;
        } map[] = {{"host", server}, {"port", port}, {"dbname", db}, {"sslmode", sslmode}};
        int oom = 0;
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            char *v = raw_value(dsn->raw, map[i].names, &oom);
            if (v) {
                p->owned[p->nowned++] = v;
                set(p, map[i].key, v);
            }
        }
        if (oom) {
            params_free(p);
            return odbox_fail(err, ODBOX_ENOMEM, "wake-up listener: out of memory");
        }
        if (!has_key(p, "host")) {
            params_free(p);
            return odbox_fail(err, ODBOX_EUNSUPPORTED,
                              "wake-up listener: the raw ODBC connection string names no Server= (a DSN= entry "
                              "is resolved by the driver manager, which libpq cannot read)");
        }
    } else {
        snprintf(port_buf, port_cap, "%d", dsn->port ? dsn->port : 5432);
        set(p, "host", dsn->host);
        set(p, "port", port_buf);
        set(p, "dbname", dsn->database);
        for (size_t i = 0; i < dsn->noptions; i++) {
            const char *kw = libpq_keyword(known, dsn->options[i].key);
            if (kw && strcmp(kw, "password"))
                set(p, kw, dsn->options[i].value);
        }
    }
    set(p, "user", dsn->user);
    set(p, "password", dsn->password);
    for (size_t i = 0; extra[i]; i += 2)
        set(p, extra[i], extra[i + 1]);
    p->keys[p->n] = NULL;
    p->vals[p->n] = NULL;
    return ODBOX_OK;
}

/* ---- the session ---------------------------------------------------------- */

/* libpq prints notices to stderr by default; a library must not. A
 * terminated session's last words arrive this way. */
static void notice(void *arg, const char *message)
{
    (void)arg;
    int len = (int)strcspn(message, "\n");
    odbox_log(ODBOX_LOG_DEBUG, "wake-up listener: server says: %.*s", len, message);
}

static int connect_session(PGconn *pg, int64_t deadline, int cancel_fd, const char *password, odbox_error *err)
{
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    for (;;) {
        if (st == PGRES_POLLING_OK)
            return ODBOX_OK;
        if (st == PGRES_POLLING_FAILED)
            return pg_fail(err, ODBOX_ECONNECT, "cannot connect", pg, password);
        int r = wait_fd(PQsocket(pg), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline, cancel_fd);
        if (r <= 0)
            return odbox_fail(err, ODBOX_ETIMEDOUT, "wake-up listener: %s while connecting",
                              r < 0 ? "stopped" : "timed out");
        st = PQconnectPoll(pg);
    }
}

/* Sends LISTEN for every channel (one message) and reads its results. */
static int listen_all(odbox_listener *l, int64_t deadline, int cancel_fd, const char *password, odbox_error *err)
{
    odbox_buf q = {0};
    for (size_t i = 0; i < l->n; i++)
        odbox_buf_cat(&q, i ? "; LISTEN \"" : "LISTEN \"", l->channels[i], "\"", (char *)NULL);
    char *sql = odbox_buf_take(&q);
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "wake-up listener: out of memory");
    int ok = PQsetnonblocking(l->pg, 1) == 0 && PQsendQuery(l->pg, sql);
    free(sql);
    if (!ok)
        return pg_fail(err, ODBOX_ECONNLOST, "cannot send LISTEN", l->pg, password);
    int flushed;
    while ((flushed = PQflush(l->pg)) == 1) {
        int r = wait_fd(PQsocket(l->pg), POLLOUT, deadline, cancel_fd);
        if (r <= 0)
            return odbox_fail(err, ODBOX_ETIMEDOUT, "wake-up listener: %s sending LISTEN", r < 0 ? "stopped" : "timed out");
    }
    if (flushed < 0)
        return pg_fail(err, ODBOX_ECONNLOST, "cannot send LISTEN", l->pg, password);
    int rc = ODBOX_OK;
    for (;;) {
        while (PQisBusy(l->pg)) {
            int r = wait_fd(PQsocket(l->pg), POLLIN, deadline, cancel_fd);
            if (r <= 0)
                return odbox_fail(err, ODBOX_ETIMEDOUT, "wake-up listener: %s waiting for LISTEN",
                                  r < 0 ? "stopped" : "timed out");
            if (!PQconsumeInput(l->pg))
                return pg_fail(err, ODBOX_ECONNLOST, "LISTEN", l->pg, password);
        }
        PGresult *res = PQgetResult(l->pg);
        if (!res)
            return rc;
        if (PQresultStatus(res) != PGRES_COMMAND_OK && rc == ODBOX_OK)
            rc = pg_fail(err, ODBOX_EDB, "LISTEN failed", l->pg, password);
        PQclear(res);
    }
}

void odbox_pg_listen_close(odbox_listener **lp)
{
    if (!lp || !*lp)
        return;
    odbox_listener *l = *lp;
    if (l->pg)
        PQfinish(l->pg);
    for (size_t i = 0; i < l->n; i++)
        free(l->channels[i]);
    free(l);
    *lp = NULL;
}

int odbox_pg_listen_open(const odbox_dsn *dsn, const char *const *channels, size_t nchannels, int timeout_ms,
                         int cancel_fd, odbox_listener **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up listener: out is NULL");
    *out = NULL;
    if (!dsn || !channels || nchannels == 0 || nchannels > MAX_CHANNELS || timeout_ms <= 0)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up listener: needs a DSN, 1..%d channels and a timeout",
                          MAX_CHANNELS);
    for (size_t i = 0; i < nchannels; i++)
        if (!odbox_name_is_valid(channels[i]))
            return odbox_fail(err, ODBOX_EINVAL, "wake-up listener: channel '%.80s' is not a valid name",
                              channels[i] ? channels[i] : "(null)");
    int64_t deadline = mono_ms() + timeout_ms;
    odbox_listener *l = calloc(1, sizeof *l);
    if (!l)
        return odbox_fail(err, ODBOX_ENOMEM, "wake-up listener: out of memory");
    for (; l->n < nchannels; l->n++)
        if (!(l->channels[l->n] = strdup(channels[l->n]))) {
            odbox_pg_listen_close(&l);
            return odbox_fail(err, ODBOX_ENOMEM, "wake-up listener: out of memory");
        }
    PQconninfoOption *known = PQconndefaults();
    params p;
    char port[16];
    /* Seen by operators in pg_stat_activity; keepalives find a server that
     * went away while the session waits, which it does most of its life. */
    static const char *const extra[] = {"application_name", "odbox-wake", "keepalives", "1", "keepalives_idle", "30",
                                        "keepalives_interval", "10", "keepalives_count", "3", NULL};
    int rc = known ? build_params(dsn, &p, known, port, sizeof port, extra, err)
                   : odbox_fail(err, ODBOX_ENOMEM, "wake-up listener: out of memory");
    if (rc == ODBOX_OK) {
        l->pg = PQconnectStartParams(p.keys, p.vals, 0);
        params_free(&p);
        if (!l->pg)
            rc = odbox_fail(err, ODBOX_ENOMEM, "wake-up listener: out of memory");
        else if (PQstatus(l->pg) == CONNECTION_BAD)
            rc = pg_fail(err, ODBOX_ECONNECT, "cannot connect", l->pg, dsn->password);
        else
            PQsetNoticeProcessor(l->pg, notice, NULL);
    }
    if (known)
        PQconninfoFree(known);
    if (rc == ODBOX_OK)
        rc = connect_session(l->pg, deadline, cancel_fd, dsn->password, err);
    if (rc == ODBOX_OK)
        rc = listen_all(l, deadline, cancel_fd, dsn->password, err);
    if (rc != ODBOX_OK) {
        odbox_pg_listen_close(&l);
        return rc;
    }
    *out = l;
    return ODBOX_OK;
}

/* Takes the notifications libpq has read: their count, their channels'
 * bits in *got. */
static int take(odbox_listener *l, unsigned *got)
{
    int count = 0;
    PGnotify *n;
    while ((n = PQnotifies(l->pg))) {
        for (size_t i = 0; i < l->n; i++)
            if (!strcmp(n->relname, l->channels[i]))
                *got |= 1u << i;
        PQfreemem(n);
        count++;
    }
    return count;
}

int odbox_pg_listen_wait(odbox_listener *l, int timeout_ms, int cancel_fd, unsigned *got, odbox_error *err)
{
    if (!l || !got || timeout_ms < 0)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up listener: wait needs a listener, got and a timeout");
    *got = 0;
    int count = take(l, got);
    if (count > 0)
        return count;
    if (PQstatus(l->pg) == CONNECTION_BAD)
        return pg_fail(err, ODBOX_ECONNLOST, "session lost", l->pg, NULL);
    int r = wait_fd(PQsocket(l->pg), POLLIN, mono_ms() + timeout_ms, cancel_fd);
    if (r <= 0)
        return 0;
    /* also what a terminated session or a restarting server sends: its
     * error, then the end of the stream */
    if (!PQconsumeInput(l->pg) || PQstatus(l->pg) == CONNECTION_BAD)
        return pg_fail(err, ODBOX_ECONNLOST, "session lost", l->pg, NULL);
    return take(l, got);
}

/* ---- the connection string of driver=libpq (src/db/pq.c) --------------------- */

/* Appends key='value' to b, with ' and \ escaped as libpq reads them. */
static void conninfo_add(odbox_buf *b, const char *key, const char *value)
{
    odbox_buf_cat(b, b->len ? " " : "", key, "='", (char *)NULL);
    for (const char *v = value; *v; v++) {
        if (*v == '\'' || *v == '\\')
            odbox_buf_appendn(b, "\\", 1);
        odbox_buf_appendn(b, v, 1);
    }
    odbox_buf_append(b, "'");
}

/* The timeouts as psqlODBC's connection string sets them
 * (dialects/postgresql.c): connect_timeout bounds the TCP connect and the
 * login; keepalives and tcp_user_timeout drop a session whose peer has
 * not answered for about read_timeout. DateStyle ISO as psqlODBC sets it:
 * the text values odbox parses. */
int odbox_pg_conninfo(const odbox_dsn *dsn, char **out, odbox_error *err)
{
    *out = NULL;
    odbox_timeouts t;
    int rc = odbox_dsn_timeouts(dsn, &t, err);
    if (rc != ODBOX_OK)
        return rc;
    char connect_s[16], idle[16], interval[16], user_timeout[24];
    snprintf(connect_s, sizeof connect_s, "%d", t.connect_s);
    snprintf(idle, sizeof idle, "%d", t.read_s / 2 > 0 ? t.read_s / 2 : 1);
    snprintf(interval, sizeof interval, "%d", t.read_s / 10 > 0 ? t.read_s / 10 : 1);
    snprintf(user_timeout, sizeof user_timeout, "%d", t.read_s * 1000);
    static const char iso[] = "-c DateStyle=ISO";
    const char *extra[21] = {"application_name", "odbox", "client_encoding", "UTF8", "options", iso};
    size_t n = 6;
    if (t.connect_s > 0)
        extra[n++] = "connect_timeout", extra[n++] = connect_s;
    if (t.read_s > 0) {
        const char *const keepalive[] = {"keepalives", "1", "keepalives_idle", idle, "keepalives_interval",
                                         interval, "keepalives_count", "5", "tcp_user_timeout", user_timeout};
        memcpy(extra + n, keepalive, sizeof keepalive);
        n += sizeof keepalive / sizeof keepalive[0];
    }
    extra[n] = NULL;
    PQconninfoOption *known = PQconndefaults();
    if (!known)
        return odbox_fail(err, ODBOX_ENOMEM, "connect: out of memory");
    /* an ODBC driver's option (ConnSettings, ...) would be dropped without
     * a word, and what it asked for not done */
    for (size_t i = 0; i < dsn->noptions; i++) {
        const char *k = dsn->options[i].key;
        if (!libpq_keyword(known, k) && !odbox_strcaseeq(k, "read_timeout")) {
            rc = odbox_fail(err, ODBOX_EINVAL,
                            "DSN: option '%.64s' is not one of libpq's connection keywords, which are all "
                            "driver=libpq takes (PostgreSQL's manual, \"Parameter Key Words\")",
                            k);
            PQconninfoFree(known);
            return rc;
        }
    }
    params p;
    char port[16];
    rc = build_params(dsn, &p, known, port, sizeof port, extra, err);
    PQconninfoFree(known);
    if (rc != ODBOX_OK)
        return rc;
    /* the DSN's own options= keeps the ISO dates odbox parses, last so
     * that they win */
    odbox_buf opts = {0};
    for (size_t i = 0; i < p.n; i++)
        if (!strcmp(p.keys[i], "options") && p.vals[i] != iso) {
            odbox_buf_cat(&opts, p.vals[i], " ", iso, (char *)NULL);
            if (opts.oom) {
                params_free(&p);
                odbox_buf_reset(&opts);
                return odbox_fail(err, ODBOX_ENOMEM, "connect: out of memory");
            }
            p.vals[i] = opts.data;
        }
    odbox_buf b = {0};
    for (size_t i = 0; i < p.n; i++)
        conninfo_add(&b, p.keys[i], p.vals[i]);
    odbox_buf_reset(&opts);
    params_free(&p);
    if (!(*out = odbox_buf_take(&b))) {
        odbox_buf_reset(&b);
        return odbox_fail(err, ODBOX_ENOMEM, "connect: out of memory");
    }
    return ODBOX_OK;
}
