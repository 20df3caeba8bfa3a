-- The jobs an organization already made with these idempotency keys, as they stand.
SELECT id, status::text, next_attempt_at, request_hash, idempotency_key
FROM job_states
WHERE organization_id = $1 AND idempotency_key = ANY($2::text[])
