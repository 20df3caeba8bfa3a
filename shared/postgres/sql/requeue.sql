-- Requeue a dead job: due now, with a fresh budget of as many attempts as it had, on top of
-- those it used (attempt numbers keep counting, so its history stays). Its outcome row goes
-- and its queue row comes back, in one statement; the last attempt the outcome row held
-- becomes a row of job_attempts, so the job's history keeps it.
-- Reads the partitions of the days its id gives only. Deleting the outcome row locks its
-- day's partition until this commits, so the day cannot be dropped meanwhile
-- (history_drop_days), and a day dropped first leaves nothing to requeue: the job is gone.
-- requeue_dead.sql requeues many at once with the same `kept_attempt`.
WITH removed AS (
    DELETE FROM job_outcomes
    WHERE job_id = $1 AND organization_id = $2 AND status = 'dead'
      AND created_at >= job_created_after($1) AND created_at < job_created_before($1)
    RETURNING job_id, created_at, attempts, max_attempts, tries, provider, provider_message_id,
              error_code, error_message, started_at, finished_at
),
-- @part kept_attempt
kept_attempt AS (
    INSERT INTO job_attempts
        (job_id, job_created_at, attempt, provider, provider_message_id, error_code,
         error_message, outcome, fenced, started_at, finished_at)
    SELECT job_id, created_at, tries, provider, provider_message_id, error_code,
           error_message, 'dead', false, started_at, finished_at
    FROM removed
    WHERE started_at IS NOT NULL
),
-- @end kept_attempt
queued AS (
    INSERT INTO job_queue (id, organization_id, channel, payload, trace_header,
                           next_attempt_at, expires_at, attempts, max_attempts, tries,
                           priority, created_at, updated_at)
    SELECT j.id, j.organization_id, j.channel,
           CASE WHEN (SELECT copies_payload FROM queue_settings) THEN j.payload END,
           j.trace_header, now(), j.expires_at,
           r.attempts, r.attempts + r.max_attempts, r.tries, j.priority, j.created_at, now()
    FROM removed AS r
    JOIN job_requests AS j ON j.id = r.job_id AND j.created_at = r.created_at
        AND j.created_at >= job_created_after($1) AND j.created_at < job_created_before($1)
    RETURNING id, next_attempt_at
)
SELECT id, 'pending' AS status, next_attempt_at FROM queued
