-- Persist one accepted request. With an idempotency key, a repeat inserts nothing
-- (the unique index decides, also between concurrent repeats) and returns no row.
INSERT INTO notification_jobs
    (organization_id, channel, payload, max_attempts, next_attempt_at,
     idempotency_key, request_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL
DO NOTHING
RETURNING id, status::text, next_attempt_at
