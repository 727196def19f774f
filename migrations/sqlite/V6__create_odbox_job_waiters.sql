-- Processes waiting for a turn at a job another process holds, next to
-- scheduled_tasks in the same file. A holder that has just finished a run
-- leaves the next one to a process that waited (until waiting_until, in
-- the database's time, odbox's fixed-width UTC text), so that one process
-- does not win every claim of a job that is always due. IF NOT EXISTS:
-- several eventlogs may share the file.
CREATE TABLE IF NOT EXISTS odbox_job_waiters (
    task_name TEXT NOT NULL,
    picked_by TEXT NOT NULL,
    waiting_until TEXT NOT NULL,
    PRIMARY KEY (task_name, picked_by)
);
