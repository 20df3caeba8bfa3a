-- A status event's fields are stored as columns, and its JSON `data` is built as the event
-- is read (status_event_body), no longer stored. The JSON object repeated its nine key
-- names, the job's and the organization's ids as text (the row has both as uuids) and its
-- offsets in every event: about 300 bytes of a 470-byte row, written to the WAL once per
-- status change, and the largest single write of a send (docs/decisions/
-- 0019-event-fields-as-columns.md, with the figures). Receivers see the same envelope.
--
-- Events written before this migration keep their `data` and are read from it; every event
-- written after has its columns and no `data` (the CHECK, NOT VALID: the earlier rows are
-- not scanned, every new one is checked). Nor does a new event carry the retry path's
-- columns until it takes that path.
--
-- Online against the 1.0 release (tests/it/online_migration.rs): nullable columns with no
-- default and NOT NULL dropped (catalog changes alone, under a short lock timeout: the
-- runner tries again), a NOT VALID check, and the trigger functions replaced (the next
-- statement of a worker's completion uses the new ones). 1.0 writes no event itself; its
-- completions keep producing them through these triggers.
SET LOCAL lock_timeout = '500ms';

ALTER TABLE status_events
    ADD COLUMN status text,
    ADD COLUMN previous_status text,
    ADD COLUMN channel text,
    ADD COLUMN attempt int,
    ADD COLUMN provider_message_id text,
    ADD COLUMN error_code text,
    -- redacted as it is written (status_event_redact): no recipient is ever stored here
    ADD COLUMN error_message text,
    ALTER COLUMN data DROP NOT NULL,
    -- the retry path's (an event the bus refused): the stream's events leave them NULL, and
    -- complete_events.sql sets both when one leaves the stream
    ALTER COLUMN next_attempt_at DROP NOT NULL,
    ALTER COLUMN attempts DROP NOT NULL,
    ALTER COLUMN attempts DROP DEFAULT,
    ADD CONSTRAINT status_events_data_or_fields CHECK (data IS NOT NULL OR status IS NOT NULL)
        NOT VALID;

-- The envelope's `data` of an event (without its `sequence`, which the envelope adds): the
-- stored JSON of an event from before this migration, built from the columns otherwise.
CREATE FUNCTION status_event_body(e status_events) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(e.data,
                    status_event_data(e.job_id, e.organization_id, e.channel, e.status,
                                      e.previous_status, e.attempt, e.provider_message_id,
                                      e.error_code, e.error_message))
$$;

-- The triggers of 0004, each writing the same fields as columns.
CREATE OR REPLACE FUNCTION status_events_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt, provider_message_id,
                               error_code, error_message)
    SELECT e.organization_id, e.job_id, 'notification.' || e.status, e.updated_at,
           e.status::text,
           CASE WHEN e.status IN ('sent', 'dead') THEN 'processing'
                WHEN e.tries > CASE WHEN e.status = 'expired' THEN 1 ELSE 0 END
                    THEN 'failed'
                ELSE 'pending' END,
           CASE e.provider WHEN 'sns' THEN 'sms' WHEN 'ses' THEN 'email'
                ELSE job_channel(e.job_id, e.created_at) END,
           e.tries, e.provider_message_id,
           CASE WHEN e.status = 'dead'
                THEN coalesce(e.error_code, split_part(e.last_error, ':', 1)) END,
           CASE WHEN e.status IN ('dead', 'expired')
                THEN status_event_redact(coalesce(e.error_message, e.last_error)) END
    FROM ended AS e;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION status_events_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt, provider_message_id)
    SELECT n.organization_id, n.job_id, 'notification.' || n.status, n.updated_at,
           n.status::text, o.status::text,
           CASE n.provider WHEN 'sns' THEN 'sms' WHEN 'ses' THEN 'email'
                ELSE job_channel(n.job_id, n.created_at) END,
           n.tries, n.provider_message_id
    FROM after_change AS n
    JOIN before_change AS o ON o.job_id = n.job_id AND o.created_at = n.created_at
    WHERE n.status IS DISTINCT FROM o.status;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION status_events_requeued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt)
    SELECT r.organization_id, r.job_id, 'notification.requeued', now(),
           'pending', r.status::text, q.channel, r.tries
    FROM removed AS r
    JOIN job_queue AS q ON q.id = r.job_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION status_events_complained() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt, provider_message_id,
                               error_code, error_message)
    SELECT o.organization_id, o.job_id, 'notification.complained', n.applied_at,
           o.status::text, o.status::text, n.channel, n.attempt, n.provider_message_id,
           'complaint', status_event_redact(n.subtype)
    FROM after_change AS n
    JOIN before_change AS b ON b.id = n.id
    JOIN job_outcomes AS o ON o.job_id = n.job_id
    WHERE n.kind = 'complaint' AND b.applied_at IS NULL AND n.applied_at IS NOT NULL;
    RETURN NULL;
END
$$;
