-- The wallet example's domain table (a model: common columns + dates).
-- Amounts are integer minor units (cents). Lives in the DSN's database
-- (default schema), next to, not inside, the eventlog schema.
CREATE TABLE wallets (
    id           UUID         PRIMARY KEY,
    version      BIGINT       NOT NULL,
    state        VARCHAR(24)  NOT NULL,
    created_date TIMESTAMP    NOT NULL,
    updated_date TIMESTAMP    NOT NULL,
    owner        VARCHAR(200) NOT NULL,
    balance      BIGINT       NOT NULL,
    CONSTRAINT wallets_balance_not_negative CHECK (balance >= 0)
);
