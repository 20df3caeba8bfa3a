-- One row per delivery attempt, success or not, kept for the audit trail.
CREATE TABLE notification_deliveries (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id              uuid NOT NULL REFERENCES notification_jobs (id) ON DELETE CASCADE,
    attempt             int NOT NULL CHECK (attempt >= 1),
    provider            text NOT NULL CHECK (provider IN ('sns', 'ses')),
    provider_message_id text,
    error_code          text,
    error_message       text,
    -- sent | retry | dead: the worker's decision; lost: the sweeper found the attempt abandoned
    outcome             text NOT NULL CHECK (outcome IN ('sent', 'retry', 'dead', 'lost')),
    -- true when the job had been swept and claimed again before this completion arrived
    fenced              boolean NOT NULL DEFAULT false,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL,
    UNIQUE (job_id, attempt)
);
