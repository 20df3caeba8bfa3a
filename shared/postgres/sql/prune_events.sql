-- Retention of the events and webhook attempts: drops up to $2 rows of each kind older than
-- $1 days before $3 (the current time; NULL: now()). A delivery still waiting for an event
-- that old (its endpoint disabled: an enabled one's deliveries end within two days) goes
-- with it. Answers how many of each went.
WITH cutoff AS (
    SELECT coalesce($3::timestamptz, now()) - make_interval(days => $1) AS at
),
-- an event's id is a UUIDv7 made with the event (0009): the old ones are the primary key's
-- range below the cutoff's, read oldest first
old AS (
    SELECT id FROM status_events
    WHERE id < job_id_floor((SELECT at FROM cutoff))
    ORDER BY id
    LIMIT $2
),
deliveries AS (
    DELETE FROM webhook_deliveries
    WHERE event_id IN (SELECT id FROM old)
    RETURNING 1
),
events AS (
    DELETE FROM status_events
    WHERE id IN (SELECT id FROM old)
    RETURNING 1
),
attempts AS (
    DELETE FROM webhook_attempts
    WHERE id IN (SELECT id FROM webhook_attempts
                 WHERE started_at < (SELECT at FROM cutoff)
                 ORDER BY started_at
                 LIMIT $2)
    RETURNING 1
)
SELECT (SELECT count(*) FROM events)::bigint AS events,
       (SELECT count(*) FROM attempts)::bigint AS attempts
