-- An organization's endpoints, oldest first (at most a handful: create_webhook.sql caps them).
SELECT id, url, event_types, created_at, disabled_at, disabled_reason, failing_since
FROM webhook_endpoints
WHERE organization_id = $1
ORDER BY created_at, id
