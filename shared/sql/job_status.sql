-- Where a job stands (job_states: processing while a worker holds its claim), read in the
-- record and outcome partitions of its day only (0016_job_day_from_id.sql,
-- 0017_one_day_per_lookup.sql).
SELECT status::text AS status
FROM job_states_between(job_created_after($1), job_created_before($1))
WHERE id = $1 AND organization_id = $2
