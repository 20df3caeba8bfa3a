SELECT id, status::text, next_attempt_at, request_hash
FROM notification_jobs
WHERE organization_id = $1 AND idempotency_key = $2
