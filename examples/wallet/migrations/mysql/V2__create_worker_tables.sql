-- The tables of odbox-wallet worker's two handlers (examples/wallet/
-- wallet_handlers.c). Both are keyed so that a handler called twice for
-- one event (delivery is at least once) writes nothing new:
-- wallet_statement: one row per money event, by its event_id; amount is
-- signed (deposits and received transfers positive), balance_after is the
-- payload's balance, event_us the event's date (UTC microseconds) that
-- orders a wallet's rows.
CREATE TABLE wallet_statement (
    event_id      CHAR(36) CHARACTER SET ascii NOT NULL,
    wallet_id     CHAR(36) CHARACTER SET ascii NOT NULL,
    kind          VARCHAR(16)  NOT NULL,
    amount        BIGINT       NOT NULL,
    balance_after BIGINT       NOT NULL,
    event_us      BIGINT       NOT NULL,
    PRIMARY KEY (event_id)
);
CREATE INDEX wallet_statement_wallet ON wallet_statement (wallet_id, event_us);
-- wallet_handler_calls: how often each handler was called for each event,
-- so duplicate deliveries can be counted.
CREATE TABLE wallet_handler_calls (
    handler_name VARCHAR(64)  NOT NULL,
    event_id     CHAR(36) CHARACTER SET ascii NOT NULL,
    calls        BIGINT       NOT NULL,
    PRIMARY KEY (handler_name, event_id)
);
