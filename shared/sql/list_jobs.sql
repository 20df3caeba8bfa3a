-- One page of an organization's jobs, oldest first, after the cursor (created_at, id);
-- $3/$4 NULL for the first page, $2 NULL for every status. The status filter compares the
-- column itself (sargable), so a filtered page reads notification_jobs_listing_by_status
-- instead of walking every job of the organization.
SELECT id, channel, payload ->> 'to' AS recipient, status::text AS status, attempts, max_attempts, next_attempt_at,
       created_at, updated_at, last_error
FROM notification_jobs
WHERE organization_id = $1
  AND ($2::text IS NULL OR status = $2::text::job_status)
  AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4::uuid))
ORDER BY created_at, id
LIMIT $5
