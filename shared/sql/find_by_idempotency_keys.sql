-- The jobs an organization already made with these idempotency keys.
SELECT id, status::text, next_attempt_at, request_hash, idempotency_key
FROM notification_jobs
WHERE organization_id = $1 AND idempotency_key = ANY($2::text[])
