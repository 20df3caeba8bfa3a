-- Give back claimed jobs that were never handed to a provider (the worker stopped early: a
-- store error, its deadline): due again at once, the attempt and the try their claim took
-- refunded, the claim token cleared. Only jobs still processing under the caller's claim.
-- $1 ids, $2 their claim tokens, $3 the current time (NULL: now()).
UPDATE notification_jobs AS j
SET status          = CASE WHEN j.attempts - 1 <= 0 THEN 'pending'::job_status
                           ELSE 'failed'::job_status END,
    attempts        = GREATEST(j.attempts - 1, 0),
    tries           = GREATEST(j.tries - 1, 0),
    next_attempt_at = coalesce($3::timestamptz, now()),
    claim_token     = NULL,
    updated_at      = coalesce($3::timestamptz, now())
FROM unnest($1::uuid[], $2::uuid[]) AS r(id, claim_token)
WHERE j.id = r.id
  AND j.claim_token = r.claim_token
  AND j.status = 'processing'
RETURNING j.id
