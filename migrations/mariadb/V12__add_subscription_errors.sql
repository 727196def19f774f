-- The last error of a subscription's calls (odbox handlers, odbox_subscription):
-- the message of the latest failed call a process saw, and when, in the
-- database's time. A process writes it at most once a second per
-- subscription, so a broker that is down costs a statement a second, not
-- one per failed row. A later success leaves it: its date says how old it is.
ALTER TABLE ${eventlog}.subscriptions
    ADD COLUMN last_error TEXT,
    ADD COLUMN last_error_date DATETIME(6);
