-- One row per (event x subscribed handler), written by the fan-out job
-- with the event's action context copied in, so dispatch needs no JOIN.
CREATE TABLE ${eventlog}.event_notifications (
    id              UUID         PRIMARY KEY,
    event_id        UUID NOT NULL,
    handler_name    VARCHAR(255) NOT NULL,
    namespace       VARCHAR(255) NOT NULL,
    action_id       UUID NOT NULL,
    action_name     VARCHAR(255) NOT NULL,
    action_params   JSON         NOT NULL,
    started_date    DATETIME(6)  NOT NULL,
    completion_date DATETIME(6)  NOT NULL,
    model_id        VARCHAR(255),
    model_type      VARCHAR(255),
    event_type      VARCHAR(255) NOT NULL,
    payload         JSON,
    event_date      DATETIME(6)  NOT NULL,
    state           VARCHAR(24)  NOT NULL,
    attempts        INT          NOT NULL DEFAULT 0,
    next_retry_at   DATETIME(6)  NOT NULL,
    created_date    DATETIME(6)  NOT NULL,
    updated_date    DATETIME(6)  NOT NULL,
    UNIQUE (event_id, handler_name)
);

-- Due scan: no partial indexes here, so state leads a full composite index.
CREATE INDEX event_notifications_due ON ${eventlog}.event_notifications (state, next_retry_at);
