-- One job of an organization, as it stands (job_states: while it is open, its queue row says
-- whether a worker holds it and how many attempts its claims have taken). The window its id
-- gives (0016_job_day_from_id.sql) plans only the partitions of its day.
SELECT id, channel, payload ->> 'to' AS recipient, status::text AS status, attempts,
       max_attempts, next_attempt_at, created_at, updated_at, last_error
FROM job_states
WHERE id = $1 AND organization_id = $2
  AND created_at >= job_created_after($1) AND created_at < job_created_before($1)
