-- bench/relay_rows.sql - the database's work per relayed event in three
-- row layouts (bench/relay_rows.sh), as procedures that drain the
-- RelayProbed events of one eventlog in batches, one session, the
-- broker left out. Each batch ends with one durable commit, as a relay's
-- outcomes do.
--
-- relay_rows_current: what odbox does today for a row handed off by the
-- fan-out (the statements of a ceiling drain in PostgreSQL's log): the
-- fan-out's INSERT of the notification rows, already claimed, and the
-- flip of events.delivered, committed without waiting for the flush; the
-- loop's read of the rows by id; the outcome UPDATE by id and lease.
CREATE OR REPLACE PROCEDURE relay_rows_current(batch INT) LANGUAGE plpgsql AS $$
DECLARE ids UUID[]; nids UUID[]; r RECORD;
BEGIN
  LOOP
    SET LOCAL synchronous_commit = off;
    SELECT array_agg(id) INTO ids FROM (SELECT id FROM eventlog.events WHERE delivered = FALSE
        AND event_type = 'RelayProbed' ORDER BY event_date LIMIT batch) s;
    EXIT WHEN ids IS NULL;
    WITH w AS (INSERT INTO eventlog.event_notifications (id, event_id, handler_name, namespace, action_id,
        action_name, action_params, started_date, completion_date, model_id, model_type, event_type, payload,
        event_date, state, attempts, next_retry_at, created_date, updated_date, lease_owner, lease_until)
      SELECT gen_random_uuid(), e.id, 'bench', e.namespace, e.action_id, e.action_name, e.action_params,
        e.started_date, e.completion_date, e.model_id, e.model_type, e.event_type, e.payload, e.event_date,
        'PENDING', 0, now() + INTERVAL '45 s', now(), now(), 'round', now() + INTERVAL '45 s'
      FROM eventlog.events e WHERE e.id = ANY(ids) RETURNING id)
    SELECT array_agg(id) INTO nids FROM w;
    UPDATE eventlog.events SET delivered = TRUE WHERE id = ANY(ids);
    COMMIT;
    FOR r IN SELECT id, event_id, handler_name, namespace, action_id, action_name, action_params, started_date,
        completion_date, model_id, model_type, event_type, payload, event_date, attempts
        FROM eventlog.event_notifications WHERE id = ANY(nids) LOOP
    END LOOP;
    COMMIT;
    UPDATE eventlog.event_notifications SET state = 'SUCCEEDED', attempts = attempts + 1, updated_date = now(),
        next_retry_at = now(), order_key = NULL, lease_owner = NULL, lease_until = NULL, limit_lease_until = NULL
      WHERE id = ANY(nids) AND lease_owner = 'round';
    COMMIT;
  END LOOP;
END $$;

-- The next batch of undelivered events, read whole as a relay publishes
-- them; their ids (NULL when none is left).
CREATE OR REPLACE FUNCTION relay_rows_read(batch INT) RETURNS UUID[] LANGUAGE plpgsql AS $$
DECLARE ids UUID[]; r RECORD;
BEGIN
  FOR r IN SELECT id, namespace, action_id, action_name, action_params, started_date, completion_date,
      model_id, model_type, event_type, payload, event_date FROM eventlog.events
      WHERE delivered = FALSE AND event_type = 'RelayProbed' ORDER BY event_date LIMIT batch LOOP
    ids := ids || r.id;
  END LOOP;
  RETURN ids;
END $$;

-- relay_rows_outcome_row: a notification row written once, with its
-- outcome: the events read, then the SUCCEEDED rows and the flip in
-- one transaction (nothing written while the batch is in flight).
CREATE OR REPLACE PROCEDURE relay_rows_outcome_row(batch INT) LANGUAGE plpgsql AS $$
DECLARE ids UUID[];
BEGIN
  LOOP
    ids := relay_rows_read(batch);
    EXIT WHEN ids IS NULL;
    COMMIT;
    INSERT INTO eventlog.event_notifications (id, event_id, handler_name, namespace, action_id, action_name,
        action_params, started_date, completion_date, model_id, model_type, event_type, payload, event_date,
        state, attempts, next_retry_at, created_date, updated_date)
      SELECT gen_random_uuid(), e.id, 'bench', e.namespace, e.action_id, e.action_name, e.action_params,
        e.started_date, e.completion_date, e.model_id, e.model_type, e.event_type, e.payload, e.event_date,
        'SUCCEEDED', 1, now(), now(), now()
      FROM eventlog.events e WHERE e.id = ANY(ids);
    UPDATE eventlog.events SET delivered = TRUE WHERE id = ANY(ids);
    COMMIT;
  END LOOP;
END $$;

-- relay_rows_events_only: no notification row for a success (a failure
-- would write one, for its retries): the events read, then the flip.
CREATE OR REPLACE PROCEDURE relay_rows_events_only(batch INT) LANGUAGE plpgsql AS $$
DECLARE ids UUID[];
BEGIN
  LOOP
    ids := relay_rows_read(batch);
    EXIT WHEN ids IS NULL;
    COMMIT;
    UPDATE eventlog.events SET delivered = TRUE WHERE id = ANY(ids);
    COMMIT;
  END LOOP;
END $$;
