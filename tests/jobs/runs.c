/* odbox — jobs tests: recording runs (see runs.h). */
#include <stdio.h>
#include "runs.h"

int runs_create(odbox_conn *c, const char *table, odbox_error *err)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "CREATE TABLE %s (runner VARCHAR(60) NOT NULL, started BIGINT NOT NULL, ended BIGINT)", table);
    return odbox_conn_exec(c, sql, err);
}

/* Runs sql with (text, int64, int64 or NULL when 0) bound at 1, 2, 3. */
static int exec3(odbox_pool *pool, const char *sql, const char *text, int64_t a, int64_t b, odbox_error *err)
{
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 1, text, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 2, a, err)) == ODBOX_OK &&
        (rc = b ? odbox_stmt_bind_int64(s, 3, b, err) : odbox_stmt_bind_null(s, 3, ODBOX_TYPE_INT64, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    if (c)
        odbox_pool_release(pool, &c);
    return rc;
}

int runs_record(odbox_pool *pool, const char *table, const char *runner, int64_t started_us, int64_t ended_us,
                odbox_error *err)
{
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO %s (runner, started, ended) VALUES (?, ?, ?)", table);
    return exec3(pool, sql, runner, started_us, ended_us, err);
}

int runs_end(odbox_pool *pool, const char *table, const char *runner, int64_t started_us, int64_t ended_us,
             odbox_error *err)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE %s SET ended = ? WHERE started = ? AND runner = ?", table);
    odbox_conn *c = NULL;
    odbox_stmt *s = NULL;
    int rc = odbox_pool_acquire(pool, &c, err);
    if (rc == ODBOX_OK && (rc = odbox_stmt_prepare(c, sql, &s, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 1, ended_us, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_int64(s, 2, started_us, err)) == ODBOX_OK &&
        (rc = odbox_stmt_bind_text(s, 3, runner, err)) == ODBOX_OK)
        rc = odbox_stmt_execute(s, err);
    odbox_stmt_free(&s);
    if (c)
        odbox_pool_release(pool, &c);
    return rc;
}
