-- The outbox: one row per emitted event, or one sentinel row (model and
-- event columns NULL) for an action that emitted none. Column-compatible
-- with eventlog.events of Ekbatan. On SQLite the eventlog is a name prefix
-- (${eventlog}_events) beside the domain tables in the one database file,
-- so that one transaction covers both. UUIDs, JSON and timestamps are
-- TEXT. A timestamp is UTC in the fixed-width form of odbox
-- 'YYYY-MM-DD HH:MM:SS.ffffff', which sorts as text (the GLOB checks keep
-- it so). Booleans are 0/1. delivered has no DDL default: odbox writes
-- FALSE on every insert. NOT NULL on the key: SQLite lets a non-INTEGER
-- primary key be NULL otherwise. (No semicolon, question mark or lone
-- quote in these comments: the ODBC driver does not skip comments when it
-- looks for statement ends, parameters and string literals.)

CREATE TABLE ${eventlog}_events (
    id              TEXT         NOT NULL PRIMARY KEY,
    namespace       VARCHAR(255) NOT NULL,
    action_id       TEXT         NOT NULL,
    action_name     VARCHAR(255) NOT NULL,
    action_params   TEXT         NOT NULL CHECK (json_valid(action_params)),
    started_date    TEXT         NOT NULL CHECK (started_date GLOB '????-??-?? ??:??:??.??????'),
    completion_date TEXT         NOT NULL CHECK (completion_date GLOB '????-??-?? ??:??:??.??????'),
    model_id        VARCHAR(255),
    model_type      VARCHAR(255),
    event_type      VARCHAR(255),
    payload         TEXT         CHECK (payload IS NULL OR json_valid(payload)),
    event_date      TEXT         NOT NULL CHECK (event_date GLOB '????-??-?? ??:??:??.??????'),
    delivered       INTEGER      NOT NULL CHECK (delivered IN (0, 1))
);

-- Index names are per database file here: prefixed like the tables.
CREATE INDEX ${eventlog}_idx_events_action_id ON ${eventlog}_events (action_id);

-- Fan-out scan: delivered = FALSE AND event_type IN (...) ORDER BY event_date.
CREATE INDEX ${eventlog}_events_undelivered
    ON ${eventlog}_events (event_type, event_date)
    WHERE delivered = FALSE;
