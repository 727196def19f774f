-- The quickstart's domain table: a model's common columns (id, version,
-- state, created_date, updated_date) and its own (owner, balance). It lives
-- in the DSN's database (default schema), next to the eventlog schema.
CREATE TABLE accounts (
    id           UUID         PRIMARY KEY,
    version      BIGINT       NOT NULL,
    state        VARCHAR(24)  NOT NULL,
    created_date TIMESTAMP    NOT NULL,
    updated_date TIMESTAMP    NOT NULL,
    owner        VARCHAR(200) NOT NULL,
    balance      BIGINT       NOT NULL
);
