-- Requeue a dead job: due now, with a fresh budget of as many attempts as it had, on top of
-- those it used (attempt numbers keep counting, so its delivery history stays). It goes back
-- in the queue (job_queue) in the same statement.
WITH revived AS (
    UPDATE notification_jobs
    SET status = 'pending',
        max_attempts = attempts + max_attempts,
        next_attempt_at = now(),
        last_error = NULL,
        updated_at = now()
    WHERE id = $1 AND organization_id = $2 AND status = 'dead'
    RETURNING id, organization_id, channel, payload, trace_header, status, next_attempt_at,
              expires_at, attempts, max_attempts, tries
),
queued AS (
    INSERT INTO job_queue (id, organization_id, channel, payload, trace_header,
                           next_attempt_at, expires_at, attempts, max_attempts, tries)
    SELECT id, organization_id, channel, payload, trace_header, next_attempt_at, expires_at,
           attempts, max_attempts, tries
    FROM revived
)
SELECT id, status::text AS status, next_attempt_at FROM revived
