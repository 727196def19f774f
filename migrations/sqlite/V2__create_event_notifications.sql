-- One row per (event x subscribed handler), written by the fan-out job
-- with the action context of its event copied in, so dispatch needs no JOIN.
-- Types as in V1.
CREATE TABLE ${eventlog}_event_notifications (
    id              TEXT         NOT NULL PRIMARY KEY,
    event_id        TEXT         NOT NULL,
    handler_name    VARCHAR(255) NOT NULL,
    namespace       VARCHAR(255) NOT NULL,
    action_id       TEXT         NOT NULL,
    action_name     VARCHAR(255) NOT NULL,
    action_params   TEXT         NOT NULL CHECK (json_valid(action_params)),
    started_date    TEXT         NOT NULL CHECK (started_date GLOB '????-??-?? ??:??:??.??????'),
    completion_date TEXT         NOT NULL CHECK (completion_date GLOB '????-??-?? ??:??:??.??????'),
    model_id        VARCHAR(255),
    model_type      VARCHAR(255),
    event_type      VARCHAR(255) NOT NULL,
    payload         TEXT         CHECK (payload IS NULL OR json_valid(payload)),
    event_date      TEXT         NOT NULL CHECK (event_date GLOB '????-??-?? ??:??:??.??????'),
    state           VARCHAR(24)  NOT NULL,
    attempts        INT          NOT NULL DEFAULT 0,
    next_retry_at   TEXT         NOT NULL CHECK (next_retry_at GLOB '????-??-?? ??:??:??.??????'),
    created_date    TEXT         NOT NULL CHECK (created_date GLOB '????-??-?? ??:??:??.??????'),
    updated_date    TEXT         NOT NULL CHECK (updated_date GLOB '????-??-?? ??:??:??.??????'),
    UNIQUE (event_id, handler_name)
);

-- Due scan: state IN ('PENDING','FAILED') AND next_retry_at <= now ORDER BY next_retry_at.
CREATE INDEX ${eventlog}_event_notifications_due
    ON ${eventlog}_event_notifications (next_retry_at)
    WHERE state IN ('PENDING', 'FAILED');
