-- B retention, one batch (the sweeper's loop runs it until it deletes nothing): up to $2
-- finished jobs whose final outcome is older than $1 days before $3 (NULL: now()), with
-- their request and attempts, found by job_outcomes_finished as prune.sql finds them today.
WITH doomed AS (
    SELECT job_id
    FROM job_outcomes
    WHERE finished_at < coalesce($3::timestamptz, now()) - make_interval(days => $1)
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
attempts AS (
    DELETE FROM job_attempts AS a USING doomed AS d WHERE a.job_id = d.job_id
),
requests AS (
    DELETE FROM job_requests AS r USING doomed AS d WHERE r.id = d.job_id
)
DELETE FROM job_outcomes AS o USING doomed AS d WHERE o.job_id = d.job_id
