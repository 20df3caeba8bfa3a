-- Requeue (or bury) up to $2 jobs left in processing for longer than $1 seconds before $3
-- (the current time; NULL: now()).
-- SKIP LOCKED: two sweepers, or a sweeper beside a completing worker, never wait on each other.
-- The claim is cleared (or the queue row gone), so the lost worker's late completion is
-- fenced. No index names the claim (it would make every claim write an index entry): this
-- reads the queue, open jobs only, once a minute.
WITH stuck AS (
    SELECT id, claimed_at
    FROM job_queue
    WHERE claim_token IS NOT NULL
      AND claimed_at < coalesce($3::timestamptz, now()) - make_interval(secs => $1)
    ORDER BY claimed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
-- its budget spent: the job ends dead and leaves the queue
buried AS (
    DELETE FROM job_queue AS q
    USING stuck
    WHERE q.id = stuck.id
      AND q.attempts >= q.max_attempts
    RETURNING q.id, q.organization_id, q.created_at, q.channel, q.attempts, q.max_attempts,
              q.tries, stuck.claimed_at
),
ended AS (
    INSERT INTO job_outcomes (job_id, organization_id, created_at, status, attempts,
                              max_attempts, tries, next_attempt_at, last_error, updated_at)
    SELECT id, organization_id, created_at, 'dead', attempts, max_attempts, tries,
           coalesce($3::timestamptz, now()), 'worker lost: processing since ' || claimed_at,
           coalesce($3::timestamptz, now())
    FROM buried
),
-- otherwise due again at once
requeued AS (
    UPDATE job_queue AS q
    SET next_attempt_at = coalesce($3::timestamptz, now()),
        claim_token     = NULL,
        claimed_at      = NULL,
        last_error      = 'worker lost: processing since ' || stuck.claimed_at,
        updated_at      = coalesce($3::timestamptz, now())
    FROM stuck
    WHERE q.id = stuck.id
      AND q.attempts < q.max_attempts
    RETURNING q.id, q.created_at, q.channel, q.attempts, q.tries, stuck.claimed_at
),
swept AS (
    SELECT id, created_at, channel, GREATEST(tries, attempts) AS try, claimed_at,
           'dead' AS status
    FROM buried
    UNION ALL
    SELECT id, created_at, channel, GREATEST(tries, attempts), claimed_at, 'failed'
    FROM requeued
),
recorded AS (
    INSERT INTO job_attempts
        (job_id, job_created_at, attempt, provider, error_code, error_message, outcome,
         started_at, finished_at)
    SELECT id, created_at, try, CASE channel WHEN 'sms' THEN 'sns' ELSE 'ses' END,
           'WorkerLost', 'worker lost: processing since ' || claimed_at, 'lost', claimed_at, coalesce($3::timestamptz, now())
    FROM swept
    ON CONFLICT (job_id, job_created_at, attempt) DO NOTHING
    RETURNING 1
)
SELECT count(*) FILTER (WHERE status = 'failed') AS requeued,
       count(*) FILTER (WHERE status = 'dead') AS dead
FROM swept
