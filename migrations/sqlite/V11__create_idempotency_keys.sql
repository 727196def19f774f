-- Idempotency keys (docs/actions.md, Idempotency keys): a key executes
-- once per namespace. The row is written in the transaction of the rows
-- and events it stands for, first, so the unique (namespace, idem_key)
-- makes a concurrent second caller wait for the first one and then fail
-- on it. id is the action_id of the execution that spent the key (the
-- id of the row: purge deletes by it), params_sha256 the SHA-256 (hex)
-- of the params JSON text, result the result JSON of the action (NULL:
-- none), created_date the UTC time of the writer: odbox purge removes
-- rows older than its window.
CREATE TABLE ${eventlog}_idempotency_keys (
    id            TEXT         NOT NULL PRIMARY KEY,
    namespace     VARCHAR(255) NOT NULL,
    idem_key      VARCHAR(255) NOT NULL,
    params_sha256 TEXT         NOT NULL,
    result        TEXT,
    created_date  TEXT         NOT NULL CHECK (created_date GLOB '????-??-?? ??:??:??.??????'),
    UNIQUE (namespace, idem_key)
);

-- Purge: created_date < cutoff, oldest first.
CREATE INDEX ${eventlog}_idempotency_keys_created ON ${eventlog}_idempotency_keys (created_date);
