-- One page of an organization's suppression list in recipient order, after the cursor $2
-- (NULL for the first page), at most $3 rows.
SELECT recipient, reason, detail, created_at
FROM suppressions
WHERE organization_id = $1
  AND ($2::text IS NULL OR recipient > $2)
ORDER BY recipient
LIMIT $3
