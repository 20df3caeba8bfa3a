-- The jobs an organization made with these idempotency keys: each key's job and the job's
-- day, which jobs_within.sql then reads within. $1 the organization, $2 the keys.
SELECT k.job_id, k.job_created_at
FROM idempotency_keys AS k
WHERE k.organization_id = $1 AND k.idempotency_key = ANY($2::text[])
