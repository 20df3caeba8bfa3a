-- For tests only (notify_postgres::testing, behind the `test-support` feature; the tests'
-- factory goes through it): jobs in any state, laid out as ingest and the worker leave them.
-- The request in job_requests; an open job (pending, failed, processing) its queue row, an
-- ended one its outcome row. Ids are UUIDv7s of each job's creation time, as ingest makes
-- them (a lookup by id reads the days around the id's time). The days' partitions must
-- exist (test_history_days.sql).
-- $1 organizations, $2 channels, $3 payloads, $4 statuses, $5 attempts (and provider calls),
-- $6 budgets, $7 due times, $8 claim times (NULL: not claimed), $9 creation times,
-- $10 update times, $11 expiry times (NULL: never), $12 last errors (NULL: none; a `failed`
-- job gets one). Answers the ids in input order.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::text[], $5::int[], $6::int[],
                $7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[],
                $11::timestamptz[], $12::text[])
        WITH ORDINALITY AS t(organization_id, channel, payload, status, attempts,
                             max_attempts, next_attempt_at, claimed_at, created_at,
                             updated_at, expires_at, last_error, n)
),
ided AS MATERIALIZED (
    SELECT (lpad(to_hex(floor(extract(epoch FROM created_at) * 1000)::bigint), 12, '0')
            || '7' || substr(md5(random()::text), 1, 3) || '8'
            || substr(md5(random()::text), 1, 15))::uuid AS id,
           input.*
    FROM input
),
requests AS (
    INSERT INTO job_requests
        (id, organization_id, channel, payload, max_attempts, send_at, created_at, expires_at)
    SELECT id, organization_id, channel, payload, max_attempts, next_attempt_at, created_at,
           expires_at
    FROM ided
),
queued AS (
    INSERT INTO job_queue
        (id, organization_id, channel, payload, next_attempt_at, expires_at, attempts,
         max_attempts, tries, claim_token, claimed_at, created_at, updated_at, last_error)
    SELECT id, organization_id, channel,
           -- stored once, as ingest leaves it on a fresh install (insert_jobs.sql); the
           -- queue's copy only on a schema before migration 0012, which requires one
           CASE WHEN (SELECT a.attnotnull FROM pg_attribute AS a
                      WHERE a.attrelid = 'job_queue'::regclass AND a.attname = 'payload')
                THEN payload END,
           next_attempt_at, expires_at, attempts, max_attempts, attempts,
           CASE WHEN claimed_at IS NULL THEN NULL ELSE gen_random_uuid() END, claimed_at,
           created_at, updated_at,
           -- job_states: a job whose last attempt failed is `failed`
           coalesce(last_error, CASE WHEN status = 'failed' THEN 'Throttling: factory' END)
    FROM ided
    WHERE status IN ('pending', 'failed', 'processing')
),
ended AS (
    INSERT INTO job_outcomes
        (job_id, organization_id, created_at, status, attempts, max_attempts, tries,
         next_attempt_at, last_error, updated_at)
    SELECT id, organization_id, created_at, status::job_status, attempts, max_attempts,
           attempts, next_attempt_at, last_error, updated_at
    FROM ided
    WHERE status NOT IN ('pending', 'failed', 'processing')
)
SELECT id FROM ided ORDER BY n
