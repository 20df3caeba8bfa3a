-- Record webhook attempts: $1 delivery ids, $2 claim tokens, $3 outcomes (delivered | retry |
-- dead), $4 when to try again (retry), $5 status codes, $6 latencies (ms), $7 errors,
-- $8 when each attempt started; $9 the current time (NULL: now()); $10 how long an endpoint
-- may fail, every attempt, before it is disabled (seconds).
-- Only a delivery still claimed under the caller's token changes (one the sweeper took back
-- is sent again by its next claim: at least once). Delivered and dead ones leave the queue,
-- a retry waits; every applied attempt is a row of webhook_attempts. An endpoint that
-- answered 2xx has no failing streak; one that failed starts one, and is disabled once the
-- streak is older than $10.
WITH input AS (
    SELECT *
    FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::timestamptz[], $5::int[], $6::int[],
                $7::text[], $8::timestamptz[])
         AS t(delivery_id, claim_token, outcome, retry_at, status_code, latency_ms, error,
              started_at)
),
ended AS (
    DELETE FROM webhook_deliveries AS d
    USING input AS i
    WHERE d.id = i.delivery_id
      AND d.claim_token = i.claim_token
      AND i.outcome IN ('delivered', 'dead')
    RETURNING d.id, d.endpoint_id, d.event_id, d.attempts
),
retried AS (
    UPDATE webhook_deliveries AS d
    SET next_attempt_at = i.retry_at,
        claim_token     = NULL,
        claimed_at      = NULL
    FROM input AS i
    WHERE d.id = i.delivery_id
      AND d.claim_token = i.claim_token
      AND i.outcome = 'retry'
    RETURNING d.id, d.endpoint_id, d.event_id, d.attempts
),
applied AS (
    SELECT a.*, i.outcome, i.retry_at, i.status_code, i.latency_ms, i.error, i.started_at
    FROM (SELECT * FROM ended UNION ALL SELECT * FROM retried) AS a
    JOIN input AS i ON i.delivery_id = a.id
),
recorded AS (
    INSERT INTO webhook_attempts (endpoint_id, event_id, event_type, attempt, outcome,
                                  status_code, latency_ms, error, started_at, next_attempt_at)
    SELECT a.endpoint_id, a.event_id, e.type, a.attempts, a.outcome, a.status_code,
           a.latency_ms, a.error, a.started_at, a.retry_at
    FROM applied AS a
    JOIN status_events AS e ON e.id = a.event_id
),
streaks AS (
    SELECT endpoint_id, bool_or(outcome = 'delivered') AS answered
    FROM applied
    GROUP BY endpoint_id
),
endpoints AS (
    UPDATE webhook_endpoints AS w
    SET failing_since   = CASE WHEN s.answered THEN NULL
                               ELSE coalesce(w.failing_since, coalesce($9::timestamptz, now())) END,
        disabled_at     = CASE WHEN NOT s.answered AND w.failing_since
                                    <= coalesce($9::timestamptz, now()) - make_interval(secs => $10)
                               THEN coalesce($9::timestamptz, now()) END,
        disabled_reason = CASE WHEN NOT s.answered AND w.failing_since
                                    <= coalesce($9::timestamptz, now()) - make_interval(secs => $10)
                               THEN 'every delivery failed since ' || w.failing_since END
    FROM streaks AS s
    WHERE w.id = s.endpoint_id
      AND w.disabled_at IS NULL
      -- only a change is written: a streak that starts, ends, or reaches its limit
      AND CASE WHEN s.answered THEN w.failing_since IS NOT NULL
               ELSE w.failing_since IS NULL
                    OR w.failing_since
                       <= coalesce($9::timestamptz, now()) - make_interval(secs => $10) END
    RETURNING w.disabled_at IS NOT NULL AS disabled
)
SELECT (SELECT count(*) FROM applied)::bigint AS applied,
       (SELECT count(*) FROM endpoints WHERE disabled)::bigint AS disabled
