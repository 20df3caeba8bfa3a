-- The job table: one row per accepted send request, claimable by any worker.
-- Starts from the lesson's schema and adds what DESIGN.md lists.
CREATE TYPE job_status AS ENUM ('pending', 'processing', 'sent', 'failed', 'dead');

CREATE TABLE notification_jobs (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    organization_id uuid NOT NULL,
    channel         text NOT NULL CHECK (channel IN ('sms', 'email')),
    payload         jsonb NOT NULL,
    status          job_status NOT NULL DEFAULT 'pending',
    -- incremented by the claim, so a job that crashes its worker still uses up its budget
    attempts        int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    int NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 20),
    -- first eligibility time (scheduled send) and backoff time alike
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    claimed_at      timestamptz,
    -- fresh on every claim; every completion is conditioned on it (fencing)
    claim_token     uuid,
    last_error      text,
    idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash    text,
    CHECK ((idempotency_key IS NULL) = (request_hash IS NULL))
);

CREATE UNIQUE INDEX notification_jobs_idempotency
    ON notification_jobs (organization_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The claim reads only this index, so its cost does not grow with sent/dead rows.
CREATE INDEX notification_jobs_claimable
    ON notification_jobs (next_attempt_at)
    WHERE status IN ('pending', 'failed');

-- The sweep reads only jobs in processing.
CREATE INDEX notification_jobs_processing
    ON notification_jobs (claimed_at)
    WHERE status = 'processing';
