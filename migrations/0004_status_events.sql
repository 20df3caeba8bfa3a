-- Status events: every change of a notification's status that callers hear about, recorded
-- in the transaction of the change (an outbox), then published to the event bus and posted
-- to the organization's webhook endpoints by the worker, at least once each.
--
-- The events are written by triggers on the history tables, not by the statements that
-- change a status: so every statement that changes one, of this release or of the one
-- before it still serving during a deploy, records the change's event, and a change that
-- does not commit has none. The triggers are per statement (transition tables): one insert
-- per statement, whatever the number of rows.
--
-- The first migration after 1.0: applied online against the 1.0 release in a test
-- (tests/it/online_migration.rs). It creates tables and adds triggers; CREATE TRIGGER takes a
-- SHARE ROW EXCLUSIVE lock on job_outcomes and delivery_feedback (and their partitions) for
-- an instant, which the worker's completions wait for, and ingest never does.

-- Each event's place in the order of all changes: a notification's changes are made under
-- its row's lock, one after another, so their numbers increase in the order they happened.
-- A receiver orders what arrives out of order by it. Gaps are normal.
CREATE SEQUENCE status_event_sequence AS bigint;

-- The outbox, and what the bus still has to take. An event is kept RETENTION_DAYS (the
-- sweeper deletes older ones that no webhook delivery still needs).
CREATE TABLE status_events (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    sequence        bigint NOT NULL DEFAULT nextval('status_event_sequence'),
    organization_id uuid NOT NULL,
    job_id          uuid NOT NULL,
    type            text NOT NULL CHECK (type LIKE 'notification.%'),
    -- when the change happened (the changed row's time)
    created_at      timestamptz NOT NULL,
    -- the envelope's `data` but its `sequence` (the column, added as the envelope is built):
    -- no recipient, no body (status_event_data below)
    data            jsonb NOT NULL,
    -- the bus: the event waits until published_at is set, claimed like a job
    published_at    timestamptz,
    next_attempt_at timestamptz NOT NULL,
    attempts        int NOT NULL DEFAULT 0,
    claim_token     uuid,
    claimed_at      timestamptz,
    last_error      text
) WITH (fillfactor = 80);
-- claim_events.sql: the events the bus has not taken, due first
CREATE INDEX status_events_unpublished ON status_events (next_attempt_at)
    WHERE published_at IS NULL;
-- retention
CREATE INDEX status_events_created ON status_events (created_at);

-- An organization's webhook endpoints.
CREATE TABLE webhook_endpoints (
    id                    uuid PRIMARY KEY,
    organization_id       uuid NOT NULL,
    url                   text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    -- the event types it receives; NULL: every type
    event_types           text[],
    -- whsec_…: signs every delivery; the one it replaced signs too until previous_until
    secret                text NOT NULL,
    previous_secret       text,
    previous_until        timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    -- since when every attempt to it failed (NULL while it answers 2xx)
    failing_since         timestamptz,
    -- set after failing for five days: nothing more is sent to it
    disabled_at           timestamptz,
    disabled_reason       text,
    CHECK ((previous_secret IS NULL) = (previous_until IS NULL))
);
CREATE INDEX webhook_endpoints_by_org ON webhook_endpoints (organization_id, created_at);

-- The deliveries still to make: one per event and endpoint subscribed to its type, made
-- with the event (status_events_fan_out below). Claimed like a job: claim_webhooks.sql takes
-- due rows with SKIP LOCKED and stamps a claim token that complete_webhooks.sql checks. A
-- delivery leaves this table when it is delivered or dead; its attempts are in
-- webhook_attempts.
CREATE TABLE webhook_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints ON DELETE CASCADE,
    event_id        uuid NOT NULL,
    organization_id uuid NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    attempts        int NOT NULL DEFAULT 0,
    claim_token     uuid,
    claimed_at      timestamptz,
    UNIQUE (endpoint_id, event_id)
);
-- claim_webhooks.sql: each endpoint's due deliveries
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_id, next_attempt_at);
-- webhook_backlog.sql
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at);
-- retention: an event is kept while a delivery of it waits
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);

-- Every webhook attempt: what GET /webhooks/{id}/deliveries lists. Kept RETENTION_DAYS.
CREATE TABLE webhook_attempts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints ON DELETE CASCADE,
    event_id        uuid NOT NULL,
    event_type      text NOT NULL,
    attempt         int NOT NULL CHECK (attempt >= 1),
    outcome         text NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
    status_code     int,
    latency_ms      int NOT NULL,
    error           text,
    started_at      timestamptz NOT NULL,
    next_attempt_at timestamptz
);
CREATE INDEX webhook_attempts_by_endpoint ON webhook_attempts (endpoint_id, id DESC);
CREATE INDEX webhook_attempts_started ON webhook_attempts (started_at);

-- A provider's error message may quote a recipient ("… failed the check: a@example.com",
-- a phone number): an event never carries one, so addresses and long digit runs go.
CREATE FUNCTION status_event_redact(message text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT regexp_replace(
               regexp_replace(message, '[^\s<>(),;:"'']+@[^\s<>(),;:"'']+', '[redacted]', 'g'),
               '\+?\d[\d ().-]{5,}\d', '[redacted]', 'g')
$$;

-- The envelope's `data` of one change, but its sequence (the event's own column).
CREATE FUNCTION status_event_data(job_id uuid, organization_id uuid, channel text,
                                  status text, previous_status text, attempt int,
                                  provider_message_id text, error_code text,
                                  error_message text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object(
               'id', job_id, 'organization_id', organization_id, 'channel', channel,
               'status', status, 'previous_status', previous_status, 'attempt', attempt,
               'provider_message_id', provider_message_id,
               'error', CASE WHEN error_code IS NOT NULL OR error_message IS NOT NULL THEN
                            jsonb_build_object('code', error_code,
                                               'message', status_event_redact(error_message))
                        END)
$$;

-- The channel of a job whose outcome row names no provider (cancelled, expired, buried):
-- its request's, read by its id and day.
CREATE FUNCTION job_channel(job_id uuid, created_at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT j.channel FROM job_requests AS j
    WHERE j.id = $1 AND j.created_at = $2
$$;

-- A job ends (sent, dead, cancelled, expired): one event per outcome row inserted. The job
-- was claimed when a worker or the sweeper ended it (sent, dead), waiting otherwise
-- (`failed` once tried: an expired job's tries count the expiry's own row).
CREATE FUNCTION status_events_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, data, next_attempt_at)
    SELECT e.organization_id, e.job_id, 'notification.' || e.status, e.updated_at,
           status_event_data(e.job_id, e.organization_id,
                             CASE e.provider WHEN 'sns' THEN 'sms' WHEN 'ses' THEN 'email'
                                  ELSE job_channel(e.job_id, e.created_at) END,
                             e.status::text,
                             CASE WHEN e.status IN ('sent', 'dead') THEN 'processing'
                                  WHEN e.tries > CASE WHEN e.status = 'expired' THEN 1 ELSE 0 END
                                      THEN 'failed'
                                  ELSE 'pending' END,
                             e.tries, e.provider_message_id,
                             CASE WHEN e.status = 'dead'
                                  THEN coalesce(e.error_code, split_part(e.last_error, ':', 1)) END,
                             CASE WHEN e.status IN ('dead', 'expired')
                                  THEN coalesce(e.error_message, e.last_error) END),
           e.updated_at
    FROM ended AS e;
    RETURN NULL;
END
$$;
CREATE TRIGGER status_events_ended
    AFTER INSERT ON job_outcomes
    REFERENCING NEW TABLE AS ended
    FOR EACH STATEMENT EXECUTE FUNCTION status_events_ended();

-- Provider feedback changes an ended job's status (delivered, bounced): one event per change.
CREATE FUNCTION status_events_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, data, next_attempt_at)
    SELECT n.organization_id, n.job_id, 'notification.' || n.status, n.updated_at,
           status_event_data(n.job_id, n.organization_id,
                             CASE n.provider WHEN 'sns' THEN 'sms' WHEN 'ses' THEN 'email'
                                  ELSE job_channel(n.job_id, n.created_at) END,
                             n.status::text, o.status::text, n.tries, n.provider_message_id,
                             NULL, NULL),
           n.updated_at
    FROM after_change AS n
    JOIN before_change AS o ON o.job_id = n.job_id AND o.created_at = n.created_at
    WHERE n.status IS DISTINCT FROM o.status;
    RETURN NULL;
END
$$;
CREATE TRIGGER status_events_changed
    AFTER UPDATE ON job_outcomes
    REFERENCING OLD TABLE AS before_change NEW TABLE AS after_change
    FOR EACH STATEMENT EXECUTE FUNCTION status_events_changed();

-- A dead job requeued: its outcome row goes and its queue row comes back, in one statement
-- (requeue.sql, requeue_dead.sql). An outcome row deleted otherwise is no requeue.
CREATE FUNCTION status_events_requeued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, data, next_attempt_at)
    SELECT r.organization_id, r.job_id, 'notification.requeued', now(),
           status_event_data(r.job_id, r.organization_id, q.channel, 'pending',
                             r.status::text, r.tries, NULL, NULL, NULL),
           now()
    FROM removed AS r
    JOIN job_queue AS q ON q.id = r.job_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER status_events_requeued
    AFTER DELETE ON job_outcomes
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION status_events_requeued();

-- A complaint changes no status, but callers hear of it: one event per complaint applied to
-- an ended job (apply_feedback.sql ties the event to its attempt).
CREATE FUNCTION status_events_complained() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, data, next_attempt_at)
    SELECT o.organization_id, o.job_id, 'notification.complained', n.applied_at,
           status_event_data(o.job_id, o.organization_id, n.channel, o.status::text,
                             o.status::text, n.attempt, n.provider_message_id,
                             'complaint', n.subtype),
           n.applied_at
    FROM after_change AS n
    JOIN before_change AS b ON b.id = n.id
    JOIN job_outcomes AS o ON o.job_id = n.job_id
    WHERE n.kind = 'complaint' AND b.applied_at IS NULL AND n.applied_at IS NOT NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER status_events_complained
    AFTER UPDATE ON delivery_feedback
    REFERENCING OLD TABLE AS before_change NEW TABLE AS after_change
    FOR EACH STATEMENT EXECUTE FUNCTION status_events_complained();

-- Each new event becomes a delivery to each of its organization's enabled endpoints that
-- asked for its type, in the same transaction: an endpoint registered before the change
-- commits is sure to get it.
CREATE FUNCTION status_events_fan_out() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (endpoint_id, event_id, organization_id, next_attempt_at)
    SELECT w.id, e.id, e.organization_id, e.created_at
    FROM recorded AS e
    JOIN webhook_endpoints AS w ON w.organization_id = e.organization_id
    WHERE w.disabled_at IS NULL
      AND (w.event_types IS NULL OR e.type = ANY (w.event_types));
    RETURN NULL;
END
$$;
CREATE TRIGGER status_events_fan_out
    AFTER INSERT ON status_events
    REFERENCING NEW TABLE AS recorded
    FOR EACH STATEMENT EXECUTE FUNCTION status_events_fan_out();
