/* odbox — distributed jobs: background jobs that one process of a cluster
 * runs at a time, coordinated only through the database.
 *
 * Jobs live in db-scheduler's table `scheduled_tasks` (migration V3), one
 * row per job: task_name = the job's name, task_instance = 'recurring',
 * with db-scheduler's semantics, so a Java db-scheduler (or Ekbatan)
 * service can share the table:
 *
 * - start inserts each job's row when absent (execution_time = the
 *   schedule's first time) and refuses to start when it cannot;
 * - every poll interval, each job's thread reads its row; a due row that
 *   nobody holds is claimed with UPDATE ... SET picked = TRUE, version =
 *   version + 1 WHERE ... AND version = ? (losing that race is normal);
 * - while the callback runs, a separate heartbeat thread writes
 *   last_heartbeat every heartbeat interval;
 * - a held row whose last_heartbeat is older than heartbeat interval x
 *   missed-heartbeats limit is dead: its holder crashed or stalled. It is
 *   revived (counted as a failure, due now) and claimed again. A stalled
 *   holder that comes back finds its row gone (fraction_dead >= 1) and its
 *   outcome is dropped;
 * - on return the row gets last_success or last_failure,
 *   consecutive_failures (0 on success, + 1 on failure) and the next
 *   execution time from the schedule.
 *
 * Pause and run-now are kept in odbox's own table odbox_job_state
 * (migration V4), next to scheduled_tasks, whose rows stay as
 * db-scheduler writes them.
 *
 * At most one run per job at a time across the cluster, as long as
 * heartbeats arrive: a run that stalls longer than the dead window may
 * overlap the run that took over (db-scheduler's rule). A job must stop
 * in time: check odbox_job_context_shutting_down and
 * odbox_job_context_fraction_dead (db-scheduler's advice: stop above
 * 0.5), and be idempotent.
 *
 * Threads: the schedule functions and the operations on a pool are
 * thread-safe. A job registry is set up (open, add, start) and torn down
 * (stop, free) by one thread; odbox_jobs_wake may be called from any
 * thread once it is started. The odbox_job_context_* functions are for
 * the callback that got the context. */
#ifndef ODBOX_JOBS_H
#define ODBOX_JOBS_H

#include <stddef.h>
#include <stdint.h>
#include "clock.h"
#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODBOX_JOB_NAME_MAX 100     /* task_name: VARCHAR(100) */
#define ODBOX_JOB_PICKED_BY_MAX 50 /* picked_by: VARCHAR(50) */

/* ---- schedules ------------------------------------------------------- */

typedef enum odbox_schedule_kind {
    ODBOX_SCHEDULE_NONE = 0,   /* not set: refused by odbox_jobs_add */
    ODBOX_SCHEDULE_FIXED_DELAY,
    ODBOX_SCHEDULE_CRON
} odbox_schedule_kind;

/* A value: fill it with one of the constructors below. */
typedef struct odbox_schedule {
    odbox_schedule_kind kind;
    int64_t delay_ms;          /* fixed delay */
    /* cron: the allowed values of each field as bits */
    uint64_t minutes;          /* bits 0..59 */
    uint32_t hours;            /* bits 0..23 */
    uint32_t days;             /* bits 1..31 */
    uint32_t months;           /* bits 1..12 */
    uint32_t weekdays;         /* bits 0..6, Sunday = 0 */
    int days_star, weekdays_star; /* the field began with '*' (see below) */
} odbox_schedule;

/* Runs again ms milliseconds after a run finished; the first run is due
 * at start. ms must be > 0 (odbox_jobs_add refuses anything else). */
odbox_schedule odbox_schedule_fixed_delay(int64_t ms);

/* A 5-field cron expression, in UTC: minute hour day-of-month month
 * day-of-week. Each field is a comma list of '*', n, a-b, with an
 * optional /step: a star and /15 is every 15th minute, 1-30/2 every
 * other day of 1..30, 5/10 is 5-max/10. Months JAN..DEC
 * and weekdays SUN..SAT may be named (any case); Sunday is 0 or 7. When
 * both day-of-month and day-of-week are restricted (neither begins with
 * '*'), a day matching either runs (Vixie cron). Also @yearly,
 * @annually, @monthly, @weekly, @daily, @midnight, @hourly. The first
 * run is the first match after start. ODBOX_EINVAL names the bad field,
 * also for an expression that never matches (e.g. "0 0 30 2 *"). */
int odbox_schedule_cron(const char *expr, odbox_schedule *out, odbox_error *err);

/* The first execution time for a schedule started at now_us: now for a
 * fixed delay, the next match for cron. */
int odbox_schedule_initial(const odbox_schedule *s, int64_t now_us, int64_t *first_us, odbox_error *err);

/* The next execution time after a run that finished at after_us: after +
 * delay, or the first cron match strictly after it (whole minutes).
 * ODBOX_EINVAL for an invalid schedule or a time past year 9999. */
int odbox_schedule_next(const odbox_schedule *s, int64_t after_us, int64_t *next_us, odbox_error *err);

/* ---- jobs ------------------------------------------------------------ */

typedef struct odbox_jobs odbox_jobs;
typedef struct odbox_job_context odbox_job_context;

/* Runs one execution on the job's own thread. Return 0 for success, a
 * negative ODBOX_E* code for failure (err's message, when set, is
 * logged). ctx is valid until the callback returns. */
typedef int (*odbox_job_fn)(odbox_job_context *ctx, void *user, odbox_error *err);

typedef struct odbox_job {
    const char *name;          /* task_name: 1..100 characters, unique per registry (copied) */
    odbox_schedule schedule;
    odbox_job_fn execute;
    void *user;                /* handed to execute; must outlive every run */
} odbox_job;

typedef struct odbox_jobs_config {
    /* The database of scheduled_tasks; NULL: the registry's default
     * shard's primary. Must outlive the job registry. */
    odbox_pool *pool;
    int poll_interval_ms;          /* 0: 10000 */
    int heartbeat_interval_ms;     /* 0: 10000 */
    int missed_heartbeats_limit;   /* 0: 6; dead window = heartbeat x limit */
    /* picked_by; NULL: "host:pid", the host name cut so that it fits in
     * 50 characters. A longer name given here is refused. */
    const char *picked_by;
    /* odbox_jobs_stop waits this long for running callbacks; 0: 30000 */
    int shutdown_max_wait_ms;
    /* NULL (the default): the database's time decides everything the
     * processes sharing the rows must agree on: due times, the
     * heartbeats written, the dead test, next times and the outcome's
     * timestamps; the clocks of the machines never do, so a machine
     * whose clock is off neither takes over a live run nor misses a
     * dead one. A clock given here replaces the database's time for this
     * job registry: for tests that move time, or one process alone (every
     * process sharing the rows must then use the same clock). Must
     * outlive the job registry and its callbacks. Waits (polls,
     * heartbeats, odbox_job_context_wait) use real time. */
    const odbox_clock *clock;
    /* A held row whose last heartbeat is older than this is dead and is
     * taken over; 0: heartbeat_interval_ms x missed_heartbeats_limit.
     * Sharing a task name with db-scheduler needs at least db-scheduler's
     * own window (its heartbeatInterval x missedHeartbeatsLimit, 30 min
     * by default: ODBOX_JOBS_DB_SCHEDULER_DEAD_AFTER_MS), or odbox takes
     * over db-scheduler's live runs. Must be at least 2 x
     * heartbeat_interval_ms. */
    int dead_after_ms;
    /* The job registry's own sessions (one per job and one for the
     * heartbeats, never the pool's) wait for a lock at most half of this
     * and run a statement at most this long (SQLite: its busy wait is
     * half of this); 0: 10000. */
    int statement_timeout_ms;
} odbox_jobs_config;

/* db-scheduler's dead window at its defaults: heartbeats every 5 min, 6
 * missed (db-scheduler's HeartbeatConfig). */
#define ODBOX_JOBS_DB_SCHEDULER_DEAD_AFTER_MS (30 * 60 * 1000)

/* A job registry on registry's default shard (or cfg->pool; registry may
 * then be NULL). cfg may be NULL for all defaults. Negative values are
 * refused. Does not connect. */
int odbox_jobs_open(odbox_registry *registry, const odbox_jobs_config *cfg, odbox_jobs **out,
                    odbox_error *err);

/* Adds a job before start: ODBOX_EINVAL for an empty, too long or
 * duplicate name, a missing callback or an invalid schedule (a fixed
 * delay <= 0); ODBOX_ESTATE after start. */
int odbox_jobs_add(odbox_jobs *jobs, const odbox_job *job, odbox_error *err);

/* Inserts the rows of jobs that have none, moves a row whose schedule
 * changed (db-scheduler's rule: a cron row more than 1 s off the new
 * schedule, a fixed-delay row later than now + delay; only rows due more
 * than 10 s from now and not held), then starts one thread per job and
 * the heartbeat thread. Refuses to start (ODBOX_EDB, "run odbox
 * migrate") when the tables are missing, and with the database's error
 * when it cannot write them; nothing runs then. Once only, and not
 * after odbox_jobs_stop (ODBOX_ESTATE). */
int odbox_jobs_start(odbox_jobs *jobs, odbox_error *err);

/* Wakes name's thread: it polls its row now, or, while the job runs,
 * odbox_job_context_wait returns ODBOX_JOB_WAIT_WOKEN. A wake that comes
 * while nothing waits is kept for the next wait. ODBOX_ENOTFOUND for an
 * unknown name. Thread-safe once started, also from inside a callback. */
int odbox_jobs_wake(odbox_jobs *jobs, const char *name);

/* Stops polling and waits, up to shutdown_max_wait_ms in all, for
 * running callbacks to return and their outcome to be written. A
 * callback that has not returned by then is left running and reported
 * by name (ODBOX_ETIMEDOUT); nothing waits for it again, it heartbeats no
 * more (its row goes dead and another process takes it over) and its
 * outcome is dropped; its thread keeps what it uses of the job registry
 * alive, so odbox_jobs_free is safe at once (its `user` and the clock
 * must still outlive it). A thread in the middle of a statement on its
 * row at the bound is waited for: statements end by the pool's and the
 * server's timeouts. Idempotent; not from inside a callback. */
int odbox_jobs_stop(odbox_jobs *jobs, odbox_error *err);

/* Stops (as odbox_jobs_stop) and frees. NULL-safe; sets *jobs = NULL. */
void odbox_jobs_free(odbox_jobs **jobs);

/* ---- inside a callback ----------------------------------------------- */

/* 1 once odbox_jobs_stop was called: return soon. */
int odbox_job_context_shutting_down(const odbox_job_context *ctx);

/* How much of the dead window has passed since the last heartbeat that
 * reached the database: 0.0 just after one, 1.0 and above when others
 * may already consider this run dead, or when the row was taken over or
 * changed (then it is at least 1.0 for good). */
double odbox_job_context_fraction_dead(const odbox_job_context *ctx);

const char *odbox_job_context_name(const odbox_job_context *ctx);

/* The registry's clock. */
int64_t odbox_job_context_now_us(const odbox_job_context *ctx);

enum {
    ODBOX_JOB_WAIT_ELAPSED = 0, /* ms passed */
    ODBOX_JOB_WAIT_WOKEN = 1,   /* odbox_jobs_wake */
    ODBOX_JOB_WAIT_STOP = 2     /* shutting down, or the run was taken over */
};

/* Waits up to ms (real time; <= 0 only checks) for a wake, shutdown or
 * the loss of the row, for a job that loops between rounds. */
int odbox_job_context_wait(odbox_job_context *ctx, int ms);

/* ---- operations on a database (CLI, services) ------------------------ */

typedef struct odbox_job_info {
    char *name;
    char *instance;
    int64_t next_execution_us;      /* execution_time */
    int picked;
    char *picked_by;                /* NULL when none */
    int64_t last_heartbeat_us;      /* 0 when none */
    int64_t last_success_us;        /* 0 when none */
    int64_t last_failure_us;        /* 0 when none */
    int consecutive_failures;
    int paused;
    /* the database's time when listed - last_heartbeat_us (0 when none):
     * the heartbeat's age by the clock that wrote it, not the caller's */
    int64_t heartbeat_age_us;
} odbox_job_info;

/* Every row of scheduled_tasks (also db-scheduler's own tasks), by name
 * and instance. *infos is freed with odbox_job_infos_free. */
int odbox_jobs_list(odbox_pool *pool, odbox_job_info **infos, size_t *n, odbox_error *err);
void odbox_job_infos_free(odbox_job_info **infos, size_t n);

/* Cluster-wide, for the job's 'recurring' row; ODBOX_ENOTFOUND when there
 * is none. A paused job is not claimed (a run in progress goes on);
 * resume lets it run again when due. run_now makes it due now (system
 * clock); when it is running, it runs again right after it finishes
 * (possibly once more than asked, never less). A paused job stays paused:
 * run_now then takes effect on resume. */
int odbox_jobs_pause(odbox_pool *pool, const char *name, odbox_error *err);
int odbox_jobs_resume(odbox_pool *pool, const char *name, odbox_error *err);
int odbox_jobs_run_now(odbox_pool *pool, const char *name, odbox_error *err);

#ifdef __cplusplus
}
#endif
#endif
