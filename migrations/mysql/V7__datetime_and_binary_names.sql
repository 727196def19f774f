-- MySQL/MariaDB only (PostgreSQL and SQLite already store instants or
-- UTC text and compare text byte by byte).
--
-- 1. scheduled_tasks' times become DATETIME(6), as the eventlog tables
--    have always been. V3 made them TIMESTAMP(6), which (a) a session in
--    another time zone writes converted to UTC, so odbox (session
--    '+00:00') read its heartbeats hours off; (b) ends in 2038, so a
--    db-scheduler row of 2040 or Schedule.NEVER (2500-01-01) was refused;
--    (c) with explicit_defaults_for_timestamp=OFF (MySQL 5.7, MariaDB up
--    to 10.9) made execution_time ON UPDATE CURRENT_TIMESTAMP, so any
--    UPDATE of the row (a heartbeat) moved it to now. odbox's session is
--    '+00:00' (session_setup), so the conversion keeps the stored UTC
--    value; the MODIFY drops the implicit default and ON UPDATE.
-- 2. Names odbox compares with strcmp are compared byte by byte here too
--    (utf8mb4_bin): with the default case-insensitive collation the
--    primary key made job names differing only in case share a row.
--    task_instance goes with task_name: db-scheduler compares both in Java.
-- 3. The priority index is db-scheduler's (priority DESC, execution_time).
--
-- scheduled_tasks and odbox_job_state sit in the application's database,
-- which several eventlogs may share: each eventlog's migrate runs this
-- again. A MODIFY to the type a column already has changes nothing, and
-- the index is dropped and added in one ALTER (it exists on every run:
-- V3 made it and a first run made it again), so a second run succeeds.
-- MySQL 8 has no DROP INDEX IF EXISTS.
ALTER TABLE scheduled_tasks
    MODIFY task_name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY task_instance VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY execution_time DATETIME(6) NOT NULL,
    MODIFY last_success DATETIME(6) NULL,
    MODIFY last_failure DATETIME(6) NULL,
    MODIFY last_heartbeat DATETIME(6) NULL,
    DROP INDEX priority_execution_time_idx,
    ADD INDEX priority_execution_time_idx (priority DESC, execution_time ASC);

-- Joined to scheduled_tasks on task_name: the same collation.
ALTER TABLE odbox_job_state
    MODIFY task_name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;

-- The eventlog's own tables (their times are DATETIME(6) since V1).
-- event_type: the fan-out reads "event_type = ?" per handled type; with a
-- case-insensitive collation older events of 'EV' filled the batch of
-- 'Ev' and were skipped, and 'Ev' was never reached.
-- handler_name: the unique key (event_id, handler_name) took 'audit' and
-- 'Audit' for one row, and the second handler was never called.
-- COST: each ALTER rebuilds its table (a copy of every row, and of the
-- indexes over the column: events_undelivered, the unique key
-- (event_id, handler_name)); on a large events table that takes time and
-- disk space for a second copy, and the server may block writes to the
-- table meanwhile (MySQL 8 changes a collation only by copying). Purge
-- delivered events first, or run it in a quiet hour.
ALTER TABLE ${eventlog}.events
    MODIFY event_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;

ALTER TABLE ${eventlog}.event_notifications
    MODIFY handler_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    MODIFY event_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
