-- One job of an organization, as it stands (job_states: while it is open, its queue row says
-- whether a worker holds it and how many attempts its claims have taken). Read in the window
-- its id gives (job_created_after, job_created_before): job_states_between plans only the
-- request and outcome partitions of the job's days.
SELECT id, channel, payload ->> 'to' AS recipient, status::text AS status, attempts,
       max_attempts, next_attempt_at, created_at, updated_at, last_error, request_hash,
       idempotency_key
FROM job_states_between(job_created_after($1), job_created_before($1))
WHERE id = $1 AND organization_id = $2
