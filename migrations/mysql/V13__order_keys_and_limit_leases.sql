-- Order and limits that cost only the handlers that ask for them.
--
-- V10's two indexes held every notification: (handler_name, model_id,
-- state, ...) moved an entry at every change of state, (handler_name,
-- lease_until) at every claim and every outcome, so each row paid about
-- 20 us of InnoDB work for options most handlers do not have. Their
-- replacements hold columns that stay NULL for the rows of other
-- handlers, so only a handler with the option moves their entries.
--
-- ordered: the subscription delivers each model_id's events in order,
-- recorded by the processes that register it (odbox_handler_options).
ALTER TABLE ${eventlog}.subscriptions ADD COLUMN ordered INT NOT NULL DEFAULT 0;

-- order_key: the model_id while the row is unfinished and its
-- subscription is ordered, else NULL, written by the fan-out, cleared
-- by the outcome that finishes the row. An ordered row is claimed only
-- when no older row of its handler has its order_key.
-- limit_lease_until: the lease deadline of a claim by a handler with a
-- concurrency limit (NULL for the others): its calls in flight.
ALTER TABLE ${eventlog}.event_notifications
    ADD COLUMN order_key VARCHAR(255) NULL,
    ADD COLUMN limit_lease_until DATETIME(6) NULL,
    DROP INDEX event_notifications_model_order,
    DROP INDEX event_notifications_leased,
    ADD INDEX event_notifications_order_key (handler_name, order_key, event_date, event_id),
    ADD INDEX event_notifications_limit_leases (handler_name, limit_lease_until);

-- Finished rows: an outcome that finishes a row now sets next_retry_at to
-- the finish time (updated_date), so the purge and the metrics find them
-- through the due index (state, next_retry_at), and the index V5 kept
-- for them alone, whose entry every outcome moved, goes. Rows finished
-- before this keep an earlier next_retry_at: those conditions test
-- updated_date as well.
ALTER TABLE ${eventlog}.event_notifications DROP INDEX event_notifications_finished;

-- Delivered events: the purge reads them type by type through
-- events_undelivered (delivered, event_type, event_date), so V5's
-- (delivered, event_date), whose entry every fan-out flip moved, goes.
ALTER TABLE ${eventlog}.events DROP INDEX events_delivered;
