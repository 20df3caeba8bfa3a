-- Register an endpoint of organization $2: id $1, URL $3, event types $4 (NULL: every type),
-- secret $5; refused (no row) when the organization has $6 endpoints already. The count and
-- the insert race only with the organization's own concurrent registrations, which the
-- advisory lock puts in line.
WITH gate AS (
    SELECT pg_advisory_xact_lock(hashtext('webhook_endpoints'), hashtext($2::text))
),
counted AS (
    SELECT count(*) AS endpoints
    FROM webhook_endpoints, gate
    WHERE organization_id = $2
)
INSERT INTO webhook_endpoints (id, organization_id, url, event_types, secret)
SELECT $1, $2, $3, $4, $5
FROM counted
WHERE counted.endpoints < $6
RETURNING id, url, event_types, created_at, disabled_at, disabled_reason, failing_since
