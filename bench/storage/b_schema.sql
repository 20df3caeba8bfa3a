-- B: a narrow queue + append-only history, unpartitioned.
--
-- The queue holds open jobs only (pending, failed = waiting for a retry, processing). A job
-- leaves it on its final outcome (DELETE). Everything else is written once:
--   job_requests  the accepted request (ingest)
--   job_attempts  one row per provider call (as notification_deliveries today)
--   job_outcomes  one row per finished job: its final status (sent, dead, cancelled, expired;
--                 feedback moves sent to delivered or bounced)
-- Status of an open job, derived: processing when claimed_at is set, else failed when it was
-- tried before (tries > 0), else pending.
CREATE TYPE job_status AS ENUM ('pending', 'processing', 'sent', 'failed', 'dead',
                                'cancelled', 'expired', 'delivered', 'bounced');

CREATE TABLE job_requests (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL,
    channel         text NOT NULL CHECK (channel IN ('sms', 'email')),
    payload         jsonb NOT NULL,
    max_attempts    int NOT NULL CHECK (max_attempts >= 1),
    send_at         timestamptz NOT NULL,
    expires_at      timestamptz,
    idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash    text,
    trace_header    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((idempotency_key IS NULL) = (request_hash IS NULL))
);
-- idempotency for as long as the request is kept (ingest: ON CONFLICT DO NOTHING, as today)
CREATE UNIQUE INDEX job_requests_idempotency
    ON job_requests (organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- GET /jobs listing, every status: keyset paging on (created_at, id), immutable keys
CREATE INDEX job_requests_listing ON job_requests (organization_id, created_at, id);

CREATE TABLE job_queue (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL,
    created_at      timestamptz NOT NULL,       -- the request's: listing order
    next_attempt_at timestamptz NOT NULL,
    expires_at      timestamptz,
    attempts        int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    int NOT NULL CHECK (max_attempts >= 1),
    tries           int NOT NULL DEFAULT 0 CHECK (tries >= 0),
    claim_token     uuid,
    claimed_at      timestamptz
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 1);
-- the claim (a claimed row leaves these partial indexes: the claim adds no entry to them)
CREATE INDEX job_queue_claimable ON job_queue (next_attempt_at) WHERE claimed_at IS NULL;
-- the fair, rate-limited claim's loose scan over organizations
CREATE INDEX job_queue_claimable_by_org
    ON job_queue (organization_id, next_attempt_at) WHERE claimed_at IS NULL;
-- the sweeper: claimed jobs by claim time
CREATE INDEX job_queue_processing ON job_queue (claimed_at) WHERE claimed_at IS NOT NULL;
-- listing ?status=pending|failed (processing: the index above, few rows)
CREATE INDEX job_queue_listing ON job_queue (organization_id, created_at, id)
    WHERE claimed_at IS NULL;

CREATE TABLE job_attempts (
    job_id              uuid NOT NULL,
    attempt             int NOT NULL CHECK (attempt >= 1),
    provider            text NOT NULL CHECK (provider IN ('sns', 'ses')),
    provider_message_id text,
    error_code          text,
    error_message       text,
    outcome             text NOT NULL
        CHECK (outcome IN ('sent', 'retry', 'held', 'dead', 'lost', 'expired')),
    fenced              boolean NOT NULL DEFAULT false,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL,
    PRIMARY KEY (job_id, attempt)
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
-- provider feedback finds its attempt by the provider's message id
CREATE INDEX job_attempts_by_message_id ON job_attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

CREATE TABLE job_outcomes (
    job_id          uuid PRIMARY KEY,
    organization_id uuid NOT NULL,
    job_created_at  timestamptz NOT NULL,       -- the request's: listing order
    status          job_status NOT NULL,
    attempts        int NOT NULL,
    max_attempts    int NOT NULL,
    tries           int NOT NULL,
    last_error      text,
    finished_at     timestamptz NOT NULL
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
-- listing ?status=sent|dead|…
CREATE INDEX job_outcomes_listing_by_status
    ON job_outcomes (organization_id, status, job_created_at, job_id);
-- retention (unpartitioned): finished jobs by finish time, as prune.sql today
CREATE INDEX job_outcomes_finished ON job_outcomes (finished_at);

CREATE TABLE suppressions (
    organization_id     uuid NOT NULL,
    recipient           text NOT NULL,
    reason              text NOT NULL,
    detail              text,
    job_id              uuid,
    provider_message_id text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, recipient)
);
