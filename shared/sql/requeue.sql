-- Requeue a dead job: due now, with a fresh budget of as many attempts as it had, on top of
-- those it used (attempt numbers keep counting, so its delivery history stays).
UPDATE notification_jobs
SET status = 'pending',
    max_attempts = attempts + max_attempts,
    next_attempt_at = now(),
    claim_token = NULL,
    last_error = NULL,
    updated_at = now()
WHERE id = $1 AND organization_id = $2 AND status = 'dead'
RETURNING id, status::text, next_attempt_at
