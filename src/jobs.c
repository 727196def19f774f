/* odbox — the job registry: one thread per job polls its row, claims it
 * when due and runs the callback; one heartbeat thread keeps the rows of
 * running jobs alive; stop waits a bounded time.
 *
 * Memory: the registry is shared by its owner and every job thread it
 * started (refs). A thread whose callback outlives odbox_jobs_stop's
 * bound is detached and marked abandoned; when the callback returns it
 * writes nothing and drops its reference, and the last reference frees
 * the registry. So odbox_jobs_free may come first.
 *
 * Sessions: each job thread and the heartbeat thread has one session of
 * its own (never the pool's, which the application may exhaust), opened
 * when first needed, with bounded lock and statement waits, and opened
 * again after a failure. No session is held by a callback.
 *
 * Time: the database's (ODBOX_JOB_DB_NOW) unless a clock was given.
 *
 * Lock: one mutex (mu) guards every field marked "under mu". */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "jobs_internal.h"
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

typedef struct job_rt job_rt;

struct odbox_job_context {
    job_rt *job;
};

struct job_rt {
    odbox_jobs *reg;
    char *name;
    odbox_schedule schedule;
    odbox_job_fn execute;
    void *user;
    odbox_job_context ctx;
    pthread_t thread;
    pthread_cond_t cv;     /* wakes this job's thread: wake, stop, lost row */
    /* under mu */
    int thread_started;
    int exited;
    int wake;              /* a wake not yet seen */
    int running;           /* in the callback, holding the row */
    int abandoned;         /* stop gave up on this callback */
    int lost;              /* the held row was changed by someone else */
    int64_t version;       /* of the held row */
    int64_t last_beat_us;  /* beat_now() of the last heartbeat that landed */
    /* the job's thread's own: after a run it recorded, how soon its row
     * is due again (-1: unknown), so that a delay shorter than the poll
     * interval is kept */
    int64_t due_in_us;
    int ran_last;          /* it ran the last run: leaves the next to a waiter */
    odbox_conn *conn;      /* its session */
};

struct odbox_jobs {
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* a job thread exited or entered its callback */
    pthread_cond_t hb_cv;   /* wakes the heartbeat thread to stop */
    odbox_pool *pool;
    int poll_ms, heartbeat_ms, missed_limit, shutdown_ms, statement_ms;
    int64_t dead_us;        /* the dead window */
    int db_time;            /* no clock given: the database's time decides */
    odbox_clock clock;
    odbox_conn *hb_conn;    /* the heartbeat thread's session (start's, before) */
    char picked_by[ODBOX_JOB_PICKED_BY_MAX + 1];
    job_rt **jobs;
    size_t njobs, cap;
    pthread_t hb_thread;
    /* under mu */
    int refs;               /* the owner and each thread that has not exited */
    int started, stopping, stopped, hb_started, hb_exited, hb_abandoned;
};

/* ---- time and locking -------------------------------------------------------- */

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

static int64_t clock_now(const odbox_jobs *r) { return r->clock.now_us(r->clock.ud); }

/* The time statements write and compare with. */
static int64_t stmt_now(const odbox_jobs *r) { return r->db_time ? ODBOX_JOB_DB_NOW : clock_now(r); }

/* The time heartbeats are measured in locally: the clock's, or, with
 * the database's time, this process's monotonic time (a heartbeat lands
 * at the database's now). */
static int64_t beat_now(const odbox_jobs *r) { return r->db_time ? odbox_mono_us() : clock_now(r); }

/* "Now" for a row just read: the database's time read with it, or the
 * clock's. */
static int64_t row_now(const odbox_jobs *r, const odbox_job_row *row) { return r->db_time ? row->db_now_us : clock_now(r); }

/* The time now, read from a session when it is the database's. */
static int now_on(const odbox_jobs *r, odbox_conn *c, int64_t *now, odbox_error *err)
{
    if (!r->db_time) {
        *now = clock_now(r);
        return ODBOX_OK;
    }
    return odbox_job_db_now(c, now, err);
}

/* A session of the job registry's own: opened when *c is NULL, with
 * bounded waits. */
static int own_session(odbox_jobs *r, odbox_conn **c, odbox_error *err)
{
    if (*c)
        return ODBOX_OK;
    int rc = odbox_conn_open(odbox_pool_dsn(r->pool), c, err);
    const odbox_dialect *d = rc == ODBOX_OK ? odbox_conn_dialect(*c) : NULL;
    char sql[160];
    int lock_ms = r->statement_ms / 2 > 0 ? r->statement_ms / 2 : 1;
    for (size_t i = 0; rc == ODBOX_OK && d->bounded_session_sql &&
                       d->bounded_session_sql(i, lock_ms, r->statement_ms, sql, sizeof sql);
         i++)
        rc = odbox_conn_exec(*c, sql, err);
    if (rc != ODBOX_OK)
        odbox_conn_close(c);
    return rc;
}

/* After a failed statement the session may be gone: the next use opens
 * another. */
static void session_failed(odbox_conn **c) { odbox_conn_close(c); }

static void job_free(job_rt *j)
{
    if (!j)
        return;
    odbox_conn_close(&j->conn);
    pthread_cond_destroy(&j->cv);
    free(j->name);
    free(j);
}

static void registry_destroy(odbox_jobs *r)
{
    for (size_t i = 0; i < r->njobs; i++)
        job_free(r->jobs[i]);
    free(r->jobs);
    odbox_conn_close(&r->hb_conn);
    pthread_cond_destroy(&r->done_cv);
    pthread_cond_destroy(&r->hb_cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Drops one reference; the last one frees r. */
static void registry_release(odbox_jobs *r)
{
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        registry_destroy(r);
}

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
    if ((int64_t)cfg->heartbeat_interval_ms * cfg->missed_heartbeats_limit > INT32_MAX) {
        free(r);
        return odbox_fail(err, ODBOX_EINVAL, "jobs: heartbeat interval x missed heartbeats limit is too large");
    }
    if ((rc = config_int("poll interval (ms)", cfg->poll_interval_ms, DEFAULT_POLL_MS, &r->poll_ms, err)) != ODBOX_OK ||
        (rc = config_int("heartbeat interval (ms)", cfg->heartbeat_interval_ms, DEFAULT_HEARTBEAT_MS, &r->heartbeat_ms,
                         err)) != ODBOX_OK ||
        (rc = config_int("missed heartbeats limit", cfg->missed_heartbeats_limit, DEFAULT_MISSED_HEARTBEATS,
                         &r->missed_limit, err)) != ODBOX_OK ||
        (rc = config_int("shutdown max wait (ms)", cfg->shutdown_max_wait_ms, DEFAULT_SHUTDOWN_MS, &r->shutdown_ms,
                         err)) != ODBOX_OK ||
        (rc = config_int("statement timeout (ms)", cfg->statement_timeout_ms, DEFAULT_STATEMENT_TIMEOUT_MS,
                         &r->statement_ms, err)) != ODBOX_OK ||
        (rc = config_int("dead after (ms)", cfg->dead_after_ms, r->heartbeat_ms * r->missed_limit, &dead_ms, err)) !=
            ODBOX_OK) {
        free(r);
        return rc;
    }
    if (dead_ms < 2 * r->heartbeat_ms) {
        int hb = r->heartbeat_ms;
        free(r);
        return odbox_fail(err, ODBOX_EINVAL,
                          "jobs: the dead window (%d ms) must be at least two heartbeat intervals (%d ms): a live "
                          "run would be taken for dead between two heartbeats",
                          dead_ms, 2 * hb);
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
    cond_init_mono(&r->done_cv);
    cond_init_mono(&r->hb_cv);
    r->refs = 1;
    *out = r;
    return ODBOX_OK;
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
    cond_init_mono(&j->cv);
    r->jobs[r->njobs++] = j;
    return ODBOX_OK;
}

/* ---- a job's thread ------------------------------------------------------------ */

static int is_stopping(odbox_jobs *r)
{
    pthread_mutex_lock(&r->mu);
    int s = r->stopping;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* Records the outcome and the next time; when a run-now request came in
 * while the job ran (run_requests grew past seen), makes it due now. */
static void finish_run(job_rt *j, int64_t version, int succeeded, int64_t seen_requests)
{
    odbox_jobs *r = j->reg;
    odbox_error e = {0};
    int64_t done_us = 0, next_us;
    int done = 0, rc = own_session(r, &j->conn, &e);
    if (rc == ODBOX_OK)
        rc = now_on(r, j->conn, &done_us, &e);
    if (rc == ODBOX_OK && odbox_schedule_next(&j->schedule, done_us, &next_us, &e) != ODBOX_OK) {
        odbox_log(ODBOX_LOG_ERROR, "job '%s': no next execution time: %s; the row stays held until it is dead",
                  j->name, e.message);
        return;
    }
    if (rc == ODBOX_OK)
        rc = odbox_job_row_finish(j->conn, j->name, version, succeeded, done_us, next_us, &done, &e);
    if (rc == ODBOX_OK && done) {
        j->due_in_us = next_us - done_us;
        j->ran_last = 1;
    }
    if (rc != ODBOX_OK)
        odbox_log(ODBOX_LOG_ERROR, "job '%s': recording the run failed: %s; the row stays held until it is dead",
                  j->name, e.message);
    else if (!done)
        odbox_log(ODBOX_LOG_WARN, "job '%s': the row was taken over while the job ran; its outcome is dropped",
                  j->name);
    if (rc == ODBOX_OK && done) {
        odbox_job_row row;
        if ((rc = odbox_job_row_read(j->conn, j->name, r->picked_by, stmt_now(r), &row, &e)) == ODBOX_OK &&
            row.run_requests > seen_requests && !row.picked && row.version == version + 1) {
            rc = odbox_job_row_move(j->conn, j->name, row.version, row_now(r, &row), &done, &e);
            if (rc == ODBOX_OK && done) {
                pthread_mutex_lock(&r->mu);
                j->wake = 1; /* poll again at once */
                pthread_mutex_unlock(&r->mu);
                j->ran_last = 0; /* asked for: not a turn to leave */
            }
        }
        if (rc != ODBOX_OK)
            odbox_log(ODBOX_LOG_WARN, "job '%s': checking for run-now requests failed: %s", j->name, e.message);
    }
    if (rc != ODBOX_OK)
        session_failed(&j->conn);
}

/* Inserts the row of j when it is missing: at start, or when someone
 * else deleted it (db-scheduler deletes rows of task names it does not
 * know). */
static int insert_row(job_rt *j, odbox_conn *c, odbox_error *err)
{
    int64_t now, when;
    int rc = now_on(j->reg, c, &now, err);
    if (rc == ODBOX_OK && (rc = odbox_schedule_initial(&j->schedule, now, &when, err)) == ODBOX_OK)
        rc = odbox_job_row_insert(c, j->name, when, err);
    return rc;
}

/* Records that this process waits for a turn. A turn lasts two of its
 * polls: a waiter that died delays the last runner's next claim by at
 * most that. */
static int mark_waiting(job_rt *j, int64_t now, odbox_error *e)
{
    odbox_jobs *r = j->reg;
    return odbox_job_wait_mark(j->conn, j->name, r->picked_by, now + 2 * (int64_t)r->poll_ms * 1000, e);
}

/* A held row: records that this process waits for a turn, and revives
 * the row when its holder stopped heartbeating. 1: revived (free and
 * due now), 0: still held. */
static int held_row(job_rt *j, odbox_job_row *row, int *rc, odbox_error *e)
{
    odbox_jobs *r = j->reg;
    int64_t now = row_now(r, row);
    int done = 0;
    j->ran_last = 0;
    *rc = mark_waiting(j, now, e);
    if (*rc != ODBOX_OK || !row->has_heartbeat || row->heartbeat_us >= now - r->dead_us)
        return 0;
    /* its holder stopped heartbeating: revive it (db-scheduler's
     * ReviveDeadExecution), then claim it like any due row */
    if ((*rc = odbox_job_row_revive(j->conn, j->name, row->version, now, now - r->dead_us, &done, e)) != ODBOX_OK ||
        !done)
        return 0;
    odbox_log(ODBOX_LOG_WARN, "job '%s': its run was dead (no heartbeat for %lld ms); taking it over", j->name,
              (long long)(r->dead_us / 1000));
    row->version++;
    row->execution_us = now;
    row->picked = 0;
    return 1;
}

/* Reads the row and, when it is due (or dead) and not paused, claims it.
 * 1: claimed (*version, *seen_requests set), 0: not now. */
static int poll_row(job_rt *j, int64_t *version, int64_t *seen_requests)
{
    odbox_jobs *r = j->reg;
    odbox_error e = {0};
    odbox_job_row row;
    int done = 0, rc = own_session(r, &j->conn, &e);
    if (rc == ODBOX_OK && (rc = odbox_job_row_read(j->conn, j->name, r->picked_by, stmt_now(r), &row, &e)) ==
                              ODBOX_ENOTFOUND) {
        if ((rc = insert_row(j, j->conn, &e)) == ODBOX_OK) {
            odbox_log(ODBOX_LOG_WARN, "job '%s': its row in scheduled_tasks was gone (deleted by another "
                                      "scheduler?); inserted it again", j->name);
            pthread_mutex_lock(&r->mu);
            j->wake = 1; /* claim it at once when it is due */
            pthread_mutex_unlock(&r->mu);
        }
        done = -1;
    }
    if (rc == ODBOX_OK && done == 0 && row.picked && !held_row(j, &row, &rc, &e))
        done = -1;
    int64_t now = rc == ODBOX_OK && done == 0 ? row_now(r, &row) : 0;
    /* due within two polls: a turn is near */
    if (rc == ODBOX_OK && done == 0 && !j->ran_last && row.execution_us > now &&
        row.execution_us - now <= 2 * (int64_t)r->poll_ms * 1000)
        rc = mark_waiting(j, now, &e);
    if (rc != ODBOX_OK) {
        odbox_log(ODBOX_LOG_WARN, "job '%s': polling its row failed: %s", j->name, e.message);
        session_failed(&j->conn);
        return 0;
    }
    if (done < 0 || row.paused || row.execution_us > now || is_stopping(r))
        return 0;
    /* fair turns: a process that has just run the job leaves the next
     * run to one that waited for it (until that one's turn lapses) */
    if (j->ran_last && row.has_waiter)
        return 0;
    if ((rc = odbox_job_row_claim(j->conn, j->name, row.version, r->picked_by, stmt_now(r), &done, &e)) != ODBOX_OK) {
        odbox_log(ODBOX_LOG_WARN, "job '%s': claiming its row failed: %s", j->name, e.message);
        session_failed(&j->conn);
    }
    if (rc != ODBOX_OK || !done)
        return 0; /* another process was first, or it was paused meanwhile */
    if (odbox_job_wait_clear(j->conn, j->name, r->picked_by, &e) != ODBOX_OK) {
        odbox_log(ODBOX_LOG_WARN, "job '%s': ending its wait for a turn failed: %s", j->name, e.message);
        session_failed(&j->conn);
    }
    *version = row.version + 1;
    *seen_requests = row.run_requests;
    pthread_mutex_lock(&r->mu);
    j->running = 1;
    j->lost = 0;
    j->version = *version;
    j->last_beat_us = beat_now(r);
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->mu);
    return 1;
}

/* Whether stop gave up on this thread: it must then exit touching
 * nothing but what its reference keeps. */
static int abandoned(job_rt *j)
{
    pthread_mutex_lock(&j->reg->mu);
    int a = j->abandoned;
    pthread_mutex_unlock(&j->reg->mu);
    return a;
}

/* One poll: claim and run when due. 0 normally, -1 when stop abandoned
 * this thread (it must exit without touching anything). */
static int poll_once(job_rt *j)
{
    odbox_jobs *r = j->reg;
    int64_t version = 0, seen = 0;
    int claimed = poll_row(j, &version, &seen);
    if (abandoned(j))
        return -1;
    if (!claimed)
        return 0;
    odbox_error je = {0};
    int rc = j->execute(&j->ctx, j->user, &je);
    pthread_mutex_lock(&r->mu);
    j->running = 0;
    int gone = j->abandoned;
    pthread_mutex_unlock(&r->mu);
    if (gone)
        return -1;
    if (rc != ODBOX_OK)
        odbox_log(ODBOX_LOG_WARN, "job '%s' failed: %s", j->name,
                  je.message[0] ? je.message : odbox_strerror(rc));
    finish_run(j, version, rc == ODBOX_OK, seen);
    return abandoned(j) ? -1 : 0;
}

static void *job_main(void *arg)
{
    job_rt *j = arg;
    odbox_jobs *r = j->reg;
    struct timespec next = odbox_mono_after(0);
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (!r->stopping && !j->wake && !odbox_mono_passed(&next))
            pthread_cond_timedwait(&j->cv, &r->mu, &next);
        int stop = r->stopping;
        j->wake = 0;
        pthread_mutex_unlock(&r->mu);
        if (stop)
            break;
        next = odbox_mono_after(r->poll_ms);
        j->due_in_us = -1;
        if (poll_once(j) < 0)
            break;
        if (j->due_in_us >= 0 && j->due_in_us < (int64_t)r->poll_ms * 1000)
            next = odbox_mono_after((j->due_in_us + 999) / 1000);
    }
    pthread_mutex_lock(&r->mu);
    j->exited = 1;
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->mu);
    registry_release(r);
    return NULL;
}

/* ---- heartbeats ---------------------------------------------------------------- */

typedef struct beat {
    job_rt *job;
    int64_t version;
} beat;

/* Heartbeats every running job's row once, on the heartbeat thread's own
 * session: the pool may be busy with the application's work. */
static void beat_all(odbox_jobs *r, beat *list)
{
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->njobs; i++)
        if (r->jobs[i]->running && !r->jobs[i]->lost)
            list[n++] = (beat){r->jobs[i], r->jobs[i]->version};
    pthread_mutex_unlock(&r->mu);
    if (!n)
        return;
    odbox_error e = {0};
    if (own_session(r, &r->hb_conn, &e) != ODBOX_OK) {
        odbox_log(ODBOX_LOG_WARN, "jobs: no session for heartbeats: %s", e.message);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        job_rt *j = list[i].job;
        int64_t local = beat_now(r);
        int done = 0, rc = odbox_job_row_heartbeat(r->hb_conn, j->name, list[i].version, stmt_now(r), &done, &e);
        if (rc != ODBOX_OK) {
            odbox_log(ODBOX_LOG_WARN, "job '%s': heartbeat failed: %s", j->name, e.message);
            session_failed(&r->hb_conn);
        }
        pthread_mutex_lock(&r->mu);
        if (j->running && j->version == list[i].version) {
            if (rc == ODBOX_OK && done) {
                j->last_beat_us = local;
            } else if (rc == ODBOX_OK) {
                j->lost = 1; /* taken over: tell a waiting callback */
                pthread_cond_broadcast(&j->cv);
                odbox_log(ODBOX_LOG_WARN, "job '%s': its row was taken over while the job runs", j->name);
            }
        }
        pthread_mutex_unlock(&r->mu);
        if (rc != ODBOX_OK)
            break;
    }
}

static void *heartbeat_main(void *arg)
{
    odbox_jobs *r = arg;
    beat *list = malloc(r->njobs * sizeof *list);
    pthread_mutex_lock(&r->mu);
    while (!r->stopped) {
        struct timespec next = odbox_mono_after(r->heartbeat_ms);
        while (!r->stopped && !odbox_mono_passed(&next))
            pthread_cond_timedwait(&r->hb_cv, &r->mu, &next);
        if (r->stopped)
            break;
        pthread_mutex_unlock(&r->mu);
        if (list)
            beat_all(r, list);
        else
            odbox_log(ODBOX_LOG_ERROR, "jobs: out of memory: no heartbeats");
        pthread_mutex_lock(&r->mu);
    }
    r->hb_exited = 1;
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->mu);
    free(list);
    registry_release(r);
    return NULL;
}

/* ---- start, wake, stop, free -------------------------------------------------------- */

/* Inserts j's row when absent; moves it when its schedule changed
 * (db-scheduler's ScheduleRecurringOnStartup). */
static int prepare_row(odbox_jobs *r, job_rt *j, odbox_conn *c, odbox_error *err)
{
    odbox_job_row row;
    int rc = odbox_job_row_read(c, j->name, r->picked_by, stmt_now(r), &row, err);
    if (rc == ODBOX_ENOTFOUND)
        return insert_row(j, c, err);
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
    int started = r->started;
    r->started = 1;
    pthread_mutex_unlock(&r->mu);
    if (started)
        return odbox_fail(err, ODBOX_ESTATE, "jobs start: started already");
    int rc = own_session(r, &r->hb_conn, err);
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
        int trc = pthread_create(&r->hb_thread, NULL, heartbeat_main, r);
        if (trc != 0)
            r->refs--;
        r->hb_started = trc == 0;
        for (size_t i = 0; trc == 0 && i < r->njobs; i++) {
            job_rt *j = r->jobs[i];
            r->refs++;
            if ((trc = pthread_create(&j->thread, NULL, job_main, j)) != 0)
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
    struct timespec deadline = odbox_mono_after(r->shutdown_ms);
    struct timespec last = odbox_mono_after(r->shutdown_ms + 3 * r->statement_ms);
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
    /* the heartbeat thread: at most one statement to finish */
    pthread_mutex_lock(&r->mu);
    r->stopped = 1;
    pthread_cond_broadcast(&r->hb_cv);
    struct timespec hb_last = odbox_mono_after(2 * r->statement_ms);
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
    registry_release(*p);
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
