-- Processes waiting for a turn at a job another process holds, next to
-- scheduled_tasks in the application's own schema. A holder that has
-- just finished a run leaves the next one to a process that waited
-- (until waiting_until, in the database's time), so that one process
-- does not win every claim of a job that is always due. IF NOT EXISTS:
-- several eventlogs may share the database.
CREATE TABLE IF NOT EXISTS odbox_job_waiters (
    task_name text NOT NULL,
    picked_by text NOT NULL,
    waiting_until timestamp with time zone NOT NULL,
    PRIMARY KEY (task_name, picked_by)
);
