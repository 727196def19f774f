/* odbox — a job registry's threads: each job's thread polls its row,
 * claims it when due (fair turns: odbox_job_waiters), runs the callback
 * and records the outcome; the heartbeat thread keeps the rows of
 * running jobs alive. Both on sessions of their own (src/jobs_run.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jobs_run.h"
#include "db/odbc.h"

/* ---- the registry's memory: the last reference frees it (the owner's,
 * or a thread's that outlived odbox_jobs_stop); here, so that the threads
 * do not call back into jobs.c ------------------------------------------------ */

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
    for (size_t i = 0; i < r->nservices; i++)
        if (r->services[i].release)
            r->services[i].release(r->services[i].ud);
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
void odbox_jobs_release(odbox_jobs *r)
{
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        registry_destroy(r);
}

/* ---- sessions ---------------------------------------------------------------- */

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
int odbox_jobs_session(odbox_jobs *r, odbox_conn **c, odbox_error *err)
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
    int done = 0, rc = ODBOX_ECONNLOST;
    /* the session sat idle through the callback, which may have run for
     * long: a server, proxy or failover may have ended it meanwhile. One
     * more try on a new session, or the run would stay held until the
     * dead window, then count as a failure and run again. The UPDATE is
     * guarded by the version, so a first one that landed unanswered
     * makes the second change nothing. */
    for (int attempt = 0; attempt < 2 && rc == ODBOX_ECONNLOST; attempt++) {
        if (attempt)
            session_failed(&j->conn);
        if ((rc = odbox_jobs_session(r, &j->conn, &e)) == ODBOX_OK)
            rc = now_on(r, j->conn, &done_us, &e);
        if (rc == ODBOX_OK && odbox_schedule_next(&j->schedule, done_us, &next_us, &e) != ODBOX_OK) {
            odbox_log(ODBOX_LOG_ERROR, "job '%s': no next execution time: %s; the row stays held until it is dead",
                      j->name, e.message);
            return;
        }
        if (rc == ODBOX_OK)
            rc = odbox_job_row_finish(j->conn, j->name, version, succeeded, done_us, next_us, &done, &e);
    }
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
int odbox_jobs_insert_row(job_rt *j, odbox_conn *c, odbox_error *err)
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
    int done = 0, rc = odbox_jobs_session(r, &j->conn, &e);
    if (rc == ODBOX_OK && (rc = odbox_job_row_read(j->conn, j->name, r->picked_by, stmt_now(r), &row, &e)) ==
                              ODBOX_ENOTFOUND) {
        if ((rc = odbox_jobs_insert_row(j, j->conn, &e)) == ODBOX_OK) {
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
    if (odbox_job_wait_clear(j->conn, j->name, r->picked_by, stmt_now(r), &e) != ODBOX_OK) {
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

void *odbox_jobs_job_main(void *arg)
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
    odbox_jobs_release(r);
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
    for (size_t i = 0; i < n; i++) {
        job_rt *j = list[i].job;
        int64_t local = beat_now(r);
        int done = 0, rc = ODBOX_ECONNLOST;
        /* the session sat idle for an interval: a server, proxy or load
         * balancer whose idle timeout is shorter ends it each time. One
         * more try on a new session, or every other beat would be lost
         * and a dead window of two beats would see the run dead. The
         * UPDATE only moves the time: a first one that landed unanswered
         * makes the second harmless. */
        for (int attempt = 0; attempt < 2 && rc == ODBOX_ECONNLOST; attempt++) {
            if (attempt)
                session_failed(&r->hb_conn);
            if ((rc = odbox_jobs_session(r, &r->hb_conn, &e)) == ODBOX_OK)
                rc = odbox_job_row_heartbeat(r->hb_conn, j->name, list[i].version, stmt_now(r), &done, &e);
        }
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

void *odbox_jobs_heartbeat_main(void *arg)
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
    odbox_jobs_release(r);
    return NULL;
}
