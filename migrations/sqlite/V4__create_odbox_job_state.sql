-- The state odbox keeps of jobs, next to the scheduled_tasks table of
-- db-scheduler in the same file (the rows of scheduled_tasks stay exactly
-- as db-scheduler writes them): a pause for the whole cluster, and the
-- count of run-now requests so far. A job without a row here is not
-- paused. Booleans are INTEGER 0 or 1 (see V3).
CREATE TABLE IF NOT EXISTS odbox_job_state (
    task_name TEXT NOT NULL PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    run_requests BIGINT NOT NULL DEFAULT 0
);
