-- Per-organization rate limits: jobs claimed per minute (the fair claim), requests accepted
-- per minute (ingest's burst limit). The counters are fixed one-minute windows; the sweeper
-- deletes windows older than an hour.

-- Overrides of RATE_LIMIT_PER_ORG_PER_MIN (0: no limit for that organization).
CREATE TABLE organization_rate_limits (
    organization_id uuid PRIMARY KEY,
    per_minute      int NOT NULL CHECK (per_minute >= 0),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Jobs claimed per organization per minute, reserved by the fair claim itself (an upsert on
-- the latest committed count, so concurrent claimers never take more than the budget).
CREATE TABLE organization_claim_counts (
    organization_id uuid NOT NULL,
    minute          timestamptz NOT NULL,
    claimed         int NOT NULL,
    -- the limit in force and the last reservation, read by the claim's upsert
    per_minute      int NOT NULL,
    granted         int NOT NULL,
    PRIMARY KEY (organization_id, minute)
);

-- Requests accepted per organization per minute at ingest.
CREATE TABLE organization_ingest_counts (
    organization_id uuid NOT NULL,
    minute          timestamptz NOT NULL,
    requests        int NOT NULL,
    PRIMARY KEY (organization_id, minute)
);
