-- The end of a job is written once, as a row of its own (issue 17, second storage step).
-- Until 0011 each completion rewrote the job's record in notification_jobs: a new version of
-- the whole row (payload included) and an entry in each of its four indexes, because the
-- status it changed is indexed for listing and retention. Now:
--  * notification_jobs is the accepted request. Ingest writes it and nothing on the
--    worker's path changes it.
--  * While a job is open, where it stands is its queue row's (job_queue: attempts, due time,
--    claim, last error, when it last changed).
--  * A final outcome (sent, dead, cancelled, expired; feedback's delivered and bounced)
--    deletes the queue row and inserts a job_outcomes row: a narrow row, three index entries.
-- The two writes of a retry (a queue row update and a delivery row) stay as they were.
--
-- Jobs finished before this migration keep their final status in their record
-- (notification_jobs.status) and have no outcome row; no history is copied. A record whose
-- status is final is such a job (nothing after this migration sets a final status on a
-- record, and requeue sets such a record back to pending), so the reads below take it from
-- there, and these jobs age out under the usual retention. The previous release (0011),
-- still running while a deploy rolls out, keeps working: it completes jobs the old way
-- (a final status on the record), which reads the same.

-- Every lock this file needs, first, with a bounded wait (as in 0011): the view, which locks
-- the tables it reads (notification_jobs and job_queue) too. The
-- previous release's ingest and worker wait for the few milliseconds this file takes.
SET LOCAL lock_timeout = '1s';
LOCK TABLE job_states IN ACCESS EXCLUSIVE MODE;

-- Where a job ended. One row per finished job, inserted by the statement that ends it; only
-- feedback (sent -> delivered/bounced) and requeue (a dead job deleted, back in the queue)
-- change it afterwards.
CREATE TABLE job_outcomes (
    job_id          uuid PRIMARY KEY,
    organization_id uuid NOT NULL,
    -- the job's (its record's created_at): listing order
    created_at      timestamptz NOT NULL,
    status          job_status NOT NULL
        CHECK (status IN ('sent', 'dead', 'cancelled', 'expired', 'delivered', 'bounced')),
    attempts        int NOT NULL,
    max_attempts    int NOT NULL,
    tries           int NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    updated_at      timestamptz NOT NULL
) WITH (autovacuum_vacuum_insert_scale_factor = 0.05);

-- list_jobs.sql with a final status: one organization's jobs of that status in page order.
CREATE INDEX job_outcomes_listing ON job_outcomes (organization_id, status, created_at, job_id);
-- prune.sql: finished before the retention cutoff, oldest first. (A block-range index would
-- cost no entry per job, but each batch of a LIMITed delete would scan again the ranges the
-- batches before it emptied: a cost that grows with the square of a day's jobs. Partitions
-- by day are the way to drop this index.)
CREATE INDEX job_outcomes_updated ON job_outcomes (updated_at);

-- What the queue row now says of an open job, beside its claim: when it was accepted (its
-- record's created_at: listing the open jobs reads the queue alone), the error of its last
-- attempt and when it last changed. The defaults are right for a row inserted by the
-- previous release's ingest (the same statement, so the same now()); the rows already queued
-- take their record's values.
ALTER TABLE job_queue
    ADD COLUMN created_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN last_error text;

UPDATE job_queue AS q
SET created_at = j.created_at,
    updated_at = j.updated_at,
    -- an open job is `failed` when its last attempt failed (job_states below)
    last_error = CASE WHEN j.status = 'failed' THEN coalesce(j.last_error, 'failed') END
FROM notification_jobs AS j
WHERE j.id = q.id;

-- Where each job stands, as the API reports it: from its queue row while it is open, its
-- outcome row once it ended, its record for a job that ended before this migration. An open
-- job is `processing` while a worker holds its claim, `failed` when its last attempt failed
-- (the queue row keeps that attempt's error; requeue clears it), `pending` otherwise.
-- `recorded_status` is the status at rest without the claim (what the previous release's
-- listing filters on while a deploy rolls out).
DROP VIEW job_states;
CREATE VIEW job_states AS
SELECT j.id,
       j.organization_id,
       j.channel,
       j.payload,
       CASE WHEN q.claim_token IS NOT NULL THEN 'processing'::job_status
            WHEN q.last_error IS NOT NULL
                THEN 'failed'::job_status
            WHEN q.id IS NOT NULL THEN 'pending'::job_status
            ELSE coalesce(o.status, j.status) END AS status,
       CASE WHEN q.last_error IS NOT NULL
                THEN 'failed'::job_status
            WHEN q.id IS NOT NULL THEN 'pending'::job_status
            ELSE coalesce(o.status, j.status) END AS recorded_status,
       coalesce(q.attempts, o.attempts, j.attempts) AS attempts,
       coalesce(q.max_attempts, o.max_attempts, j.max_attempts) AS max_attempts,
       coalesce(q.tries, o.tries, j.tries) AS tries,
       coalesce(q.next_attempt_at, o.next_attempt_at, j.next_attempt_at) AS next_attempt_at,
       j.expires_at,
       j.created_at,
       CASE WHEN q.id IS NOT NULL THEN GREATEST(q.updated_at, q.claimed_at)
            ELSE coalesce(o.updated_at, j.updated_at) END AS updated_at,
       q.claim_token,
       q.claimed_at,
       CASE WHEN q.id IS NOT NULL THEN q.last_error
            WHEN o.job_id IS NOT NULL THEN o.last_error
            ELSE j.last_error END AS last_error,
       j.idempotency_key,
       j.request_hash,
       j.trace_header
FROM notification_jobs AS j
LEFT JOIN job_queue AS q ON q.id = j.id
LEFT JOIN job_outcomes AS o ON o.job_id = j.id;

-- 0011's trigger queues a job inserted without a queue row (by a release older than 0011,
-- while a deploy rolls out). A record is pending for as long as it is kept now, so a job
-- inserted with its outcome row at once (an import, a test fixture) is not queued either.
CREATE OR REPLACE FUNCTION job_queue_adopt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_queue (id, organization_id, channel, payload, trace_header,
                           next_attempt_at, expires_at, attempts, max_attempts, tries,
                           created_at, updated_at, last_error)
    SELECT n.id, n.organization_id, n.channel, n.payload, n.trace_header, n.next_attempt_at,
           n.expires_at, n.attempts, n.max_attempts, n.tries, n.created_at, n.updated_at,
           n.last_error
    FROM accepted AS n
    WHERE n.status IN ('pending', 'failed')
      AND NOT EXISTS (SELECT FROM job_outcomes AS o WHERE o.job_id = n.id)
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;
