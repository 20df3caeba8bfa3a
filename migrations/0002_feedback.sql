-- Provider feedback (what SES and SNS report after accepting a message) and each
-- organization's suppression list, which ingest and the worker honour.

-- One row per provider event, tied to the attempt whose provider message id it names (a row
-- of job_attempts, or the last attempt in an outcome row). An event for an id no attempt
-- carries yet (it arrived before the worker recorded the attempt) waits with job_id NULL:
-- applied when the attempt appears (the sweeper looks every minute), dropped after
-- FEEDBACK_MATCH_WINDOW_SECS. The sweeper deletes events RETENTION_DAYS after they arrived.
CREATE TABLE delivery_feedback (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_message_id text NOT NULL,
    channel             text NOT NULL CHECK (channel IN ('sms', 'email')),
    -- the event itself (kind, its timestamp, hashed recipients): a redelivered copy has the
    -- same key and changes nothing
    event_key           text NOT NULL,
    -- delivery | bounce | reject | complaint | sms_failure | ...
    kind                text NOT NULL,
    subtype             text,
    diagnostic          text,
    -- whether the recipient goes on the organization's suppression list
    suppresses          boolean NOT NULL,
    occurred_at         timestamptz NOT NULL,
    received_at         timestamptz NOT NULL,
    -- the event as received, size-capped by the function, recipients hashed
    raw                 jsonb NOT NULL,
    job_id              uuid,
    attempt             int,
    applied_at          timestamptz,
    UNIQUE (provider_message_id, event_key)
);
-- the events still waiting for their attempt
CREATE INDEX delivery_feedback_waiting ON delivery_feedback (received_at) WHERE applied_at IS NULL;
-- GET: an attempt's events
CREATE INDEX delivery_feedback_by_attempt ON delivery_feedback (job_id, attempt);
-- retention
CREATE INDEX delivery_feedback_received ON delivery_feedback (received_at);

-- Recipients an organization no longer sends to, keyed by the recipient as
-- domain::normalize_recipient gives it (the one normaliser: ingest stores `to` that way, and
-- no statement normalises again).
CREATE TABLE suppressions (
    organization_id     uuid NOT NULL,
    recipient           text NOT NULL,
    -- bounce | complaint | sms_failure (from feedback) | manual (POST /suppressions)
    reason              text NOT NULL,
    detail              text,
    job_id              uuid,
    provider_message_id text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, recipient)
);
