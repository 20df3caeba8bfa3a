-- For tests only (notify_postgres::testing): a claim taken over, as when its job was swept
-- and claimed again by another invocation: a fresh claim token, so the first holder's
-- completion is fenced. $1 the job id.
UPDATE job_queue SET claim_token = gen_random_uuid(), claimed_at = now()
WHERE id = $1
RETURNING id
