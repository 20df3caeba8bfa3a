-- Persist accepted requests, one or many, in one statement (ids are made by the caller).
-- With an idempotency key, a repeat inserts nothing (the unique index decides, also between
-- concurrent repeats and between two items of one batch) and returns no row.
INSERT INTO notification_jobs
    (id, organization_id, channel, payload, max_attempts, next_attempt_at,
     idempotency_key, request_hash, expires_at, trace_header)
SELECT *
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::int[],
            $6::timestamptz[], $7::text[], $8::text[], $9::timestamptz[], $10::text[])
ON CONFLICT (organization_id, idempotency_key) WHERE idempotency_key IS NOT NULL
DO NOTHING
RETURNING id, status::text, next_attempt_at
