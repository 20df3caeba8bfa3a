-- Claim up to $1 due webhook deliveries (due at $3, the current time; NULL: now()) to enabled
-- endpoints, at most $2 of any one endpoint, the longest waiting first: each endpoint's
-- oldest are picked apart (its own index range), so one endpoint's backlog never hides
-- another's deliveries. The picked rows are then locked (SKIP LOCKED: concurrent workers
-- take disjoint ones; one claimed meanwhile is passed over) and get a fresh claim token
-- (complete_webhooks.sql checks it) and their attempt's number.
WITH picked AS (
    SELECT d.id
    FROM webhook_endpoints AS w
    CROSS JOIN LATERAL (
        SELECT id, next_attempt_at
        FROM webhook_deliveries AS d
        WHERE d.endpoint_id = w.id
          AND d.claim_token IS NULL
          AND d.next_attempt_at <= coalesce($3::timestamptz, now())
        ORDER BY d.next_attempt_at
        LIMIT $2
    ) AS d
    WHERE w.disabled_at IS NULL
    ORDER BY d.next_attempt_at
    LIMIT $1
),
locked AS (
    SELECT id
    FROM webhook_deliveries
    WHERE id IN (SELECT id FROM picked)
      AND claim_token IS NULL
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries AS d
SET claim_token = gen_random_uuid(),
    claimed_at  = coalesce($3::timestamptz, now()),
    attempts    = d.attempts + 1
FROM locked, webhook_endpoints AS w, status_events AS e
WHERE d.id = locked.id
  AND w.id = d.endpoint_id
  AND e.id = d.event_id
RETURNING d.id AS delivery_id, d.claim_token, d.endpoint_id, w.url, w.secret,
          -- the secret being rotated out signs too, until its time is up
          CASE WHEN w.previous_until > coalesce($3::timestamptz, now())
               THEN w.previous_secret END AS previous_secret,
          d.attempts AS attempt, e.id AS event_id, e.type AS event_type, e.created_at, e.organization_id,
          e.sequence, status_event_body(e) AS data
