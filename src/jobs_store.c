/* odbox — the statements on jobs' rows in scheduled_tasks (db-scheduler's
 * JdbcTaskRepository: insert, pick, heartbeat, reschedule, each guarded
 * by the version read before) and odbox_job_state, and the operations on
 * them that need no job registry: list, pause, resume, run now. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jobs_internal.h"
#include "odbox/dialect.h"

#define TASKS "scheduled_tasks"
#define STATE "odbox_job_state"
#define WAITERS "odbox_job_waiters"

/* A SELECT-list item reading timestamp column col as the text
 * odbox_stmt_get_timestamp parses. */
static void ts_col(odbox_buf *b, const odbox_dialect *d, const char *col)
{
    if (d->timestamp_read_open)
        odbox_buf_cat(b, d->timestamp_read_open, col, d->timestamp_read_close, NULL);
    else
        odbox_buf_append(b, col);
}

static int name_ok(const char *name, odbox_error *err)
{
    if (!name || !*name)
        return odbox_fail(err, ODBOX_EINVAL, "jobs: job name is NULL or empty");
    if (strlen(name) > ODBOX_JOB_NAME_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "jobs: job name '%.40s...' is longer than %d characters", name,
                          ODBOX_JOB_NAME_MAX);
    return ODBOX_OK;
}

/* Executes s (bound) and reports whether it changed exactly one row. */
static int execute_one(odbox_stmt *s, int *done, odbox_error *err)
{
    int rc = odbox_stmt_execute(s, err);
    *done = rc == ODBOX_OK && odbox_stmt_rows_affected(s) == 1;
    return rc;
}

/* Binds name and the instance at idx, idx + 1. */
static int bind_key(odbox_stmt *s, int idx, const char *name, odbox_error *err)
{
    int rc = odbox_stmt_bind_text(s, idx, name, err);
    return rc == ODBOX_OK ? odbox_stmt_bind_text(s, idx + 1, ODBOX_JOB_INSTANCE, err) : rc;
}

/* ---- statements with times ----------------------------------------------- */

/* SQL text in which each "{now}" is the time of the statement: a
 * parameter when it is a clock's value, the dialect's now_sql when it is
 * ODBOX_JOB_DB_NOW. NULL when out of memory. */
static char *with_now(const odbox_dialect *d, const char *tmpl, int64_t now_us)
{
    odbox_buf b = {0};
    for (const char *p = tmpl, *q; *p; p = q + 5) {
        if (!(q = strstr(p, "{now}"))) {
            odbox_buf_append(&b, p);
            break;
        }
        odbox_buf_appendn(&b, p, (size_t)(q - p));
        odbox_buf_append(&b, now_us == ODBOX_JOB_DB_NOW ? d->now_sql : "?");
    }
    return odbox_buf_take(&b);
}

/* Binds parameters in order; the first failure sticks. */
typedef struct binder {
    odbox_stmt *s;
    int idx;
    int rc;
    odbox_error *err;
} binder;

static void b_text(binder *b, const char *v)
{
    if (b->rc == ODBOX_OK)
        b->rc = odbox_stmt_bind_text(b->s, ++b->idx, v, b->err);
}

static void b_int64(binder *b, int64_t v)
{
    if (b->rc == ODBOX_OK)
        b->rc = odbox_stmt_bind_int64(b->s, ++b->idx, v, b->err);
}

/* A time; the database's own takes no parameter. */
static void b_time(binder *b, int64_t us)
{
    if (b->rc == ODBOX_OK && us != ODBOX_JOB_DB_NOW)
        b->rc = odbox_stmt_bind_timestamp(b->s, ++b->idx, us, b->err);
}

static void b_key(binder *b, const char *name)
{
    b_text(b, name);
    b_text(b, ODBOX_JOB_INSTANCE);
}

/* Prepares tmpl with its {now}s as now_us says. */
static int prepare_now(odbox_conn *c, const char *tmpl, int64_t now_us, binder *b, odbox_error *err)
{
    char *sql = with_now(odbox_conn_dialect(c), tmpl, now_us);
    *b = (binder){NULL, 0, ODBOX_OK, err};
    b->rc = sql ? odbox_stmt_prepare(c, sql, &b->s, err) : odbox_fail(err, ODBOX_ENOMEM, "jobs: out of memory");
    free(sql);
    return b->rc;
}

/* An UPDATE of name's row guarded by its version: parameters are the nts
 * timestamps ts, then task_name, task_instance and the version. */
static int update_row(odbox_conn *c, const char *sql, const int64_t *ts, int nts, const char *name, int64_t version,
                      int *done, odbox_error *err)
{
    binder b;
    *done = 0;
    prepare_now(c, sql, 0, &b, err);
    for (int i = 0; i < nts; i++)
        b_time(&b, ts[i]);
    b_key(&b, name);
    b_int64(&b, version);
    if (b.rc == ODBOX_OK)
        b.rc = execute_one(b.s, done, err);
    odbox_stmt_free(&b.s);
    return b.rc;
}

/* ---- a job's row -------------------------------------------------------- */

int odbox_job_db_now(odbox_conn *c, int64_t *now_us, odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_buf b = {0};
    odbox_buf_append(&b, "SELECT ");
    ts_col(&b, d, d->now_sql);
    char *sql = odbox_buf_take(&b);
    if (!sql)
        return odbox_fail(err, ODBOX_ENOMEM, "jobs: out of memory");
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    free(sql);
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(s, err)) == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1)
        rc = odbox_stmt_get_timestamp(s, 1, now_us, NULL, err);
    else if (rc == 0)
        rc = odbox_fail(err, ODBOX_EDB, "jobs: the database's time: no row");
    odbox_stmt_free(&s);
    return rc;
}

int odbox_job_row_read(odbox_conn *c, const char *name, const char *me, int64_t now_us, odbox_job_row *row,
                       odbox_error *err)
{
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_buf b = {0};
    odbox_buf_append(&b, "SELECT t.version, ");
    ts_col(&b, d, "t.execution_time");
    odbox_buf_append(&b, ", t.picked, ");
    ts_col(&b, d, "t.last_heartbeat");
    odbox_buf_append(&b, ", COALESCE(s.paused, FALSE), COALESCE(s.run_requests, 0), ");
    ts_col(&b, d, d->now_sql);
    odbox_buf_append(&b, ", CASE WHEN EXISTS (SELECT 1 FROM " WAITERS " w WHERE w.task_name = t.task_name "
                         "AND w.picked_by <> ? AND w.waiting_until > {now}) THEN 1 ELSE 0 END FROM " TASKS
                         " t LEFT JOIN " STATE " s ON s.task_name = t.task_name "
                         "WHERE t.task_name = ? AND t.task_instance = ?");
    char *tmpl = odbox_buf_take(&b);
    if (!tmpl)
        return odbox_fail(err, ODBOX_ENOMEM, "jobs: out of memory");
    binder p;
    int null_hb = 1;
    int64_t waiter = 0;
    memset(row, 0, sizeof *row);
    prepare_now(c, tmpl, now_us, &p, err);
    free(tmpl);
    b_text(&p, me);
    b_time(&p, now_us);
    b_key(&p, name);
    int rc = p.rc;
    if (rc == ODBOX_OK && (rc = odbox_stmt_execute(p.s, err)) == ODBOX_OK)
        rc = odbox_stmt_fetch(p.s, err);
    if (rc == 0)
        rc = odbox_fail(err, ODBOX_ENOTFOUND, "jobs: no row for job '%.100s' in " TASKS, name);
    else if (rc == 1 && (rc = odbox_stmt_get_int64(p.s, 1, &row->version, NULL, err)) == ODBOX_OK &&
             (rc = odbox_stmt_get_timestamp(p.s, 2, &row->execution_us, NULL, err)) == ODBOX_OK &&
             (rc = odbox_stmt_get_bool(p.s, 3, &row->picked, NULL, err)) == ODBOX_OK &&
             (rc = odbox_stmt_get_timestamp(p.s, 4, &row->heartbeat_us, &null_hb, err)) == ODBOX_OK &&
             (rc = odbox_stmt_get_bool(p.s, 5, &row->paused, NULL, err)) == ODBOX_OK &&
             (rc = odbox_stmt_get_int64(p.s, 6, &row->run_requests, NULL, err)) == ODBOX_OK &&
             (rc = odbox_stmt_get_timestamp(p.s, 7, &row->db_now_us, NULL, err)) == ODBOX_OK)
        rc = odbox_stmt_get_int64(p.s, 8, &waiter, NULL, err);
    row->has_heartbeat = !null_hb;
    row->has_waiter = waiter != 0;
    odbox_stmt_free(&p.s);
    return rc;
}

int odbox_job_row_insert(odbox_conn *c, const char *name, int64_t execution_us, odbox_error *err)
{
    char sql[512];
    snprintf(sql, sizeof sql, odbox_conn_dialect(c)->insert_ignore_fmt, TASKS,
             "task_name, task_instance, execution_time, picked, version", "(?, ?, ?, FALSE, 1)", "task_name");
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && (rc = bind_key(s, 1, name, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_timestamp(s, 3, execution_us, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    return rc;
}

int odbox_job_row_move(odbox_conn *c, const char *name, int64_t version, int64_t execution_us, int *done,
                       odbox_error *err)
{
    return update_row(c,
                      "UPDATE " TASKS " SET execution_time = ?, version = version + 1 "
                      "WHERE task_name = ? AND task_instance = ? AND version = ? AND picked = FALSE",
                      &execution_us, 1, name, version, done, err);
}

int odbox_job_row_claim(odbox_conn *c, const char *name, int64_t version, const char *picked_by, int64_t now_us,
                        int *done, odbox_error *err)
{
    binder b;
    *done = 0;
    /* the pause is checked in the same statement: once odbox_jobs_pause
     * has returned, no claim can start a run */
    prepare_now(c,
                "UPDATE " TASKS " SET picked = TRUE, picked_by = ?, last_heartbeat = {now}, "
                "version = version + 1 WHERE task_name = ? AND task_instance = ? AND version = ? "
                "AND picked = FALSE AND NOT EXISTS (SELECT 1 FROM " STATE " s WHERE s.task_name = ? AND s.paused = TRUE)",
                now_us, &b, err);
    b_text(&b, picked_by);
    b_time(&b, now_us);
    b_key(&b, name);
    b_int64(&b, version);
    b_text(&b, name);
    if (b.rc == ODBOX_OK)
        b.rc = execute_one(b.s, done, err);
    odbox_stmt_free(&b.s);
    return b.rc;
}

int odbox_job_row_revive(odbox_conn *c, const char *name, int64_t version, int64_t now_us, int64_t dead_before_us,
                         int *done, odbox_error *err)
{
    /* the staleness is tested here, not only when the row was read: a
     * heartbeat that lands in between wins */
    binder b;
    *done = 0;
    prepare_now(c,
                "UPDATE " TASKS " SET picked = FALSE, picked_by = NULL, last_heartbeat = NULL, "
                "execution_time = ?, last_failure = ?, "
                "consecutive_failures = COALESCE(consecutive_failures, 0) + 1, version = version + 1 "
                "WHERE task_name = ? AND task_instance = ? AND version = ? AND picked = TRUE AND last_heartbeat < ?",
                0, &b, err);
    b_time(&b, now_us);
    b_time(&b, now_us);
    b_key(&b, name);
    b_int64(&b, version);
    b_time(&b, dead_before_us);
    if (b.rc == ODBOX_OK)
        b.rc = execute_one(b.s, done, err);
    odbox_stmt_free(&b.s);
    return b.rc;
}

int odbox_job_row_heartbeat(odbox_conn *c, const char *name, int64_t version, int64_t now_us, int *done,
                            odbox_error *err)
{
    binder b;
    *done = 0;
    prepare_now(c,
                "UPDATE " TASKS " SET last_heartbeat = {now} "
                "WHERE task_name = ? AND task_instance = ? AND version = ?",
                now_us, &b, err);
    b_time(&b, now_us);
    b_key(&b, name);
    b_int64(&b, version);
    if (b.rc == ODBOX_OK)
        b.rc = execute_one(b.s, done, err);
    odbox_stmt_free(&b.s);
    int rc = b.rc;
    if (rc != ODBOX_OK || *done)
        return rc;
    /* MySQL and MariaDB count changed rows, not matched ones: writing the
     * same heartbeat again (a clock that stood still) changes none */
    odbox_stmt *s = NULL;
    rc = odbox_stmt_prepare(c,
                            "SELECT COUNT(*) FROM " TASKS " WHERE task_name = ? AND task_instance = ? "
                            "AND version = ? AND picked = TRUE",
                            &s, err);
    int64_t n = 0;
    if (rc == ODBOX_OK && (rc = bind_key(s, 1, name, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 3, version, err)) == ODBOX_OK)
        rc = odbox_stmt_query_int64(s, &n, err);
    odbox_stmt_free(&s);
    *done = rc == ODBOX_OK && n == 1;
    return rc;
}

int odbox_job_row_finish(odbox_conn *c, const char *name, int64_t version, int succeeded, int64_t done_us,
                         int64_t next_us, int *done, odbox_error *err)
{
    const int64_t ts[2] = {next_us, done_us};
    return update_row(c,
                      succeeded ? "UPDATE " TASKS " SET picked = FALSE, picked_by = NULL, last_heartbeat = NULL, "
                                  "execution_time = ?, last_success = ?, consecutive_failures = 0, "
                                  "version = version + 1 WHERE task_name = ? AND task_instance = ? AND version = ?"
                                : "UPDATE " TASKS " SET picked = FALSE, picked_by = NULL, last_heartbeat = NULL, "
                                  "execution_time = ?, last_failure = ?, "
                                  "consecutive_failures = COALESCE(consecutive_failures, 0) + 1, "
                                  "version = version + 1 WHERE task_name = ? AND task_instance = ? AND version = ?",
                      ts, 2, name, version, done, err);
}

/* ---- names ------------------------------------------------------------------ */

int odbox_job_name_for(const char *base, const odbox_registry *registry, char *out, size_t cap, odbox_error *err)
{
    const char *ev = registry ? odbox_shard_eventlog(odbox_registry_default_shard(registry)) : NULL;
    int n = !ev || !strcmp(ev, "eventlog") ? snprintf(out, cap, "%s", base) : snprintf(out, cap, "%s@%s", base, ev);
    if (n < 0 || (size_t)n >= cap || n > ODBOX_JOB_NAME_MAX)
        return odbox_fail(err, ODBOX_EINVAL, "jobs: the job name '%s@%.60s' is longer than %d characters", base,
                          ev ? ev : "", ODBOX_JOB_NAME_MAX);
    return ODBOX_OK;
}

/* ---- turns ------------------------------------------------------------------ */

int odbox_job_wait_mark(odbox_conn *c, const char *name, const char *me, int64_t until_us, odbox_error *err)
{
    binder b;
    int done = 0;
    prepare_now(c, "UPDATE " WAITERS " SET waiting_until = ? WHERE task_name = ? AND picked_by = ?", 0, &b, err);
    b_time(&b, until_us);
    b_text(&b, name);
    b_text(&b, me);
    if (b.rc == ODBOX_OK)
        b.rc = execute_one(b.s, &done, err);
    odbox_stmt_free(&b.s);
    if (b.rc != ODBOX_OK || done)
        return b.rc;
    char sql[512];
    snprintf(sql, sizeof sql, odbox_conn_dialect(c)->insert_ignore_fmt, WAITERS, "task_name, picked_by, waiting_until",
             "(?, ?, ?)", "task_name");
    prepare_now(c, sql, 0, &b, err);
    b_text(&b, name);
    b_text(&b, me);
    b_time(&b, until_us);
    if (b.rc == ODBOX_OK)
        b.rc = odbox_stmt_execute(b.s, err);
    odbox_stmt_free(&b.s);
    return b.rc;
}

int odbox_job_wait_clear(odbox_conn *c, const char *name, const char *me, int64_t now_us, odbox_error *err)
{
    /* expired rows too: those of processes that exited while waiting
     * (each host:pid leaves one) are read by no one and would pile up */
    binder b;
    prepare_now(c, "DELETE FROM " WAITERS " WHERE task_name = ? AND (picked_by = ? OR waiting_until <= {now})", now_us,
                &b, err);
    b_text(&b, name);
    b_text(&b, me);
    b_time(&b, now_us);
    if (b.rc == ODBOX_OK)
        b.rc = odbox_stmt_execute(b.s, err);
    odbox_stmt_free(&b.s);
    return b.rc;
}

/* ---- operations ----------------------------------------------------------- */

/* Runs sql with name bound at 1 (and at 2 when two). */
static int exec_named(odbox_conn *c, const char *sql, const char *name, int twice, odbox_error *err)
{
    odbox_stmt *s = NULL;
    int rc = odbox_stmt_prepare(c, sql, &s, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_bind_text(s, 1, name, err)) == ODBOX_OK && twice)
        rc = odbox_stmt_bind_text(s, 2, name, err);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    return rc;
}

/* Makes sure name has a row in odbox_job_state and runs update on it. */
static int update_state(odbox_conn *c, const char *name, const char *update, odbox_error *err)
{
    char sql[512];
    snprintf(sql, sizeof sql, odbox_conn_dialect(c)->insert_ignore_fmt, STATE,
             "task_name, paused, run_requests", "(?, FALSE, 0)", "task_name");
    int rc = exec_named(c, sql, name, 0, err);
    return rc == ODBOX_OK ? exec_named(c, update, name, 0, err) : rc;
}

typedef enum { OP_PAUSE, OP_RESUME, OP_RUN_NOW } op_kind;

static int operate(odbox_pool *pool, const char *name, op_kind op, odbox_error *err)
{
    static const char *const what[] = {"pause", "resume", "run now"};
    if (!pool)
        return odbox_fail(err, ODBOX_EINVAL, "jobs %s: pool is NULL", what[op]);
    int rc = name_ok(name, err);
    if (rc != ODBOX_OK)
        return rc;
    odbox_conn *c = NULL;
    if ((rc = odbox_pool_acquire(pool, &c, err)) != ODBOX_OK)
        return rc;
    odbox_job_row row;
    rc = odbox_job_row_read(c, name, "", ODBOX_JOB_DB_NOW, &row, err);
    if (rc == ODBOX_ENOTFOUND)
        rc = odbox_fail(err, ODBOX_ENOTFOUND, "jobs %s: no job named '%.100s' (no '" ODBOX_JOB_INSTANCE
                        "' row in " TASKS ")", what[op], name);
    else if (rc == ODBOX_OK && op != OP_RUN_NOW)
        rc = update_state(c, name,
                          op == OP_PAUSE ? "UPDATE " STATE " SET paused = TRUE WHERE task_name = ?"
                                         : "UPDATE " STATE " SET paused = FALSE WHERE task_name = ?",
                          err);
    else if (rc == ODBOX_OK) {
        /* The request is counted first: a runner that finishes after it
         * sees it and makes the row due again; if the runner finished
         * before, the row is free and is made due here. */
        int done;
        rc = update_state(c, name, "UPDATE " STATE " SET run_requests = run_requests + 1 WHERE task_name = ?", err);
        if (rc == ODBOX_OK) {
            binder b;
            prepare_now(c,
                        "UPDATE " TASKS " SET execution_time = {now}, version = version + 1 "
                        "WHERE task_name = ? AND task_instance = ? AND picked = FALSE",
                        ODBOX_JOB_DB_NOW, &b, err);
            b_key(&b, name);
            if ((rc = b.rc) == ODBOX_OK)
                rc = execute_one(b.s, &done, err);
            odbox_stmt_free(&b.s);
        }
    }
    odbox_pool_release(pool, &c);
    return rc;
}

int odbox_jobs_pause(odbox_pool *pool, const char *name, odbox_error *err) { return operate(pool, name, OP_PAUSE, err); }

int odbox_jobs_resume(odbox_pool *pool, const char *name, odbox_error *err)
{
    return operate(pool, name, OP_RESUME, err);
}

int odbox_jobs_run_now(odbox_pool *pool, const char *name, odbox_error *err)
{
    return operate(pool, name, OP_RUN_NOW, err);
}

void odbox_job_infos_free(odbox_job_info **infos, size_t n)
{
    if (!infos || !*infos)
        return;
    for (size_t i = 0; i < n; i++) {
        free((*infos)[i].name);
        free((*infos)[i].instance);
        free((*infos)[i].picked_by);
    }
    free(*infos);
    *infos = NULL;
}

/* Copies column col of the current row (NULL stays NULL when nullable). */
static int get_string(odbox_stmt *s, int col, char **out, int nullable, odbox_error *err)
{
    const char *v;
    int is_null;
    int rc = odbox_stmt_get_text(s, col, &v, &is_null, err);
    if (rc != ODBOX_OK)
        return rc;
    if (is_null && nullable)
        return ODBOX_OK;
    if (!(*out = odbox_strdup(is_null ? "" : v)))
        return odbox_fail(err, ODBOX_ENOMEM, "jobs list: out of memory");
    return ODBOX_OK;
}

static int read_info(odbox_stmt *s, odbox_job_info *in, odbox_error *err)
{
    int64_t failures = 0, now = 0;
    int rc;
    if ((rc = get_string(s, 1, &in->name, 0, err)) == ODBOX_OK && (rc = get_string(s, 2, &in->instance, 0, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_timestamp(s, 3, &in->next_execution_us, NULL, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_bool(s, 4, &in->picked, NULL, err)) == ODBOX_OK &&
        (rc = get_string(s, 5, &in->picked_by, 1, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_timestamp(s, 6, &in->last_heartbeat_us, NULL, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_timestamp(s, 7, &in->last_success_us, NULL, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_timestamp(s, 8, &in->last_failure_us, NULL, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_int64(s, 9, &failures, NULL, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_bool(s, 10, &in->paused, NULL, err)) == ODBOX_OK &&
        (rc = odbox_stmt_get_timestamp(s, 11, &now, NULL, err)) == ODBOX_OK && in->last_heartbeat_us)
        in->heartbeat_age_us = now - in->last_heartbeat_us;
    in->consecutive_failures = (int)failures;
    return rc;
}

int odbox_jobs_list(odbox_pool *pool, odbox_job_info **infos, size_t *n, odbox_error *err)
{
    if (!pool || !infos || !n)
        return odbox_fail(err, ODBOX_EINVAL, "jobs list: pool, infos or n is NULL");
    *infos = NULL;
    *n = 0;
    odbox_conn *c = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc != ODBOX_OK)
        return rc;
    const odbox_dialect *d = odbox_conn_dialect(c);
    odbox_buf b = {0};
    odbox_buf_append(&b, "SELECT t.task_name, t.task_instance, ");
    ts_col(&b, d, "t.execution_time");
    odbox_buf_append(&b, ", t.picked, t.picked_by, ");
    ts_col(&b, d, "t.last_heartbeat");
    odbox_buf_append(&b, ", ");
    ts_col(&b, d, "t.last_success");
    odbox_buf_append(&b, ", ");
    ts_col(&b, d, "t.last_failure");
    /* the heartbeats' ages by the database's time: they are written in it
     * (by processes whose clocks may disagree with the caller's) */
    odbox_buf_append(&b, ", COALESCE(t.consecutive_failures, 0), COALESCE(s.paused, FALSE), ");
    ts_col(&b, d, d->now_sql);
    odbox_buf_append(&b, " FROM " TASKS " t LEFT JOIN " STATE
                         " s ON s.task_name = t.task_name ORDER BY t.task_name, t.task_instance");
    char *sql = odbox_buf_take(&b);
    odbox_stmt *s = NULL;
    odbox_job_info *list = NULL;
    size_t count = 0, cap = 0;
    rc = sql ? odbox_stmt_prepare(c, sql, &s, err) : odbox_fail(err, ODBOX_ENOMEM, "jobs list: out of memory");
    free(sql);
    if (rc == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    while (rc == ODBOX_OK && (rc = odbox_stmt_fetch(s, err)) == 1) {
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            odbox_job_info *p = realloc(list, ncap * sizeof *p);
            if (!p) {
                rc = odbox_fail(err, ODBOX_ENOMEM, "jobs list: out of memory");
                break;
            }
            list = p, cap = ncap;
        }
        memset(&list[count], 0, sizeof list[count]);
        rc = read_info(s, &list[count++], err);
    }
    odbox_stmt_free(&s);
    odbox_pool_release(pool, &c);
    if (rc < 0) {
        odbox_job_infos_free(&list, count);
        return rc;
    }
    *infos = list;
    *n = count;
    return ODBOX_OK;
}
