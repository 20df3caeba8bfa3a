-- Cancel a job that has not gone out: only pending or failed jobs change. A job a worker
-- holds is locked by its claim (or already processing): this waits for the claim to commit
-- and then finds it processing, so a job is never both cancelled and delivered.
UPDATE notification_jobs
SET status = 'cancelled', claim_token = NULL, updated_at = now()
WHERE id = $1 AND organization_id = $2 AND status IN ('pending', 'failed')
RETURNING id, status::text, next_attempt_at
