-- Delete up to $2 finished jobs (sent, delivered, bounced, dead, cancelled, expired) last
-- updated more than $1 days before $3 (the current time; NULL: now()), with their records,
-- outcome and delivery rows (and their provider feedback: ON DELETE CASCADE).
-- SKIP LOCKED: never waits on anyone.
-- A job ended since 0012 has an outcome row (job_outcomes_updated finds the old ones); one
-- that ended before has its final status on its record (notification_jobs_finished_any).
WITH ended AS (
    SELECT job_id AS id
    FROM job_outcomes
    WHERE updated_at < coalesce($3::timestamptz, now()) - make_interval(days => $1)
    ORDER BY updated_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
ended_before AS (
    SELECT id
    FROM notification_jobs
    -- the predicate of the index notification_jobs_finished_any
    WHERE status IN ('sent', 'dead', 'cancelled', 'expired', 'delivered', 'bounced')
      AND updated_at < coalesce($3::timestamptz, now()) - make_interval(days => $1)
    ORDER BY updated_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
doomed AS (
    SELECT id FROM ended
    UNION ALL
    SELECT id FROM ended_before
),
outcomes AS (
    DELETE FROM job_outcomes AS o
    USING doomed
    WHERE o.job_id = doomed.id
),
-- their delivery rows go in the same statement (no foreign key cascades them since 0011)
attempts AS (
    DELETE FROM notification_deliveries AS d
    USING doomed
    WHERE d.job_id = doomed.id
)
DELETE FROM notification_jobs AS j
USING doomed
WHERE j.id = doomed.id
