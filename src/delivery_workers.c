/* odbox — the handlers' worker threads: batches of calls run in parallel,
 * every wait bounded, a hung call abandoned and its thread replaced, up
 * to a bound of hung calls per group (a handler).
 *
 * Memory: a work item is its submitter's; once abandoned, the thread
 * running it holds a reference too, dropped (release) when the call
 * returns, if ever; the thread then exits, since a new one took its
 * place. The pool itself is shared by its owner and every
 * abandoned thread (refs): the last one frees it, so odbox_workers_free
 * never waits for a hung call.
 *
 * Lock: one mutex (mu) guards the queue, the states and the counts. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "delivery_internal.h"

typedef struct worker {
    odbox_workers *pool;
    pthread_t thread;
    int abandoned;           /* under mu: left with an abandoned call */
    struct worker *next;     /* the pool's list of live workers */
} worker;

struct odbox_workers {
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* queue has work, or stopping */
    pthread_cond_t done_cv;  /* a call ended, or a waiter should look at its stop flag */
    odbox_work *head, *tail; /* the queue */
    worker *live;            /* joinable workers */
    int nlive, wanted;
    int refs;                /* the owner and every abandoned thread still running */
    int stopping;
    /* per group: calls running, abandoned ones included (busy), and the
     * abandoned ones (hung) */
    int *busy, *hung;
    size_t ngroups;
};

static int in_group(const odbox_workers *p, const odbox_work *w)
{
    return w->group >= 0 && (size_t)w->group < p->ngroups && w->group_cap > 0;
}

/* w's group runs its cap of calls: w waits in the queue; under mu */
static int group_full(const odbox_workers *p, const odbox_work *w)
{
    return in_group(p, w) && p->busy[w->group] >= w->group_cap;
}

/* ... all of them hung: w cannot start until one returns; under mu */
static int group_hung(const odbox_workers *p, const odbox_work *w)
{
    return in_group(p, w) && p->hung[w->group] >= w->group_cap;
}

/* Takes w off the queue; under mu. */
static void unqueue(odbox_workers *p, odbox_work *w)
{
    odbox_work *prev = NULL;
    for (odbox_work *q = p->head; q; prev = q, q = q->next)
        if (q == w) {
            if (prev)
                prev->next = q->next;
            else
                p->head = q->next;
            if (p->tail == q)
                p->tail = prev;
            return;
        }
}

/* The first queued item whose group has room, taken off the queue; NULL:
 * none. Under mu. */
static odbox_work *take(odbox_workers *p)
{
    for (odbox_work *w = p->head; w; w = w->next)
        if (!group_full(p, w)) {
            unqueue(p, w);
            return w;
        }
    return NULL;
}

/* A call of w's group ended (returned, or abandoned and returned); if the
 * group was full, an item of it waiting in the queue may start now.
 * Under mu. */
static void group_left(odbox_workers *p, const odbox_work *w, int was_hung)
{
    if (!in_group(p, w))
        return;
    int was_full = group_full(p, w);
    p->busy[w->group]--;
    p->hung[w->group] -= was_hung;
    if (was_full)
        pthread_cond_broadcast(&p->work_cv);
}

static struct timespec mono_at(int64_t us)
{
    return (struct timespec){(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
}

static void pool_destroy(odbox_workers *p)
{
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->busy);
    free(p->hung);
    free(p);
}

static void unlink_worker(odbox_workers *p, worker *w)
{
    for (worker **at = &p->live; *at; at = &(*at)->next)
        if (*at == w) {
            *at = w->next;
            return;
        }
}

static void *worker_main(void *arg)
{
    worker *me = arg;
    odbox_workers *p = me->pool;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        odbox_work *w = NULL;
        while (!p->stopping && !(w = take(p)))
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stopping)
            break;
        w->started_us = odbox_mono_us();
        if (w->start_by_us && w->started_us >= w->start_by_us) {
            w->state = ODBOX_WORK_LATE;
            pthread_cond_broadcast(&p->done_cv);
            continue;
        }
        w->state = ODBOX_WORK_RUNNING;
        w->runner = me;
        if (in_group(p, w))
            p->busy[w->group]++;
        pthread_mutex_unlock(&p->mu);
        w->run(w);
        pthread_mutex_lock(&p->mu);
        group_left(p, w, me->abandoned);
        if (me->abandoned) {
            /* replaced while in the call: the call's item is ours now */
            int last = --p->refs == 0;
            pthread_mutex_unlock(&p->mu);
            w->release(w);
            free(me);
            if (last)
                pool_destroy(p);
            return NULL;
        }
        w->state = ODBOX_WORK_DONE;
        w->runner = NULL;
        pthread_cond_broadcast(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Starts one more worker; under mu. */
static int spawn(odbox_workers *p)
{
    worker *w = calloc(1, sizeof *w);
    if (!w)
        return ODBOX_ENOMEM;
    w->pool = p;
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        free(w);
        return rc == EAGAIN ? ODBOX_ENOMEM : ODBOX_EDB;
    }
    w->next = p->live;
    p->live = w;
    p->nlive++;
    return ODBOX_OK;
}

int odbox_workers_open(int n, size_t ngroups, odbox_workers **out, odbox_error *err)
{
    *out = NULL;
    odbox_workers *p = calloc(1, sizeof *p);
    if (p && (!(p->busy = calloc(ngroups ? ngroups : 1, sizeof *p->busy)) ||
              !(p->hung = calloc(ngroups ? ngroups : 1, sizeof *p->hung)))) {
        free(p->busy);
        free(p);
        p = NULL;
    }
    if (!p)
        return odbox_fail(err, ODBOX_ENOMEM, "workers: out of memory");
    p->ngroups = ngroups;
    pthread_mutex_init(&p->mu, NULL);
    odbox_cond_init_mono(&p->work_cv);
    odbox_cond_init_mono(&p->done_cv);
    p->refs = 1;
    p->wanted = n;
    *out = p;
    return ODBOX_OK;
}

/* Abandons w, running on a thread that is then replaced; under mu. */
static void abandon(odbox_workers *p, odbox_work *w, int state)
{
    worker *t = w->runner;
    w->state = state;
    if (in_group(p, w))
        p->hung[w->group]++;
    atomic_fetch_add(&w->refs, 1); /* the thread's, dropped when run returns */
    t->abandoned = 1;
    unlink_worker(p, t);
    p->nlive--;
    p->refs++;
    pthread_detach(t->thread);
    if (spawn(p) != ODBOX_OK)
        odbox_log(ODBOX_LOG_ERROR, "handlers: cannot start a worker thread in place of an abandoned one "
                                   "(%d left)", p->nlive);
}

/* Takes w off the queue, in state; under mu. */
static void dequeue(odbox_workers *p, odbox_work *w, int state)
{
    unqueue(p, w);
    w->state = state;
}

void odbox_workers_run(odbox_workers *p, odbox_work **batch, size_t n, int timeout_ms, int64_t start_by_us,
                       const atomic_int *stop, int stop_wait_ms)
{
    int64_t timeout_us = (int64_t)timeout_ms * 1000, stop_us = 0;
    pthread_mutex_lock(&p->mu);
    /* threads are started when first needed */
    while (p->nlive < p->wanted && spawn(p) == ODBOX_OK)
        ;
    for (size_t i = 0; i < n; i++) {
        odbox_work *w = batch[i];
        w->state = ODBOX_WORK_QUEUED;
        w->start_by_us = start_by_us;
        w->next = NULL;
        w->runner = NULL;
        if (p->tail)
            p->tail->next = w;
        else
            p->head = w;
        p->tail = w;
    }
    pthread_cond_broadcast(&p->work_cv);
    for (;;) {
        int64_t now = odbox_mono_us(), next = INT64_MAX;
        int open = 0, again = 0; /* again: a call was abandoned, its group's queued items look again */
        if (!stop_us && stop && atomic_load(stop))
            stop_us = now + (int64_t)stop_wait_ms * 1000;
        for (size_t i = 0; i < n; i++) {
            odbox_work *w = batch[i];
            if (w->state == ODBOX_WORK_QUEUED && (stop_us || p->nlive == 0)) {
                dequeue(p, w, ODBOX_WORK_NOT_RUN); /* never started: its row stays due */
            } else if (w->state == ODBOX_WORK_QUEUED && start_by_us && now >= start_by_us) {
                dequeue(p, w, ODBOX_WORK_LATE);
            } else if (w->state == ODBOX_WORK_QUEUED && group_hung(p, w)) {
                dequeue(p, w, ODBOX_WORK_HELD);
            } else if (w->state == ODBOX_WORK_RUNNING) {
                int64_t limit = w->started_us + timeout_us;
                if (now >= limit || (stop_us && now >= stop_us)) {
                    abandon(p, w, now >= limit ? ODBOX_WORK_TIMED_OUT : ODBOX_WORK_CUT_OFF);
                    again = 1;
                } else {
                    if (limit < next)
                        next = limit;
                    if (stop_us && stop_us < next)
                        next = stop_us;
                }
            }
            open += w->state == ODBOX_WORK_QUEUED || w->state == ODBOX_WORK_RUNNING;
        }
        if (!open)
            break;
        if (again)
            continue;
        if (next == INT64_MAX) {
            /* only queued calls: they start as workers free up; look at
             * the stop flag now and then */
            next = now + 100000;
        }
        if (start_by_us && start_by_us > now && start_by_us < next)
            next = start_by_us;
        struct timespec at = mono_at(next);
        pthread_cond_timedwait(&p->done_cv, &p->mu, &at);
    }
    pthread_mutex_unlock(&p->mu);
}

int odbox_workers_hung(odbox_workers *p, int group)
{
    pthread_mutex_lock(&p->mu);
    int n = group >= 0 && (size_t)group < p->ngroups ? p->hung[group] : 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void odbox_workers_poke(odbox_workers *p)
{
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
}

void odbox_workers_free(odbox_workers **pp)
{
    if (!pp || !*pp)
        return;
    odbox_workers *p = *pp;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->work_cv);
    worker *live = p->live;
    p->live = NULL;
    pthread_mutex_unlock(&p->mu);
    /* no batch runs now: the live workers are idle and exit at once */
    while (live) {
        worker *next = live->next;
        pthread_join(live->thread, NULL);
        free(live);
        live = next;
    }
    pthread_mutex_lock(&p->mu);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (last)
        pool_destroy(p);
    *pp = NULL;
}
