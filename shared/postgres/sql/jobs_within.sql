-- The jobs $1 as they stand (job_states), all accepted within [$2, $3), in page order: the
-- page of a listing (list_jobs.sql), or the jobs an idempotency check found
-- (idempotency_key_jobs.sql). The window is a parameter, so the statement is planned over
-- those days' partitions only (job_states_between); joined to the page or the key rows in
-- one statement, it would be planned over every day kept. Each job's priority is its
-- request's (job_requests by its key, within the same window).
SELECT s.id, s.channel, s.payload ->> 'to' AS recipient, s.status::text AS status, s.attempts,
       s.max_attempts, s.next_attempt_at, s.created_at, s.updated_at, s.last_error,
       s.request_hash, s.idempotency_key, r.priority::text AS priority
FROM job_states_between($2, $3) AS s
JOIN job_requests AS r ON r.id = s.id AND r.created_at = s.created_at
    AND r.created_at >= $2 AND r.created_at < $3
WHERE s.id = ANY($1::uuid[])
ORDER BY s.created_at, s.id
