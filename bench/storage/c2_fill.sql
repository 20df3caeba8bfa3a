-- Finished history for C2: c_fill.sql's rows (this file is c_fill.sql plus the keys).
-- As C: b_fill.sql's rows, routed to the day partitions; the attempt
-- rows also carry job_created_at. psql variables as b_fill.sql.
INSERT INTO job_requests
    (id, organization_id, channel, payload, max_attempts, send_at, expires_at,
     idempotency_key, request_hash, trace_header, created_at)
SELECT md5(:'tag' || g)::uuid,
       ('0b9d8c1e-0000-4000-8000-' || lpad((g % 20)::text, 12, '0'))::uuid,
       CASE WHEN g % 2 = 0 THEN 'sms' ELSE 'email' END,
       CASE WHEN g % 2 = 0
            THEN jsonb_build_object('to', '+1555' || lpad((g % 10000000)::text, 7, '0'),
                                    'message', 'Your invoice is paid')
            ELSE jsonb_build_object('to', 'user' || g || '@example.com',
                                    'subject', 'Invoice paid', 'text', 'Your invoice is paid')
       END,
       5, t, t + interval '1 day',
       CASE WHEN g % 10 = 3 THEN md5('key' || :'tag' || g) END,
       CASE WHEN g % 10 = 3 THEN encode(sha256(convert_to(:'tag' || g, 'UTF8')), 'hex') END,
       NULL, t
FROM generate_series(:lo::bigint, :hi::bigint) AS g,
     LATERAL (SELECT :'start'::timestamptz + :'span'::interval * ((g - 1)::float8 / :total)
              AS t) AS ts;

INSERT INTO job_attempts
    (job_id, job_created_at, attempt, provider, provider_message_id, error_code,
     error_message, outcome, started_at, finished_at)
SELECT md5(:'tag' || g)::uuid, t, 1,
       CASE WHEN g % 2 = 0 THEN 'sns' ELSE 'ses' END,
       md5('message' || :'tag' || g)::uuid::text,
       CASE WHEN g % 10 = 0 THEN 'InvalidParameter' END,
       CASE WHEN g % 10 = 0 THEN 'bench' END,
       CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'sent' END,
       t, t + interval '1 second'
FROM generate_series(:lo::bigint, :hi::bigint) AS g,
     LATERAL (SELECT :'start'::timestamptz + :'span'::interval * ((g - 1)::float8 / :total)
              AS t) AS ts;

INSERT INTO job_outcomes
    (job_id, organization_id, job_created_at, status, attempts, max_attempts, tries,
     last_error, finished_at)
SELECT md5(:'tag' || g)::uuid,
       ('0b9d8c1e-0000-4000-8000-' || lpad((g % 20)::text, 12, '0'))::uuid,
       t, CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'sent' END::job_status, 1, 5, 1,
       CASE WHEN g % 10 = 0 THEN 'InvalidParameter: bench' END,
       t + interval '1 second'
FROM generate_series(:lo::bigint, :hi::bigint) AS g,
     LATERAL (SELECT :'start'::timestamptz + :'span'::interval * ((g - 1)::float8 / :total)
              AS t) AS ts;

INSERT INTO idempotency_keys (organization_id, idempotency_key, job_id, request_hash, created_at)
SELECT ('0b9d8c1e-0000-4000-8000-' || lpad((g % 20)::text, 12, '0'))::uuid,
       md5('key' || :'tag' || g), md5(:'tag' || g)::uuid,
       encode(sha256(convert_to(:'tag' || g, 'UTF8')), 'hex'), t
FROM generate_series(:lo::bigint, :hi::bigint) AS g,
     LATERAL (SELECT :'start'::timestamptz + :'span'::interval * ((g - 1)::float8 / :total)
              AS t) AS ts
WHERE g % 10 = 3;
