-- Retention and metrics read finished rows by time. Without these the
-- purge (odbox purge, the purge job) and the delivery-lag metric would
-- scan the whole table for every batch or scrape.
--
-- Delivered events by age: the purge deletes them oldest first.
CREATE INDEX events_delivered
    ON ${eventlog}.events (event_date)
    WHERE delivered = TRUE;

-- Finished notifications by their last update: the purge deletes them
-- oldest first, and the delivery lag reads the SUCCEEDED ones of the
-- last minutes.
CREATE INDEX event_notifications_finished
    ON ${eventlog}.event_notifications (updated_date)
    WHERE state IN ('SUCCEEDED', 'EXPIRED');
