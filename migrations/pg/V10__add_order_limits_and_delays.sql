-- Per-handler order, limits and delayed delivery (README, Handlers).
--
-- Delayed delivery: an event emitted with a delivery time gets its
-- notifications due then (next_retry_at), not at once. NULL: at once.
ALTER TABLE ${eventlog}.events ADD COLUMN deliver_after TIMESTAMP;

-- Ordered handlers: a row is claimed only when no older unfinished row of
-- the same handler and model_id exists: this finds those.
CREATE INDEX event_notifications_model_order
    ON ${eventlog}.event_notifications (handler_name, model_id, event_date, event_id)
    WHERE state IN ('PENDING', 'FAILED');

-- Concurrency limits: the calls in flight of a handler are its rows whose
-- lease holds: this counts them without reading the backlog.
CREATE INDEX event_notifications_leased
    ON ${eventlog}.event_notifications (handler_name, lease_until)
    WHERE lease_until IS NOT NULL;
