-- Claim up to $1 events for the bus at $2 (the current time; NULL: now()): the stream's
-- next events after the bus's cursor, and the events the bus refused before that are due
-- again (0010). $3: the cursor's lease, in seconds.
--  * The stream: one reader at a time. The cursor is taken only when an event waits after
--    it, below the horizon (the oldest transaction still running: every event behind it
--    has committed or rolled back, and none can be added behind it), and when no other
--    reader holds it, or its holder has held it past the lease (it was lost). Its events
--    are answered with the cursor's fresh claim token, attempt 1; nothing is written to
--    them.
--  * The refused ones: SKIP LOCKED, as jobs are, each with a fresh claim token and its
--    attempt counted.
-- complete_events.sql checks the tokens. Each event's `data` is built from its columns as it
-- is read (status_event_body, 0013).
WITH cursor AS (
    UPDATE event_cursors AS c
    SET claim_token = gen_random_uuid(),
        claimed_at  = coalesce($2::timestamptz, now())
    WHERE c.consumer = 'bus'
      AND (c.claim_token IS NULL
           OR c.claimed_at < coalesce($2::timestamptz, now()) - make_interval(secs => $3))
      AND EXISTS (SELECT 1 FROM status_events AS e
                  WHERE e.tx IS NOT NULL
                    AND (e.tx, e.sequence) > (c.last_tx, c.last_sequence)
                    AND e.tx < pg_snapshot_xmin(pg_current_snapshot()))
    RETURNING c.claim_token, c.last_tx, c.last_sequence
),
stream AS (
    SELECT e.id, e.type AS event_type, e.created_at, e.organization_id, e.sequence, e.data,
           c.claim_token, 1 AS attempts
    FROM cursor AS c
    CROSS JOIN LATERAL (
        SELECT e.id, e.type, e.created_at, e.organization_id, e.sequence,
               status_event_body(e) AS data
        FROM status_events AS e
        WHERE e.tx IS NOT NULL
          AND (e.tx, e.sequence) > (c.last_tx, c.last_sequence)
          AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY e.tx, e.sequence
        LIMIT $1
    ) AS e
),
due AS (
    SELECT id
    FROM status_events
    WHERE published_at IS NULL
      AND claim_token IS NULL
      AND next_attempt_at <= coalesce($2::timestamptz, now())
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
refused AS (
    UPDATE status_events AS e
    SET claim_token = gen_random_uuid(),
        claimed_at  = coalesce($2::timestamptz, now()),
        -- NULL until the event first leaves the stream (0013): an operator's replay
        -- (docs/events.md) may send one here with its attempts never counted
        attempts    = coalesce(e.attempts, 0) + 1
    FROM due
    WHERE e.id = due.id
    RETURNING e.id, e.type AS event_type, e.created_at, e.organization_id, e.sequence,
              status_event_body(e) AS data, e.claim_token, e.attempts
)
SELECT * FROM stream
UNION ALL
SELECT * FROM refused
