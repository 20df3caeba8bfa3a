-- Requeue a dead job: due now, with a fresh budget of as many attempts as it had, on top of
-- those it used (attempt numbers keep counting, so its delivery history stays). It goes back
-- in the queue (job_queue) in the same statement, and its end is undone: its outcome row is
-- deleted, or, for a job that ended before 0012 (its final status on its record, in
-- notification_jobs: the partition before the cut, 0015_history_by_day.sql), the record
-- says pending again.
-- The last attempt the outcome row holds (0018_final_attempt_inline.sql) becomes a row of
-- job_attempts, so the job's history keeps it.
-- Both read the partitions of the job's day only (0016_job_day_from_id.sql).
WITH removed AS (
    DELETE FROM job_outcomes
    WHERE job_id = $1 AND organization_id = $2 AND status = 'dead'
      AND created_at >= job_created_after($1) AND created_at < job_created_before($1)
    RETURNING job_id, created_at, attempts, max_attempts, tries, provider, provider_message_id,
              error_code, error_message, started_at, finished_at
),
kept_attempt AS (
    INSERT INTO job_attempts
        (job_id, job_created_at, attempt, provider, provider_message_id, error_code,
         error_message, outcome, fenced, started_at, finished_at)
    SELECT job_id, created_at, tries, provider, provider_message_id, error_code,
           error_message, 'dead', false, started_at, finished_at
    FROM removed
    WHERE started_at IS NOT NULL
),
ended AS (
    SELECT job_id AS id, attempts, max_attempts, tries FROM removed
),
ended_before AS (
    UPDATE notification_jobs
    SET status = 'pending', updated_at = now()
    WHERE id = $1 AND organization_id = $2 AND status = 'dead'
    RETURNING id, attempts, max_attempts, tries
),
revived AS (
    SELECT e.id, e.attempts, e.max_attempts, e.tries
    FROM (SELECT * FROM ended UNION ALL SELECT * FROM ended_before) AS e
),
queued AS (
    INSERT INTO job_queue (id, organization_id, channel, payload, trace_header,
                           next_attempt_at, expires_at, attempts, max_attempts, tries,
                           created_at, updated_at)
    SELECT j.id, j.organization_id, j.channel, j.payload, j.trace_header, now(), j.expires_at,
           r.attempts, r.attempts + r.max_attempts, r.tries, j.created_at, now()
    FROM revived AS r
    JOIN job_requests AS j ON j.id = r.id
        AND j.created_at >= job_created_after($1) AND j.created_at < job_created_before($1)
    RETURNING id, next_attempt_at
)
SELECT id, 'pending' AS status, next_attempt_at FROM queued
