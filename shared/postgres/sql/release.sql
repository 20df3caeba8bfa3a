-- Give back claimed jobs that were never handed to a provider (the worker stopped early: a
-- store error, its deadline, no send slot of the provider's pace left, a channel held by a
-- quota): due again at $4 (NULL: at once), the attempt and the try their claim took
-- refunded, the claim cleared. Only jobs still claimed under the caller's claim token.
-- Their record in job_requests is untouched: it still says what it said before the
-- claim (pending, or failed after an earlier attempt).
-- $1 ids, $2 their claim tokens, $3 the current time (NULL: now()), $4 when they are due.
UPDATE job_queue AS q
SET attempts        = GREATEST(q.attempts - 1, 0),
    tries           = GREATEST(q.tries - 1, 0),
    next_attempt_at = coalesce($4::timestamptz, $3::timestamptz, now()),
    claim_token     = NULL,
    claimed_at      = NULL
FROM unnest($1::uuid[], $2::uuid[]) AS r(id, claim_token)
WHERE q.id = r.id
  AND q.claim_token = r.claim_token
RETURNING q.id
