-- Make due again the bus publications and webhook deliveries claimed more than $1 seconds
-- before $2 (the current time; NULL: now()) by a worker that never completed them (it
-- crashed or timed out): their claim is cleared, so a late completion is fenced, and the
-- next claim sends them again. Answers how many of each.
WITH events AS (
    UPDATE status_events
    SET claim_token = NULL, claimed_at = NULL,
        last_error  = 'worker lost: publishing since ' || claimed_at
    WHERE published_at IS NULL
      AND claim_token IS NOT NULL
      AND claimed_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1)
    RETURNING 1
),
deliveries AS (
    UPDATE webhook_deliveries
    SET claim_token = NULL, claimed_at = NULL,
        next_attempt_at = coalesce($2::timestamptz, now())
    WHERE claim_token IS NOT NULL
      AND claimed_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1)
    RETURNING 1
)
SELECT (SELECT count(*) FROM events)::bigint AS events,
       (SELECT count(*) FROM deliveries)::bigint AS deliveries
