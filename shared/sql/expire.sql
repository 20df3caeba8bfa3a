-- Expire up to $1 jobs still waiting (pending or failed, held ones included) whose expiry is
-- at or before $2 (the current time; NULL: now()): final status `expired`, and a delivery row
-- saying why. SKIP LOCKED: never waits on a claimer. A job being delivered is left to finish.
WITH doomed AS (
    DELETE FROM job_queue AS q
    WHERE q.id IN (SELECT id
                   FROM job_queue
                   WHERE claim_token IS NULL
                     AND expires_at <= coalesce($2::timestamptz, now())
                   ORDER BY expires_at
                   LIMIT $1
                   FOR UPDATE SKIP LOCKED)
    RETURNING q.id, GREATEST(q.tries, q.attempts) + 1 AS tries, q.attempts
),
expired AS (
    UPDATE notification_jobs AS j
    SET status     = 'expired',
        attempts   = d.attempts,
        tries      = d.tries,
        last_error = 'expired: not delivered by ' || j.expires_at,
        updated_at = coalesce($2::timestamptz, now())
    FROM doomed AS d
    WHERE j.id = d.id
    RETURNING j.id, j.channel, j.tries, j.expires_at
),
recorded AS (
    INSERT INTO notification_deliveries
        (job_id, attempt, provider, error_code, error_message, outcome, started_at, finished_at)
    SELECT id, tries, CASE channel WHEN 'sms' THEN 'sns' ELSE 'ses' END, 'Expired',
           'expired: not delivered by ' || expires_at, 'expired',
           coalesce($2::timestamptz, now()), coalesce($2::timestamptz, now())
    FROM expired
    ON CONFLICT (job_id, attempt) DO NOTHING
    RETURNING 1
)
SELECT count(*) AS expired FROM expired
