-- Finished history for A and D: jobs g = :lo … :hi of :total, created evenly over
-- [:start, :start + :span) in time order (as a live table fills), each finished one second
-- after it was created: 9 in 10 sent, 1 in 10 dead; each with its delivery row. The shapes
-- of the ingest scripts (20 organizations), but 1 in 10 with an idempotency key and request
-- hash (the ingest scripts give every job one), which keeps 10M jobs under 10 GB.
-- psql variables: tag (makes ids unique per fill), lo, hi, total, start, span.
INSERT INTO notification_jobs
    (id, organization_id, channel, payload, status, attempts, max_attempts, tries,
     next_attempt_at, created_at, updated_at, claimed_at, claim_token, last_error,
     idempotency_key, request_hash, expires_at)
SELECT md5(:'tag' || g)::uuid,
       ('0b9d8c1e-0000-4000-8000-' || lpad((g % 20)::text, 12, '0'))::uuid,
       CASE WHEN g % 2 = 0 THEN 'sms' ELSE 'email' END,
       CASE WHEN g % 2 = 0
            THEN jsonb_build_object('to', '+1555' || lpad((g % 10000000)::text, 7, '0'),
                                    'message', 'Your invoice is paid')
            ELSE jsonb_build_object('to', 'user' || g || '@example.com',
                                    'subject', 'Invoice paid', 'text', 'Your invoice is paid')
       END,
       CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'sent' END::job_status,
       1, 5, 1, t, t, t + interval '1 second', t, md5('token' || :'tag' || g)::uuid,
       CASE WHEN g % 10 = 0 THEN 'InvalidParameter: bench' END,
       CASE WHEN g % 10 = 3 THEN md5('key' || :'tag' || g) END,
       CASE WHEN g % 10 = 3 THEN encode(sha256(convert_to(:'tag' || g, 'UTF8')), 'hex') END,
       t + interval '1 day'
FROM generate_series(:lo::bigint, :hi::bigint) AS g,
     LATERAL (SELECT :'start'::timestamptz + :'span'::interval * ((g - 1)::float8 / :total)
              AS t) AS ts;

-- the jobs exist: the foreign key's per-row check is skipped for the bulk load
SET session_replication_role = replica;
INSERT INTO notification_deliveries
    (job_id, attempt, provider, provider_message_id, error_code, error_message, outcome,
     started_at, finished_at)
SELECT md5(:'tag' || g)::uuid, 1,
       CASE WHEN g % 2 = 0 THEN 'sns' ELSE 'ses' END,
       md5('message' || :'tag' || g)::uuid::text,
       CASE WHEN g % 10 = 0 THEN 'InvalidParameter' END,
       CASE WHEN g % 10 = 0 THEN 'bench' END,
       CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'sent' END,
       t, t + interval '1 second'
FROM generate_series(:lo::bigint, :hi::bigint) AS g,
     LATERAL (SELECT :'start'::timestamptz + :'span'::interval * ((g - 1)::float8 / :total)
              AS t) AS ts;
RESET session_replication_role;
