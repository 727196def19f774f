-- order_lease_until: the lease deadline of a claim of an ordered
-- subscription's row (NULL for the others, and once the row's outcome is
-- written): its call in flight. A row of an ordered subscription is
-- claimed only when no older row of its model is unfinished (V13) and no
-- row of its model has an order lease that holds: a row that a requeue or
-- a replay brings back while a newer row of its model is in flight waits
-- for that call to end, so two calls of one model never run at once. The
-- partial index holds only the rows in flight.
ALTER TABLE ${eventlog}_event_notifications ADD COLUMN order_lease_until TEXT
    CHECK (order_lease_until IS NULL OR order_lease_until GLOB '????-??-?? ??:??:??.??????');
CREATE INDEX ${eventlog}_event_notifications_order_leases
    ON ${eventlog}_event_notifications (handler_name, order_key, order_lease_until)
    WHERE order_lease_until IS NOT NULL;
