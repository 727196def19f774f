/* odbox — keyed locks: leases over the session locks of src/db/lock.c.
 *
 * A hold is one lock taken on one session of the shard's lock pool: a
 * pool of its own beside the primary pool (opened by the registry, sized
 * by odbox_lock_pool_config), so that lock sessions never take the
 * connections odbox_execute writes through. A waiter does not keep a
 * session while it waits: each try borrows one, and gives it back unless
 * the try took the lock. So sessions are pinned only by held locks, and
 * waiters on one hot key cannot use up the sessions other keys need.
 * Every hold lives in one process-wide list (g_holds) with its owner
 * thread, so a nested acquire by the same thread for the same key and
 * shard finds it and only counts up; each lease points at its hold, and
 * the outermost release unlocks and returns the connection.
 *
 * The max-hold watchdog is one shared thread, started on demand, that
 * sleeps on a condition variable until the earliest deadline of the armed
 * holds. When a deadline passes it disarms the hold, marks it as being
 * fired (g_firing), drops the list mutex and unlocks the lock on the
 * hold's connection under the hold's own mutex. A release that finds its
 * hold being fired waits for the watchdog to finish with it, so the two
 * never use the connection at once and the hold is never freed under the
 * watchdog. The connection stays pinned to the hold until the owner
 * releases it; when the force-unlock failed, that release discards it.
 * The watchdog thread exits after WATCHDOG_LINGER_MS without armed holds
 * and is joined by the next start, by fork's child handler reset, or at
 * exit by a destructor.
 *
 * Lock order: g_mu before hold->mu; nobody takes g_mu holding hold->mu. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "odbox/lock.h"

#define POLL_MS 50                /* a waiter tries the lock this often */
#define WATCHDOG_LINGER_MS 2000   /* idle watchdog thread exits after this */

typedef struct hold {
    struct hold *prev, *next;  /* g_holds; under g_mu */
    pthread_t owner;
    const odbox_shard *shard;
    odbox_pool *pool;
    char *key;
    int count;                 /* live leases; under g_mu */
    int armed;                 /* in the watchdog's sight; under g_mu */
    struct timespec deadline;  /* CLOCK_MONOTONIC; under g_mu */

    pthread_mutex_t mu;        /* guards held, unlock_failed and the use of conn */
    odbox_conn *conn;
    int held;                  /* the database lock is held */
    int unlock_failed;         /* the watchdog could not unlock: discard conn */
} hold;

struct odbox_lease {
    hold *h;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv;          /* wakes the watchdog: new deadline or stop */
static pthread_cond_t g_done_cv;     /* the watchdog finished firing g_firing */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static hold *g_holds;
static hold *g_firing;
static pthread_t g_thread;
static int g_thread_valid;           /* g_thread was created and not joined */
static int g_running;                /* g_thread has not decided to exit */
static int g_stop;

/* ---- time ----------------------------------------------------------------- */

static int ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* ---- watchdog ----------------------------------------------------------------- */

static void atfork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_mu); }

/* The child has no watchdog thread and no other threads: their holds are
 * not its own (the connections belong to the parent's sessions). */
static void atfork_child(void)
{
    g_holds = NULL;
    g_firing = NULL;
    g_thread_valid = 0;
    g_running = 0;
    g_stop = 0;
    pthread_mutex_unlock(&g_mu);
}

static void init_once(void)
{
    odbox_cond_init_mono(&g_cv);
    pthread_cond_init(&g_done_cv, NULL);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Unlocks h's lock if it is still held. Runs on the watchdog thread with
 * g_mu released and g_firing == h, so the owner cannot free h meanwhile. */
static void force_release(hold *h)
{
    pthread_mutex_lock(&h->mu);
    if (h->held) {
        odbox_error e;
        if (odbox_conn_unlock(h->conn, h->key, &e) != ODBOX_OK)
            h->unlock_failed = 1;
        h->held = 0;
    }
    pthread_mutex_unlock(&h->mu);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_mu);
    struct timespec idle_until = odbox_mono_after(WATCHDOG_LINGER_MS);
    while (!g_stop) {
        hold *first = NULL;
        for (hold *h = g_holds; h; h = h->next)
            if (h->armed && (!first || ts_before(&h->deadline, &first->deadline)))
                first = h;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!first) {
            if (!ts_before(&now, &idle_until))
                break;
            pthread_cond_timedwait(&g_cv, &g_mu, &idle_until);
            continue;
        }
        if (ts_before(&now, &first->deadline)) {
            pthread_cond_timedwait(&g_cv, &g_mu, &first->deadline);
            continue;
        }
        first->armed = 0;
        g_firing = first;
        pthread_mutex_unlock(&g_mu);
        force_release(first);
        pthread_mutex_lock(&g_mu);
        g_firing = NULL;
        pthread_cond_broadcast(&g_done_cv);
        idle_until = odbox_mono_after(WATCHDOG_LINGER_MS);
    }
    g_running = 0;
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* Joins a watchdog thread that decided to exit. Under g_mu: the exiting
 * thread does not take g_mu again after clearing g_running. */
static void join_exited_locked(void)
{
    if (g_thread_valid && !g_running) {
        pthread_join(g_thread, NULL);
        g_thread_valid = 0;
    }
}

/* Adds h to g_holds, armed, and makes sure a watchdog runs. */
static int register_hold(hold *h, int max_hold_ms, odbox_error *err)
{
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_mu);
    if (!g_running && !g_stop) {
        join_exited_locked();
        int rc = pthread_create(&g_thread, NULL, watchdog_main, NULL);
        if (rc != 0) {
            pthread_mutex_unlock(&g_mu);
            return odbox_fail(err, rc == EAGAIN ? ODBOX_ENOMEM : ODBOX_EDB,
                              "lock: could not start the watchdog thread (error %d)", rc);
        }
        g_thread_valid = 1;
        g_running = 1;
    }
    h->deadline = odbox_mono_after(max_hold_ms);
    h->armed = 1;
    h->prev = NULL;
    h->next = g_holds;
    if (g_holds)
        g_holds->prev = h;
    g_holds = h;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return ODBOX_OK;
}

/* Removes h from g_holds and waits until the watchdog is done with it. */
static void unregister_hold_locked(hold *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        g_holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
    h->armed = 0;
    while (g_firing == h)
        pthread_cond_wait(&g_done_cv, &g_mu);
}

__attribute__((destructor)) static void watchdog_shutdown(void)
{
    pthread_mutex_lock(&g_mu);
    g_stop = 1;
    if (g_thread_valid) {
        pthread_cond_signal(&g_cv);
        pthread_t t = g_thread;
        g_thread_valid = 0;
        pthread_mutex_unlock(&g_mu);
        pthread_join(t, NULL);
        return;
    }
    pthread_mutex_unlock(&g_mu);
}

/* ---- holds ------------------------------------------------------------------ */

static void hold_free(hold *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h->key);
    free(h);
}

/* Unlocks (when still held) and hands the connection back; frees h. h is
 * no longer registered, so nothing else can reach it. */
static void hold_finish(hold *h)
{
    int discard = h->unlock_failed;
    if (h->held) {
        odbox_error e;
        if (odbox_conn_unlock(h->conn, h->key, &e) != ODBOX_OK)
            discard = 1;
        h->held = 0;
    }
    if (discard)
        odbox_pool_discard(h->pool, &h->conn);
    else
        odbox_pool_release(h->pool, &h->conn);
    hold_free(h);
}

/* A hold of this thread for (shard, key) that still holds its lock,
 * counted up; NULL when there is none. */
static hold *reenter(const odbox_shard *shard, const char *key)
{
    pthread_once(&g_once, init_once);
    pthread_t self = pthread_self();
    hold *found = NULL;
    pthread_mutex_lock(&g_mu);
    for (hold *h = g_holds; h && !found; h = h->next) {
        if (h->shard != shard || !pthread_equal(h->owner, self) || strcmp(h->key, key) != 0)
            continue;
        pthread_mutex_lock(&h->mu);
        if (h->held) {
            h->count++;
            found = h;
        }
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_unlock(&g_mu);
    return found;
}

/* ---- acquiring --------------------------------------------------------------- */

static long ms_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* One try on a borrowed lock session. *taken = 1: h->conn holds the lock.
 * Otherwise the session went back, and *no_session tells whether the try
 * never happened because every lock session was in use. */
static int try_once(hold *h, int *taken, int *no_session, odbox_error *err)
{
    *taken = 0;
    *no_session = 0;
    int rc = odbox_pool_acquire(h->pool, &h->conn, err);
    if (rc == ODBOX_ETIMEDOUT) {
        *no_session = 1;
        return ODBOX_OK;
    }
    if (rc != ODBOX_OK)
        return rc;
    rc = odbox_conn_try_lock(h->conn, h->key, taken, err);
    if (rc != ODBOX_OK)
        odbox_pool_discard(h->pool, &h->conn); /* the lock may or may not have been taken */
    else if (!*taken)
        odbox_pool_release(h->pool, &h->conn);
    return rc;
}

/* Tries until h's lock is taken (h->conn holds it) or wait_ms passed
 * (0: one try, < 0: no bound). Contention is ODBOX_EBUSY (one try) or
 * ODBOX_ETIMEDOUT. */
static int take(hold *h, int wait_ms, odbox_error *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int taken = 0, no_session = 0;
        int rc = try_once(h, &taken, &no_session, err);
        if (rc != ODBOX_OK || taken)
            return rc;
        long waited = ms_since(&t0);
        if (wait_ms >= 0 && waited >= wait_ms) {
            int code = wait_ms == 0 ? ODBOX_EBUSY : ODBOX_ETIMEDOUT;
            if (no_session)
                return odbox_fail(err, code,
                                  "lock '%.64s': every lock session of the shard is in use "
                                  "(it has as many as its pool size); waited %ld ms",
                                  h->key, waited);
            return odbox_fail(err, code, "lock '%.64s' is held by another session; waited %ld ms", h->key,
                              waited);
        }
        long nap_ms = wait_ms < 0 || wait_ms - waited > POLL_MS ? POLL_MS : wait_ms - waited;
        odbox_sleep_ms(nap_ms);
    }
}

/* wait_ms: 0 try once, > 0 bounded, < 0 unbounded. */
static int acquire(odbox_shard *shard, const char *key, int wait_ms, int max_hold_ms, odbox_lease **out,
                   odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "lock: lease is NULL");
    *out = NULL;
    if (!shard)
        return odbox_fail(err, ODBOX_EINVAL, "lock: shard is NULL");
    if (!key || !*key)
        return odbox_fail(err, ODBOX_EINVAL, "lock: key is NULL or empty");
    if (max_hold_ms <= 0)
        return odbox_fail(err, ODBOX_EINVAL, "lock: max hold %d ms must be > 0", max_hold_ms);

    odbox_lease *lease = malloc(sizeof *lease);
    if (!lease)
        return odbox_fail(err, ODBOX_ENOMEM, "lock: out of memory");
    hold *h = reenter(shard, key);
    if (h) {
        lease->h = h;
        *out = lease;
        return ODBOX_OK;
    }

    h = calloc(1, sizeof *h);
    if (!h || !(h->key = strdup(key))) {
        free(h);
        free(lease);
        return odbox_fail(err, ODBOX_ENOMEM, "lock: out of memory");
    }
    pthread_mutex_init(&h->mu, NULL);
    h->owner = pthread_self();
    h->shard = shard;
    h->pool = odbox_shard_lock_pool(shard);
    h->count = 1;

    int rc = take(h, wait_ms, err);
    if (rc != ODBOX_OK) {
        hold_free(h);
        free(lease);
        return rc;
    }
    h->held = 1;
    rc = register_hold(h, max_hold_ms, err);
    if (rc != ODBOX_OK) {
        hold_finish(h);
        free(lease);
        return rc;
    }
    lease->h = h;
    *out = lease;
    return ODBOX_OK;
}

/* ---- public ------------------------------------------------------------------- */

int odbox_lock_try_acquire(odbox_shard *shard, const char *key, int wait_ms, int max_hold_ms,
                           odbox_lease **lease, odbox_error *err)
{
    if (wait_ms < 0) {
        if (lease)
            *lease = NULL;
        return odbox_fail(err, ODBOX_EINVAL, "lock: wait %d ms is negative", wait_ms);
    }
    return acquire(shard, key, wait_ms, max_hold_ms, lease, err);
}

int odbox_lock_acquire(odbox_shard *shard, const char *key, int max_hold_ms, odbox_lease **lease,
                       odbox_error *err)
{
    return acquire(shard, key, -1, max_hold_ms, lease, err);
}

int odbox_lock_is_held(const odbox_lease *lease)
{
    if (!lease)
        return 0;
    hold *h = lease->h;
    pthread_mutex_lock(&h->mu);
    int held = h->held;
    pthread_mutex_unlock(&h->mu);
    return held;
}

void odbox_lock_release(odbox_lease **lease)
{
    if (!lease || !*lease)
        return;
    hold *h = (*lease)->h;
    free(*lease);
    *lease = NULL;
    pthread_mutex_lock(&g_mu);
    if (--h->count > 0) {
        pthread_mutex_unlock(&g_mu);
        return;
    }
    unregister_hold_locked(h);
    pthread_mutex_unlock(&g_mu);
    hold_finish(h);
}
