-- The name of the action (or own transaction) that spent each idempotency
-- key (docs/actions.md, Idempotency keys): the same key used by another
-- name is refused (ODBOX_EUNIQUE), where the first one's outcome used to
-- be returned as the second one's (a withdrawal reported done with a
-- deposit's action id). utf8mb4_bin, as V7 gave the other name columns,
-- so that the name compares byte by byte, as odbox compares it.
--
-- Nullable and without a default: rows written before this migration, and
-- rows a build older than it writes during a rolling deploy (its INSERT
-- names the V11 columns only, so it keeps working), hold NULL, which odbox
-- reads as "unknown": such a key is compared by its params only, as before.
--
-- COST: InnoDB adds a nullable last column in place without copying the
-- table (MariaDB 10.3 and later, MySQL 8.0.12 and later: INSTANT); an
-- older MySQL rebuilds idempotency_keys, whose rows purge keeps to the
-- keys' window. Either way the ALTER waits at most lock_wait_timeout, 50 s
-- in odbox's sessions, for transactions that use the table to end.
ALTER TABLE ${eventlog}.idempotency_keys
    ADD COLUMN action_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
