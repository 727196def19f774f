-- Subscriptions are data: a handler's durable name, its event types, its
-- former names, and the processes that serve it, heartbeated in the
-- database's time. The fan-out writes one notification per event of a
-- type per subscription that is not retired, whatever handlers the
-- process running it has. A subscription ends only when an operator
-- retires it (retired_date), a process going away is not a retirement.
CREATE TABLE ${eventlog}.subscriptions (
    name         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,
    former_names TEXT,
    created_date DATETIME(6) NOT NULL,
    retired_date DATETIME(6)
);

-- One row per (subscription, event type): the fan-out reads the types of
-- the subscriptions that are not retired once per round.
CREATE TABLE ${eventlog}.subscription_types (
    name       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    event_type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (name, event_type)
);

-- The processes serving a subscription; live while last_seen is recent.
CREATE TABLE ${eventlog}.subscription_processes (
    name      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    process   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    last_seen DATETIME(6) NOT NULL,
    PRIMARY KEY (name, process)
);
