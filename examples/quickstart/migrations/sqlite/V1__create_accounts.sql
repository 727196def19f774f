-- The quickstart's domain table: a model's common columns (id, version,
-- state, created_date, updated_date) and its own (owner, balance). It lives
-- in the same database file as the eventlog tables (eventlog_events and
-- the others), so one transaction writes both. UUIDs and timestamps are TEXT.
CREATE TABLE accounts (
    id           TEXT         NOT NULL PRIMARY KEY,
    version      BIGINT       NOT NULL,
    state        VARCHAR(24)  NOT NULL,
    created_date TEXT         NOT NULL,
    updated_date TEXT         NOT NULL,
    owner        VARCHAR(200) NOT NULL,
    balance      BIGINT       NOT NULL
);
