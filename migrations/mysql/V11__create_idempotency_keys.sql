-- Idempotency keys (docs/actions.md, Idempotency keys): a key executes
-- once per namespace. The row is written in the transaction of the rows
-- and events it stands for, first, so the unique (namespace, idem_key)
-- makes a concurrent second caller wait for the first one and then fail
-- on it. params_sha256 is the SHA-256 (hex) of the params JSON text;
-- result is the action's result JSON (NULL: none). created_date is the
-- writer's UTC time; odbox purge removes rows older than its window.
-- The key is compared byte by byte (VARBINARY), the namespace as odbox
-- compares it (utf8mb4_bin).
CREATE TABLE ${eventlog}.idempotency_keys (
    namespace     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idem_key      VARBINARY(255) NOT NULL,
    params_sha256 CHAR(64)     CHARACTER SET ascii NOT NULL,
    action_id     CHAR(36)     CHARACTER SET ascii NOT NULL,
    result        MEDIUMTEXT,
    created_date  DATETIME(6)  NOT NULL,
    PRIMARY KEY (namespace, idem_key)
);

-- Purge: created_date < cutoff, oldest first.
CREATE INDEX idempotency_keys_created ON ${eventlog}.idempotency_keys (created_date);
