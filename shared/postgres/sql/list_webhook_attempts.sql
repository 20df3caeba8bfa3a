-- An organization's endpoint and its latest $3 attempts, newest first: no row when the
-- organization has no such endpoint, one row with a NULL event_id when it has no attempt.
SELECT a.event_id, a.event_type, a.attempt, a.outcome, a.status_code, a.latency_ms, a.error,
       a.started_at AS attempted_at, a.next_attempt_at
FROM webhook_endpoints AS w
LEFT JOIN LATERAL (
    SELECT *
    FROM webhook_attempts AS t
    WHERE t.endpoint_id = w.id
    ORDER BY t.id DESC
    LIMIT $3
) AS a ON true
WHERE w.id = $1 AND w.organization_id = $2
ORDER BY a.id DESC
