-- Persist accepted requests, one or many, in one statement (ids are made by the caller).
-- A request to a recipient its organization suppressed is not inserted and comes back with
-- `suppressed`: the check and the insert are one round trip, and a refusal writes nothing.
-- The payload's `to` is the recipient as the suppression list keys it (ingest normalised it
-- with domain::normalize_recipient), compared as it is.
-- With an idempotency key, a repeat inserts nothing (the key's row in idempotency_keys
-- decides, also between concurrent repeats and between two items of one batch: the first
-- of them) and returns no row. An inserted job is queued in the same statement (job_queue).
-- The key is inserted where no committed row holds it, with no ON CONFLICT: its speculative
-- insertion writes a second WAL record for every key (decision 0019). A concurrent repeat
-- that commits the same key first makes this statement fail on idempotency_keys_pkey
-- (after waiting for it); the store runs it again, and then finds the key.
-- $11 the priorities, as text ('high', 'normal', 'low'): the request keeps its own, and the
-- queue row a copy (the claim reads no other table).
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::int[],
                $6::timestamptz[], $7::text[], $8::text[], $9::timestamptz[], $10::text[],
                $11::text[]::job_priority[]) WITH ORDINALITY
         AS t(id, organization_id, channel, payload, max_attempts, next_attempt_at,
              idempotency_key, request_hash, expires_at, trace_header, priority, item)
),
blocked AS (
    SELECT i.id
    FROM input AS i
    WHERE EXISTS (SELECT FROM suppressions AS s
                  WHERE s.organization_id = i.organization_id
                    AND s.recipient = i.payload ->> 'to')
),
keyed AS (
    INSERT INTO idempotency_keys (organization_id, idempotency_key, job_id, job_created_at)
    SELECT DISTINCT ON (i.organization_id, i.idempotency_key)
           i.organization_id, i.idempotency_key, i.id, now()
    FROM input AS i
    WHERE i.idempotency_key IS NOT NULL
      AND i.id NOT IN (SELECT id FROM blocked)
      AND NOT EXISTS (SELECT FROM idempotency_keys AS k
                      WHERE k.organization_id = i.organization_id
                        AND k.idempotency_key = i.idempotency_key)
    ORDER BY i.organization_id, i.idempotency_key, i.item
    RETURNING job_id
),
-- the request, in the partition of its day
inserted AS (
    INSERT INTO job_requests
        (id, organization_id, channel, payload, max_attempts, send_at,
         idempotency_key, request_hash, expires_at, trace_header, priority, created_at)
    SELECT id, organization_id, channel, payload, max_attempts, next_attempt_at,
           idempotency_key, request_hash, expires_at, trace_header, priority, now()
    FROM input
    WHERE id NOT IN (SELECT id FROM blocked)
      AND (idempotency_key IS NULL OR id IN (SELECT job_id FROM keyed))
    RETURNING id, organization_id, channel, payload, trace_header, send_at, expires_at,
              max_attempts, priority, created_at
),
-- each accepted job's queue row; the payload stays in the request alone, copied here only
-- while a release before migration 0012 may still claim (queue_settings)
queued AS (
    INSERT INTO job_queue (id, organization_id, channel, payload, trace_header,
                           next_attempt_at, expires_at, max_attempts, priority, created_at,
                           updated_at)
    SELECT id, organization_id, channel,
           CASE WHEN (SELECT copies_payload FROM queue_settings) THEN payload END,
           trace_header, send_at, expires_at,
           max_attempts, priority, created_at, created_at
    FROM inserted
)
SELECT id, 'pending' AS status, send_at AS next_attempt_at, false AS suppressed FROM inserted
UNION ALL
SELECT id, NULL, NULL, true FROM blocked
