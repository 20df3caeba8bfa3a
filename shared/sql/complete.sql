-- Complete a whole batch and claim the next one, in one statement (one transaction, one
-- round trip, one commit).
-- Each job changes only while it is still processing under the caller's claim token;
-- a stale token changes nothing (fenced). Every attempt gets its delivery row either way.
-- The next batch (up to $12 jobs; 0 claims none) is claimed by claim.sql itself, put in
-- place of the marker below when the statement is prepared. Both parts work on disjoint
-- rows: the claim takes pending/failed jobs, the completion changes processing ones.
-- $1 ids, $2 claim tokens, $3 attempts, $4 outcomes (sent|retry|dead), $5 retry times,
-- $6 providers, $7 provider message ids, $8 error codes, $9 error messages,
-- $10 started, $11 finished, $12 how many jobs to claim next
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[], $5::timestamptz[],
                $6::text[], $7::text[], $8::text[], $9::text[],
                $10::timestamptz[], $11::timestamptz[])
         AS t(job_id, claim_token, attempt, outcome, retry_at,
              provider, provider_message_id, error_code, error_message,
              started_at, finished_at)
),
applied AS (
    UPDATE notification_jobs AS j
    SET status          = CASE i.outcome
                              WHEN 'sent' THEN 'sent'::job_status
                              WHEN 'retry' THEN 'failed'::job_status
                              ELSE 'dead'::job_status
                          END,
        next_attempt_at = COALESCE(i.retry_at, j.next_attempt_at),
        last_error      = CASE WHEN i.outcome = 'sent' THEN NULL
                               ELSE concat_ws(': ', i.error_code, i.error_message) END,
        updated_at      = now()
    FROM input AS i
    WHERE j.id = i.job_id
      AND j.claim_token = i.claim_token
      AND j.status = 'processing'
    RETURNING j.id
),
recorded AS (
    INSERT INTO notification_deliveries AS d
        (job_id, attempt, provider, provider_message_id, error_code, error_message,
         outcome, fenced, started_at, finished_at)
    SELECT i.job_id, i.attempt, i.provider, i.provider_message_id, i.error_code,
           i.error_message, i.outcome, a.id IS NULL, i.started_at, i.finished_at
    FROM input AS i
    LEFT JOIN applied AS a ON a.id = i.job_id
    -- the sweeper already wrote a 'lost' row for this attempt: keep it, and add what
    -- the late worker learnt (the provider may have accepted the message after all)
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET provider_message_id = COALESCE(d.provider_message_id, EXCLUDED.provider_message_id),
        error_message       = concat_ws('; ', d.error_message,
                                        'late completion: ' || EXCLUDED.outcome),
        fenced              = true
    RETURNING 1
),
claimed AS (
    -- claim.sql, with its batch size taken from $12
    /* claim.sql */
)
-- one row per completion (applied is true or false), then one per claimed job (applied null)
SELECT i.job_id AS id, a.id IS NOT NULL AS applied, NULL::uuid AS organization_id,
       NULL::text AS channel, NULL::jsonb AS payload, NULL::int AS attempts,
       NULL::int AS max_attempts, NULL::uuid AS claim_token, NULL::timestamptz AS claimed_at
FROM input AS i
LEFT JOIN applied AS a ON a.id = i.job_id
UNION ALL
SELECT id, NULL, organization_id, channel, payload, attempts, max_attempts, claim_token,
       claimed_at
FROM claimed
