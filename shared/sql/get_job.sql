SELECT id, channel, payload ->> 'to' AS recipient, status::text AS status, attempts, max_attempts, next_attempt_at,
       created_at, updated_at, last_error
FROM notification_jobs
WHERE id = $1 AND organization_id = $2
