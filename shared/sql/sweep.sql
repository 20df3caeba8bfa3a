-- Requeue (or bury) up to $2 jobs left in processing for longer than $1 seconds before $3
-- (the current time; NULL: now()).
-- SKIP LOCKED: two sweepers, or a sweeper beside a completing worker, never wait on each other.
-- The claim token is cleared, so the lost worker's late completion is fenced.
WITH stuck AS (
    SELECT id
    FROM notification_jobs
    WHERE status = 'processing'
      AND claimed_at < coalesce($3::timestamptz, now()) - make_interval(secs => $1)
    ORDER BY claimed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
swept AS (
    UPDATE notification_jobs AS j
    SET status          = CASE WHEN j.attempts >= j.max_attempts
                               THEN 'dead'::job_status ELSE 'failed'::job_status END,
        next_attempt_at = coalesce($3::timestamptz, now()),
        claim_token     = NULL,
        last_error      = 'worker lost: processing since ' || j.claimed_at,
        updated_at      = coalesce($3::timestamptz, now())
    FROM stuck
    WHERE j.id = stuck.id
    RETURNING j.id, j.channel, GREATEST(j.tries, j.attempts) AS try, j.claimed_at, j.status
),
recorded AS (
    INSERT INTO notification_deliveries
        (job_id, attempt, provider, error_code, error_message, outcome, started_at, finished_at)
    SELECT id, try, CASE channel WHEN 'sms' THEN 'sns' ELSE 'ses' END,
           'WorkerLost', 'worker lost: processing since ' || claimed_at, 'lost', claimed_at, coalesce($3::timestamptz, now())
    FROM swept
    ON CONFLICT (job_id, attempt) DO NOTHING
    RETURNING 1
)
SELECT count(*) FILTER (WHERE status = 'failed') AS requeued,
       count(*) FILTER (WHERE status = 'dead') AS dead
FROM swept
