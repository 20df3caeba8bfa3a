-- Cancel a job that has not gone out: only a job waiting in the queue, unclaimed, changes.
-- Its queue row goes and its record says cancelled. A job a worker holds is locked by its
-- claim (or already claimed): this waits for the claim to commit and then finds it claimed,
-- so a job is never both cancelled and delivered.
WITH dequeued AS (
    DELETE FROM job_queue
    WHERE id = $1 AND organization_id = $2 AND claim_token IS NULL
    RETURNING id
)
UPDATE notification_jobs AS j
SET status = 'cancelled', updated_at = now()
FROM dequeued
WHERE j.id = dequeued.id
RETURNING j.id, j.status::text AS status, j.next_attempt_at
