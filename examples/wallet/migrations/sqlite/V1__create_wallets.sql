-- The domain table of the wallet example (a model: common columns + dates).
-- Amounts are integer minor units (cents). Lives in the same database
-- file as the eventlog tables (eventlog_events, ...), so one transaction
-- writes both. UUIDs and timestamps are TEXT (odbox writes timestamps as
-- fixed-width UTC 'YYYY-MM-DD HH:MM:SS.ffffff').
CREATE TABLE wallets (
    id           TEXT         NOT NULL PRIMARY KEY,
    version      BIGINT       NOT NULL,
    state        VARCHAR(24)  NOT NULL,
    created_date TEXT         NOT NULL,
    updated_date TEXT         NOT NULL,
    owner        VARCHAR(200) NOT NULL,
    balance      BIGINT       NOT NULL,
    CONSTRAINT wallets_balance_not_negative CHECK (balance >= 0)
);
