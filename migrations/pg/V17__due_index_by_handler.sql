-- The claim's due read, by handler: a claim reads each of its handlers'
-- due rows (handler_name = ?, next_retry_at order) and merges them.
-- V2's due index led with next_retry_at, so a claim read every due row
-- of every handler before its own, in time order, and dropped those of
-- other handlers by filter: the PENDING backlog of a subscription no live
-- process serves (a service down, or gone without `odbox handlers
-- retire`) was stepped over by every claim of every other handler
-- (100,000 such rows: 32-40 ms a claim instead of well under 1 ms).
--
-- The index replaces V2's: its other readers (`odbox notifications`'
-- counts of due rows, by handler) read it as well. A process of an odbox
-- before this migration still claims correctly, through this index with a
-- sort of its handlers' due rows, until it is upgraded.
--
-- COST: the index is built inside this migration's transaction, which
-- holds event_notifications' lock meanwhile: writers of notifications
-- (the fan-out, outcomes) wait for the build, which reads the table and
-- sorts its PENDING and FAILED rows (measured: 0.17 s for the whole
-- migration over 101,000 such rows).
CREATE INDEX event_notifications_handler_due
    ON ${eventlog}.event_notifications (handler_name, next_retry_at)
    WHERE state IN ('PENDING', 'FAILED');
DROP INDEX ${eventlog}.event_notifications_due;
