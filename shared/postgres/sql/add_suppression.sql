-- Suppress a normalised recipient ($2) for the organization ($1) by hand, reason 'manual',
-- detail $3. An entry already there is kept as it is: `created` says which happened.
WITH added AS (
    INSERT INTO suppressions (organization_id, recipient, reason, detail)
    VALUES ($1, $2, 'manual', $3)
    ON CONFLICT (organization_id, recipient) DO NOTHING
    RETURNING recipient, reason, detail, created_at
)
SELECT recipient, reason, detail, created_at, true AS created FROM added
UNION ALL
SELECT recipient, reason, detail, created_at, false
FROM suppressions
WHERE organization_id = $1 AND recipient = $2 AND NOT EXISTS (SELECT FROM added)
