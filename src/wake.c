/* odbox — wake-up signals within a process, and the listener threads that
 * raise them when another process notifies (see wake.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "wake.h"
#include "callbacks.h"
#include "internal.h"
#include "registry_internal.h"
#include "odbox/dialect.h"
#include "odbox/dsn.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_BACKOFF_MIN_MS 100
#define DEFAULT_BACKOFF_MAX_MS 5000
/* How long one wait for a notification lasts: the loop around it also
 * watches the stop pipe, so this only bounds each call. */
#define LISTEN_WAIT_MS 1000

typedef struct wshard {
    odbox_wake *w;
    odbox_shard *shard;
    odbox_shard_id id;
    char channel[ODBOX_WAKE_NSIGNALS][ODBOX_NAME_MAX];
    atomic_int flag[ODBOX_WAKE_NSIGNALS];
    atomic_int listening;
    const odbox_dialect *dialect; /* of a started listener */
    odbox_dsn *dsn;               /* parsed primary DSN of a started listener (secret) */
    pthread_t thread;
    int has_thread;
} wshard;

struct odbox_wake {
    odbox_registry *r;
    odbox_wake_config cfg;
    wshard *shards;
    size_t n;
    odbox_callbacks subs; /* odbox_wake_fn, tagged with their signal */
    int stop_pipe[2];    /* written at stop: wakes every listener's wait */
    int started;
    odbox_notifier *notifier;
};

/* ---- in-process signals ------------------------------------------------------ */

int odbox_wake_open(odbox_registry *r, const odbox_wake_config *cfg, odbox_wake **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: out is NULL");
    *out = NULL;
    if (!r)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: registry is NULL");
    odbox_wake_config c = cfg ? *cfg : (odbox_wake_config){0};
    if (c.listen != 0 && c.listen != -1)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: listen is 0 (on) or -1 (off), not %d", c.listen);
    if (c.connect_timeout_ms < 0 || c.backoff_min_ms < 0 || c.backoff_max_ms < 0)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: timeouts and backoffs must not be negative");
    c.connect_timeout_ms = c.connect_timeout_ms ? c.connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    c.backoff_min_ms = c.backoff_min_ms ? c.backoff_min_ms : DEFAULT_BACKOFF_MIN_MS;
    c.backoff_max_ms = c.backoff_max_ms ? c.backoff_max_ms : DEFAULT_BACKOFF_MAX_MS;
    if (c.backoff_max_ms < c.backoff_min_ms)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: backoff_max_ms %d is below backoff_min_ms %d",
                          c.backoff_max_ms, c.backoff_min_ms);
    odbox_wake *w = calloc(1, sizeof *w);
    size_t count = odbox_registry_shard_count(r);
    if (!w || !(w->shards = calloc(count, sizeof *w->shards))) {
        free(w);
        return odbox_fail(err, ODBOX_ENOMEM, "wake-up: out of memory");
    }
    w->r = r;
    w->cfg = c;
    w->n = count;
    w->stop_pipe[0] = w->stop_pipe[1] = -1;
    int rc = ODBOX_OK;
    for (size_t i = 0; i < count && rc == ODBOX_OK; i++) {
        wshard *ws = &w->shards[i];
        ws->w = w;
        ws->shard = odbox_registry_shard_at(r, i);
        ws->id = odbox_shard_get_id(ws->shard);
        for (int sig = 0; sig < ODBOX_WAKE_NSIGNALS && rc == ODBOX_OK; sig++)
            rc = odbox_wake_channel(odbox_shard_eventlog(ws->shard), sig, ws->channel[sig], err);
    }
    if (rc == ODBOX_OK && pipe2(w->stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        rc = odbox_fail(err, ODBOX_ENOMEM, "wake-up: cannot create a pipe: %s", strerror(errno));
    if (rc == ODBOX_OK)
        rc = odbox_notifier_open(r, &w->notifier, err);
    if (rc != ODBOX_OK) {
        if (w->stop_pipe[0] >= 0) {
            close(w->stop_pipe[0]);
            close(w->stop_pipe[1]);
        }
        free(w->shards);
        free(w);
        return rc;
    }
    odbox_callbacks_init(&w->subs);
    *out = w;
    return ODBOX_OK;
}

int odbox_wake_subscribe(odbox_wake *w, odbox_wake_signal sig, odbox_wake_fn fn, void *ud, odbox_error *err)
{
    if (!w || !fn || !odbox_wake_signal_name(sig))
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: subscribe needs a wake, a known signal and a callback");
    int rc = odbox_callbacks_add(&w->subs, (int)sig, (odbox_callback_fn)fn, ud);
    if (rc == ODBOX_EINVAL)
        return odbox_fail(err, rc, "wake-up: this callback and user data are subscribed to %s already",
                          odbox_wake_signal_name(sig));
    return rc == ODBOX_OK ? rc : odbox_fail(err, rc, "wake-up: out of memory");
}

int odbox_wake_unsubscribe(odbox_wake *w, odbox_wake_signal sig, odbox_wake_fn fn, void *ud)
{
    return w ? odbox_callbacks_remove(&w->subs, (int)sig, (odbox_callback_fn)fn, ud) : ODBOX_EINVAL;
}

static wshard *find(odbox_wake *w, odbox_shard_id id)
{
    for (size_t i = 0; i < w->n; i++)
        if (w->shards[i].id.group == id.group && w->shards[i].id.member == id.member)
            return &w->shards[i];
    return NULL;
}

static void raise_local(wshard *ws, odbox_wake_signal sig)
{
    odbox_wake *w = ws->w;
    atomic_store(&ws->flag[sig], 1);
    size_t n;
    const odbox_callback *cb = odbox_callbacks_begin(&w->subs, &n);
    for (size_t i = 0; i < n; i++)
        if (cb[i].tag == (int)sig)
            ((odbox_wake_fn)cb[i].fn)(cb[i].ud, ws->id, sig);
    odbox_callbacks_end(&w->subs);
}

int odbox_wake_raise(odbox_wake *w, odbox_shard_id shard, odbox_wake_signal sig, int across_processes)
{
    if (!w || !odbox_wake_signal_name(sig))
        return ODBOX_EINVAL;
    wshard *ws = find(w, shard);
    if (!ws)
        return ODBOX_ENOTFOUND;
    raise_local(ws, sig);
    if (across_processes)
        odbox_notifier_post(w->notifier, ws->shard, sig);
    return ODBOX_OK;
}

int odbox_wake_take(odbox_wake *w, odbox_shard_id shard, odbox_wake_signal sig)
{
    if (!w || !odbox_wake_signal_name(sig))
        return ODBOX_EINVAL;
    wshard *ws = find(w, shard);
    return ws ? atomic_exchange(&ws->flag[sig], 0) : ODBOX_ENOTFOUND;
}

void odbox_wake_on_commit(void *wake, odbox_shard_id shard, size_t nevents)
{
    if (nevents > 0)
        odbox_wake_raise(wake, shard, ODBOX_WAKE_EVENTS, 0);
}

/* ---- listeners ------------------------------------------------------------------ */

/* Sleeps ms unless stopped first: 1 when stopped. */
static int pause_or_stop(odbox_wake *w, int ms)
{
    struct pollfd p = {.fd = w->stop_pipe[0], .events = POLLIN};
    int r;
    while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
        ;
    return r > 0;
}

static int stopped(odbox_wake *w)
{
    return pause_or_stop(w, 0);
}

static void *listen_loop(void *arg)
{
    wshard *ws = arg;
    odbox_wake *w = ws->w;
    const odbox_dialect *d = ws->dialect;
    const char *channels[ODBOX_WAKE_NSIGNALS];
    for (int sig = 0; sig < ODBOX_WAKE_NSIGNALS; sig++)
        channels[sig] = ws->channel[sig];
    int backoff = w->cfg.backoff_min_ms, failures = 0, sessions = 0;
    while (!stopped(w)) {
        odbox_listener *l = NULL;
        odbox_error e = {0};
        int rc = d->listen_open(ws->dsn, channels, ODBOX_WAKE_NSIGNALS, w->cfg.connect_timeout_ms,
                                w->stop_pipe[0], &l, &e);
        if (rc == ODBOX_EUNSUPPORTED || rc == ODBOX_EINVAL) {
            odbox_log(ODBOX_LOG_WARN, "wake-up: shard %d.%d cannot LISTEN (%s); workers poll it", ws->id.group,
                      ws->id.member, e.message);
            break;
        }
        if (rc != ODBOX_OK) {
            if (stopped(w))
                break;
            if (failures++ == 0)
                odbox_log(ODBOX_LOG_WARN, "wake-up: shard %d.%d: %s; retrying with backoff up to %d ms (workers "
                                          "poll meanwhile)", ws->id.group, ws->id.member, e.message,
                          w->cfg.backoff_max_ms);
            if (pause_or_stop(w, backoff))
                break;
            backoff = backoff > w->cfg.backoff_max_ms / 2 ? w->cfg.backoff_max_ms : backoff * 2;
            continue;
        }
        atomic_store(&ws->listening, 1);
        if (sessions++ > 0 || failures > 0) {
            odbox_log(ODBOX_LOG_INFO, "wake-up: shard %d.%d listens again", ws->id.group, ws->id.member);
            /* what was notified while no session listened is lost */
            for (int sig = 0; sig < ODBOX_WAKE_NSIGNALS; sig++)
                raise_local(ws, sig);
        }
        failures = 0;
        backoff = w->cfg.backoff_min_ms;
        for (;;) {
            unsigned got = 0;
            rc = d->listen_wait(l, LISTEN_WAIT_MS, w->stop_pipe[0], &got, &e);
            if (rc < 0 || stopped(w))
                break;
            for (int sig = 0; sig < ODBOX_WAKE_NSIGNALS; sig++)
                if (got & (1u << sig))
                    raise_local(ws, sig);
        }
        atomic_store(&ws->listening, 0);
        d->listen_close(&l);
        if (rc < 0) {
            failures = 1; /* the loss is the one line logged */
            odbox_log(ODBOX_LOG_WARN, "wake-up: shard %d.%d: %s; reconnecting", ws->id.group, ws->id.member,
                      e.message);
            if (pause_or_stop(w, backoff))
                break;
        }
    }
    return NULL;
}

/* The dialect of the shard's primary, connecting once when its DSN is a
 * raw ODBC string not yet connected; NULL when that fails (logged). */
static const odbox_dialect *shard_dialect(wshard *ws)
{
    odbox_pool *pool = odbox_shard_primary(ws->shard);
    const odbox_dialect *d = odbox_pool_dialect(pool);
    if (d)
        return d;
    odbox_conn *c = NULL;
    odbox_error e = {0};
    if (odbox_pool_acquire(pool, &c, &e) == ODBOX_OK) {
        d = odbox_conn_dialect(c);
        odbox_pool_release(pool, &c);
    } else {
        odbox_log(ODBOX_LOG_WARN, "wake-up: shard %d.%d: cannot tell its database (%s); workers poll it",
                  ws->id.group, ws->id.member, e.message);
    }
    return d;
}

/* Why shard cannot listen, or NULL when it can (ws->dialect and ws->dsn set). */
static const char *prepare_listener(wshard *ws, odbox_error *err, int *rc)
{
    *rc = ODBOX_OK;
    if (ws->w->cfg.listen == -1)
        return "listening is off";
    if (odbox_shard_notify_interval_ms(ws->shard) == 0)
        return "its DSN says notify=off";
    const odbox_dialect *d = shard_dialect(ws);
    if (!d)
        return "its database is unknown";
    if (!d->notify_sql)
        return "its database has no LISTEN";
    if (!d->listen_open)
        return "odbox was built without libpq";
    if ((*rc = odbox_dsn_parse(odbox_shard_primary_dsn(ws->shard), &ws->dsn, err)) != ODBOX_OK)
        return "its DSN";
    ws->dialect = d;
    return NULL;
}

int odbox_wake_start(odbox_wake *w, odbox_error *err)
{
    if (!w)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: start needs a wake");
    if (w->started)
        return odbox_fail(err, ODBOX_ESTATE, "wake-up: started already");
    w->started = 1;
    for (size_t i = 0; i < w->n; i++) {
        wshard *ws = &w->shards[i];
        int rc;
        const char *why = prepare_listener(ws, err, &rc);
        if (rc != ODBOX_OK) {
            odbox_wake_stop(w);
            return rc;
        }
        if (why) {
            odbox_log(ODBOX_LOG_INFO, "wake-up: shard %d.%d: no LISTEN (%s); its workers learn of other "
                                      "processes' commits by polling", ws->id.group, ws->id.member, why);
            continue;
        }
        if ((rc = pthread_create(&ws->thread, NULL, listen_loop, ws)) != 0) {
            odbox_wake_stop(w);
            return odbox_fail(err, ODBOX_ENOMEM, "wake-up: cannot start a listener thread (error %d)", rc);
        }
        ws->has_thread = 1;
    }
    return ODBOX_OK;
}

void odbox_wake_stop(odbox_wake *w)
{
    if (!w || !w->started)
        return;
    ssize_t wr;
    do
        wr = write(w->stop_pipe[1], "x", 1);
    while (wr < 0 && errno == EINTR);
    for (size_t i = 0; i < w->n; i++) {
        wshard *ws = &w->shards[i];
        if (ws->has_thread)
            pthread_join(ws->thread, NULL);
        ws->has_thread = 0;
        odbox_dsn_free(&ws->dsn);
        ws->dialect = NULL;
    }
    char buf[64];
    while (read(w->stop_pipe[0], buf, sizeof buf) > 0)
        ;
    w->started = 0;
}

int odbox_wake_listening(odbox_wake *w, odbox_shard_id shard)
{
    wshard *ws = w ? find(w, shard) : NULL;
    return ws ? atomic_load(&ws->listening) : 0;
}

void odbox_wake_free(odbox_wake **wp)
{
    if (!wp || !*wp)
        return;
    odbox_wake *w = *wp;
    odbox_wake_stop(w);
    odbox_notifier_free(&w->notifier);
    close(w->stop_pipe[0]);
    close(w->stop_pipe[1]);
    odbox_callbacks_destroy(&w->subs);
    free(w->shards);
    free(w);
    *wp = NULL;
}
