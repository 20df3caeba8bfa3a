-- Claim up to $1 events the bus has not taken, due at $2 (the current time; NULL: now()),
-- the longest waiting first. SKIP LOCKED: concurrent workers take disjoint events. Each gets
-- a fresh claim token (complete_events.sql checks it) and counts the attempt.
WITH due AS (
    SELECT id
    FROM status_events
    WHERE published_at IS NULL
      AND claim_token IS NULL
      AND next_attempt_at <= coalesce($2::timestamptz, now())
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE status_events AS e
SET claim_token = gen_random_uuid(),
    claimed_at  = coalesce($2::timestamptz, now()),
    attempts    = e.attempts + 1
FROM due
WHERE e.id = due.id
RETURNING e.id, e.type AS event_type, e.created_at, e.organization_id, e.sequence, e.data, e.claim_token, e.attempts
