-- Delete an organization's endpoint; its waiting deliveries and its attempts go with it.
DELETE FROM webhook_endpoints
WHERE id = $1 AND organization_id = $2
RETURNING id
