/* odbox — the writer's side of cross-process wake-ups: NOTIFY after a
 * commit, from a thread of its own (see wake.h).
 *
 * Committers only set a flag per channel (post); the thread sends one
 * NOTIFY per flagged channel and then leaves that channel alone for the
 * shard's interval, so a burst of commits costs a few NOTIFYs. A flag set
 * while a NOTIFY is on its way stays set and is sent after the interval:
 * every commit is followed by a NOTIFY sent after it.
 *
 * The channel names are made here: wake.c's listeners use them, so this
 * file does not call wake.c (one-way layers, docs/architecture.md). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "wake.h"
#include "internal.h"
#include "registry_internal.h"
#include "odbox/dialect.h"

/* A wait with nothing to do still wakes this often: every wait is bounded. */
#define IDLE_WAIT_US 1000000
/* The private pool's wait for its one connection (only the thread uses it). */
#define ACQUIRE_TIMEOUT_MS 1000

/* ---- channel names (the listeners of wake.c use them too) ---------------- */

static const char *const signal_names[ODBOX_WAKE_NSIGNALS] = {"events", "notifications"};

const char *odbox_wake_signal_name(odbox_wake_signal sig)
{
    return (int)sig >= 0 && sig < ODBOX_WAKE_NSIGNALS ? signal_names[sig] : NULL;
}

int odbox_wake_channel(const char *eventlog, odbox_wake_signal sig, char out[ODBOX_NAME_MAX], odbox_error *err)
{
    const char *name = odbox_wake_signal_name(sig);
    if (!name)
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: unknown signal %d", (int)sig);
    if (!odbox_name_is_valid(eventlog))
        return odbox_fail(err, ODBOX_EINVAL, "wake-up: eventlog '%.80s' is not a valid name",
                          eventlog ? eventlog : "(null)");
    size_t len = strlen(eventlog), tail = 1 + strlen(name);
    char *p = out;
    if (len + tail < ODBOX_NAME_MAX) {
        memcpy(p, eventlog, len);
        p += len;
    } else {
        char hash[65];
        odbox_sha256_hex(eventlog, len, hash);
        size_t keep = ODBOX_NAME_MAX - 1 - tail - 9;
        memcpy(p, eventlog, keep);
        p[keep] = '_';
        memcpy(p + keep + 1, hash, 8);
        p += keep + 9;
    }
    *p++ = '_';
    memcpy(p, name, tail); /* with its NUL */
    return ODBOX_OK;
}

/* ---- the notifier thread ---------------------------------------------------- */

enum { UNDECIDED = 0, SENDS, SILENT };

typedef struct nshard {
    odbox_shard *shard;
    char channel[ODBOX_WAKE_NSIGNALS][ODBOX_NAME_MAX];
    atomic_int mode;                           /* UNDECIDED, SENDS or SILENT */
    atomic_int pending[ODBOX_WAKE_NSIGNALS];
    int64_t not_before_us[ODBOX_WAKE_NSIGNALS]; /* monotonic; the thread's own */
    odbox_pool *pool;                          /* one connection, opened by the thread */
    int failing;                               /* the last send failed (logged once) */
} nshard;

struct odbox_notifier {
    odbox_registry *r;
    nshard *shards;
    size_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int started, stopping;
    pthread_t thread;
};

static void wait_until(odbox_notifier *n, int64_t at_us)
{
    struct timespec ts = {(time_t)(at_us / 1000000), (long)(at_us % 1000000) * 1000};
    pthread_cond_timedwait(&n->cv, &n->mu, &ts);
}

int odbox_notifier_open(odbox_registry *r, odbox_notifier **out, odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "notifier: out is NULL");
    *out = NULL;
    if (!r)
        return odbox_fail(err, ODBOX_EINVAL, "notifier: registry is NULL");
    odbox_notifier *n = calloc(1, sizeof *n);
    size_t count = odbox_registry_shard_count(r);
    if (!n || !(n->shards = calloc(count, sizeof *n->shards))) {
        free(n);
        return odbox_fail(err, ODBOX_ENOMEM, "notifier: out of memory");
    }
    n->r = r;
    n->n = count;
    for (size_t i = 0; i < count; i++) {
        nshard *ns = &n->shards[i];
        ns->shard = odbox_registry_shard_at(r, i);
        for (int sig = 0; sig < ODBOX_WAKE_NSIGNALS; sig++) {
            int rc = odbox_wake_channel(odbox_shard_eventlog(ns->shard), sig, ns->channel[sig], err);
            if (rc != ODBOX_OK) {
                free(n->shards);
                free(n);
                return rc;
            }
        }
        if (odbox_shard_notify_interval_ms(ns->shard) == 0)
            atomic_store(&ns->mode, SILENT);
    }
    pthread_mutex_init(&n->mu, NULL);
    odbox_cond_init_mono(&n->cv);
    *out = n;
    return ODBOX_OK;
}

/* One NOTIFY on ns's channel of sig, on the notifier's own connection. */
static void send_one(nshard *ns, int sig)
{
    odbox_error e = {0};
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    int rc = ODBOX_OK;
    if (!ns->pool) {
        odbox_pool_config pc = {.size = 1, .acquire_timeout_ms = ACQUIRE_TIMEOUT_MS};
        rc = odbox_pool_open(odbox_shard_primary_dsn(ns->shard), &pc, &ns->pool, &e);
    }
    if (rc == ODBOX_OK)
        rc = odbox_pool_acquire(ns->pool, &c, &e);
    const odbox_dialect *d = c ? odbox_conn_dialect(c) : NULL;
    if (rc == ODBOX_OK && d->notify_sql) {
        if ((rc = odbox_stmt_prepare(c, d->notify_sql, &s, &e)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_text(s, 1, ns->channel[sig], &e)) == ODBOX_OK &&
            (rc = odbox_stmt_bind_text(s, 2, "", &e)) == ODBOX_OK)
            rc = odbox_stmt_execute(s, &e);
        odbox_stmt_free(&s);
    }
    if (c)
        odbox_pool_release(ns->pool, &c);
    odbox_shard_id id = odbox_shard_get_id(ns->shard);
    if (rc != ODBOX_OK && !ns->failing)
        odbox_log(ODBOX_LOG_WARN,
                  "wake-up: NOTIFY %s on shard %d.%d failed (a hint only: workers still poll): %s: %s",
                  ns->channel[sig], id.group, id.member, odbox_errname(rc), e.message);
    else if (rc == ODBOX_OK && ns->failing)
        odbox_log(ODBOX_LOG_INFO, "wake-up: NOTIFY on shard %d.%d works again", id.group, id.member);
    ns->failing = rc != ODBOX_OK;
}

static void *run(void *arg)
{
    odbox_notifier *n = arg;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        int64_t now = odbox_mono_us(), next = now + IDLE_WAIT_US;
        int sent = 0;
        for (size_t i = 0; i < n->n; i++) {
            nshard *ns = &n->shards[i];
            for (int sig = 0; sig < ODBOX_WAKE_NSIGNALS; sig++) {
                if (!atomic_load(&ns->pending[sig]))
                    continue;
                if (ns->not_before_us[sig] > now && !n->stopping) {
                    if (ns->not_before_us[sig] < next)
                        next = ns->not_before_us[sig];
                    continue;
                }
                atomic_store(&ns->pending[sig], 0); /* a post from now on asks again */
                pthread_mutex_unlock(&n->mu);
                send_one(ns, sig);
                pthread_mutex_lock(&n->mu);
                ns->not_before_us[sig] = odbox_mono_us() + (int64_t)odbox_shard_notify_interval_ms(ns->shard) * 1000;
                sent = 1;
            }
        }
        if (sent)
            continue; /* time went by: look again */
        if (n->stopping)
            break;
        wait_until(n, next);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

static nshard *find(odbox_notifier *n, odbox_shard *s)
{
    for (size_t i = 0; i < n->n; i++)
        if (n->shards[i].shard == s)
            return &n->shards[i];
    return NULL;
}

/* SENDS or SILENT, decided once the shard's dialect is known (a raw ODBC
 * DSN's only after its first connection, which a commit has made). */
static int mode_of(nshard *ns)
{
    int mode = atomic_load(&ns->mode);
    if (mode != UNDECIDED)
        return mode;
    const odbox_dialect *d = odbox_pool_dialect(odbox_shard_primary(ns->shard));
    if (!d)
        return UNDECIDED;
    mode = d->notify_sql ? SENDS : SILENT;
    atomic_store(&ns->mode, mode);
    return mode;
}

void odbox_notifier_post(odbox_notifier *n, odbox_shard *shard, odbox_wake_signal sig)
{
    if (!n || !shard || (int)sig < 0 || sig >= ODBOX_WAKE_NSIGNALS)
        return;
    nshard *ns = find(n, shard);
    if (!ns || mode_of(ns) != SENDS || atomic_exchange(&ns->pending[sig], 1))
        return; /* nothing to send, or the thread will send it already */
    pthread_mutex_lock(&n->mu);
    if (!n->started && !n->stopping) {
        int rc = pthread_create(&n->thread, NULL, run, n);
        n->started = rc == 0;
        if (rc != 0)
            odbox_log(ODBOX_LOG_ERROR, "wake-up: cannot start the NOTIFY thread (error %d): workers in other "
                                       "processes learn of commits by polling", rc);
    }
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

void odbox_notifier_free(odbox_notifier **np)
{
    if (!np || !*np)
        return;
    odbox_notifier *n = *np;
    pthread_mutex_lock(&n->mu);
    n->stopping = 1;
    pthread_cond_signal(&n->cv);
    int started = n->started;
    pthread_mutex_unlock(&n->mu);
    if (started)
        pthread_join(n->thread, NULL);
    for (size_t i = 0; i < n->n; i++)
        odbox_pool_free(&n->shards[i].pool);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n->shards);
    free(n);
    *np = NULL;
}
