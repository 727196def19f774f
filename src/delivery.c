/* odbox — the delivery: its configuration, the fan-out job's executions
 * and the handling loops' (handling_loops threads per shard, looping
 * rounds: delivery_loop.c), the wake-ups that start a round early, and
 * the public round functions (see odbox/handlers.h).
 *
 * Threads: a fan-out execution runs on its job's thread, which supervises
 * (stop, heartbeat health, the execution's length) while one thread per
 * shard runs rounds. The handling loops run under a supervisor thread of
 * their own, started and stopped through the job registry (a service of
 * it, not a job: every process handles), with no end by length. Wake-ups
 * come from committers, listeners and fan-out rounds, through odbox_wake:
 * they set the shard's pending flag and wake the shard's threads; one
 * loop takes the flag, and a handling round whose claim filled its batch
 * sets it again, for another loop.
 *
 * Freeing: the job registry may give up on an execution (odbox_jobs_stop's
 * bound) that then still runs and uses the delivery, the handlers and the
 * registry's pools. So every execution is on the running list (under mu)
 * from its start to its return, and odbox_delivery_free stops them, wakes
 * them and waits for the list to empty before it frees anything.
 *
 * Locks: mu guards the pending and failing flags, the listening flag and
 * the running list and closing flag;
 * a wake-up takes it inside the executor's and the wake's callback locks,
 * so nothing holds it while calling into those. attach_mu guards the
 * attached executors, and is held while adding or removing a commit
 * listener (which waits for running commit listeners). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "delivery_internal.h"
#include "action_internal.h"
#include "jobs_internal.h"

#define DEFAULT_FANOUT_BATCH 200
#define DEFAULT_HANDLING_BATCH 100
#define DEFAULT_POLL_MS 1000
#define DEFAULT_BACKOFF_BASE_MS 30000
#define DEFAULT_BACKOFF_CAP_MS 300000
#define DEFAULT_RETENTION_MS (7 * INT64_C(86400000))
#define DEFAULT_WORKERS 8
#define DEFAULT_HANDLING_LOOPS 2
#define MAX_HANDLING_LOOPS 64
#define DEFAULT_HANDLER_TIMEOUT_MS 300000
#define DEFAULT_STOP_WAIT_MS 5000
#define DEFAULT_EXECUTION_MAX_MS 60000
#define DEFAULT_REPLICA_MAX_LAG_MS 1000
#define DEFAULT_SUBSCRIPTION_LIVE_MS 30000
/* The default lease: handler_timeout_ms plus this, for the round's
 * statements after its calls. */
#define DEFAULT_LEASE_MARGIN_MS 30000
/* A batch larger than this is refused: one statement's parameters and one
 * round's memory stay bounded. */
#define MAX_BATCH 10000
#define MAX_WORKERS 1024
/* How often an execution's supervisor looks at its heartbeat health. */
#define SUPERVISE_MS 1000
/* odbox_delivery_free warns when executions keep it waiting this long
 * past stop_wait_ms, and again every FREE_WARN_MS. */
#define FREE_WARN_MS 2000
/* Of the job registry's shutdown wait, stop_wait_ms may take at most this
 * share (percent); the rest is for the round's statements (reading,
 * writing the outcomes) and the execution's return. */
#define STOP_WAIT_SHARE 50

static const char *const job_bases[NJOBS] = {ODBOX_FANOUT_JOB_NAME, ODBOX_HANDLING_JOB_NAME};

odbox_dshard *odbox_delivery_shard(odbox_delivery *d, const odbox_shard *s)
{
    for (size_t i = 0; i < d->nshards; i++)
        if (d->shards[i].shard == s)
            return &d->shards[i];
    return NULL;
}

/* ---- configuration ---------------------------------------------------------- */

static int cfg_int(const char *what, int64_t v, int64_t dflt, int64_t max, int64_t *out, odbox_error *err)
{
    if (v < 0 || v > max)
        return odbox_fail(err, ODBOX_EINVAL, "delivery: %s %lld is out of range 0..%lld (0: the default, %lld)",
                          what, (long long)v, (long long)max, (long long)dflt);
    *out = v ? v : dflt;
    return ODBOX_OK;
}

static int resolve(const odbox_delivery_config *c, odbox_dcfg *o, odbox_error *err)
{
    int64_t v[15] = {0};
    const int64_t day_ms = 86400000, year_ms = 366 * day_ms;
    int rc;
    if ((rc = cfg_int("fanout_batch", c->fanout_batch, DEFAULT_FANOUT_BATCH, MAX_BATCH, &v[0], err)) ||
        (rc = cfg_int("handling_batch", c->handling_batch, DEFAULT_HANDLING_BATCH, MAX_BATCH, &v[1], err)) ||
        (rc = cfg_int("fanout_poll_ms", c->fanout_poll_ms, DEFAULT_POLL_MS, day_ms, &v[2], err)) ||
        (rc = cfg_int("handling_poll_ms", c->handling_poll_ms, DEFAULT_POLL_MS, day_ms, &v[3], err)) ||
        (rc = cfg_int("backoff_base_ms", c->backoff_base_ms, DEFAULT_BACKOFF_BASE_MS, day_ms, &v[4], err)) ||
        (rc = cfg_int("backoff_cap_ms", c->backoff_cap_ms, DEFAULT_BACKOFF_CAP_MS, year_ms, &v[5], err)) ||
        (rc = cfg_int("retention_ms", c->retention_ms, DEFAULT_RETENTION_MS, 100 * year_ms, &v[6], err)) ||
        (rc = cfg_int("workers", c->workers, DEFAULT_WORKERS, MAX_WORKERS, &v[7], err)) ||
        (rc = cfg_int("handler_timeout_ms", c->handler_timeout_ms, DEFAULT_HANDLER_TIMEOUT_MS, day_ms, &v[8],
                      err)) ||
        (rc = cfg_int("stop_wait_ms", c->stop_wait_ms, DEFAULT_STOP_WAIT_MS, day_ms, &v[9], err)) ||
        (rc = cfg_int("execution_max_ms", c->execution_max_ms, DEFAULT_EXECUTION_MAX_MS, day_ms, &v[10], err)) ||
        (rc = cfg_int("replica_max_lag_ms", c->replica_max_lag_ms, DEFAULT_REPLICA_MAX_LAG_MS, day_ms, &v[11],
                      err)) ||
        (rc = cfg_int("subscription_live_ms", c->subscription_live_ms, DEFAULT_SUBSCRIPTION_LIVE_MS, day_ms, &v[12],
                      err)) ||
        (rc = cfg_int("lease_ms", c->lease_ms, v[8] + DEFAULT_LEASE_MARGIN_MS, 2 * day_ms, &v[13], err)) ||
        (rc = cfg_int("handling_loops", c->handling_loops, DEFAULT_HANDLING_LOOPS, MAX_HANDLING_LOOPS, &v[14], err)))
        return rc;
    if (c->cross_process_wakeup != 0 && c->cross_process_wakeup != -1)
        return odbox_fail(err, ODBOX_EINVAL, "delivery: cross_process_wakeup is 0 (on) or -1 (off), not %d",
                          c->cross_process_wakeup);
    *o = (odbox_dcfg){
        .batch = {(int)v[0], (int)v[1]},
        .poll_ms = {(int)v[2], (int)v[3]},
        .backoff_base_us = v[4] * 1000,
        .backoff_cap_us = v[5] * 1000,
        .retention_us = v[6] * 1000,
        .workers = (int)v[7],
        .handler_timeout_ms = (int)v[8],
        .stop_wait_ms = (int)v[9],
        .execution_max_ms = (int)v[10],
        .listen = c->cross_process_wakeup,
        .replica_max_lag_ms = (int)v[11],
        .live_ms = v[12] < 3 ? 3 : (int)v[12],
        .lease_us = v[13] * 1000,
        .loops = (int)v[14],
    };
    return ODBOX_OK;
}

/* The event types of h, each with the indexes of its handlers. */
static int group_types(odbox_delivery *d, odbox_error *err)
{
    const odbox_handlers *h = d->h;
    size_t all = 0;
    for (size_t i = 0; i < h->n; i++)
        all += h->v[i].ntypes;
    if (!(d->types = calloc(all ? all : 1, sizeof *d->types)))
        return odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
    for (size_t i = 0; i < h->n; i++)
        for (size_t k = 0; k < h->v[i].ntypes; k++) {
            const char *type = h->v[i].types[k];
            size_t t = 0;
            while (t < d->ntypes && strcmp(d->types[t].name, type))
                t++;
            odbox_dtype *dt = &d->types[t];
            if (t == d->ntypes) {
                d->ntypes++;
                dt->name = type;
            }
            size_t *g = realloc(dt->handlers, (dt->n + 1) * sizeof *g);
            if (!g)
                return odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
            g[dt->n++] = i;
            dt->handlers = g;
        }
    return ODBOX_OK;
}

/* ---- wake-ups ------------------------------------------------------------------- */

static void wake_shard(odbox_delivery *d, odbox_shard_id id, int job)
{
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->nshards; i++)
        if (d->shards[i].id.group == id.group && d->shards[i].id.member == id.member)
            d->shards[i].pending[job] = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* A subscriber of both signals: EVENTS wakes the fan-out, NOTIFICATIONS
 * the handling. Cheap: a flag and a broadcast. */
static void on_signal(void *ud, odbox_shard_id shard, odbox_wake_signal sig)
{
    wake_shard(ud, shard, sig == ODBOX_WAKE_EVENTS ? JOB_FANOUT : JOB_HANDLING);
}

/* The listeners start with the first execution in this process: a process
 * that never runs a delivery job never listens. */
static void start_listening(odbox_delivery *d)
{
    pthread_mutex_lock(&d->mu);
    int start = !d->listening;
    d->listening = 1;
    pthread_mutex_unlock(&d->mu);
    odbox_error e = {0};
    if (start && odbox_wake_start(d->wake, &e) != ODBOX_OK)
        odbox_log(ODBOX_LOG_WARN, "delivery: no cross-process wake-ups (%s); the poll delays bound the wait",
                  e.message);
}

/* ---- open, free ------------------------------------------------------------------ */

static void svc_detach(odbox_delivery *d);

static void delivery_destroy(odbox_delivery *d)
{
    odbox_subs_stop_beat(d);
    svc_detach(d);
    for (size_t i = 0; i < d->nattached; i++)
        odbox_executor_remove_commit_listener(d->attached[i], odbox_wake_on_commit, d->wake);
    free(d->attached);
    if (d->wake) {
        odbox_wake_stop(d->wake);
        odbox_wake_unsubscribe(d->wake, ODBOX_WAKE_EVENTS, on_signal, d);
        odbox_wake_unsubscribe(d->wake, ODBOX_WAKE_NOTIFICATIONS, on_signal, d);
        odbox_wake_free(&d->wake);
    }
    odbox_workers_free(&d->workers);
    odbox_dmetrics_free(&d->metrics);
    for (size_t i = 0; i < d->ntypes; i++)
        free(d->types[i].handlers);
    free(d->types);
    for (size_t i = 0; d->shards && i < d->nshards; i++) {
        odbox_kept_drop(&d->shards[i]);
        free(d->shards[i].replica_wait);
        free(d->shards[i].error_noted_us);
        free(d->shards[i].max_attempts);
        free(d->shards[i].round_since_us);
    }
    free(d->shards);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    pthread_mutex_destroy(&d->attach_mu);
    free(d);
}

int odbox_delivery_open(odbox_registry *registry, odbox_handlers *handlers, const odbox_delivery_config *cfg,
                        odbox_delivery **out, odbox_error *err)
{
    static const odbox_delivery_config defaults = {0};
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "delivery: out is NULL");
    *out = NULL;
    if (!registry || !handlers)
        return odbox_fail(err, ODBOX_EINVAL, "delivery: registry or handlers is NULL");
    if (handlers->n == 0)
        return odbox_fail(err, ODBOX_EINVAL, "delivery: no handlers (add some before opening)");
    if (!cfg)
        cfg = &defaults;
    odbox_dcfg c;
    int rc = resolve(cfg, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_delivery *d = calloc(1, sizeof *d);
    if (!d)
        return odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_init(&d->attach_mu, NULL);
    odbox_cond_init_mono(&d->cv);
    d->r = registry;
    d->h = handlers;
    d->cfg = c;
    d->clock = cfg->clock && cfg->clock->now_us ? *cfg->clock : *odbox_clock_system();
    d->hook = cfg->hook;
    d->hook_ud = cfg->hook_ud;
    odbox_subs_process_id(d);
    d->db_time = !(cfg->clock && cfg->clock->now_us);
    for (int j = 0; j < NJOBS; j++)
        d->jobs[j] = (odbox_djob){d, j, NULL};
    d->nshards = odbox_registry_shard_count(registry);
    odbox_wake_config wc = {.listen = c.listen};
    if (!(d->shards = calloc(d->nshards, sizeof *d->shards)))
        rc = odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
    for (size_t i = 0; rc == ODBOX_OK && i < d->nshards; i++) {
        d->shards[i].shard = odbox_registry_shard_at(registry, i);
        d->shards[i].id = odbox_shard_get_id(d->shards[i].shard);
        if (!(d->shards[i].error_noted_us = calloc(handlers->n, sizeof *d->shards[i].error_noted_us)) ||
            !(d->shards[i].round_since_us = calloc((size_t)c.loops, sizeof *d->shards[i].round_since_us)) ||
            !(d->shards[i].max_attempts = calloc(handlers->n, sizeof *d->shards[i].max_attempts)))
            rc = odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
        for (size_t k = 0; rc == ODBOX_OK && k < handlers->n; k++)
            atomic_init(&d->shards[i].max_attempts[k], -1);
    }
    for (int k = 0; rc == ODBOX_OK && k < NJOBS; k++)
        rc = odbox_job_name_for(job_bases[k], registry, d->job_name[k], sizeof d->job_name[k], err);
    if (rc == ODBOX_OK)
        rc = group_types(d, err);
    if (rc == ODBOX_OK)
        rc = odbox_dmetrics_new(handlers, &d->metrics, err);
    if (rc == ODBOX_OK)
        rc = odbox_workers_open(c.workers, handlers->n, &d->workers, err);
    if (rc == ODBOX_OK)
        rc = odbox_wake_open(registry, &wc, &d->wake, err);
    if (rc == ODBOX_OK && (rc = odbox_wake_subscribe(d->wake, ODBOX_WAKE_EVENTS, on_signal, d, err)) == ODBOX_OK)
        rc = odbox_wake_subscribe(d->wake, ODBOX_WAKE_NOTIFICATIONS, on_signal, d, err);
    if (rc != ODBOX_OK) {
        delivery_destroy(d);
        return rc;
    }
    atomic_store(&handlers->frozen, 1);
    *out = d;
    return ODBOX_OK;
}

/* Ends the running executions (those a job registry's stop gave up on,
 * or of a registry not stopped) and waits until they have returned. */
static void stop_executions(odbox_delivery *d)
{
    pthread_mutex_lock(&d->mu);
    d->closing = 1;
    int any = d->running != NULL;
    for (execution *x = d->running; x; x = x->next) {
        atomic_store(&x->stop, 1);
        /* its supervisor's wait ends now (the registry lives while one
         * of its jobs runs, and x leaves the list only under mu) */
        if (!x->own)
            odbox_jobs_wake(d->jobs[x->job].jobs, d->job_name[x->job]);
    }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (!any)
        return;
    odbox_workers_poke(d->workers); /* handling rounds waiting for calls: stop_wait_ms from now */
    int64_t t0 = odbox_mono_us(), warn_ms = d->cfg.stop_wait_ms + FREE_WARN_MS;
    pthread_mutex_lock(&d->mu);
    while (d->running) {
        struct timespec until = odbox_mono_after(FREE_WARN_MS / 4);
        pthread_cond_timedwait(&d->cv, &d->mu, &until);
        int64_t waited_ms = (odbox_mono_us() - t0) / 1000;
        if (d->running && waited_ms >= warn_ms) {
            int n = 0;
            for (execution *x = d->running; x; x = x->next)
                n++;
            odbox_log(ODBOX_LOG_WARN,
                      "delivery free: waiting %lld ms for %d job execution(s) to return (a statement, a "
                      "handler call's stop wait or the delivery hook still runs)",
                      (long long)waited_ms, n);
            warn_ms += FREE_WARN_MS * 5;
        }
    }
    pthread_mutex_unlock(&d->mu);
}

void odbox_delivery_free(odbox_delivery **dp)
{
    if (!dp || !*dp)
        return;
    stop_executions(*dp);
    odbox_handoff_give_back(*dp);
    odbox_subs_leave(*dp);
    delivery_destroy(*dp);
    *dp = NULL;
}

/* ---- executors ------------------------------------------------------------------- */

int odbox_delivery_attach(odbox_delivery *d, odbox_executor *exe, odbox_error *err)
{
    if (!d || !exe)
        return odbox_fail(err, ODBOX_EINVAL, "delivery attach: delivery or executor is NULL");
    pthread_mutex_lock(&d->attach_mu);
    int rc = ODBOX_OK;
    for (size_t i = 0; i < d->nattached && rc == ODBOX_OK; i++)
        if (d->attached[i] == exe)
            rc = odbox_fail(err, ODBOX_EINVAL, "delivery attach: this executor is attached already");
    odbox_executor **g = rc == ODBOX_OK ? realloc(d->attached, (d->nattached + 1) * sizeof *g) : NULL;
    if (rc == ODBOX_OK && !g)
        rc = odbox_fail(err, ODBOX_ENOMEM, "delivery attach: out of memory");
    if (rc == ODBOX_OK) {
        d->attached = g;
        /* the executor's NOTIFY already tells other processes */
        rc = odbox_executor_add_commit_listener(exe, odbox_wake_on_commit, d->wake, err);
    }
    if (rc == ODBOX_OK)
        d->attached[d->nattached++] = exe;
    pthread_mutex_unlock(&d->attach_mu);
    return rc;
}

int odbox_delivery_detach(odbox_delivery *d, odbox_executor *exe, odbox_error *err)
{
    if (!d || !exe)
        return odbox_fail(err, ODBOX_EINVAL, "delivery detach: delivery or executor is NULL");
    pthread_mutex_lock(&d->attach_mu);
    size_t i = 0;
    while (i < d->nattached && d->attached[i] != exe)
        i++;
    int found = i < d->nattached;
    if (found) {
        memmove(&d->attached[i], &d->attached[i + 1], (d->nattached - i - 1) * sizeof *d->attached);
        d->nattached--;
    }
    if (found)
        odbox_executor_remove_commit_listener(exe, odbox_wake_on_commit, d->wake);
    pthread_mutex_unlock(&d->attach_mu);
    if (!found)
        return odbox_fail(err, ODBOX_ENOTFOUND, "delivery detach: this executor is not attached");
    return ODBOX_OK;
}

/* ---- rounds ------------------------------------------------------------------------ */

static int public_round(odbox_delivery *d, int job, odbox_shard *s, odbox_delivery_round *round, odbox_error *err)
{
    odbox_delivery_round local;
    if (!round)
        round = &local;
    memset(round, 0, sizeof *round);
    if (!d || !s)
        return odbox_fail(err, ODBOX_EINVAL, "delivery round: delivery or shard is NULL");
    odbox_dshard *ds = odbox_delivery_shard(d, s);
    if (!ds)
        return odbox_fail(err, ODBOX_EINVAL, "delivery round: the shard is not of the delivery's registry");
    odbox_round_ctx x = {.d = d, .ds = ds, .stop = NULL, .clock = d->clock};
    if (job == JOB_FANOUT)
        return odbox_fanout_round(&x, round, err);
    /* this process serves its handlers: recorded (the fan-out's rounds
     * do it themselves) */
    int rc = odbox_subs_beat(d, ds, 0, err);
    return rc == ODBOX_OK ? odbox_handling_round(&x, round, err) : rc;
}

int odbox_delivery_fanout_round(odbox_delivery *d, odbox_shard *s, odbox_delivery_round *round, odbox_error *err)
{
    return public_round(d, JOB_FANOUT, s, round, err);
}

int odbox_delivery_handling_round(odbox_delivery *d, odbox_shard *s, odbox_delivery_round *round,
                                  odbox_error *err)
{
    return public_round(d, JOB_HANDLING, s, round, err);
}

/* ---- executions ------------------------------------------------------------------------ */

/* The supervisor: runs until the job registry stops, the run is about to
 * be taken for dead, or execution_max_ms passed. */
static void supervise(odbox_job_context *ctx, execution *x)
{
    odbox_delivery *d = x->d;
    int64_t end = odbox_mono_us() / 1000 + d->cfg.execution_max_ms;
    for (;;) {
        int64_t left = end - odbox_mono_us() / 1000;
        if (left <= 0 || atomic_load(&x->stop)) /* x->stop: the delivery is being freed */
            break;
        int w = odbox_job_context_wait(ctx, (int)(left < SUPERVISE_MS ? left : SUPERVISE_MS));
        if (w == ODBOX_JOB_WAIT_STOP)
            break;
        if (odbox_job_context_fraction_dead(ctx) > 0.5) {
            odbox_log(ODBOX_LOG_WARN, "delivery: %s: heartbeats are late; ending this execution",
                      d->job_name[x->job]);
            break;
        }
        if (w == ODBOX_JOB_WAIT_WOKEN) { /* odbox_jobs_wake: every shard now */
            pthread_mutex_lock(&d->mu);
            for (size_t i = 0; i < d->nshards; i++)
                d->shards[i].pending[x->job] = 1;
            pthread_cond_broadcast(&d->cv);
            pthread_mutex_unlock(&d->mu);
        }
    }
}

/* Puts x on the running list; ODBOX_ESTATE once the delivery is being
 * freed. */
static int execution_enter(odbox_delivery *d, execution *x, odbox_error *err)
{
    pthread_mutex_lock(&d->mu);
    int closing = d->closing;
    if (!closing) {
        x->next = d->running;
        d->running = x;
    }
    pthread_mutex_unlock(&d->mu);
    if (closing)
        return odbox_fail(err, ODBOX_ESTATE, "delivery: %s: the delivery is being freed", d->job_name[x->job]);
    return ODBOX_OK;
}

/* Takes x off the running list and tells a waiting odbox_delivery_free.
 * The last touch of d: it may be freed once mu is released. */
static void execution_leave(odbox_delivery *d, execution *x)
{
    pthread_mutex_lock(&d->mu);
    for (execution **at = &d->running; *at; at = &(*at)->next)
        if (*at == x) {
            *at = x->next;
            break;
        }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static int execute(odbox_job_context *ctx, void *user, odbox_error *err)
{
    odbox_djob *j = user;
    odbox_delivery *d = j->d;
    execution x = {.d = d, .job = j->kind};
    atomic_init(&x.stop, 0);
    int rc = execution_enter(d, &x, err);
    if (rc != ODBOX_OK)
        return rc;
    start_listening(d);
    shard_loop *loops = calloc(d->nshards, sizeof *loops);
    if (!loops) {
        execution_leave(d, &x);
        return odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
    }
    for (size_t i = 0; i < d->nshards && rc == ODBOX_OK; i++) {
        loops[i] = (shard_loop){&x, &d->shards[i], 0, 0, 0};
        if (pthread_create(&loops[i].thread, NULL, odbox_shard_loop_main, &loops[i]) != 0)
            rc = odbox_fail(err, ODBOX_ENOMEM, "delivery: %s: cannot start a thread for shard %d.%d",
                            d->job_name[j->kind], d->shards[i].id.group, d->shards[i].id.member);
        else
            loops[i].started = 1;
    }
    if (rc == ODBOX_OK)
        supervise(ctx, &x);
    atomic_store(&x.stop, 1);
    pthread_mutex_lock(&d->mu);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    odbox_workers_poke(d->workers);
    for (size_t i = 0; i < d->nshards; i++)
        if (loops[i].started)
            pthread_join(loops[i].thread, NULL);
    free(loops);
    execution_leave(d, &x);
    return rc;
}

/* ---- the handling loops ------------------------------------------------------------------ */

/* Handling is no job: every process that adds it handles, claiming rows
 * by lease (delivery_handling.c). Its loops (one thread per shard, under
 * one supervisor thread) start with the job registry (odbox_jobs_start)
 * and stop with it (odbox_jobs_stop), as a service of the registry; they
 * are an execution on the running list, so odbox_delivery_free stops them
 * and waits for them as for the fan-out's. They never end by length. */
struct hservice {
    pthread_mutex_t mu;
    odbox_delivery *d; /* NULL once the delivery is freed */
    int refs;          /* the delivery's and the job registry's */
};

static void svc_release(void *ud)
{
    struct hservice *sv = ud;
    pthread_mutex_lock(&sv->mu);
    int last = --sv->refs == 0;
    pthread_mutex_unlock(&sv->mu);
    if (last) {
        pthread_mutex_destroy(&sv->mu);
        free(sv);
    }
}

static void svc_detach(odbox_delivery *d)
{
    if (!d->svc)
        return;
    pthread_mutex_lock(&d->svc->mu);
    d->svc->d = NULL;
    pthread_mutex_unlock(&d->svc->mu);
    svc_release(d->svc);
    d->svc = NULL;
}

static odbox_delivery *svc_delivery(struct hservice *sv)
{
    pthread_mutex_lock(&sv->mu);
    odbox_delivery *d = sv->d;
    pthread_mutex_unlock(&sv->mu);
    return d;
}

/* The handling of every shard: handling_loops threads per shard, each
 * looping rounds. Claims are leased, so loops of one process share a
 * backlog as processes do; a wake-up starts one of them, and a round
 * that claimed a full batch starts another. */
static void *handling_main(void *arg)
{
    execution *x = arg;
    odbox_delivery *d = x->d;
    size_t n = d->nshards * (size_t)d->cfg.loops;
    shard_loop *loops = calloc(n, sizeof *loops);
    for (size_t i = 0; loops && i < n; i++) {
        odbox_dshard *ds = &d->shards[i / (size_t)d->cfg.loops];
        loops[i] = (shard_loop){x, ds, (int)(i % (size_t)d->cfg.loops), 0, 0};
        if (pthread_create(&loops[i].thread, NULL, odbox_shard_loop_main, &loops[i]) != 0)
            odbox_log(ODBOX_LOG_ERROR, "delivery: cannot start a handling thread of shard %d.%d", ds->id.group,
                      ds->id.member);
        else
            loops[i].started = 1;
    }
    if (!loops)
        odbox_log(ODBOX_LOG_ERROR, "delivery: out of memory: no handling in this process");
    /* hand-offs no loop takes in time: the fan-out job that would give
     * them back may have moved to another process */
    pthread_mutex_lock(&d->mu);
    while (loops && !atomic_load(&x->stop)) {
        struct timespec until = odbox_mono_after(HANDOFF_CHECK_MS);
        while (!atomic_load(&x->stop) && !odbox_mono_passed(&until))
            pthread_cond_timedwait(&d->cv, &d->mu, &until);
        pthread_mutex_unlock(&d->mu);
        for (size_t i = 0; i < d->nshards && !atomic_load(&x->stop); i++)
            odbox_handoff_expire(d, &d->shards[i]);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; loops && i < n; i++)
        if (loops[i].started)
            pthread_join(loops[i].thread, NULL);
    free(loops);
    odbox_handoff_give_back(d);
    execution_leave(d, x);
    free(x);
    return NULL;
}

static int svc_start(void *ud, odbox_error *err)
{
    odbox_delivery *d = svc_delivery(ud);
    if (!d)
        return odbox_fail(err, ODBOX_ESTATE, "delivery: the delivery was freed");
    execution *x = calloc(1, sizeof *x);
    if (!x)
        return odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
    *x = (execution){.d = d, .job = JOB_HANDLING, .own = 1};
    atomic_init(&x->stop, 0);
    int rc = execution_enter(d, x, err);
    if (rc != ODBOX_OK) {
        free(x);
        return rc;
    }
    start_listening(d);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, handling_main, x) != 0) {
        execution_leave(d, x);
        free(x);
        rc = odbox_fail(err, ODBOX_ENOMEM, "delivery: cannot start the handling thread");
    }
    pthread_attr_destroy(&at);
    return rc;
}

static void svc_stop(void *ud)
{
    odbox_delivery *d = svc_delivery(ud);
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    for (execution *x = d->running; x; x = x->next)
        if (x->own)
            atomic_store(&x->stop, 1);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    odbox_workers_poke(d->workers); /* rounds waiting for calls: stop_wait_ms from now */
}

static int svc_wait(void *ud, const struct timespec *until)
{
    odbox_delivery *d = svc_delivery(ud);
    if (!d)
        return 1;
    pthread_mutex_lock(&d->mu);
    int left;
    for (;;) {
        left = 0;
        for (execution *x = d->running; x; x = x->next)
            left |= x->own;
        if (!left || odbox_mono_passed(until))
            break;
        pthread_cond_timedwait(&d->cv, &d->mu, until);
    }
    pthread_mutex_unlock(&d->mu);
    return !left;
}

const char *odbox_delivery_job_name(const odbox_delivery *d, int which)
{
    if (!d)
        return NULL;
    return which == ODBOX_DELIVERY_FANOUT ? d->job_name[JOB_FANOUT]
           : which == ODBOX_DELIVERY_HANDLING ? d->job_name[JOB_HANDLING]
                                              : NULL;
}

int odbox_delivery_add_jobs(odbox_delivery *d, odbox_jobs *jobs, int which, odbox_error *err)
{
    if (!d || !jobs)
        return odbox_fail(err, ODBOX_EINVAL, "delivery: add jobs needs a delivery and a job registry");
    if (which <= 0 || (which & ~(ODBOX_DELIVERY_FANOUT | ODBOX_DELIVERY_HANDLING)))
        return odbox_fail(err, ODBOX_EINVAL, "delivery: add jobs: %d is not a mask of ODBOX_DELIVERY_FANOUT and "
                                             "ODBOX_DELIVERY_HANDLING", which);
    for (int k = 0; k < NJOBS; k++)
        if ((which & (1 << k)) && d->jobs[k].jobs)
            return odbox_fail(err, ODBOX_ESTATE, "delivery: the %s job was added already", d->job_name[k]);
    /* a stop must let the calls' stop wait and the round's statements end
     * inside the registry's shutdown wait, or it gives up on executions */
    int64_t shutdown_ms = odbox_jobs_shutdown_ms(jobs);
    if ((int64_t)d->cfg.stop_wait_ms * 100 > shutdown_ms * STOP_WAIT_SHARE)
        return odbox_fail(err, ODBOX_EINVAL,
                          "delivery: add jobs: stop_wait_ms %d does not fit the job registry's "
                          "shutdown_max_wait_ms %lld: it may be at most %d%% of it (%lld ms), the rest is for the "
                          "round's statements",
                          d->cfg.stop_wait_ms, (long long)shutdown_ms, STOP_WAIT_SHARE,
                          (long long)(shutdown_ms * STOP_WAIT_SHARE / 100));
    for (int k = 0; k < NJOBS; k++) {
        if (!(which & (1 << k)))
            continue;
        if (k == JOB_HANDLING) {
            struct hservice *sv = calloc(1, sizeof *sv);
            if (!sv)
                return odbox_fail(err, ODBOX_ENOMEM, "delivery: out of memory");
            pthread_mutex_init(&sv->mu, NULL);
            sv->d = d;
            sv->refs = 2;
            odbox_jobs_service s = {"the delivery's handling", svc_start, svc_stop, svc_wait, svc_release, sv};
            int rc = odbox_jobs_add_service(jobs, &s, err);
            if (rc != ODBOX_OK) {
                pthread_mutex_destroy(&sv->mu);
                free(sv);
                return rc;
            }
            d->svc = sv;
            d->jobs[k].jobs = jobs;
            continue;
        }
        /* due again 1 ms after an execution, which the job registry polls
         * for then: the next execution follows at once */
        odbox_job job = {d->job_name[k], odbox_schedule_fixed_delay(1), execute, &d->jobs[k]};
        int rc = odbox_jobs_add(jobs, &job, err);
        if (rc != ODBOX_OK)
            return rc;
        d->jobs[k].jobs = jobs;
    }
    /* the process serves its handlers from now on, whatever jobs it
     * holds: recorded and heartbeated on every shard by a thread */
    return odbox_subs_start_beat(d, err);
}
