-- Processes waiting for a turn at a job another process holds, next to
-- scheduled_tasks in the application's own database. A holder that has
-- just finished a run leaves the next one to a process that waited
-- (until waiting_until, in the database's time), so that one process
-- does not win every claim of a job that is always due. IF NOT EXISTS:
-- several eventlogs may share the database. Names compare as the code
-- does: binary.
CREATE TABLE IF NOT EXISTS odbox_job_waiters (
    task_name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    picked_by VARCHAR(50) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    waiting_until DATETIME(6) NOT NULL,
    PRIMARY KEY (task_name, picked_by)
);
