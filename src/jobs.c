/* odbox — the job registry: open, add, start (rows inserted or moved,
 * threads started), wake, a bounded stop, free, and what a callback asks
 * of its context. The threads are in src/jobs_thread.c, the state they
 * share in src/jobs_run.h. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "jobs_run.h"
#include "db/odbc.h"

#define DEFAULT_POLL_MS 10000
#define DEFAULT_HEARTBEAT_MS 10000
#define DEFAULT_MISSED_HEARTBEATS 6
#define DEFAULT_SHUTDOWN_MS 30000
#define DEFAULT_STATEMENT_TIMEOUT_MS 10000
/* db-scheduler's ScheduleRecurringOnStartup: rows due sooner are left as
 * they are; a cron row further off than this is moved */
#define RESCHEDULE_NOT_BEFORE_US INT64_C(10000000)
#define RESCHEDULE_TOLERANCE_US INT64_C(1000000)

/* ---- time and locking -------------------------------------------------------- */

static job_rt *find_job(const odbox_jobs *r, const char *name)
{
    for (size_t i = 0; name && i < r->njobs; i++)
        if (!strcmp(r->jobs[i]->name, name))
            return r->jobs[i];
    return NULL;
}

/* ---- open, add ------------------------------------------------------------- */

static int config_int(const char *what, int v, int dflt, int *out, odbox_error *err)
{
    if (v < 0)
        return odbox_fail(err, ODBOX_EINVAL, "jobs: %s %d must be > 0 (0: the default, %d)", what, v, dflt);
    *out = v ? v : dflt;
    return ODBOX_OK;
}

/* "host:pid", the host cut so that the whole fits (db-scheduler truncates
 * picked_by to 50 characters too). */
static void default_picked_by(char *out, size_t cap)
{
    char host[256] = "";
    char pid[24];
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    int n = snprintf(pid, sizeof pid, ":%ld", (long)getpid());
    int room = (int)cap - 1 - n;
    snprintf(out, cap, "%.*s%s", room, host, pid);
}

int odbox_jobs_open(odbox_registry *registry, const odbox_jobs_config *cfg, odbox_jobs **out, odbox_error *err)
{
    static const odbox_jobs_config defaults = {0};
    if (!out)
        return odbox_fail(err, ODBOX_EINVAL, "jobs: out is NULL");
    *out = NULL;
    if (!cfg)
        cfg = &defaults;
    odbox_pool *pool = cfg->pool;
    if (!pool && registry)
        pool = odbox_shard_primary(odbox_registry_default_shard(registry));
    if (!pool)
        return odbox_fail(err, ODBOX_EINVAL, "jobs: no registry and no pool given");
    if (cfg->picked_by && (!*cfg->picked_by || strlen(cfg->picked_by) > ODBOX_JOB_PICKED_BY_MAX))
        return odbox_fail(err, ODBOX_EINVAL, "jobs: picked_by '%.60s' must have 1..%d characters", cfg->picked_by,
                          ODBOX_JOB_PICKED_BY_MAX);
    odbox_jobs *r = calloc(1, sizeof *r);
    if (!r)
        return odbox_fail(err, ODBOX_ENOMEM, "jobs: out of memory");
    int rc, dead_ms = 0;
    if ((rc = config_int("poll interval (ms)", cfg->poll_interval_ms, DEFAULT_POLL_MS, &r->poll_ms, err)) != ODBOX_OK ||
        (rc = config_int("heartbeat interval (ms)", cfg->heartbeat_interval_ms, DEFAULT_HEARTBEAT_MS, &r->heartbeat_ms,
                         err)) != ODBOX_OK ||
        (rc = config_int("missed heartbeats limit", cfg->missed_heartbeats_limit, DEFAULT_MISSED_HEARTBEATS,
                         &r->missed_limit, err)) != ODBOX_OK) {
        free(r);
        return rc;
    }
    /* with the defaults in place: a value given for one of the two times
     * the other's default must not wrap into a negative or short window */
    if ((int64_t)r->heartbeat_ms * r->missed_limit > INT32_MAX) {
        free(r);
        return odbox_fail(err, ODBOX_EINVAL, "jobs: heartbeat interval x missed heartbeats limit is too large");
    }
    if ((rc = config_int("shutdown max wait (ms)", cfg->shutdown_max_wait_ms, DEFAULT_SHUTDOWN_MS, &r->shutdown_ms,
                         err)) != ODBOX_OK ||
        (rc = config_int("statement timeout (ms)", cfg->statement_timeout_ms, DEFAULT_STATEMENT_TIMEOUT_MS,
                         &r->statement_ms, err)) != ODBOX_OK ||
        (rc = config_int("dead after (ms)", cfg->dead_after_ms, r->heartbeat_ms * r->missed_limit, &dead_ms, err)) !=
            ODBOX_OK) {
        free(r);
        return rc;
    }
    if (dead_ms < 2 * (int64_t)r->heartbeat_ms) {
        int hb = r->heartbeat_ms;
        free(r);
        return odbox_fail(err, ODBOX_EINVAL,
                          "jobs: the dead window (%d ms) must be at least two heartbeat intervals (%lld ms): a live "
                          "run would be taken for dead between two heartbeats",
                          dead_ms, 2 * (long long)hb);
    }
    r->dead_us = (int64_t)dead_ms * 1000;
    r->pool = pool;
    r->db_time = !(cfg->clock && cfg->clock->now_us);
    r->clock = r->db_time ? *odbox_clock_system() : *cfg->clock;
    if (cfg->picked_by)
        strcpy(r->picked_by, cfg->picked_by);
    else
        default_picked_by(r->picked_by, sizeof r->picked_by);
    pthread_mutex_init(&r->mu, NULL);
    odbox_cond_init_mono(&r->done_cv);
    odbox_cond_init_mono(&r->hb_cv);
    r->refs = 1;
    *out = r;
    return ODBOX_OK;
}

int odbox_jobs_add_service(odbox_jobs *r, const odbox_jobs_service *sv, odbox_error *err)
{
    if (!r || !sv || !sv->start || !sv->stop || !sv->wait)
        return odbox_fail(err, ODBOX_EINVAL, "jobs add service: registry or service is NULL");
    pthread_mutex_lock(&r->mu);
    int rc = r->started ? odbox_fail(err, ODBOX_ESTATE, "jobs add service: the registry is started")
             : r->nservices == ODBOX_JOBS_MAX_SERVICES ? odbox_fail(err, ODBOX_ENOMEM, "jobs add service: too many")
                                                        : ODBOX_OK;
    if (rc == ODBOX_OK)
        r->services[r->nservices++] = *sv;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int odbox_jobs_add(odbox_jobs *r, const odbox_job *job, odbox_error *err)
{
    if (!r || !job)
        return odbox_fail(err, ODBOX_EINVAL, "jobs add: registry or job is NULL");
    if (!job->name || !*job->name)
        return odbox_fail(err, ODBOX_EINVAL, "jobs add: the job's name is NULL or empty");
    if (strlen(job->name) > ODBOX_JOB_NAME_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "jobs add: name '%.40s...' is longer than %d characters", job->name,
                          ODBOX_JOB_NAME_MAX);
    if (!job->execute)
        return odbox_fail(err, ODBOX_EINVAL, "jobs add: job '%s' has no execute callback", job->name);
    int rc = odbox_schedule_check(&job->schedule, err);
    if (rc != ODBOX_OK)
        return odbox_error_prefix(err, rc, "jobs add: job '%s'", job->name);
    pthread_mutex_lock(&r->mu);
    int started = r->started;
    pthread_mutex_unlock(&r->mu);
    if (started)
        return odbox_fail(err, ODBOX_ESTATE, "jobs add: job '%s' added after start", job->name);
    if (find_job(r, job->name))
        return odbox_fail(err, ODBOX_EINVAL, "jobs add: a job named '%s' was added already", job->name);
    if (r->njobs == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 4;
        job_rt **p = realloc(r->jobs, ncap * sizeof *p);
        if (!p)
            return odbox_fail(err, ODBOX_ENOMEM, "jobs add: out of memory");
        r->jobs = p, r->cap = ncap;
    }
    job_rt *j = calloc(1, sizeof *j);
    if (!j || !(j->name = odbox_strdup(job->name))) {
        free(j);
        return odbox_fail(err, ODBOX_ENOMEM, "jobs add: out of memory");
    }
    j->reg = r;
    j->schedule = job->schedule;
    j->execute = job->execute;
    j->user = job->user;
    j->ctx.job = j;
    odbox_cond_init_mono(&j->cv);
    r->jobs[r->njobs++] = j;
    return ODBOX_OK;
}

/* ---- start, wake, stop, free -------------------------------------------------------- */

/* Inserts j's row when absent; moves it when its schedule changed
 * (db-scheduler's ScheduleRecurringOnStartup). */
static int prepare_row(odbox_jobs *r, job_rt *j, odbox_conn *c, odbox_error *err)
{
    odbox_job_row row;
    int rc = odbox_job_row_read(c, j->name, r->picked_by, stmt_now(r), &row, err);
    if (rc == ODBOX_ENOTFOUND)
        return odbox_jobs_insert_row(j, c, err);
    int64_t now = rc == ODBOX_OK ? row_now(r, &row) : 0;
    if (rc != ODBOX_OK || row.picked || row.execution_us < now + RESCHEDULE_NOT_BEFORE_US)
        return rc;
    int64_t next;
    if ((rc = odbox_schedule_next(&j->schedule, now, &next, err)) != ODBOX_OK)
        return rc;
    int move = j->schedule.kind == ODBOX_SCHEDULE_CRON ? llabs(row.execution_us - next) > RESCHEDULE_TOLERANCE_US
                                                       : row.execution_us > next;
    int done;
    if (move && (rc = odbox_job_row_move(c, j->name, row.version, next, &done, err)) == ODBOX_OK && done)
        odbox_log(ODBOX_LOG_INFO, "job '%s': its schedule changed; next run moved", j->name);
    return rc;
}

static void stop_threads(odbox_jobs *r, char *late, size_t cap);

int odbox_jobs_start(odbox_jobs *r, odbox_error *err)
{
    if (!r)
        return odbox_fail(err, ODBOX_EINVAL, "jobs start: registry is NULL");
    pthread_mutex_lock(&r->mu);
    int started = r->started, stopped = r->stopping;
    if (!stopped)
        r->started = 1;
    pthread_mutex_unlock(&r->mu);
    /* a stop before start ends the registry: its threads would see the
     * stop and exit at once, and nothing would ever run */
    if (stopped && !started)
        return odbox_fail(err, ODBOX_ESTATE, "jobs start: the job registry was stopped already");
    if (started)
        return odbox_fail(err, ODBOX_ESTATE, "jobs start: started already");
    int rc = odbox_jobs_session(r, &r->hb_conn, err);
    if (rc != ODBOX_OK)
        odbox_error_prefix(err, rc, "jobs start");
    for (size_t i = 0; rc == ODBOX_OK && i < r->njobs; i++) {
        rc = prepare_row(r, r->jobs[i], r->hb_conn, err);
        if (rc == ODBOX_EDB)
            odbox_error_prefix(err, rc,
                               "jobs start: job '%s': cannot use scheduled_tasks, odbox_job_state and "
                               "odbox_job_waiters (missing? run odbox migrate)",
                               r->jobs[i]->name);
        else if (rc != ODBOX_OK)
            odbox_error_prefix(err, rc, "jobs start: job '%s'", r->jobs[i]->name);
    }
    if (rc == ODBOX_OK && r->njobs) {
        pthread_mutex_lock(&r->mu);
        r->refs++;
        int trc = pthread_create(&r->hb_thread, NULL, odbox_jobs_heartbeat_main, r);
        if (trc != 0)
            r->refs--;
        r->hb_started = trc == 0;
        for (size_t i = 0; trc == 0 && i < r->njobs; i++) {
            job_rt *j = r->jobs[i];
            r->refs++;
            if ((trc = pthread_create(&j->thread, NULL, odbox_jobs_job_main, j)) != 0)
                r->refs--;
            j->thread_started = trc == 0;
        }
        pthread_mutex_unlock(&r->mu);
        if (trc != 0) {
            rc = odbox_fail(err, trc == EAGAIN ? ODBOX_ENOMEM : ODBOX_EDB,
                            "jobs start: could not start a thread (error %d)", trc);
            stop_threads(r, NULL, 0);
        }
    }
    for (size_t i = 0; rc == ODBOX_OK && i < r->nservices; i++) {
        if ((rc = r->services[i].start(r->services[i].ud, err)) != ODBOX_OK) {
            odbox_error_prefix(err, rc, "jobs start: %s", r->services[i].name);
            stop_threads(r, NULL, 0);
        } else {
            r->services_started = (int)i + 1;
        }
    }
    if (rc != ODBOX_OK) {
        pthread_mutex_lock(&r->mu);
        r->stopped = 1;
        pthread_mutex_unlock(&r->mu);
    }
    return rc;
}

int odbox_jobs_wake(odbox_jobs *r, const char *name)
{
    if (!r)
        return ODBOX_EINVAL;
    job_rt *j = find_job(r, name);
    if (!j)
        return ODBOX_ENOTFOUND;
    pthread_mutex_lock(&r->mu);
    j->wake = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&r->mu);
    return ODBOX_OK;
}

/* Tells every thread to stop and waits for them: up to shutdown_ms for
 * callbacks, and for a thread busy with its row's statements (bounded
 * by the sessions' lock and statement timeouts) up to three statement
 * timeouts more. A thread still busy then is abandoned (it keeps the
 * registry's memory alive until it exits); a callback's name is
 * appended to late. */
static void stop_threads(odbox_jobs *r, char *late, size_t cap)
{
    /* in 64 bits: a bound near INT_MAX (wait as long as it takes) must
     * not wrap into the past and abandon every callback at once */
    struct timespec deadline = odbox_mono_after(r->shutdown_ms);
    struct timespec last = odbox_mono_after((int64_t)r->shutdown_ms + 3 * (int64_t)r->statement_ms);
    for (int i = 0; i < r->services_started; i++)
        r->services[i].stop(r->services[i].ud);
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    for (size_t i = 0; i < r->njobs; i++)
        pthread_cond_broadcast(&r->jobs[i]->cv);
    for (;;) {
        int waiting = 0, bookkeeping = 0;
        for (size_t i = 0; i < r->njobs; i++) {
            job_rt *j = r->jobs[i];
            if (j->thread_started && !j->exited && !j->abandoned) {
                waiting = 1;
                bookkeeping |= !j->running;
            }
        }
        if (!waiting || odbox_mono_passed(&last) || (odbox_mono_passed(&deadline) && !bookkeeping))
            break;
        pthread_cond_timedwait(&r->done_cv, &r->mu, odbox_mono_passed(&deadline) ? &last : &deadline);
    }
    size_t used = late && cap ? strlen(late) : 0;
    for (size_t i = 0; i < r->njobs; i++) {
        job_rt *j = r->jobs[i];
        if (!j->thread_started || j->abandoned || j->exited)
            continue;
        j->abandoned = 1;
        pthread_detach(j->thread);
        if (!j->running)
            odbox_log(ODBOX_LOG_WARN, "jobs stop: job '%s' is still busy with its row; no longer waited for", j->name);
        else if (late && used + 1 < cap)
            used += (size_t)snprintf(late + used, cap - used, "%s'%s'", used ? ", " : "", j->name);
        if (used >= cap)
            used = cap - 1;
    }
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < r->njobs; i++) {
        job_rt *j = r->jobs[i];
        pthread_mutex_lock(&r->mu);
        int join = j->thread_started && !j->abandoned;
        j->thread_started = 0;
        pthread_mutex_unlock(&r->mu);
        if (join)
            pthread_join(j->thread, NULL);
    }
    /* the services: the callbacks' bound */
    for (int i = 0; i < r->services_started; i++)
        if (!r->services[i].wait(r->services[i].ud, &deadline)) {
            size_t u = late && cap ? strlen(late) : 0;
            if (late && u + 1 < cap)
                snprintf(late + u, cap - u, "%s'%s'", u ? ", " : "", r->services[i].name);
        }
    r->services_started = 0;
    /* the heartbeat thread: at most one statement to finish */
    pthread_mutex_lock(&r->mu);
    r->stopped = 1;
    pthread_cond_broadcast(&r->hb_cv);
    struct timespec hb_last = odbox_mono_after(2 * (int64_t)r->statement_ms);
    while (r->hb_started && !r->hb_exited && !odbox_mono_passed(&hb_last))
        pthread_cond_timedwait(&r->done_cv, &r->mu, &hb_last);
    int hb = r->hb_started;
    int hb_join = hb && r->hb_exited;
    r->hb_started = 0;
    if (hb && !hb_join) {
        r->hb_abandoned = 1;
        pthread_detach(r->hb_thread);
        odbox_log(ODBOX_LOG_WARN, "jobs stop: the heartbeat thread is still in a statement; no longer waited for");
    }
    pthread_mutex_unlock(&r->mu);
    if (hb_join)
        pthread_join(r->hb_thread, NULL);
}

int odbox_jobs_stop(odbox_jobs *r, odbox_error *err)
{
    if (!r)
        return odbox_fail(err, ODBOX_EINVAL, "jobs stop: registry is NULL");
    pthread_mutex_lock(&r->mu);
    int idle = !r->started || r->stopping;
    if (!r->started)
        r->stopping = r->stopped = 1;
    pthread_mutex_unlock(&r->mu);
    if (idle)
        return ODBOX_OK;
    char late[256] = "";
    stop_threads(r, late, sizeof late);
    if (late[0])
        return odbox_fail(err, ODBOX_ETIMEDOUT,
                          "jobs stop: job(s) %s did not return within %d ms; left running, no longer waited for",
                          late, r->shutdown_ms);
    return ODBOX_OK;
}

void odbox_jobs_free(odbox_jobs **p)
{
    if (!p || !*p)
        return;
    odbox_error e = {0};
    if (odbox_jobs_stop(*p, &e) != ODBOX_OK)
        odbox_log(ODBOX_LOG_WARN, "%s", e.message);
    odbox_jobs_release(*p);
    *p = NULL;
}

/* ---- the context ------------------------------------------------------------------ */

int odbox_job_context_shutting_down(const odbox_job_context *ctx)
{
    if (!ctx)
        return 1;
    odbox_jobs *r = ctx->job->reg;
    pthread_mutex_lock(&r->mu);
    int s = r->stopping;
    pthread_mutex_unlock(&r->mu);
    return s;
}

double odbox_job_context_fraction_dead(const odbox_job_context *ctx)
{
    if (!ctx)
        return INFINITY;
    job_rt *j = ctx->job;
    odbox_jobs *r = j->reg;
    pthread_mutex_lock(&r->mu);
    int64_t last = j->last_beat_us;
    int lost = j->lost;
    pthread_mutex_unlock(&r->mu);
    double f = (double)(beat_now(r) - last) / (double)r->dead_us;
    if (f < 0)
        f = 0;
    return lost && f < 1.0 ? 1.0 : f;
}

const char *odbox_job_context_name(const odbox_job_context *ctx) { return ctx ? ctx->job->name : NULL; }

int64_t odbox_job_context_now_us(const odbox_job_context *ctx)
{
    return ctx ? clock_now(ctx->job->reg) : odbox_now_us();
}

int64_t odbox_job_context_stmt_now(const odbox_job_context *ctx)
{
    return ctx ? stmt_now(ctx->job->reg) : ODBOX_JOB_DB_NOW;
}

int odbox_job_context_wait(odbox_job_context *ctx, int ms)
{
    if (!ctx)
        return ODBOX_JOB_WAIT_STOP;
    job_rt *j = ctx->job;
    odbox_jobs *r = j->reg;
    struct timespec deadline = odbox_mono_after(ms > 0 ? ms : 0);
    int out;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->stopping || j->lost) {
            out = ODBOX_JOB_WAIT_STOP;
            break;
        }
        if (j->wake) {
            j->wake = 0;
            out = ODBOX_JOB_WAIT_WOKEN;
            break;
        }
        if (odbox_mono_passed(&deadline)) {
            out = ODBOX_JOB_WAIT_ELAPSED;
            break;
        }
        pthread_cond_timedwait(&j->cv, &r->mu, &deadline);
    }
    pthread_mutex_unlock(&r->mu);
    return out;
}

int odbox_jobs_shutdown_ms(const odbox_jobs *r) { return r->shutdown_ms; }
