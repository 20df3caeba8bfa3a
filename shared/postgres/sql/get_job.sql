-- One job of an organization, as it stands (job_states: while it is open, its queue row says
-- whether a worker holds it and how many attempts its claims have taken). Read in the window
-- its id gives (job_created_after, job_created_before): job_states_between plans only the
-- request and outcome partitions of the job's days. Its priority is the request's (the
-- same window's partition of job_requests, by its key).
SELECT s.id, s.channel, s.payload ->> 'to' AS recipient, s.status::text AS status, s.attempts,
       s.max_attempts, s.next_attempt_at, s.created_at, s.updated_at, s.last_error,
       s.request_hash, s.idempotency_key, r.priority::text AS priority
FROM job_states_between(job_created_after($1), job_created_before($1)) AS s
JOIN job_requests AS r ON r.id = s.id AND r.created_at = s.created_at
    AND r.created_at >= job_created_after($1) AND r.created_at < job_created_before($1)
WHERE s.id = $1 AND s.organization_id = $2
