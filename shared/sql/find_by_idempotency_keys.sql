-- The jobs an organization already made with these idempotency keys, as they stand. The key's
-- row names its job and the job's day, so one partition of each history table is read.
SELECT s.id, s.status::text, s.next_attempt_at, s.request_hash, s.idempotency_key
FROM idempotency_keys AS k
JOIN job_states AS s ON s.id = k.job_id AND s.created_at = k.job_created_at
WHERE k.organization_id = $1 AND k.idempotency_key = ANY($2::text[])
