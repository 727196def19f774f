/* odbox — helpers shared by the jobs integration suites (jobs,
 * jobs_cluster): a fixture with a migrated database, a job name and a
 * runs table; rows read back through odbox_jobs_list; a counting job;
 * bounded waits; programs of the build tree run as child processes. */
#ifndef ODBOX_TESTS_JOBS_FX_H
#define ODBOX_TESTS_JOBS_FX_H

#include <stdatomic.h>
#include <sys/types.h>
#include "../jobs/runs.h"
#include "itest.h"

#define JAN_2030 INT64_C(1893456000000000) /* 2030-01-01 00:00:00 UTC */
#define MIN_US INT64_C(60000000)
#define JT_BOUND_MS 15000 /* how long a test waits for something that takes ~100 ms */

int64_t jt_mono_ms(void);
void jt_sleep_ms(long ms);
/* An atomic's value, as a plain int for ck_assert's messages. */
int jt_load(atomic_int *a);
/* Polls cond(arg) every 10 ms for up to JT_BOUND_MS; 1 when it came true. */
int jt_wait_for(int (*cond)(void *), void *arg);

typedef struct jfx {
    odbox_registry *r;   /* one shard on dsn 1, migrated into a private eventlog */
    odbox_pool *pool;
    odbox_conn *c;
    char job[64];        /* a job name of this test; rows named job% are deleted at close */
    char runs[64];       /* a runs table (runs.h) */
    char ev[64];         /* the private eventlog: MySQL and MariaDB share "eventlog" server-wide */
} jfx;

void jfx_open(jfx *f);
void jfx_close(jfx *f);

/* The 'recurring' row of job name as odbox_jobs_list shows it (its
 * strings cleared); 0 when there is none. */
int jt_row(odbox_pool *pool, const char *name, odbox_job_info *out);
odbox_job_info jt_must_row(jfx *f, const char *name);

/* A job registry on r with job added (job may be NULL); started. */
odbox_jobs *jt_open_jobs(odbox_registry *r, const odbox_jobs_config *cfg, const odbox_job *job);
void jt_start(odbox_jobs *j);

/* ---- a counting job (user = a jt_counter) -------------------------------- */

typedef struct jt_counter {
    atomic_int calls;      /* callbacks entered */
    atomic_int returned;   /* callbacks returned */
    atomic_int fail_first; /* the first this many calls fail */
    atomic_int block;      /* while set, a call waits until it is cleared */
} jt_counter;

int jt_count_job(odbox_job_context *ctx, void *user, odbox_error *err);

typedef struct jt_awaited {
    jt_counter *k;
    int n;
} jt_awaited;

int jt_returned_n(void *awaited); /* conditions for jt_wait_for */
int jt_called_n(void *awaited);

/* The row is free with `failures` consecutive failures and, when next_us
 * is not 0, that next execution time: a run was recorded. */
typedef struct jt_row_state {
    jfx *f;
    int failures;
    int64_t next_us;
} jt_row_state;

int jt_row_settled(void *row_state);

/* ---- programs of the build tree ------------------------------------------ */

/* Runs $ODBOX_BUILDDIR/rel with args (NULL-terminated); stdout (and
 * stderr) go to out_path, or stdout to /dev/null when it is NULL. */
pid_t jt_spawn(const char *rel, const char *const *args, const char *out_path);
/* Waits up to JT_BOUND_MS + extra_ms for pid: its exit status, or -1
 * after killing it. */
int jt_reap(pid_t pid, int extra_ms);

/* Rows of f's runs table written by runner; jt_has_run: any (a
 * condition for jt_wait_for). */
int64_t jt_runs_by(jfx *f, const char *runner);
typedef struct jt_runs_of {
    jfx *f;
    const char *runner;
} jt_runs_of;
int jt_has_run(void *runs_of);
/* A jobs-runner process "holder" that runs f's job with heartbeat_ms and
 * a dead window of limit heartbeats, holding each run for a minute;
 * returned once it has run (asserted). */
pid_t jt_spawn_holder(jfx *f, int heartbeat_ms, int limit);

#endif
