-- Where a job stands (job_states: processing while a worker holds its claim), read in the
-- request and outcome partitions of the days its id gives only.
SELECT status::text AS status
FROM job_states_between(job_created_after($1), job_created_before($1))
WHERE id = $1 AND organization_id = $2
