-- Where a job stands (job_states: processing while a worker holds its claim), read in the
-- partitions of its day only (0016_job_day_from_id.sql).
SELECT status::text AS status FROM job_states
WHERE id = $1 AND organization_id = $2
  AND created_at >= job_created_after($1) AND created_at < job_created_before($1)
