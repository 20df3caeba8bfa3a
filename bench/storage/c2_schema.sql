-- C2: C with the idempotency keys in a table of their own, unpartitioned, whose primary key
-- is unique across days (PostgreSQL has no unique index across partitions). Ingest inserts
-- the key first (ON CONFLICT DO NOTHING: one statement, race-free, as today) and the request
-- only when its key was new. The keys are kept as long as their jobs: retention drops the
-- day's partitions and deletes that day's keys in batches (row by row, but only keyed jobs,
-- in a narrow table). Everything else is C's (c_schema.sql): job_requests keeps the key and
-- hash columns but has no index on them.
CREATE TYPE job_status AS ENUM ('pending', 'processing', 'sent', 'failed', 'dead',
                                'cancelled', 'expired', 'delivered', 'bounced');

CREATE TABLE job_requests (
    id              uuid NOT NULL,
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
    CHECK ((idempotency_key IS NULL) = (request_hash IS NULL)),
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE INDEX job_requests_listing ON job_requests (organization_id, created_at, id);

CREATE TABLE job_queue (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL,
    created_at      timestamptz NOT NULL,       -- the request's: listing order, partition key
    next_attempt_at timestamptz NOT NULL,
    expires_at      timestamptz,
    attempts        int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    int NOT NULL CHECK (max_attempts >= 1),
    tries           int NOT NULL DEFAULT 0 CHECK (tries >= 0),
    claim_token     uuid,
    claimed_at      timestamptz
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 1);
CREATE INDEX job_queue_claimable ON job_queue (next_attempt_at) WHERE claimed_at IS NULL;
CREATE INDEX job_queue_claimable_by_org
    ON job_queue (organization_id, next_attempt_at) WHERE claimed_at IS NULL;
CREATE INDEX job_queue_processing ON job_queue (claimed_at) WHERE claimed_at IS NOT NULL;
CREATE INDEX job_queue_listing ON job_queue (organization_id, created_at, id)
    WHERE claimed_at IS NULL;

CREATE TABLE job_attempts (
    job_id              uuid NOT NULL,
    job_created_at      timestamptz NOT NULL,
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
    PRIMARY KEY (job_id, attempt, job_created_at)
) PARTITION BY RANGE (job_created_at);
CREATE INDEX job_attempts_by_message_id ON job_attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

CREATE TABLE job_outcomes (
    job_id          uuid NOT NULL,
    organization_id uuid NOT NULL,
    job_created_at  timestamptz NOT NULL,
    status          job_status NOT NULL,
    attempts        int NOT NULL,
    max_attempts    int NOT NULL,
    tries           int NOT NULL,
    last_error      text,
    finished_at     timestamptz NOT NULL,
    PRIMARY KEY (job_id, job_created_at)
) PARTITION BY RANGE (job_created_at);
CREATE INDEX job_outcomes_listing_by_status
    ON job_outcomes (organization_id, status, job_created_at, job_id);
-- no index for retention: it drops partitions

CREATE TABLE idempotency_keys (
    organization_id uuid NOT NULL,
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    job_id          uuid NOT NULL,
    request_hash    text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, idempotency_key)
);
-- retention: the keys of the days dropped
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

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

-- One partition per UTC day and table for [first, last]; a partition that exists is kept.
CREATE FUNCTION create_day_partitions(first date, last date) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    d date;
    t text;
    made int := 0;
BEGIN
    FOR d IN SELECT generate_series(first, last, interval '1 day')::date LOOP
        FOREACH t IN ARRAY ARRAY['job_requests', 'job_attempts', 'job_outcomes'] LOOP
            IF to_regclass(format('%s_%s', t, to_char(d, 'YYYYMMDD'))) IS NULL THEN
                EXECUTE format(
                    'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L) '
                    'WITH (autovacuum_vacuum_insert_scale_factor = 0.05, '
                    'autovacuum_analyze_scale_factor = 0.05)',
                    format('%s_%s', t, to_char(d, 'YYYYMMDD')), t,
                    (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
                made := made + 1;
            END IF;
        END LOOP;
    END LOOP;
    RETURN made;
END
$$;

-- the last 40 days and the next 2 (the bench's history and its runs)
SELECT create_day_partitions((now() AT TIME ZONE 'UTC')::date - 40, (now() AT TIME ZONE 'UTC')::date + 2);
