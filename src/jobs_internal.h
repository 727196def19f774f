/* odbox — what the jobs modules share: schedule checks and the
 * statements on a job's row. Not installed. */
#ifndef ODBOX_JOBS_INTERNAL_H
#define ODBOX_JOBS_INTERNAL_H

#include "internal.h"
#include "odbox/jobs.h"

/* db-scheduler's instance id of a RecurringTask's one row. */
#define ODBOX_JOB_INSTANCE "recurring"

/* ODBOX_OK when s is a schedule odbox_schedule_next can use. */
int odbox_schedule_check(const odbox_schedule *s, odbox_error *err);

/* The registry's shutdown_max_wait_ms as resolved (the default for 0):
 * how long odbox_jobs_stop waits for running callbacks. The delivery
 * checks its stop wait against it. */
int odbox_jobs_shutdown_ms(const odbox_jobs *r);

/* ---- services ------------------------------------------------------- */

/* Something a job registry starts and stops with its jobs without being
 * one (no row, no claim: every process runs it), such as the delivery's
 * handling loops. start runs at the end of odbox_jobs_start; stop tells it
 * to stop and returns at once; wait returns 1 once it has stopped, 0 when
 * until (CLOCK_MONOTONIC) passed first (odbox_jobs_stop then reports it as
 * late); release is called when the registry is freed. None is called
 * under the registry's lock. */
#define ODBOX_JOBS_MAX_SERVICES 4
typedef struct odbox_jobs_service {
    const char *name;
    int (*start)(void *ud, odbox_error *err);
    void (*stop)(void *ud);
    int (*wait)(void *ud, const struct timespec *until);
    void (*release)(void *ud);
    void *ud;
} odbox_jobs_service;

/* Before odbox_jobs_start. ODBOX_ESTATE once started, ODBOX_ENOMEM past
 * ODBOX_JOBS_MAX_SERVICES. */
int odbox_jobs_add_service(odbox_jobs *r, const odbox_jobs_service *s, odbox_error *err);

/* ---- a job's row (src/jobs_store.c) ---------------------------------- */

/* A time a statement writes or compares with: a value of the job
 * registry's clock, or this: the database's own time (the dialect's
 * now_sql), so that the clocks of the processes never decide. */
#define ODBOX_JOB_DB_NOW INT64_MIN

typedef struct odbox_job_row {
    int64_t version;
    int64_t execution_us;
    int picked;
    int has_heartbeat;
    int64_t heartbeat_us;
    int paused;            /* odbox_job_state.paused */
    int64_t run_requests;  /* odbox_job_state.run_requests: run-now requests so far */
    int64_t db_now_us;     /* the database's time when it was read */
    int has_waiter;        /* another process waits for a turn (odbox_job_waiters) */
} odbox_job_row;

/* Each statement below is one statement in autocommit. Those that are
 * guarded by the version read before set *done to 1 when they matched
 * the row, 0 when someone else changed it first (not an error). */

/* The database's time. */
int odbox_job_db_now(odbox_conn *c, int64_t *now_us, odbox_error *err);

/* "Now" for what a job decides on the database's rows: ODBOX_JOB_DB_NOW
 * when the job registry has no clock of its own (the database's time
 * decides), else that clock's value (src/jobs.c). */
int64_t odbox_job_context_stmt_now(const odbox_job_context *ctx);

/* The row and its odbox_job_state (defaults when none); has_waiter tells
 * whether a process other than me waits for a turn until after now_us.
 * ODBOX_ENOTFOUND when there is no row. */
int odbox_job_row_read(odbox_conn *c, const char *name, const char *me, int64_t now_us, odbox_job_row *row,
                       odbox_error *err);

/* Inserts the row (not picked, version 1) unless it exists. */
int odbox_job_row_insert(odbox_conn *c, const char *name, int64_t execution_us, odbox_error *err);

/* A row nobody holds gets a new execution time (schedule changed, or run
 * now); version + 1. */
int odbox_job_row_move(odbox_conn *c, const char *name, int64_t version, int64_t execution_us, int *done,
                       odbox_error *err);

/* picked = TRUE, picked_by, last_heartbeat = now, version + 1, when the
 * row is not held and the job is not paused. */
int odbox_job_row_claim(odbox_conn *c, const char *name, int64_t version, const char *picked_by, int64_t now_us,
                        int *done, odbox_error *err);

/* A held row whose last heartbeat is older than dead_before_us (tested
 * in the UPDATE) is released, due at now_us, counted as a failure
 * (db-scheduler's ReviveDeadExecution); version + 1. */
int odbox_job_row_revive(odbox_conn *c, const char *name, int64_t version, int64_t now_us, int64_t dead_before_us,
                         int *done, odbox_error *err);

/* last_heartbeat = now; the version stays. */
int odbox_job_row_heartbeat(odbox_conn *c, const char *name, int64_t version, int64_t now_us, int *done,
                            odbox_error *err);

/* Released with the outcome of a run that ended at done_us and the next
 * execution time; version + 1. */
int odbox_job_row_finish(odbox_conn *c, const char *name, int64_t version, int succeeded, int64_t done_us,
                         int64_t next_us, int *done, odbox_error *err);

/* me waits for a turn at name until until_us (odbox_job_waiters); clear
 * ends that once it has the row, and deletes the waits that expired by
 * now_us (ODBOX_JOB_DB_NOW: the database's time). */
int odbox_job_wait_mark(odbox_conn *c, const char *name, const char *me, int64_t until_us, odbox_error *err);
int odbox_job_wait_clear(odbox_conn *c, const char *name, const char *me, int64_t now_us, odbox_error *err);

/* The name of one of odbox's own jobs for the eventlog of registry's
 * default shard: base for the default eventlog ("eventlog", the name
 * installations had before), base@eventlog for any other, so that
 * eventlogs sharing one scheduled_tasks never compete for one row. */
int odbox_job_name_for(const char *base, const odbox_registry *registry, char *out, size_t cap, odbox_error *err);

#endif
