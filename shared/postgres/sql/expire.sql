-- Expire up to $1 jobs still waiting (pending or failed, held ones included) whose expiry is
-- at or before $2 (the current time; NULL: now()): final status `expired` (its outcome row),
-- and a delivery row saying why. SKIP LOCKED: never waits on a claimer. A job being
-- delivered is left to finish.
WITH doomed AS (
    DELETE FROM job_queue AS q
    WHERE q.id IN (SELECT id
                   FROM job_queue
                   WHERE claim_token IS NULL
                     AND expires_at <= coalesce($2::timestamptz, now())
                   ORDER BY expires_at
                   LIMIT $1
                   FOR UPDATE SKIP LOCKED)
    RETURNING q.id, q.organization_id, q.created_at, q.channel, q.attempts, q.max_attempts,
              GREATEST(q.tries, q.attempts) + 1 AS tries, q.next_attempt_at, q.expires_at
),
expired AS (
    INSERT INTO job_outcomes (job_id, organization_id, created_at, status, attempts,
                              max_attempts, tries, next_attempt_at, last_error, updated_at)
    SELECT id, organization_id, created_at, 'expired', attempts, max_attempts, tries,
           next_attempt_at, 'expired: not delivered by ' || expires_at,
           coalesce($2::timestamptz, now())
    FROM doomed
),
recorded AS (
    INSERT INTO job_attempts
        (job_id, job_created_at, attempt, provider, error_code, error_message, outcome,
         started_at, finished_at)
    SELECT id, created_at, tries, CASE channel WHEN 'sms' THEN 'sns' ELSE 'ses' END, 'Expired',
           'expired: not delivered by ' || expires_at, 'expired',
           coalesce($2::timestamptz, now()), coalesce($2::timestamptz, now())
    FROM doomed
    ON CONFLICT (job_id, job_created_at, attempt) DO NOTHING
    RETURNING 1
)
SELECT count(*) AS expired FROM doomed
