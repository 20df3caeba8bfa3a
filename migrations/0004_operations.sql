-- Operations: cancel, requeue, listing, and per-organization rate limits.

-- A job cancelled before it went out; never claimed again.
ALTER TYPE job_status ADD VALUE IF NOT EXISTS 'cancelled';

-- A requeued dead job gets a fresh budget on top of the attempts it used (attempt numbers
-- keep counting, so its history stays unique), so the budget may pass 20. Callers still
-- ask for 1–20 (ingest checks it).
ALTER TABLE notification_jobs DROP CONSTRAINT notification_jobs_max_attempts_check;
ALTER TABLE notification_jobs ADD CONSTRAINT notification_jobs_max_attempts_check
    CHECK (max_attempts >= 1);

-- Keyset pagination of an organization's jobs.
CREATE INDEX notification_jobs_listing
    ON notification_jobs (organization_id, created_at, id);

-- Finding the organizations with due jobs (the fair, rate-limited claim walks this).
CREATE INDEX notification_jobs_claimable_by_org
    ON notification_jobs (organization_id, next_attempt_at)
    WHERE status IN ('pending', 'failed');

-- Per-organization overrides of RATE_LIMIT_PER_ORG_PER_MIN (jobs claimed per minute).
CREATE TABLE organization_rate_limits (
    organization_id uuid PRIMARY KEY,
    per_minute      int NOT NULL CHECK (per_minute >= 0),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Jobs claimed per organization per minute (fixed windows), reserved by the claim itself.
CREATE TABLE organization_claim_counts (
    organization_id uuid NOT NULL,
    minute          timestamptz NOT NULL,
    claimed         int NOT NULL,
    -- the limit in force and the last reservation, used by the claim's upsert
    per_minute      int NOT NULL,
    granted         int NOT NULL,
    PRIMARY KEY (organization_id, minute)
);

-- Requests accepted per organization per minute at ingest (the burst limit).
CREATE TABLE organization_ingest_counts (
    organization_id uuid NOT NULL,
    minute          timestamptz NOT NULL,
    requests        int NOT NULL,
    PRIMARY KEY (organization_id, minute)
);
