-- Cancel a job that has not gone out: only a job waiting in the queue, unclaimed, changes.
-- Its queue row goes and its outcome row says cancelled. A job a worker holds is locked by
-- its claim (or already claimed): this waits for the claim to commit and then finds it
-- claimed, so a job is never both cancelled and delivered.
WITH dequeued AS (
    DELETE FROM job_queue
    WHERE id = $1 AND organization_id = $2 AND claim_token IS NULL
    RETURNING id, organization_id, created_at, attempts, max_attempts, tries, next_attempt_at
)
INSERT INTO job_outcomes (job_id, organization_id, created_at, status, attempts, max_attempts,
                          tries, next_attempt_at, updated_at)
SELECT id, organization_id, created_at, 'cancelled', attempts, max_attempts, tries,
       next_attempt_at, now()
FROM dequeued
RETURNING job_id AS id, status::text AS status, next_attempt_at
