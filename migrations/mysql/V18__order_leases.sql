-- order_lease_until: the lease deadline of a claim of an ordered
-- subscription's row (NULL for the others, and once the row's outcome is
-- written): its call in flight. A row of an ordered subscription is
-- claimed only when no older row of its model is unfinished (V13) and no
-- row of its model has an order lease that holds: a row that becomes
-- visible after a newer row of its model was claimed (its action's INSERT
-- ran first and it committed later, or a requeue or replay brings it
-- back) waits for that call to end, so two calls of one model never run
-- at once.
--
-- One statement, so that a failure leaves nothing half done (DDL here is
-- not transactional). COST: InnoDB runs it in place, with writes going
-- on (with the index in the same statement, adding the column may rebuild
-- the table: 1.6 s over 100,000 rows on MariaDB 10.11, measured). The
-- index holds every row (InnoDB has no partial index);
-- the entries of rows of other subscriptions (order_key and
-- order_lease_until NULL) never move after the fan-out's insert.
ALTER TABLE ${eventlog}.event_notifications
    ADD COLUMN order_lease_until DATETIME(6) NULL,
    ADD INDEX event_notifications_order_leases (handler_name, order_key, order_lease_until);
