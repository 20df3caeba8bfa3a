-- The age in seconds of the oldest webhook delivery due at $1 (the current time; NULL:
-- now()) to an enabled endpoint and not claimed: 0 when none waits.
SELECT coalesce(extract(epoch FROM coalesce($1::timestamptz, now()) - min(d.next_attempt_at)),
                0)::float8 AS age
FROM webhook_deliveries AS d
JOIN webhook_endpoints AS w ON w.id = d.endpoint_id
WHERE d.claim_token IS NULL
  AND d.next_attempt_at <= coalesce($1::timestamptz, now())
  AND w.disabled_at IS NULL
