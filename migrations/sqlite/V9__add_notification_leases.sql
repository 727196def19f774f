-- Leased claims: a handling round claims due rows for the calls it makes,
-- marking each with its token (lease_owner) and a deadline in the
-- database time (lease_until, the fixed-width UTC text). A row is
-- claimed again only once lease_until has passed, and an outcome is written
-- only by the round that holds the claim. NULL: not claimed. Both columns
-- are cleared when an outcome is written.
ALTER TABLE ${eventlog}_event_notifications ADD COLUMN lease_owner VARCHAR(64);

ALTER TABLE ${eventlog}_event_notifications ADD COLUMN lease_until TEXT
    CHECK (lease_until IS NULL OR lease_until GLOB '????-??-?? ??:??:??.??????');
