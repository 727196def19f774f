-- The outbox: one row per emitted event, or one sentinel row (model and
-- event columns NULL) for an action that emitted none. Column-compatible
-- with Ekbatan's eventlog.events. On MySQL/MariaDB the eventlog is a
-- database of its own. delivered has no DDL default: odbox writes FALSE
-- on every insert.
CREATE DATABASE IF NOT EXISTS ${eventlog};

CREATE TABLE ${eventlog}.events (
    id              CHAR(36) CHARACTER SET ascii NOT NULL,
    namespace       VARCHAR(255) NOT NULL,
    action_id       CHAR(36) CHARACTER SET ascii NOT NULL,
    action_name     VARCHAR(255) NOT NULL,
    action_params   JSON         NOT NULL,
    started_date    DATETIME(6)  NOT NULL,
    completion_date DATETIME(6)  NOT NULL,
    model_id        VARCHAR(255),
    model_type      VARCHAR(255),
    event_type      VARCHAR(255),
    payload         JSON,
    event_date      DATETIME(6)  NOT NULL,
    delivered       BOOLEAN      NOT NULL,
    PRIMARY KEY (id)
);

CREATE INDEX idx_events_action_id ON ${eventlog}.events (action_id);

-- Fan-out scan: no partial indexes here, so delivered leads a full
-- composite index.
CREATE INDEX events_undelivered ON ${eventlog}.events (delivered, event_type, event_date);
