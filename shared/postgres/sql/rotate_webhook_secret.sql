-- Give an organization's endpoint a new secret $3; the current one keeps signing beside it
-- for $4 seconds (a secret still in its overlap is replaced by the current one: at most two
-- sign at once).
UPDATE webhook_endpoints
SET previous_secret = secret,
    previous_until  = now() + make_interval(secs => $4),
    secret          = $3
WHERE id = $1 AND organization_id = $2
RETURNING id, url, event_types, created_at, disabled_at, disabled_reason, failing_since
