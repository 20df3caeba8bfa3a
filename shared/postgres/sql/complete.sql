-- Complete a whole batch and claim the next one, in one statement (one transaction, one
-- round trip, one commit).
-- Each job changes only while it is still claimed under the caller's claim token, and its
-- attempt is recorded with the change: a final one in its job's outcome row, any other as a
-- job_attempts row. A completion whose token no longer holds the claim changes nothing here
-- (applied false): it was swept (fenced), or it is the repeat of a completion that committed
-- already; record_late.sql tells the two apart and records a fenced one.
-- The next batch (up to $1 jobs; 0 claims none) is claimed by claim.sql's own parts, copied
-- into the `due` and `claimed` CTEs below by the build; claim.sql's parameters ($1 batch
-- size, $2 the current time, NULL meaning now()) come first here too, so they go in
-- unchanged. Both parts work on disjoint
-- rows: the claim takes unclaimed queue rows, the completion changes claimed ones (and the
-- claim does not see what the completion changed: one snapshot).
-- $1 how many jobs to claim next, $2 the current time (NULL: now()),
-- $3 ids, $4 claim tokens, $5 tries (the delivery row's attempt number),
-- $6 outcomes (sent|retry|held|dead), $7 retry times,
-- $8 providers, $9 provider message ids, $10 error codes, $11 error messages,
-- $12 started, $13 finished, $14 the jobs' creation times (from the claim: the day of the
-- partitions their delivery rows go to)
-- Why this shape: docs/decisions/0006-last-attempt-in-the-outcome-row.md and
-- docs/decisions/0007-record-results-as-they-arrive.md.
WITH input AS (
    SELECT *
    FROM unnest($3::uuid[], $4::uuid[], $5::int[], $6::text[], $7::timestamptz[],
                $8::text[], $9::text[], $10::text[], $11::text[],
                $12::timestamptz[], $13::timestamptz[], $14::timestamptz[])
         AS t(job_id, claim_token, attempt, outcome, retry_at,
              provider, provider_message_id, error_code, error_message,
              started_at, finished_at, job_created_at)
),
-- Only a job still claimed under the caller's token changes (its queue row holds the token).
-- A final outcome ends it: the queue row goes, and its outcome row is written with this last
-- attempt in it (its try number is the row's `tries`, the claim's).
finished AS (
    DELETE FROM job_queue AS q
    USING input AS i
    WHERE q.id = i.job_id
      AND q.claim_token = i.claim_token
      AND i.outcome NOT IN ('retry', 'held')
    RETURNING q.id, q.organization_id, q.created_at, q.attempts, q.max_attempts, q.tries,
              q.next_attempt_at, i.outcome, i.provider, i.provider_message_id, i.error_code,
              i.error_message, i.started_at, i.finished_at
),
ended AS (
    INSERT INTO job_outcomes (job_id, organization_id, created_at, status, attempts,
                              max_attempts, tries, next_attempt_at, last_error, updated_at,
                              provider, provider_message_id, error_code, error_message,
                              started_at, finished_at)
    SELECT id, organization_id, created_at,
           CASE WHEN outcome = 'sent' THEN 'sent'::job_status ELSE 'dead'::job_status END,
           attempts, max_attempts, tries, next_attempt_at,
           CASE WHEN outcome = 'sent' THEN NULL
                ELSE concat_ws(': ', error_code, error_message) END,
           coalesce($2::timestamptz, now()),
           provider, provider_message_id, error_code, error_message, started_at, finished_at
    FROM finished
),
-- A retry puts it back in line. held: not the message's fault (account trouble, an
-- outage): the attempt its claim took is given back. Either way the job stands `failed`
-- (it has been tried) with this attempt's error.
requeued AS (
    UPDATE job_queue AS q
    SET attempts        = CASE WHEN i.outcome = 'held' THEN GREATEST(q.attempts - 1, 0)
                               ELSE q.attempts END,
        next_attempt_at = COALESCE(i.retry_at, q.next_attempt_at),
        claim_token     = NULL,
        claimed_at      = NULL,
        last_error      = concat_ws(': ', i.error_code, i.error_message),
        updated_at      = coalesce($2::timestamptz, now())
    FROM input AS i
    WHERE q.id = i.job_id
      AND q.claim_token = i.claim_token
      AND i.outcome IN ('retry', 'held')
    RETURNING q.id
),
applied AS (
    SELECT id FROM finished
    UNION ALL
    SELECT id FROM requeued
),
-- An applied retry's (or held attempt's) row is new: its try number came with the claim the
-- token still holds (a plain insert, nothing to check). It goes to the partition of its job's
-- day. (A final attempt is in its outcome row, above.)
recorded AS (
    INSERT INTO job_attempts
        (job_id, job_created_at, attempt, provider, provider_message_id, error_code,
         error_message, outcome, fenced, started_at, finished_at)
    SELECT i.job_id, i.job_created_at, i.attempt, i.provider, i.provider_message_id,
           i.error_code, i.error_message, i.outcome, false, i.started_at, i.finished_at
    FROM input AS i
    JOIN requeued AS a ON a.id = i.job_id
),
-- the next batch: claim.sql's parts, unchanged; its $1 and $2 are this statement's
due AS (
    -- @include claim.sql#due
    SELECT lane_due.id
    FROM (VALUES ('high'::job_priority), ('normal'::job_priority), ('low'::job_priority))
         AS lane (priority)
    CROSS JOIN LATERAL (
        SELECT id
        FROM job_queue
        WHERE priority = lane.priority
          AND claim_token IS NULL
          AND next_attempt_at <= coalesce($2::timestamptz, now())
          -- an expired job is never sent (the sweeper marks it expired)
          AND (expires_at IS NULL OR expires_at > coalesce($2::timestamptz, now()))
        ORDER BY next_attempt_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS lane_due
    -- the batch: the lanes together give at most $1 (each lane's own LIMIT only bounds
    -- that lane)
    LIMIT $1
    -- @end claim.sql#due
),
claimed AS (
    -- @include claim.sql#update
    UPDATE job_queue AS q
    SET attempts    = q.attempts + 1,
        tries       = GREATEST(q.tries, q.attempts) + 1,
        claimed_at  = coalesce($2::timestamptz, now()),
        claim_token = gen_random_uuid()
    FROM due
    WHERE q.id = due.id
    RETURNING q.id, q.organization_id, q.channel,
              -- the payload, stored once: the request's, one probe of job_requests_key in
              -- the partition of the job's day (a subquery per row: never a join the planner
              -- could turn into a scan of the partitions); the queue row's copy where ingest
              -- still writes one (migration 0012)
              coalesce(q.payload,
                       (SELECT r.payload FROM job_requests AS r
                        WHERE r.id = q.id AND r.created_at = q.created_at)) AS payload,
              q.attempts, q.max_attempts, q.tries, q.claim_token, q.claimed_at,
              q.trace_header, q.created_at,
              -- the batch's order, for the answer
              q.priority, q.next_attempt_at
    -- @end claim.sql#update
)
-- one row per completion (applied is true or false), then one per claimed job (applied null)
SELECT i.job_id AS id, a.id IS NOT NULL AS applied, NULL::uuid AS organization_id,
       NULL::text AS channel, NULL::jsonb AS payload, NULL::int AS attempts,
       NULL::int AS max_attempts, NULL::int AS tries, NULL::uuid AS claim_token,
       NULL::timestamptz AS claimed_at, NULL::text AS trace_header,
       NULL::timestamptz AS created_at, NULL::bool AS suppressed
FROM input AS i
LEFT JOIN applied AS a ON a.id = i.job_id
UNION ALL
-- the claimed jobs in the batch's order, as claim.sql answers them (a statement with an
-- UPDATE never runs in parallel: the two branches come one after the other)
(SELECT c.id, NULL, c.organization_id, c.channel, c.payload, c.attempts, c.max_attempts,
        c.tries, c.claim_token, c.claimed_at, c.trace_header, c.created_at,
        -- @include claim.sql#suppressed
        -- the recipient was suppressed after the job was accepted: the worker ends it `dead`
        -- without calling the provider
        EXISTS (SELECT FROM suppressions AS s
                WHERE s.organization_id = c.organization_id
                  AND s.recipient = c.payload ->> 'to') AS suppressed
        -- @end claim.sql#suppressed
 FROM claimed AS c
 ORDER BY c.priority, c.next_attempt_at)
