-- The wallet example's domain table (a model: common columns + dates).
-- Amounts are integer minor units (cents). Lives in the DSN's database,
-- not in the eventlog database. UUID is MariaDB's native type (10.7+).
CREATE TABLE wallets (
    id           UUID         NOT NULL,
    version      BIGINT       NOT NULL,
    state        VARCHAR(24)  NOT NULL,
    created_date DATETIME(6)  NOT NULL,
    updated_date DATETIME(6)  NOT NULL,
    owner        VARCHAR(200) NOT NULL,
    balance      BIGINT       NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT wallets_balance_not_negative CHECK (balance >= 0)
);
