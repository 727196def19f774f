-- Retention and metrics read finished rows by time. Without these the
-- purge (odbox purge, the purge job) and the delivery-lag metric would
-- scan the whole table for every batch or scrape, and InnoDB would lock
-- every row such a DELETE scans. No partial indexes here, so the state
-- leads each index.

-- Delivered events by age: the purge deletes them oldest first.
-- (events_undelivered has event_type between delivered and event_date.)
CREATE INDEX events_delivered ON ${eventlog}.events (delivered, event_date);

-- Finished notifications by their last update: the purge deletes them
-- oldest first, and the delivery lag reads the SUCCEEDED ones of the
-- last minutes.
CREATE INDEX event_notifications_finished ON ${eventlog}.event_notifications (state, updated_date);
