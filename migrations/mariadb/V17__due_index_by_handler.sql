-- The claim's due read, by handler: a claim reads each of its handlers'
-- due rows of each state (handler_name = ?, state = ?, next_retry_at
-- order) and merges them. V2's due index (state, next_retry_at) made a
-- claim read every due row of every handler before its own, in time
-- order, and drop those of other handlers by filter: the PENDING backlog
-- of a subscription no live process serves (a service down, or gone
-- without `odbox handlers retire`) was stepped over by every claim of
-- every other handler.
--
-- V2's index stays: since V13 the purge and the metrics find finished
-- rows through it (state, then their finish time in next_retry_at).
--
-- One statement, so that a failure leaves nothing half done (DDL here is
-- not transactional). COST: InnoDB builds the index in place, with
-- writes going on; each notification row has one more index entry, moved
-- by its claims and outcomes.
CREATE INDEX event_notifications_handler_due
    ON ${eventlog}.event_notifications (handler_name, state, next_retry_at);
