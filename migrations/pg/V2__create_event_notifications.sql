-- One row per (event x subscribed handler), written by the fan-out job
-- with the event's action context copied in, so dispatch needs no JOIN.
CREATE TABLE ${eventlog}.event_notifications (
    id              UUID         PRIMARY KEY,
    event_id        UUID         NOT NULL,
    handler_name    VARCHAR(255) NOT NULL,
    namespace       VARCHAR(255) NOT NULL,
    action_id       UUID         NOT NULL,
    action_name     VARCHAR(255) NOT NULL,
    action_params   JSONB        NOT NULL,
    started_date    TIMESTAMP    NOT NULL,
    completion_date TIMESTAMP    NOT NULL,
    model_id        VARCHAR(255),
    model_type      VARCHAR(255),
    event_type      VARCHAR(255) NOT NULL,
    payload         JSONB,
    event_date      TIMESTAMP    NOT NULL,
    state           VARCHAR(24)  NOT NULL,
    attempts        INT          NOT NULL DEFAULT 0,
    next_retry_at   TIMESTAMP    NOT NULL,
    created_date    TIMESTAMP    NOT NULL,
    updated_date    TIMESTAMP    NOT NULL,
    UNIQUE (event_id, handler_name)
);

-- Due scan: state IN ('PENDING','FAILED') AND next_retry_at <= now ORDER BY next_retry_at.
CREATE INDEX event_notifications_due
    ON ${eventlog}.event_notifications (next_retry_at)
    WHERE state IN ('PENDING', 'FAILED');
