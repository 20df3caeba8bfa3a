-- What the bus did with claimed events: $1 ids, $2 claim tokens, $3 when to try again (NULL:
-- published), $4 the bus's error; $5 the current time (NULL: now()). Only an event still
-- claimed under the caller's token changes (a claim the sweeper took back is left to the
-- next claim, which publishes it again: at least once).
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[])
         AS t(id, claim_token, retry_at, error)
)
UPDATE status_events AS e
SET published_at    = CASE WHEN i.retry_at IS NULL THEN coalesce($5::timestamptz, now()) END,
    next_attempt_at = coalesce(i.retry_at, e.next_attempt_at),
    claim_token     = NULL,
    claimed_at      = NULL,
    last_error      = i.error
FROM input AS i
WHERE e.id = i.id
  AND e.claim_token = i.claim_token
RETURNING e.id
