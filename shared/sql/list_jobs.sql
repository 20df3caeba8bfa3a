-- One page of an organization's jobs, oldest first, after the cursor (created_at, id);
-- $3/$4 NULL for the first page, $2 NULL for every status. Jobs as they stand (job_states).
-- The status filter compares the record's own column (recorded_status), so a filtered page
-- reads notification_jobs_listing_by_status instead of walking every job of the
-- organization. Each statement is planned with its parameters' values, so only the branch
-- of $2 that applies is planned. `processing` is a job whose record says pending or failed
-- and whose claim is set.
SELECT id, channel, payload ->> 'to' AS recipient, status::text AS status, attempts,
       max_attempts, next_attempt_at, created_at, updated_at, last_error
FROM job_states
WHERE organization_id = $1
  AND ($2::text IS NULL
       OR ($2::text = 'processing' AND recorded_status IN ('pending', 'failed')
           AND claim_token IS NOT NULL)
       OR ($2::text <> 'processing' AND recorded_status = $2::text::job_status
           AND claim_token IS NULL))
  AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4::uuid))
ORDER BY created_at, id
LIMIT $5
