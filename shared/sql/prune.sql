-- Row retention, for what partitions do not cover (0015_history_by_day.sql): deletes up to
-- $2 finished jobs accepted before the cut (the partitions notification_jobs,
-- job_outcomes_before and notification_deliveries) last updated more than $1 days before $3
-- (the current time; NULL: now()), with their idempotency keys, and up to $2 provider
-- events received before then. The days after the cut are dropped whole
-- (history_days.sql). SKIP LOCKED: never waits on anyone.
-- A job ended since 0012 has an outcome row (job_outcomes_updated finds the old ones); one
-- that ended before has its final status on its record (notification_jobs_finished_any).
WITH ended AS (
    SELECT job_id AS id
    FROM job_outcomes_before
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
    DELETE FROM job_outcomes_before AS o
    USING doomed
    WHERE o.job_id = doomed.id
),
attempts AS (
    DELETE FROM notification_deliveries AS d
    USING doomed
    WHERE d.job_id = doomed.id
),
records AS (
    DELETE FROM notification_jobs AS j
    USING doomed
    WHERE j.id = doomed.id
    RETURNING j.organization_id, j.idempotency_key
),
keys AS (
    DELETE FROM idempotency_keys AS k
    USING records AS r
    WHERE k.organization_id = r.organization_id AND k.idempotency_key = r.idempotency_key
),
-- provider feedback is kept as long after it arrived (its job may be gone sooner or later)
feedback AS (
    DELETE FROM delivery_feedback
    WHERE id IN (SELECT id FROM delivery_feedback
                 WHERE received_at < coalesce($3::timestamptz, now()) - make_interval(days => $1)
                 ORDER BY received_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT (SELECT count(*) FROM records) AS pruned, (SELECT count(*) FROM feedback) AS feedback
