-- Provider feedback (what SES and SNS report after accepting a message) and each
-- organization's suppression list.

-- `delivered`: the provider confirmed delivery. `bounced`: the provider reported the message
-- undeliverable (a permanent bounce, a reject, an SMS carrier failure). `sent` keeps meaning
-- "accepted, no confirmation yet".
ALTER TYPE job_status ADD VALUE IF NOT EXISTS 'delivered';
ALTER TYPE job_status ADD VALUE IF NOT EXISTS 'bounced';

-- One row per provider event, kept against the attempt whose provider_message_id it names.
-- An event for an id no attempt carries yet (it arrived before the worker recorded the
-- attempt) waits with job_id NULL: applied when the attempt appears, dropped by the sweeper
-- after FEEDBACK_MATCH_WINDOW_SECS.
CREATE TABLE delivery_feedback (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_message_id text NOT NULL,
    channel             text NOT NULL CHECK (channel IN ('sms', 'email')),
    -- the event itself (kind, its timestamp, hashed recipients): a redelivered copy is the
    -- same key and changes nothing
    event_key           text NOT NULL,
    kind                text NOT NULL,
    subtype             text,
    diagnostic          text,
    -- whether the recipient goes on the organization's suppression list
    suppresses          boolean NOT NULL,
    occurred_at         timestamptz NOT NULL,
    received_at         timestamptz NOT NULL,
    -- the event as received, size-capped by the function
    raw                 jsonb NOT NULL,
    job_id              uuid REFERENCES notification_jobs (id) ON DELETE CASCADE,
    attempt             int,
    applied_at          timestamptz,
    UNIQUE (provider_message_id, event_key)
);
CREATE INDEX delivery_feedback_waiting ON delivery_feedback (received_at) WHERE applied_at IS NULL;
CREATE INDEX delivery_feedback_by_attempt ON delivery_feedback (job_id, attempt);

-- Recipients an organization no longer sends to: email in lower case, phones in E.164.
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
