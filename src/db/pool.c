/* odbox — thread-safe connection pools.
 *
 * A fixed upper bound of connections, opened lazily. A server restart is
 * hidden from a caller that has sent nothing yet, without a round trip
 * per hand-out:
 *  - an idle connection is handed out "fresh": when the first thing sent
 *    on it turns out to meet a lost session and is safe to send again (a
 *    read, a BEGIN, a prepare, a statement inside a transaction), the
 *    connection reconnects in place and sends it again (conn.c,
 *    odbox_conn_again). A write in autocommit is never sent again: it may
 *    have committed (ODBOX_EINDOUBT, persist.c).
 *  - so that such a write rarely meets a lost session, an idle connection
 *    is pinged first when it has been idle longer than VALIDATE_AFTER_US
 *    (servers are restarted while a pool is quiet), or when the pool has
 *    seen a lost connection since this one was last known live (a
 *    restart ends them all at once). At high rates neither holds, and a
 *    hand-out costs no round trip. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "odbc.h"
#include "dialects.h"

#define DEFAULT_SIZE 10
#define DEFAULT_ACQUIRE_TIMEOUT_MS 30000
#define VALIDATE_AFTER_US 1000000

struct odbox_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *dsn;                     /* secret: contains the password */
    const odbox_dialect *dialect;  /* from the scheme, or the first connection */
    int size;
    int acquire_timeout_ms;
    int open;                      /* connections open or being opened */
    odbox_conn *idle;
    uint64_t epoch;                /* connections found lost so far */
    int never_create;              /* odbox_pool_never_create */
};

const char *odbox_pool_dsn(const odbox_pool *p) { return p->dsn; }

/* This thread's loan (odbox_pool_lend). */
static _Thread_local struct {
    odbox_pool *pool;
    odbox_conn *conn;
} lent;

void odbox_pool_lend(odbox_pool *p, odbox_conn *c)
{
    lent.pool = c ? p : NULL;
    lent.conn = p ? c : NULL;
}

int odbox_pool_lending(const odbox_pool *p) { return p && lent.pool == p; }

static uint64_t note_lost(odbox_pool *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t epoch = ++p->epoch;
    pthread_mutex_unlock(&p->mu);
    return epoch;
}

/* What the pool's connections reach it by (conn.c calls no pool.c). */
static const odbox_conn_owner owner = {odbox_pool_dsn, note_lost};

int odbox_pool_open(const char *dsn, const odbox_pool_config *cfg, odbox_pool **out,
                    odbox_error *err)
{
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "pool: out is NULL");
    *out = NULL;
    if (cfg && (cfg->size < 0 || cfg->size > 10000))
        return odbox_fail(err, ODBOX_EINVAL, "pool: size %d out of range 1..10000", cfg->size);
    if (cfg && cfg->acquire_timeout_ms < 0)
        return odbox_fail(err, ODBOX_EINVAL, "pool: acquire timeout %d is negative", cfg->acquire_timeout_ms);
    const odbox_dialect *dialect = NULL;
    int rc = odbox_dsn_resolve(dsn, &dialect, NULL, NULL, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->dsn = strdup(dsn))) {
        free(p);
        return odbox_fail(err, ODBOX_ENOMEM, "pool: out of memory");
    }
    pthread_mutex_init(&p->mu, NULL);
    odbox_cond_init_mono(&p->cv);
    p->dialect = dialect;
    p->size = cfg && cfg->size ? cfg->size : DEFAULT_SIZE;
    p->acquire_timeout_ms = cfg && cfg->acquire_timeout_ms ? cfg->acquire_timeout_ms
                                                           : DEFAULT_ACQUIRE_TIMEOUT_MS;
    *out = p;
    return ODBOX_OK;
}

void odbox_pool_never_create(odbox_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->never_create = 1;
    pthread_mutex_unlock(&p->mu);
}

const odbox_dialect *odbox_pool_dialect(odbox_pool *p)
{
    if (!p)
        return NULL;
    pthread_mutex_lock(&p->mu);
    const odbox_dialect *d = p->dialect;
    pthread_mutex_unlock(&p->mu);
    return d;
}

/* Readies an idle connection for a hand-out: 0 when it is dead. The ping
 * is sent fresh, so a lost session is replaced under it. Asking the
 * driver (SQL_ATTR_CONNECTION_DEAD) instead would tell nothing on
 * psqlODBC (a flag it sets after a failure) and cost a round trip on
 * MariaDB's driver (mysql_ping). */
static int usable(odbox_pool *p, odbox_conn *c, uint64_t epoch)
{
    if (c->dead)
        return 0;
    c->pool = p;
    c->owner = &owner;
    c->fresh = 1;
    if (c->epoch != epoch || odbox_now_us() - c->idle_since_us >= VALIDATE_AFTER_US) {
        odbox_error e;
        if (odbox_conn_exec(c, "SELECT 1", &e) != ODBOX_OK)
            return 0;
        if (c->epoch < epoch) /* a reconnect under the ping may have set a later one */
            c->epoch = epoch;
        c->fresh = 1; /* the caller has still sent nothing */
    }
    return 1;
}

int odbox_pool_acquire(odbox_pool *p, odbox_conn **out, odbox_error *err)
{
    if (!p || !out)
        return odbox_fail(err, ODBOX_EINVAL, "pool: acquire with NULL pool or out");
    *out = NULL;
    if (lent.pool == p) {
        *out = lent.conn;
        return ODBOX_OK;
    }
    struct timespec deadline = odbox_mono_after(p->acquire_timeout_ms);

    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->idle) {
            odbox_conn *c = p->idle;
            p->idle = c->next;
            c->next = NULL;
            c->idle = 0;
            uint64_t epoch = p->epoch;
            pthread_mutex_unlock(&p->mu);
            if (usable(p, c, epoch)) {
                *out = c;
                return ODBOX_OK;
            }
            odbox_conn_close(&c);
            odbox_log(ODBOX_LOG_INFO, "pool: closed a dead idle connection; opening a new one");
            pthread_mutex_lock(&p->mu);
            p->open--;
            continue;
        }
        if (p->open < p->size) {
            p->open++;
            int never_create = p->never_create;
            pthread_mutex_unlock(&p->mu);
            odbox_conn *c = NULL;
            int rc = odbox_conn_open_as(p->dsn, never_create, &c, err);
            pthread_mutex_lock(&p->mu);
            if (rc != ODBOX_OK) {
                p->open--;
                pthread_cond_signal(&p->cv);
                pthread_mutex_unlock(&p->mu);
                return rc;
            }
            if (!p->dialect)
                p->dialect = c->dialect;
            c->pool = p;
            c->owner = &owner;
            c->epoch = p->epoch;
            pthread_mutex_unlock(&p->mu);
            *out = c;
            return ODBOX_OK;
        }
        int w = pthread_cond_timedwait(&p->cv, &p->mu, &deadline);
        if (w == ETIMEDOUT && !p->idle && p->open >= p->size) {
            int size = p->size;
            pthread_mutex_unlock(&p->mu);
            return odbox_fail(err, ODBOX_ETIMEDOUT,
                              "pool: no connection free within %d ms (all %d in use)",
                              p->acquire_timeout_ms, size);
        }
    }
}

/* Returns c to the pool, or closes it when it is dead or discarded (its
 * session state unknown to its user); a dead one counts as lost. */
static void give_back(odbox_pool *p, odbox_conn **cp, int discard)
{
    if (!p || !cp || !*cp)
        return;
    odbox_conn *c = *cp;
    *cp = NULL;
    if (c == lent.conn)
        return; /* its holder releases it */
    if (odbox_conn_tx_owned(c, discard ? "odbox_pool_discard" : "odbox_pool_release"))
        return; /* its odbox_tx releases it */
    pthread_mutex_lock(&p->mu);
    int twice = c->idle;
    pthread_mutex_unlock(&p->mu);
    if (twice) { /* put on the idle list twice, it would be handed to two callers */
        odbox_log(ODBOX_LOG_ERROR, "%s: the connection was released already: ignored",
                  discard ? "odbox_pool_discard" : "odbox_pool_release");
        return;
    }
    if (c->nheld)
        odbox_stmt_detach(c, 1, discard ? "odbox_pool_discard" : "odbox_pool_release");
    c->fresh = 0;
    c->tx_owned = 0;
    int lost = c->dead && !discard;
    /* A session whose time zone, encoding or date style a caller changed
     * would carry it to whoever gets it next, odbox's own statements
     * included, which write and compare the database's time and read
     * text as the setup left them: closed, a new one takes its place.
     * Other settings (a lock timeout, a search path) stay, as before. */
    if (discard || c->session_changed)
        c->dead = 1; /* its session is used no more, not even to roll back */
    if (c->in_tx && !c->dead) {
        odbox_error e;
        odbox_conn_rollback(c, &e);
    }
    if (c->dead) {
        odbox_conn_close(&c);
        pthread_mutex_lock(&p->mu);
        p->open--;
        p->epoch += (uint64_t)lost;
    } else {
        c->idle_since_us = odbox_now_us();
        pthread_mutex_lock(&p->mu);
        c->next = p->idle;
        c->idle = 1;
        p->idle = c;
    }
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void odbox_pool_release(odbox_pool *p, odbox_conn **cp) { give_back(p, cp, 0); }

void odbox_pool_discard(odbox_pool *p, odbox_conn **cp) { give_back(p, cp, 1); }

void odbox_pool_free(odbox_pool **pp)
{
    if (!pp || !*pp)
        return;
    odbox_pool *p = *pp;
    while (p->idle) {
        odbox_conn *c = p->idle;
        p->idle = c->next;
        odbox_conn_close(&c);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    odbox_free_secret(p->dsn);
    free(p);
    *pp = NULL;
}
