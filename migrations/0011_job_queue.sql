-- The queue leaves the job table (issue 17): a `job_queue` row per open job holds what the
-- worker sends and what claiming, fencing and sweeping need, and nothing else (no listing or
-- idempotency indexes).
--  * The claim reads and updates this row only (two index entries, and only the changed
--    bytes logged), not the job's record with its four indexes; a finished job's queue row is
--    deleted.
--  * Claims and sweeps read a table that holds only open jobs, so they cost the same with
--    30 days of history beside them as with none.
--  * notification_jobs is the record of each request and where it stands at rest: written
--    by ingest, then by each completion (a retry: `failed`; the end: `sent`, `dead`, ...).
--    While a job is claimed, `processing` comes from its queue row (claim_token set).
-- An open job (pending or failed) has exactly one queue row; a finished one has none.
CREATE TABLE job_queue (
    id              uuid PRIMARY KEY,
    organization_id uuid NOT NULL,
    -- what the worker sends, so the claim reads no other table (a copy of the request's; the
    -- row goes when the job ends)
    channel         text NOT NULL,
    payload         jsonb NOT NULL,
    trace_header    text,
    expires_at      timestamptz,
    -- the columns a claim or a retry changes come last: an update that stays on its page logs
    -- only the bytes that changed, not the payload before them
    next_attempt_at timestamptz NOT NULL,
    -- incremented by the claim, so a job that crashes its worker still uses up its budget
    attempts        int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts    int NOT NULL CHECK (max_attempts >= 1),
    -- numbers the delivery rows (one per provider call, refunded attempts included)
    tries           int NOT NULL DEFAULT 0 CHECK (tries >= 0),
    -- fresh on every claim; every completion is conditioned on it (fencing)
    claim_token     uuid,
    claimed_at      timestamptz,
    CHECK ((claim_token IS NULL) = (claimed_at IS NULL))
) WITH (
    -- updated twice per attempt and deleted at the end: room for the new versions, and an
    -- autovacuum that keeps up with a table whose live part is small
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- claim.sql: the due jobs, oldest first
CREATE INDEX job_queue_due ON job_queue (next_attempt_at) WHERE claim_token IS NULL;
-- claim_fair.sql: each organization's due jobs (and the organizations that have some)
CREATE INDEX job_queue_due_by_org ON job_queue (organization_id, next_attempt_at)
    WHERE claim_token IS NULL;
-- sweep.sql: claims held too long
CREATE INDEX job_queue_claimed ON job_queue (claimed_at) WHERE claim_token IS NOT NULL;
-- expire.sql: unclaimed jobs past their expiry
CREATE INDEX job_queue_expiring ON job_queue (expires_at)
    WHERE claim_token IS NULL AND expires_at IS NOT NULL;

-- The open jobs move in this transaction. The old statements stop working at once (the
-- claim columns are gone), so a worker or sweeper of the previous release still running
-- fails its invocation instead of claiming a job a new worker also claims.
-- Every lock this file needs is taken here, first, in the order the previous release's
-- statements take them (jobs, then deliveries): a statement that holds a weaker lock on
-- a table and waits for a stronger one would otherwise deadlock with a migration that does the
-- same. The locks are held for as long as the copy of the open jobs takes (10,000 jobs: tens
-- of milliseconds). If they cannot be had within 1 s (a long statement holds one), the
-- runner rolls back and tries again shortly, rather than queueing every statement behind it.
SET LOCAL lock_timeout = '1s';
LOCK TABLE notification_jobs, notification_deliveries IN ACCESS EXCLUSIVE MODE;

INSERT INTO job_queue (id, organization_id, channel, payload, trace_header, next_attempt_at,
                       expires_at, attempts, max_attempts, tries, claim_token, claimed_at)
SELECT id, organization_id, channel, payload, trace_header, next_attempt_at, expires_at,
       attempts, max_attempts, tries,
       CASE WHEN status = 'processing' THEN coalesce(claim_token, gen_random_uuid()) END,
       CASE WHEN status = 'processing' THEN coalesce(claimed_at, updated_at) END
FROM notification_jobs
WHERE status IN ('pending', 'failed', 'processing');

-- At rest a claimed job is what it was before its claim: pending until its first attempt.
UPDATE notification_jobs
SET status = CASE WHEN attempts <= 1 THEN 'pending'::job_status ELSE 'failed'::job_status END
WHERE status = 'processing';

DROP INDEX notification_jobs_claimable;
DROP INDEX notification_jobs_claimable_by_org;
DROP INDEX notification_jobs_processing;
ALTER TABLE notification_jobs DROP COLUMN claim_token, DROP COLUMN claimed_at;

-- A delivery row is written by the statement that completes (or sweeps, or expires) its job,
-- and retention deletes both (prune.sql): the foreign key checked nothing those statements do
-- not already ensure, and its check locked the job's row once or twice per attempt (a WAL
-- record each, about 8% of the bytes written per job).
ALTER TABLE notification_deliveries DROP CONSTRAINT notification_deliveries_job_id_fkey;

-- Where each job stands, as the API reports it: its record, with `processing`, the attempts
-- and the due time of a claimed or waiting job taken from its queue row. get_job.sql,
-- job_status.sql and list_jobs.sql read it; so can an operator in psql.
-- `recorded_status` is the record's own column, for predicates an index should serve.
CREATE VIEW job_states AS
SELECT j.id,
       j.organization_id,
       j.channel,
       j.payload,
       CASE WHEN q.claim_token IS NOT NULL THEN 'processing'::job_status ELSE j.status END
           AS status,
       j.status AS recorded_status,
       coalesce(q.attempts, j.attempts) AS attempts,
       coalesce(q.max_attempts, j.max_attempts) AS max_attempts,
       coalesce(q.tries, j.tries) AS tries,
       coalesce(q.next_attempt_at, j.next_attempt_at) AS next_attempt_at,
       j.expires_at,
       j.created_at,
       GREATEST(j.updated_at, q.claimed_at) AS updated_at,
       q.claim_token,
       q.claimed_at,
       j.last_error,
       j.idempotency_key,
       j.trace_header
FROM notification_jobs AS j
LEFT JOIN job_queue AS q ON q.id = j.id;

-- While a deploy rolls out, the previous release's ingest may still insert jobs the old way
-- (notification_jobs only). This trigger queues any accepted job that has no queue row at
-- the end of its statement; today's insert_jobs.sql writes the queue row itself, so here it
-- finds nothing to do (one index probe per job). A later migration drops it once no release
-- older than 0011 can be running.
CREATE FUNCTION job_queue_adopt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_queue (id, organization_id, channel, payload, trace_header,
                           next_attempt_at, expires_at, attempts, max_attempts, tries)
    SELECT n.id, n.organization_id, n.channel, n.payload, n.trace_header, n.next_attempt_at,
           n.expires_at, n.attempts, n.max_attempts, n.tries
    FROM accepted AS n
    WHERE n.status IN ('pending', 'failed')
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_queue_adopt
    AFTER INSERT ON notification_jobs
    REFERENCING NEW TABLE AS accepted
    FOR EACH STATEMENT EXECUTE FUNCTION job_queue_adopt();
