-- What the bus did with claimed events (claim_events.sql): $1 ids, $2 claim tokens, $3 when
-- to try again (NULL: published), $4 the bus's error; $5 the current time (NULL: now()).
--  * The stream's events (the cursor's token): while the caller still holds the cursor, it
--    moves past the last of them and is let go; those the bus refused leave the stream
--    for the retry path (published_at NULL, due at their retry time). A holder that lost
--    the cursor changes nothing: the next reader publishes them again (at least once).
--  * A refused event's retry: recorded only while still claimed under the caller's token
--    (one the sweeper took back is published again by the next claim).
-- Answers the id of every result recorded.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[])
         AS t(id, claim_token, retry_at, error)
),
cursor AS (
    UPDATE event_cursors AS c
    SET (last_tx, last_sequence) = (
            SELECT e.tx, e.sequence
            FROM input AS i
            JOIN status_events AS e ON e.id = i.id
            WHERE i.claim_token = c.claim_token
            ORDER BY e.tx DESC, e.sequence DESC
            LIMIT 1),
        claim_token = NULL,
        claimed_at  = NULL,
        moved_at    = coalesce($5::timestamptz, now())
    WHERE c.consumer = 'bus'
      AND c.claim_token IN (SELECT claim_token FROM input)
    RETURNING c.consumer
),
held AS (
    -- the cursor's token, when the caller held it (the CTE above sees the row before it)
    SELECT c.claim_token
    FROM event_cursors AS c
    WHERE c.consumer = 'bus' AND EXISTS (SELECT 1 FROM cursor)
),
streamed AS (
    SELECT i.*
    FROM input AS i
    WHERE i.claim_token IN (SELECT claim_token FROM held)
),
left_stream AS (
    UPDATE status_events AS e
    SET published_at    = NULL,
        next_attempt_at = s.retry_at,
        attempts        = 1,
        last_error      = s.error
    FROM streamed AS s
    WHERE e.id = s.id
      AND s.retry_at IS NOT NULL
    RETURNING e.id
),
retried AS (
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
)
SELECT id FROM streamed WHERE retry_at IS NULL
UNION ALL
SELECT id FROM left_stream
UNION ALL
SELECT id FROM retried
