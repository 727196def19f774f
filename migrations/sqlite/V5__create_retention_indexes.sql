-- Retention and metrics read finished rows by time. Without these the
-- purge (odbox purge, the purge job) and the delivery-lag metric would
-- scan the whole table for every batch or scrape. SQLite uses a partial
-- index only for a query that repeats its condition: the queries do.

-- Delivered events by age: the purge deletes them oldest first.
CREATE INDEX ${eventlog}_events_delivered
    ON ${eventlog}_events (event_date)
    WHERE delivered = TRUE;

-- Finished notifications by their last update: the purge deletes them
-- oldest first, and the delivery lag reads the SUCCEEDED ones of the
-- last minutes.
CREATE INDEX ${eventlog}_event_notifications_finished
    ON ${eventlog}_event_notifications (updated_date)
    WHERE state IN ('SUCCEEDED', 'EXPIRED');
