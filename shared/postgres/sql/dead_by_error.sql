-- The jobs that died since $1, by the error code that ended them (`make queue`), the most
-- frequent first, at most $2 codes. A job the sweeper buried has its code only in
-- last_error, before the colon (as requeue_dead.sql filters them). A job that died since $1
-- may have been accepted on any day kept, so every day's outcome partition is read.
SELECT coalesce(error_code, split_part(last_error, ':', 1), '') AS error_code,
       count(*) AS jobs,
       max(updated_at) AS last_died
FROM job_outcomes
WHERE status = 'dead' AND updated_at >= $1
GROUP BY 1
ORDER BY jobs DESC, error_code
LIMIT $2
