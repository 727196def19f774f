-- order_lease_until: the lease deadline of a claim of an ordered
-- subscription's row (NULL for the others, and once the row's outcome is
-- written): its call in flight. A row of an ordered subscription is
-- claimed only when no older row of its model is unfinished (V13) and no
-- row of its model has an order lease that holds: a row that becomes
-- visible after a newer row of its model was claimed (its action's INSERT
-- ran first and it committed later, or a requeue or replay brings it
-- back) waits for that call to end, so two calls of one model never run
-- at once. The partial index holds only the rows in flight.
--
-- COST: the column is added without a rewrite (no default). The index
-- holds no row yet, but its build reads the whole table once, inside this
-- migration's transaction, which holds event_notifications' lock
-- meanwhile: writers of notifications (the fan-out, outcomes) wait
-- (measured: 95 ms for the whole migration over 100,000 rows).
ALTER TABLE ${eventlog}.event_notifications ADD COLUMN order_lease_until TIMESTAMP;
CREATE INDEX event_notifications_order_leases
    ON ${eventlog}.event_notifications (handler_name, order_key, order_lease_until)
    WHERE order_lease_until IS NOT NULL;
