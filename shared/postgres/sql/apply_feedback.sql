-- Apply every recorded event not applied yet whose attempt is now recorded (just received,
-- or waiting since before the worker recorded the attempt). $1 the current time (NULL: now()).
--  * The event is tied to its attempt (job_id, attempt): a row of job_attempts, or the last
--    attempt in its job's outcome row (its try number is the row's `tries`; an outcome row
--    without an attempt has no message id, so it matches nothing). Both have an index on the
--    message id. The union is written out here rather than read from job_attempt_history:
--    that view's filter on the outcome rows keeps the planner from looking each message id up
--    in their index (a branch with a WHERE clause is not merged into the join), so every
--    outcome of the window would be read per event.
--  * The job: a bounce (permanent bounce, reject, SMS failure) makes a sent or delivered job
--    `bounced`; a delivery makes a `sent` job `delivered`. A delivery arriving after a bounce
--    changes nothing, and neither does anything else (a transient bounce, a delay).
--  * A suppressing event puts the job's recipient on its organization's suppression list:
--    `to` as the request holds it (ingest normalised it, domain::normalize_recipient).
-- $2, $3: the window of job creation times searched, [$2, $3) (NULL: unbounded). The history
-- is partitioned by that day and the provider message id does not tell the day, so without
-- a window the statement is planned over every day kept. The feedback function passes the
-- days around its events; the sweeper, once a minute, applies whatever waits with no window
-- (an event whose job lies outside the window: one sent long after it was accepted).
-- Returns one row per event applied.
WITH matched AS (
    UPDATE delivery_feedback AS f
    SET job_id     = d.job_id,
        attempt    = d.attempt,
        applied_at = coalesce($1::timestamptz, now())
    FROM (SELECT a.job_id, a.job_created_at, a.attempt, a.provider_message_id
          FROM job_attempts AS a
          UNION ALL
          SELECT o.job_id, o.created_at, o.tries, o.provider_message_id
          FROM job_outcomes AS o) AS d
    WHERE f.applied_at IS NULL
      AND d.provider_message_id = f.provider_message_id
      AND ($2::timestamptz IS NULL OR d.job_created_at >= $2)
      AND ($3::timestamptz IS NULL OR d.job_created_at < $3)
    RETURNING f.id, f.job_id, f.kind, f.suppresses, f.diagnostic, f.provider_message_id
),
-- what each job becomes, and from which statuses: a bounce makes a sent or delivered job
-- bounced; a delivery makes a sent job delivered
effects AS (
    SELECT job_id,
           CASE WHEN bounced THEN 'bounced'::job_status ELSE 'delivered'::job_status END
               AS becomes,
           CASE WHEN bounced THEN ARRAY['sent', 'delivered']::job_status[]
                ELSE ARRAY['sent']::job_status[] END AS from_statuses
    FROM (SELECT job_id,
                 bool_or(kind IN ('bounce', 'reject', 'sms_failure')) AS bounced,
                 bool_or(kind = 'delivery') AS delivered
          FROM matched
          GROUP BY job_id) AS e
    WHERE bounced OR delivered
),
changed AS (
    UPDATE job_outcomes AS o
    SET status = e.becomes, updated_at = coalesce($1::timestamptz, now())
    FROM effects AS e
    WHERE o.job_id = e.job_id AND o.status = ANY (e.from_statuses)
      -- a matched job's rows are of its day, inside the window
      AND ($2::timestamptz IS NULL OR o.created_at >= $2)
      AND ($3::timestamptz IS NULL OR o.created_at < $3)
    RETURNING o.job_id
),
suppressed AS (
    INSERT INTO suppressions (organization_id, recipient, reason, detail, job_id,
                              provider_message_id, created_at)
    SELECT DISTINCT ON (j.organization_id, j.payload ->> 'to')
           j.organization_id, j.payload ->> 'to',
           CASE m.kind WHEN 'bounce' THEN 'bounce' WHEN 'complaint' THEN 'complaint'
                       ELSE 'sms_failure' END,
           m.diagnostic, j.id, m.provider_message_id, coalesce($1::timestamptz, now())
    FROM matched AS m
    JOIN job_requests AS j ON j.id = m.job_id
        AND ($2::timestamptz IS NULL OR j.created_at >= $2)
        AND ($3::timestamptz IS NULL OR j.created_at < $3)
    WHERE m.suppresses
    ORDER BY j.organization_id, j.payload ->> 'to', m.id
    ON CONFLICT (organization_id, recipient) DO NOTHING
    RETURNING recipient
)
-- one row per event applied, each with the statement's totals
SELECT (SELECT count(*) FROM changed)::int AS jobs_changed,
       (SELECT count(*) FROM suppressed)::int AS suppressed
FROM matched AS m
