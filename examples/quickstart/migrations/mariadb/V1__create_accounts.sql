-- The quickstart's domain table: a model's common columns (id, version,
-- state, created_date, updated_date) and its own (owner, balance). It lives
-- in the DSN's database, not in the eventlog database. UUID is MariaDB's
-- native type (10.7+).
CREATE TABLE accounts (
    id           UUID         NOT NULL,
    version      BIGINT       NOT NULL,
    state        VARCHAR(24)  NOT NULL,
    created_date DATETIME(6)  NOT NULL,
    updated_date DATETIME(6)  NOT NULL,
    owner        VARCHAR(200) NOT NULL,
    balance      BIGINT       NOT NULL,
    PRIMARY KEY (id)
);
