-- Leased claims: a handling round claims due rows for the calls it makes,
-- marking each with its token (lease_owner) and a deadline in the
-- database's time (lease_until, UTC). A row is claimed again only once
-- lease_until has passed, and an outcome is written only by the round that
-- holds the claim. NULL: not claimed. Both columns are cleared when an
-- outcome is written.
ALTER TABLE ${eventlog}.event_notifications
    ADD COLUMN lease_owner VARCHAR(64) NULL,
    ADD COLUMN lease_until DATETIME(6) NULL;
