-- Order and limits read columns that stay NULL for the rows of handlers
-- without the option (see the MySQL and MariaDB migrations, where this
-- saves each row the upkeep of two indexes). Here the partial indexes
-- hold only the rows that have them.
--
-- ordered: the subscription delivers each model_id's events in order,
-- recorded by the processes that register it (odbox_handler_options).
ALTER TABLE ${eventlog}_subscriptions ADD COLUMN ordered INT NOT NULL DEFAULT 0;

-- order_key: the model_id while the row is unfinished and its
-- subscription is ordered, else NULL, written by the fan-out, cleared
-- by the outcome that finishes the row. An ordered row is claimed only
-- when no older row of its handler has its order_key.
-- limit_lease_until: the lease deadline of a claim by a handler with a
-- concurrency limit (NULL for the others): its calls in flight.
ALTER TABLE ${eventlog}_event_notifications ADD COLUMN order_key VARCHAR(255);
ALTER TABLE ${eventlog}_event_notifications ADD COLUMN limit_lease_until TEXT
    CHECK (limit_lease_until IS NULL OR limit_lease_until GLOB '????-??-?? ??:??:??.??????');
DROP INDEX IF EXISTS ${eventlog}_event_notifications_model_order;
DROP INDEX IF EXISTS ${eventlog}_event_notifications_leased;
CREATE INDEX ${eventlog}_event_notifications_order_key
    ON ${eventlog}_event_notifications (handler_name, order_key, event_date, event_id)
    WHERE order_key IS NOT NULL;
CREATE INDEX ${eventlog}_event_notifications_limit_leases
    ON ${eventlog}_event_notifications (handler_name, limit_lease_until)
    WHERE limit_lease_until IS NOT NULL;
