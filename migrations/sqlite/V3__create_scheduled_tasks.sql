-- The table and columns of db-scheduler, in the same database file as
-- everything else. Timestamps are TEXT in the fixed-width UTC form of odbox
-- (see V1), booleans 0/1. IF NOT EXISTS: several shards may share one
-- file with different eventlogs.
CREATE TABLE IF NOT EXISTS scheduled_tasks (
    task_name TEXT NOT NULL,
    task_instance TEXT NOT NULL,
    task_data BLOB,
    execution_time TEXT NOT NULL,
    picked INTEGER NOT NULL,
    picked_by TEXT,
    last_success TEXT,
    last_failure TEXT,
    consecutive_failures INT,
    last_heartbeat TEXT,
    version BIGINT NOT NULL,
    priority SMALLINT,
    PRIMARY KEY (task_name, task_instance)
);

CREATE INDEX IF NOT EXISTS execution_time_idx ON scheduled_tasks (execution_time);
CREATE INDEX IF NOT EXISTS last_heartbeat_idx ON scheduled_tasks (last_heartbeat);
CREATE INDEX IF NOT EXISTS priority_execution_time_idx ON scheduled_tasks (priority DESC, execution_time ASC);
