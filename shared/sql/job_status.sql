-- Where a job stands (job_states: processing while a worker holds its claim).
SELECT status::text AS status FROM job_states WHERE id = $1 AND organization_id = $2
