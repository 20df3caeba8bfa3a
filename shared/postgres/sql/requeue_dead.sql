-- Requeue an organization's dead jobs in one statement (an outage's, say), as requeue.sql
-- requeues one: due now, a fresh budget of as many attempts as each had, its last attempt
-- kept in job_attempts. $1 the organization; $2 and $3 when they died, [since, until) (NULL:
-- unbounded); $4 the error code that ended them (NULL: any; a job the sweeper buried has its
-- code only in last_error, before the colon); $5 at most this many, oldest death first.
-- A job may have died only after it was accepted, so `until` also bounds the days read.
-- The chosen outcome rows are locked (SKIP LOCKED: a job a single requeue or another bulk
-- requeue holds is left to it), deleted and their queue rows made; answers how many.
WITH chosen AS (
    SELECT job_id, created_at
    FROM job_outcomes
    WHERE organization_id = $1 AND status = 'dead'
      AND ($2::timestamptz IS NULL OR updated_at >= $2)
      AND ($3::timestamptz IS NULL OR updated_at < $3)
      AND ($3::timestamptz IS NULL OR created_at < $3)
      AND ($4::text IS NULL OR coalesce(error_code, split_part(last_error, ':', 1)) = $4)
    ORDER BY updated_at, job_id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
),
removed AS (
    DELETE FROM job_outcomes AS o
    USING chosen AS c
    WHERE o.job_id = c.job_id AND o.created_at = c.created_at AND o.status = 'dead'
    RETURNING o.job_id, o.created_at, o.attempts, o.max_attempts, o.tries, o.provider,
              o.provider_message_id, o.error_code, o.error_message, o.started_at,
              o.finished_at
),
-- @include requeue.sql#kept_attempt
kept_attempt AS (
    INSERT INTO job_attempts
        (job_id, job_created_at, attempt, provider, provider_message_id, error_code,
         error_message, outcome, fenced, started_at, finished_at)
    SELECT job_id, created_at, tries, provider, provider_message_id, error_code,
           error_message, 'dead', false, started_at, finished_at
    FROM removed
    WHERE started_at IS NOT NULL
),
-- @end requeue.sql#kept_attempt
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
    RETURNING id
)
SELECT count(*)::bigint AS requeued FROM queued
