-- The claim's due read, by handler: a claim reads each of its handlers'
-- due rows (handler_name = ?, next_retry_at order) and merges them.
-- V2's due index led with next_retry_at, so a claim read every due row
-- of every handler before its own, in time order, and dropped those of
-- other handlers by filter: the backlog of a subscription no live
-- process serves was stepped over by every claim of every other handler.
-- The index replaces V2's.
CREATE INDEX ${eventlog}_event_notifications_handler_due
    ON ${eventlog}_event_notifications (handler_name, next_retry_at)
    WHERE state IN ('PENDING', 'FAILED');
DROP INDEX IF EXISTS ${eventlog}_event_notifications_due;
