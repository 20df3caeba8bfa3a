-- One page of an organization's jobs, oldest first, after the cursor (created_at, id);
-- $3/$4 NULL for the first page, $2 NULL for every status.
SELECT id, channel, payload ->> 'to' AS recipient, status::text AS status, attempts, max_attempts, next_attempt_at,
       created_at, updated_at, last_error
FROM notification_jobs
WHERE organization_id = $1
  AND ($2::text IS NULL OR status::text = $2)
  AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4::uuid))
ORDER BY created_at, id
LIMIT $5
