/* odbox — jobs tests: the table that job runs are recorded in, one row per
 * run: (runner, started, ended), times in UTC microseconds as BIGINT
 * (ended NULL while the run goes on). Shared by the integration suite and
 * tests/jobs/jobs-runner. */
#ifndef ODBOX_TESTS_JOBS_RUNS_H
#define ODBOX_TESTS_JOBS_RUNS_H

#include <stdint.h>
#include "odbox/odbox.h"

/* CREATE TABLE for the runs table (name validated by the caller). */
int runs_create(odbox_conn *c, const char *table, odbox_error *err);

/* Records a run that started at started_us; ended_us 0: still running. */
int runs_record(odbox_pool *pool, const char *table, const char *runner, int64_t started_us, int64_t ended_us,
                odbox_error *err);

/* Sets ended of runner's run that started at started_us. */
int runs_end(odbox_pool *pool, const char *table, const char *runner, int64_t started_us, int64_t ended_us,
             odbox_error *err);

#endif
