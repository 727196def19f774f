-- The outbox: one row per emitted event, or one sentinel row (model and
-- event columns NULL) for an action that emitted none. Column-compatible
-- with Ekbatan's eventlog.events. delivered has no DDL default: odbox
-- writes FALSE on every insert.
CREATE SCHEMA IF NOT EXISTS ${eventlog};

CREATE TABLE ${eventlog}.events (
    id              UUID         PRIMARY KEY,
    namespace       VARCHAR(255) NOT NULL,
    action_id       UUID         NOT NULL,
    action_name     VARCHAR(255) NOT NULL,
    action_params   JSONB        NOT NULL,
    started_date    TIMESTAMP    NOT NULL,
    completion_date TIMESTAMP    NOT NULL,
    model_id        VARCHAR(255),
    model_type      VARCHAR(255),
    event_type      VARCHAR(255),
    payload         JSONB,
    event_date      TIMESTAMP    NOT NULL,
    delivered       BOOLEAN      NOT NULL
);

CREATE INDEX idx_events_action_id ON ${eventlog}.events (action_id);

-- Fan-out scan: delivered = FALSE AND event_type IN (...) ORDER BY event_date.
CREATE INDEX events_undelivered
    ON ${eventlog}.events (event_type, event_date)
    WHERE delivered = FALSE;
