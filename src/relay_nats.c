/* odbox — the NATS JetStream relay (see odbox/relay_nats.h). */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "internal.h"
#include "odbox/relay_nats.h"
#include "relay_nats_internal.h"

/* Not NATS_DEFAULT_URL: <nats/nats.h>, included below, defines that as
 * nats://localhost:4222 and, a system header, replaces ours silently. */
#define ODBOX_NATS_DEFAULT_URL "nats://127.0.0.1:4222"
#define NATS_DEFAULT_TIMEOUT_MS 10000
/* After a failed connect, publishes fail with its error this long rather
 * than each trying again: with a server that does not answer, the workers
 * would otherwise wait for the lock one connect timeout after another. */
#define NATS_CONNECT_RETRY_MS 1000
/* nats-server answers a PUB line over its max_control_line (4096 bytes by
 * default) by closing the connection, which libnats then closes for good:
 * a longer subject is refused per row, with room left on the line for the
 * reply inbox, the sizes and a server configured below the default. */
#define NATS_SUBJECT_MAX 1024

/* Settings as open_json reads them; the strings are json's until copied. */
static int settings_from_json(json_object *s, odbox_relay_nats_config *c, odbox_error *err)
{
    memset(c, 0, sizeof *c);
    if (!s || !json_object_is_type(s, json_type_object))
        return odbox_fail(err, ODBOX_EINVAL, "nats relay settings: not a JSON object");
    json_object_object_foreach(s, key, val)
    {
        const char **dst = !strcmp(key, "url")       ? &c->url
                           : !strcmp(key, "subject") ? &c->subject
                           : !strcmp(key, "stream")  ? &c->stream
                                                     : NULL;
        if (dst) {
            if (!json_object_is_type(val, json_type_string))
                return odbox_fail(err, ODBOX_EINVAL, "nats relay settings: \"%s\" is not a string", key);
            *dst = json_object_get_string(val);
        } else if (!strcmp(key, "timeout_ms")) {
            if (!json_object_is_type(val, json_type_int))
                return odbox_fail(err, ODBOX_EINVAL, "nats relay settings: \"timeout_ms\" is not an integer");
            int64_t v = json_object_get_int64(val);
            if (v < 0 || v > 3600000)
                return odbox_fail(err, ODBOX_EINVAL, "nats relay settings: timeout_ms %lld not in 0..3600000",
                                  (long long)v);
            c->timeout_ms = (int)v;
        } else {
            return odbox_fail(err, ODBOX_EINVAL,
                              "nats relay settings: unknown key \"%.64s\" (known: url, subject, stream, timeout_ms)",
                              key);
        }
    }
    if (!c->subject)
        return odbox_fail(err, ODBOX_EINVAL, "nats relay settings: \"subject\" is required");
    return ODBOX_OK;
}

/* url with each server's userinfo (user:password, or a token) as ***, for
 * messages: a server's last '@' ends it, since a password may hold one.
 * NULL when out of memory. */
static char *url_without_secrets(const char *url)
{
    odbox_buf out = {0};
    for (const char *p = url;;) {
        size_t n = strcspn(p, ",");
        const char *scheme = strstr(p, "://");
        /* what stays before the userinfo: the scheme, or the blanks libnats
         * skips before a server without one */
        size_t keep = scheme && scheme < p + n ? (size_t)(scheme - p) + 3 : strspn(p, " \t");
        const char *at = NULL;
        for (const char *q = p + keep; q < p + n; q++)
            if (*q == '@')
                at = q;
        if (at) {
            odbox_buf_appendn(&out, p, keep);
            odbox_buf_append(&out, "***");
            odbox_buf_appendn(&out, at, (size_t)(p + n - at));
        } else {
            odbox_buf_appendn(&out, p, n);
        }
        p += n;
        if (!*p)
            break;
        odbox_buf_appendn(&out, p++, 1);
    }
    return odbox_buf_take(&out);
}

/* A subject NATS would refuse or read as a pattern: the row's error (the
 * open's for a template without a placeholder). */
static int check_subject(const char *s, odbox_error *err)
{
    const char *why = NULL;
    size_t n = strlen(s);
    if (n > NATS_SUBJECT_MAX)
        return odbox_fail(err, ODBOX_EINVAL,
                          "nats relay: subject '%.80s...' is %zu bytes: over the %d bytes odbox allows (nats-server "
                          "closes the connection on a PUB line over its max_control_line, 4096 bytes by default)",
                          s, n, NATS_SUBJECT_MAX);
    if (!n)
        why = "it is empty";
    else if (s[0] == '.' || s[n - 1] == '.' || strstr(s, ".."))
        why = "it has an empty token";
    else if (strpbrk(s, " \t\r\n"))
        why = "it has white space";
    else if (strpbrk(s, "*>"))
        why = "it has a wildcard (* or >)";
    if (!why)
        return ODBOX_OK;
    return odbox_fail(err, ODBOX_EINVAL, "nats relay: subject '%.200s' is not a subject to publish to: %s", s, why);
}

/* One server of a url list (n bytes at p, blanks around it libnats
 * skips): [nats:// or tls://][userinfo@]host[:port][/...] as libnats
 * reads it, host an IPv6 address in brackets too; NULL when it is one,
 * else why not. libnats would take http:// or a missing host and fail
 * every publish with it: refused at open instead. */
static const char *server_problem(const char *p, size_t n)
{
    while (n && (*p == ' ' || *p == '\t'))
        p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (!n)
        return "is empty";
    const char *end = p + n, *scheme = NULL;
    for (const char *q = p; q + 3 <= end && !scheme; q++)
        if (!memcmp(q, "://", 3))
            scheme = q;
    if (scheme) {
        size_t sn = (size_t)(scheme - p);
        if (!(sn == 4 && !strncasecmp(p, "nats", 4)) && !(sn == 3 && !strncasecmp(p, "tls", 3)))
            return "has a scheme other than nats:// or tls://";
        p = scheme + 3;
    }
    const char *hostport = p;
    for (const char *q = p; q < end; q++) /* the last '@' ends the userinfo, as url_without_secrets reads it */
        if (*q == '@')
            hostport = q + 1;
    for (const char *q = hostport; q < end; q++)
        if (*q == '/') { /* a path: libnats ignores it */
            end = q;
            break;
        }
    const char *port = NULL;
    if (hostport < end && *hostport == '[') {
        const char *close = NULL;
        for (const char *q = hostport; q < end && !close; q++)
            if (*q == ']')
                close = q;
        if (!close || close == hostport + 1)
            return "has no host (an IPv6 address in [ ] without its ] or empty)";
        if (close + 1 < end && close[1] != ':')
            return "has something after the [host] that is not :port";
        port = close + 1 < end ? close + 2 : NULL;
    } else {
        const char *colon = NULL;
        for (const char *q = hostport; q < end; q++)
            if (*q == ':') {
                if (colon)
                    return "has no host[:port] (more than one ':' outside [ ])";
                colon = q;
            }
        if ((colon ? colon : end) == hostport)
            return "has no host";
        for (const char *q = hostport; q < (colon ? colon : end); q++)
            if (*q == ' ' || *q == '\t' || *q == '[' || *q == ']')
                return "has no host (white space or a bracket in it)";
        port = colon ? colon + 1 : NULL;
    }
    if (port) {
        long v = 0;
        if (port == end)
            return "has an empty port";
        for (const char *q = port; q < end; q++) {
            if (*q < '0' || *q > '9')
                return "has a port that is not a number";
            if ((v = v * 10 + (*q - '0')) > 65535)
                return "has a port over 65535";
        }
        if (!v)
            return "has port 0";
    }
    return NULL;
}

#define URL_WANT "(want [nats:// or tls://][user:password@]host[:port], a comma-separated list for a cluster)"

/* Each server of url, or ODBOX_EINVAL naming the first bad one (its
 * passwords and tokens as ***). A ',' always separates servers, as
 * libnats reads a list, so one in a password or token splits it: a piece
 * without an '@' of its own in a url that has one is not quoted, lest it
 * be the first part of a password. */
static int check_urls(const char *url, odbox_error *err)
{
    int nth = 1, count = 1;
    for (const char *q = url; (q = strchr(q, ',')) != NULL; q++)
        count++;
    for (const char *p = url;; p++, nth++) {
        size_t n = strcspn(p, ",");
        const char *why = server_problem(p, n);
        if (why && !memchr(p, '@', n) && strchr(url, '@'))
            return odbox_fail(err, ODBOX_EINVAL,
                              "nats relay: url: server %d of %d %s; not quoted: the url holds a password or token, "
                              "and a ',' in one would split it (a ',' always separates servers) " URL_WANT,
                              nth, count, why);
        if (why) {
            char *entry = strndup(p, n), *shown = entry ? url_without_secrets(entry) : NULL;
            int rc = odbox_fail(err, ODBOX_EINVAL, "nats relay: url: server '%.200s' %s " URL_WANT,
                                shown ? shown : "?", why);
            free(entry);
            free(shown);
            return rc;
        }
        p += n;
        if (!*p)
            return ODBOX_OK;
    }
}

/* A subject template without a placeholder is the subject of every row:
 * one NATS refuses fails at open, not each row at publish. */
static int check_fixed_subject(const char *tmpl, odbox_error *err)
{
    char *fixed = NULL;
    int rc = odbox_relay_fixed_text(tmpl, &fixed, err);
    if (rc == ODBOX_OK && fixed)
        rc = check_subject(fixed, err);
    free(fixed);
    return rc;
}

static int check_config(const odbox_relay_nats_config *cfg, odbox_error *err)
{
    if (!cfg || !cfg->subject)
        return odbox_fail(err, ODBOX_EINVAL, "nats relay: config or subject is NULL");
    if (cfg->timeout_ms < 0)
        return odbox_fail(err, ODBOX_EINVAL, "nats relay: timeout_ms %d is negative", cfg->timeout_ms);
    if (cfg->timeout_ms > ODBOX_RELAY_TIMEOUT_MAX_MS)
        return odbox_fail(err, ODBOX_EINVAL, "nats relay: timeout_ms %d is over %d (an hour)", cfg->timeout_ms,
                          ODBOX_RELAY_TIMEOUT_MAX_MS);
    if (cfg->url && !*cfg->url)
        return odbox_fail(err, ODBOX_EINVAL, "nats relay: url is empty");
    int rc = cfg->url ? check_urls(cfg->url, err) : ODBOX_OK;
    if (rc != ODBOX_OK)
        return rc;
    if ((rc = odbox_relay_template_check(cfg->subject, err)) != ODBOX_OK)
        return odbox_error_prefix(err, rc, "nats relay: subject");
    return check_fixed_subject(cfg->subject, err);
}

int odbox_relay_nats_open_json(json_object *settings, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    odbox_relay_nats_config c;
    int rc = settings_from_json(settings, &c, err);
    return rc == ODBOX_OK ? odbox_relay_nats_open(&c, broker, err) : rc;
}

#ifdef HAVE_LIBNATS
#include <nats/nats.h>

/* A connection and its JetStream context, shared by the publishes (libnats
 * allows it). One that libnats closed for good leaves the broker, and the
 * last publish still using it destroys it. */
typedef struct nats_conn {
    natsConnection *nc;
    jsCtx *js;
    int users; /* publishes using it: under the broker's mu */
} nats_conn;

typedef struct nats_broker {
    char *url, *subject, *stream;
    char *url_shown; /* url without its passwords and tokens: the only one in messages */
    int timeout_ms;
    pthread_mutex_t mu; /* guards conn, users and the failed connect */
    nats_conn *conn;    /* NULL: none yet, or libnats closed it */
    int64_t failed_ms;  /* when the last connect failed (monotonic); 0: none */
    odbox_error failed; /* ... and why */
} nats_broker;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A call's budget, as a Kafka relay's: the connect and the stream check
 * share timeout_ms from the call's start, the wait for acks ends a second
 * after that, and a batch then waits at most one more second for ack
 * handlers already running; so no call lasts past timeout_ms + 2 s, well
 * within the handler timeout `odbox relay` gives it. */
static int64_t connect_end_ms(const nats_broker *b, int64_t start_ms) { return start_ms + b->timeout_ms; }
static int64_t acks_end_ms(const nats_broker *b, int64_t start_ms) { return start_ms + b->timeout_ms + 1000; }

/* The milliseconds to end_ms, at least 1 (libnats reads 0 as its default). */
static int64_t ms_left(int64_t end_ms)
{
    int64_t left = end_ms - mono_ms();
    return left < 1 ? 1 : left;
}

static int nats_code(natsStatus s)
{
    switch (s) {
    case NATS_TIMEOUT:
        return ODBOX_ETIMEDOUT;
    case NATS_NO_SERVER:
        return ODBOX_ECONNECT;
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_STALE_CONNECTION:
        return ODBOX_ECONNLOST;
    case NATS_NO_MEMORY:
        return ODBOX_ENOMEM;
    case NATS_MAX_PAYLOAD: /* over the server's max_payload: never sent */
        return ODBOX_EDISCARD;
    default:
        return ODBOX_EIO;
    }
}

static int nats_fail(odbox_error *err, natsStatus s, jsErrCode jerr, const char *what, const char *arg)
{
    return odbox_fail(err, nats_code(s), "nats relay: %s %.200s: %s (status %d, JetStream error %d)", what, arg,
                      natsStatus_GetText(s), (int)s, (int)jerr);
}

/* The servers of b's url for natsOptions_SetServers: natsOptions_SetURL
 * takes one server, and reads "nats://a:1,nats://b:2" as a host named
 * "a:1,nats://b". *tls: one of them asks for it (tls://). */
static natsStatus url_servers(const nats_broker *b, char **copy, const char ***servers, int *count, int *tls)
{
    *count = 1;
    *tls = 0;
    for (const char *q = b->url; (q = strchr(q, ',')) != NULL; q++)
        (*count)++;
    *copy = strdup(b->url);
    *servers = calloc((size_t)*count, sizeof **servers);
    if (!*copy || !*servers)
        return NATS_NO_MEMORY;
    char *p = *copy;
    for (int i = 0; i < *count; i++) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        (*servers)[i] = p;
        p += strspn(p, " \t"); /* libnats trims a server's blanks itself */
        *tls |= !strncasecmp(p, "tls://", 6);
        p = comma ? comma + 1 : p;
    }
    return NATS_OK;
}

static natsStatus make_options(const nats_broker *b, natsOptions **o)
{
    char *copy = NULL;
    const char **servers = NULL;
    int count = 0, tls = 0;
    natsStatus s = url_servers(b, &copy, &servers, &count, &tls);
    if (s == NATS_OK)
        s = natsOptions_Create(o);
    if (s == NATS_OK)
        s = natsOptions_SetServers(*o, servers, count);
    /* libnats 3.4 does not read the scheme: without this, tls:// to a
     * server that does not ask for TLS would send the password in clear */
    if (s == NATS_OK && tls)
        s = natsOptions_SetSecure(*o, true);
    free(copy);
    free(servers);
    /* libnats tries the servers one after another, each for this long:
     * together they keep to the call's connect budget */
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(*o, b->timeout_ms / count > 0 ? b->timeout_ms / count : 1);
    /* once connected, reconnect forever; a publish meanwhile waits at most
     * timeout_ms for its ack, so no wait is unbounded */
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(*o, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(*o, 500);
    return s;
}

static void conn_free(nats_conn *c)
{
    if (!c)
        return;
    jsCtx_Destroy(c->js);
    if (c->nc)
        natsConnection_Close(c->nc);
    natsConnection_Destroy(c->nc);
    free(c);
}

/* A new connection for b, its stream checked by end_ms (under b->mu). */
static int connect_once(nats_broker *b, int64_t end_ms, nats_conn **out, odbox_error *err)
{
    natsOptions *o = NULL;
    jsOptions jo;
    jsErrCode jerr = 0;
    int rc = ODBOX_OK;
    nats_conn *c = calloc(1, sizeof *c);
    if (!c)
        return odbox_fail(err, ODBOX_ENOMEM, "nats relay: out of memory");
    natsStatus s = make_options(b, &o);
    if (s == NATS_OK)
        s = natsConnection_Connect(&c->nc, o);
    if (s == NATS_OK)
        s = jsOptions_Init(&jo);
    if (s == NATS_OK) {
        jo.Wait = b->timeout_ms;
        s = natsConnection_JetStream(&c->js, c->nc, &jo);
    }
    natsOptions_Destroy(o);
    if (s != NATS_OK) {
        rc = nats_fail(err, s, jerr, "cannot connect to", b->url_shown);
    } else if (b->stream) {
        jsStreamInfo *si = NULL;
        jsOptions so;
        jsOptions_Init(&so);
        so.Wait = ms_left(end_ms);
        s = js_GetStreamInfo(&si, c->js, b->stream, &so, &jerr);
        jsStreamInfo_Destroy(si);
        if (s != NATS_OK)
            rc = nats_fail(err, s, jerr, "stream", b->stream);
    }
    if (rc != ODBOX_OK)
        conn_free(c);
    else
        *out = c;
    return rc;
}

/* Takes b's connection away (under b->mu) once libnats has closed it for
 * good: it no longer reconnects after repeated auth errors or a server's
 * -ERR, so the next publish connects anew. *dropped says so (libnats's
 * last error, for the log); returns the connection when no publish uses
 * it, for the caller to free. */
static nats_conn *conn_drop_closed(nats_broker *b, char *dropped, size_t cap)
{
    nats_conn *c = b->conn;
    if (!c || !natsConnection_IsClosed(c->nc))
        return NULL;
    const char *why = NULL;
    natsConnection_GetLastError(c->nc, &why);
    snprintf(dropped, cap, "%s", why && *why ? why : "no error given");
    b->conn = NULL;
    return c->users ? NULL : c;
}

static void log_dropped(const nats_broker *b, const char *dropped)
{
    if (*dropped)
        odbox_log(ODBOX_LOG_WARN, "nats relay: the connection to %s was closed for good (%.200s): connecting anew",
                  b->url_shown, dropped);
}

/* The connection a publish uses until conn_release: b's, or a new one when
 * it has none or libnats closed it (checked by end_ms); a failed connect
 * answers for NATS_CONNECT_RETRY_MS. */
static int conn_acquire(nats_broker *b, int64_t end_ms, nats_conn **out, odbox_error *err)
{
    int rc = ODBOX_OK;
    char dropped[256] = "";
    pthread_mutex_lock(&b->mu);
    nats_conn *closed = conn_drop_closed(b, dropped, sizeof dropped);
    if (!b->conn && b->failed_ms && mono_ms() - b->failed_ms < NATS_CONNECT_RETRY_MS) {
        rc = b->failed.code;
        if (err)
            *err = b->failed;
    } else if (!b->conn && (rc = connect_once(b, end_ms, &b->conn, &b->failed)) != ODBOX_OK) {
        b->failed_ms = mono_ms();
        if (err)
            *err = b->failed;
    }
    if (rc == ODBOX_OK) {
        b->conn->users++;
        *out = b->conn;
    }
    pthread_mutex_unlock(&b->mu);
    conn_free(closed);
    log_dropped(b, dropped);
    return rc;
}

/* s: the publish's status; NATS_CONNECTION_CLOSED takes c away at once. */
static void conn_release(nats_broker *b, nats_conn *c, natsStatus s)
{
    char dropped[256] = "";
    pthread_mutex_lock(&b->mu);
    if (s == NATS_CONNECTION_CLOSED && b->conn == c)
        conn_drop_closed(b, dropped, sizeof dropped); /* c->users > 0: freed below */
    int last = --c->users == 0 && b->conn != c;
    pthread_mutex_unlock(&b->mu);
    if (last)
        conn_free(c);
    log_dropped(b, dropped);
}

/* A redelivery the stream dropped: worth seeing, not a fault. */
static void log_duplicate(const odbox_envelope *env, const char *stream)
{
    odbox_log(ODBOX_LOG_INFO, "relay %s: event %s was in %s%s already (a redelivery, dropped)",
              env->handler_name ? env->handler_name : "?", env->event_id, stream ? "stream " : "its stream",
              stream ? stream : "");
}

/* The subject of env's message (*subject malloc'd, or NULL), or why it
 * can never be published (ODBOX_EDISCARD): a subject NATS refuses, a body
 * libnats cannot take. */
static int subject_for(const nats_broker *b, const odbox_envelope *env, size_t len, char **subject,
                       odbox_error *err)
{
    *subject = NULL;
    if (len > INT32_MAX)
        return odbox_fail(err, ODBOX_EDISCARD, "discarded: nats relay: a body of %zu bytes", len);
    int rc = odbox_relay_expand(b->subject, env, subject, err);
    if (rc == ODBOX_OK && (rc = check_subject(*subject, err)) != ODBOX_OK)
        rc = odbox_error_discard(err);
    return rc;
}

static int nats_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    nats_broker *b = broker;
    if (!b || !env || !body)
        return odbox_fail(err, ODBOX_EINVAL, "nats relay: publish without broker, event or body");
    char *subject = NULL;
    nats_conn *c = NULL;
    int64_t start = mono_ms();
    int rc = subject_for(b, env, len, &subject, err);
    if (rc == ODBOX_OK)
        rc = conn_acquire(b, connect_end_ms(b, start), &c, err);
    if (rc == ODBOX_OK) {
        jsPubOptions po;
        jsPubAck *ack = NULL;
        jsErrCode jerr = 0;
        jsPubOptions_Init(&po);
        po.MsgId = env->event_id;
        int64_t left = ms_left(acks_end_ms(b, start));
        po.MaxWait = left < b->timeout_ms ? left : b->timeout_ms;
        if (b->stream)
            po.ExpectStream = b->stream;
        natsStatus s = js_Publish(&ack, c->js, subject, body, (int)len, &po, &jerr);
        if (s == NATS_OK && ack && ack->Duplicate)
            log_duplicate(env, ack->Stream);
        jsPubAck_Destroy(ack);
        if (s != NATS_OK)
            rc = nats_fail(err, s, jerr, "publish to", subject);
        conn_release(b, c, s);
    }
    free(subject);
    return rc;
}

/* ---- a round's rows at once ---------------------------------------------------- */

/* The answers of one batch, written by libnats's thread as acks come. */
typedef struct nats_batch {
    const odbox_envelope *const *envs;
    size_t n;
    int *rcs; /* 1 until answered */
    odbox_error *errs;
    /* the rows whose ack said Duplicate (NULL: out of memory, not told),
     * logged by the publisher once the wait is over: the ack handler only
     * writes memory, so the 1 s given to one already running is enough
     * (a log callback could block for longer, and nb would be gone) */
    unsigned char *dup;
    size_t next; /* after the row acked last: acks come in publish order, so the next one's row is
                    usually here (only the ack handler's thread reads and writes it) */
} nats_batch;

static void batch_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    nats_batch *nb = closure;
    const char *id = NULL;
    natsMsgHeader_Get(msg, "Nats-Msg-Id", &id); /* the event id, unique in a batch */
    for (size_t k = 0; id && k < nb->n; k++) {
        size_t i = (nb->next + k) % nb->n;
        /* only the row acked is read: the publisher may still be writing
         * the rcs of rows it could not publish */
        if (strcmp(nb->envs[i]->event_id, id))
            continue;
        nb->next = i + 1;
        if (nb->rcs[i] != 1)
            break;
        if (pa) {
            nb->rcs[i] = ODBOX_OK;
            if (pa->Duplicate && nb->dup)
                nb->dup[i] = 1;
        } else {
            natsStatus s = pae ? pae->Err : NATS_ERR;
            nb->rcs[i] = odbox_fail(&nb->errs[i], nats_code(s), "nats relay: publish to %.200s: %s (status %d, "
                                    "JetStream error %d)", natsMsg_GetSubject(msg),
                                    pae && pae->ErrText ? pae->ErrText : natsStatus_GetText(s), (int)s,
                                    pae ? (int)pae->ErrCode : 0);
        }
        break;
    }
    natsMsg_Destroy(msg);
}

/* Publishes every row asynchronously on a JetStream context of its own,
 * whose ack handler answers them, then waits for the answers: each
 * message has timeout_ms for its ack (libnats answers a late one with a
 * timeout), and the wait for them all ends a second after the call's
 * timeout_ms (connect_end_ms). */
static void nats_publish_batch(void *broker, size_t n, const odbox_envelope *const *envs, const char *const *bodies,
                               const size_t *lens, int *rcs, odbox_error *errs)
{
    nats_broker *b = broker;
    if (n == 1) { /* a quiet moment's row: one request costs least */
        rcs[0] = nats_publish(broker, envs[0], bodies[0], lens[0], &errs[0]);
        return;
    }
    nats_batch nb = {.envs = envs, .n = n, .rcs = rcs, .errs = errs, .dup = calloc(n, 1)};
    for (size_t i = 0; i < n; i++)
        rcs[i] = 1;
    odbox_error e = {0};
    nats_conn *c = NULL;
    int64_t start = mono_ms();
    int rc = conn_acquire(b, connect_end_ms(b, start), &c, &e);
    natsStatus closed = NATS_OK; /* NATS_CONNECTION_CLOSED once a publish said so */
    jsCtx *js = NULL;
    jsOptions jo;
    if (rc == ODBOX_OK && jsOptions_Init(&jo) == NATS_OK) {
        jo.PublishAsync.AckHandler = batch_ack;
        jo.PublishAsync.AckHandlerClosure = &nb;
        natsStatus s = natsConnection_JetStream(&js, c->nc, &jo);
        if (s != NATS_OK)
            rc = nats_fail(&e, s, 0, "cannot publish to", b->url_shown);
    }
    for (size_t i = 0; i < n && rc == ODBOX_OK; i++) {
        char *subject = NULL;
        natsMsg *m = NULL;
        int one = subject_for(b, envs[i], lens[i], &subject, &errs[i]);
        if (one == ODBOX_OK) {
            jsPubOptions po;
            jsPubOptions_Init(&po);
            po.MsgId = envs[i]->event_id;
            po.MaxWait = b->timeout_ms;
            if (b->stream)
                po.ExpectStream = b->stream;
            natsStatus s = natsMsg_Create(&m, subject, NULL, bodies[i], (int)lens[i]);
            if (s == NATS_OK)
                s = js_PublishMsgAsync(js, &m, &po);
            if (s != NATS_OK)
                one = nats_fail(&errs[i], s, 0, "publish to", subject);
            if (s == NATS_CONNECTION_CLOSED)
                closed = s;
            natsMsg_Destroy(m); /* no-op once libnats took it */
        }
        if (one != ODBOX_OK)
            rcs[i] = one;
        free(subject);
    }
    if (js) {
        /* now, not after the 1 ms libnats's flusher waits for more; a
         * flush that does not come back soon (a reconnect) leaves the
         * messages to the acks' own bound */
        int64_t left = ms_left(acks_end_ms(b, start));
        natsConnection_FlushTimeout(c->nc, left < 500 ? left : 500);
        jsPubOptions wait;
        jsPubOptions_Init(&wait);
        wait.MaxWait = ms_left(acks_end_ms(b, start));
        if (js_PublishAsyncComplete(js, &wait) != NATS_OK) {
            /* take back what is still unanswered, then let an ack handler
             * already running finish before nb goes */
            natsMsgList pending = {0};
            if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK)
                natsMsgList_Destroy(&pending);
            wait.MaxWait = 1000;
            js_PublishAsyncComplete(js, &wait);
        }
        jsCtx_Destroy(js);
    }
    if (c)
        conn_release(b, c, closed);
    for (size_t i = 0; nb.dup && i < n; i++)
        if (nb.dup[i] && rcs[i] == ODBOX_OK)
            log_duplicate(envs[i], b->stream);
    free(nb.dup);
    for (size_t i = 0; i < n; i++)
        if (rcs[i] == 1 && rc != ODBOX_OK) {
            rcs[i] = rc;
            errs[i] = e;
        } else if (rcs[i] == 1) {
            rcs[i] = odbox_fail(&errs[i], ODBOX_ETIMEDOUT, "nats relay: no ack within %d ms of the call's start",
                                b->timeout_ms + 1000);
        }
}

static void nats_close(void *broker)
{
    nats_broker *b = broker;
    if (!b)
        return;
    conn_free(b->conn); /* no publish runs any more: a closed one was freed by its last */
    pthread_mutex_destroy(&b->mu);
    free(b->url);
    free(b->url_shown);
    free(b->subject);
    free(b->stream);
    free(b);
}

int odbox_relay_nats_open(const odbox_relay_nats_config *cfg, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    if (!broker)
        return odbox_fail(err, ODBOX_EINVAL, "nats relay: broker is NULL");
    int rc = check_config(cfg, err);
    if (rc != ODBOX_OK)
        return rc;
    nats_broker *b = calloc(1, sizeof *b);
    if (!b || pthread_mutex_init(&b->mu, NULL)) {
        free(b);
        return odbox_fail(err, ODBOX_ENOMEM, "nats relay: out of memory");
    }
    b->url = strdup(cfg->url ? cfg->url : ODBOX_NATS_DEFAULT_URL);
    b->url_shown = url_without_secrets(b->url);
    b->subject = strdup(cfg->subject);
    b->stream = cfg->stream ? strdup(cfg->stream) : NULL;
    b->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : NATS_DEFAULT_TIMEOUT_MS;
    if (!b->url || !b->url_shown || !b->subject || (cfg->stream && !b->stream)) {
        nats_close(b);
        return odbox_fail(err, ODBOX_ENOMEM, "nats relay: out of memory");
    }
    *broker = b;
    return ODBOX_OK;
}

const char *odbox_relay_nats_url_shown(const void *broker)
{
    return broker ? ((const nats_broker *)broker)->url_shown : NULL;
}

#else /* !HAVE_LIBNATS */

#define NATS_MISSING "nats relay: odbox was built without NATS (install the Debian package libnats-dev and run " \
                     "configure --with-nats)"

static int nats_publish(void *broker, const odbox_envelope *env, const char *body, size_t len, odbox_error *err)
{
    return odbox_fail(err, ODBOX_EUNSUPPORTED, NATS_MISSING);
}

static void nats_close(void *broker)
{
}

int odbox_relay_nats_open(const odbox_relay_nats_config *cfg, void **broker, odbox_error *err)
{
    if (broker)
        *broker = NULL;
    if (!broker) /* as with libnats: a build judges arguments the same */
        return odbox_fail(err, ODBOX_EINVAL, "nats relay: broker is NULL");
    int rc = check_config(cfg, err);
    return rc == ODBOX_OK ? odbox_fail(err, ODBOX_EUNSUPPORTED, NATS_MISSING) : rc;
}

const char *odbox_relay_nats_url_shown(const void *broker)
{
    return NULL;
}

#endif

const odbox_relay_ops odbox_relay_nats_ops = {.version = ODBOX_RELAY_OPS_VERSION,
                                              .kind = "nats",
                                              .publish = nats_publish,
                                              .close = nats_close,
#ifdef HAVE_LIBNATS
                                              .publish_batch = nats_publish_batch
#endif
};
