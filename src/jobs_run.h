/* odbox — the job registry's private state, shared by src/jobs.c (open,
 * add, start, stop, the callback's context) and src/jobs_thread.c (a
 * job's thread, the heartbeat thread). Not installed.
 *
 * Memory: the registry is shared by its owner and every thread it started
 * (refs). A thread whose callback outlives odbox_jobs_stop's bound is
 * detached and marked abandoned; when the callback returns it writes
 * nothing and drops its reference, and the last reference frees the
 * registry. So odbox_jobs_free may come first.
 *
 * Sessions: each job thread and the heartbeat thread has one session of
 * its own (never the pool's, which the application may exhaust), opened
 * when first needed, with bounded lock and statement waits, and opened
 * again after a failure. No session is held by a callback.
 *
 * Time: the database's (ODBOX_JOB_DB_NOW) unless a clock was given.
 *
 * Lock: one mutex (mu) guards every field marked "under mu". */
#ifndef ODBOX_JOBS_RUN_H
#define ODBOX_JOBS_RUN_H

#include <pthread.h>
#include "jobs_internal.h"

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
    odbox_jobs_service services[ODBOX_JOBS_MAX_SERVICES];
    size_t nservices;
    int services_started;   /* the owner's: how many start ran for */
    pthread_t hb_thread;
    /* under mu */
    int refs;               /* the owner and each thread that has not exited */
    int started, stopping, stopped, hb_started, hb_exited, hb_abandoned;
};

static inline int64_t clock_now(const odbox_jobs *r) { return r->clock.now_us(r->clock.ud); }

/* The time statements write and compare with. */
static inline int64_t stmt_now(const odbox_jobs *r) { return r->db_time ? ODBOX_JOB_DB_NOW : clock_now(r); }

/* The time heartbeats are measured in locally: the clock's, or, with
 * the database's time, this process's monotonic time (a heartbeat lands
 * at the database's now). */
static inline int64_t beat_now(const odbox_jobs *r) { return r->db_time ? odbox_mono_us() : clock_now(r); }

/* "Now" for a row just read: the database's time read with it, or the
 * clock's. */
static inline int64_t row_now(const odbox_jobs *r, const odbox_job_row *row)
{
    return r->db_time ? row->db_now_us : clock_now(r);
}

/* Drops one reference; the last one frees r (src/jobs.c). */
void odbox_jobs_release(odbox_jobs *r);

/* src/jobs_thread.c: a session of the registry's own, opened when *c is
 * NULL, with bounded waits (the dialect's bounded_session_sql). */
int odbox_jobs_session(odbox_jobs *r, odbox_conn **c, odbox_error *err);

/* src/jobs_thread.c: j's row inserted when missing (at start, or when
 * someone else deleted it); the threads' bodies. */
int odbox_jobs_insert_row(job_rt *j, odbox_conn *c, odbox_error *err);
void *odbox_jobs_job_main(void *job);
void *odbox_jobs_heartbeat_main(void *registry);

#endif
