-- odbox's own state of jobs, next to db-scheduler's scheduled_tasks in the
-- application's own database (the rows of scheduled_tasks stay exactly as
-- db-scheduler writes them): a cluster-wide pause, and the count of
-- run-now requests so far. A job without a row here is not paused.
CREATE TABLE IF NOT EXISTS odbox_job_state (
    task_name VARCHAR(100) NOT NULL PRIMARY KEY,
    paused BOOLEAN NOT NULL DEFAULT FALSE,
    run_requests BIGINT NOT NULL DEFAULT 0
);
