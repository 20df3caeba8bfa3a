-- Claim up to $1 due jobs in one statement that commits before any delivery. $2 is the
-- current time (NULL: the server's now(); tests pass a time instead of ageing rows).
-- SKIP LOCKED: rows another claimer holds are skipped, never waited for.
-- claim_fair.sql picks its `due` rows otherwise and ends with this same UPDATE.
WITH due AS (
    SELECT id
    FROM notification_jobs
    WHERE status IN ('pending', 'failed')
      AND next_attempt_at <= coalesce($2::timestamptz, now())
      -- an expired job is never sent (the sweeper marks it expired)
      AND (expires_at IS NULL OR expires_at > coalesce($2::timestamptz, now()))
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
/* @update */
UPDATE notification_jobs AS j
SET status      = 'processing',
    attempts    = j.attempts + 1,
    tries       = GREATEST(j.tries, j.attempts) + 1,
    claimed_at  = coalesce($2::timestamptz, now()),
    claim_token = gen_random_uuid(),
    updated_at  = coalesce($2::timestamptz, now())
FROM due
WHERE j.id = due.id
RETURNING j.id, j.organization_id, j.channel, j.payload, j.attempts, j.max_attempts,
          j.tries, j.claim_token, j.claimed_at, j.trace_header,
          -- the recipient was suppressed after the job was accepted: the worker ends it
          -- `dead` without calling the provider
          EXISTS (SELECT FROM suppressions AS s
                  WHERE s.organization_id = j.organization_id
                    AND s.recipient = lower(j.payload ->> 'to')) AS suppressed
