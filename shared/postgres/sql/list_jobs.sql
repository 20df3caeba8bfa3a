-- One page of an organization's jobs, oldest first, after the cursor (created_at, id);
-- $3/$4 NULL for the first page, $2 NULL for every status: their ids and days, which
-- jobs_within.sql then reads as they stand (job_states) within those days only.
-- Each statement is planned with its parameters' values, so only the branch of $2 that
-- applies is planned; each reads one index in page order, so a filtered page reads about
-- as many rows as it returns, not every job of the organization:
--  * every status: the requests (job_requests_listing, each day's partition in turn);
--  * an open status (pending, failed, processing): the queue (job_queue_listing), open jobs
--    only, with the status job_states gives them;
--  * a final status: the outcome rows (job_outcomes_by_status).
WITH page AS (
    (SELECT j.id, j.created_at
     FROM job_requests AS j
     WHERE $2::text IS NULL
       AND j.organization_id = $1
       AND ($3::timestamptz IS NULL OR (j.created_at, j.id) > ($3, $4::uuid))
       -- implied by the line above, but in a form that drops the days before the cursor
       -- from the plan (the history is partitioned by that day)
       AND ($3::timestamptz IS NULL OR j.created_at >= $3)
     ORDER BY j.created_at, j.id
     LIMIT $5)
    UNION ALL
    (SELECT q.id, q.created_at
     FROM job_queue AS q
     WHERE $2::text IN ('pending', 'failed', 'processing')
       AND q.organization_id = $1
       AND ($3::timestamptz IS NULL OR (q.created_at, q.id) > ($3, $4::uuid))
       AND $2::text = CASE WHEN q.claim_token IS NOT NULL THEN 'processing'
                           WHEN q.last_error IS NOT NULL THEN 'failed'
                           ELSE 'pending' END
     ORDER BY q.created_at, q.id
     LIMIT $5)
    UNION ALL
    (SELECT o.job_id, o.created_at
     FROM job_outcomes AS o
     WHERE $2::text NOT IN ('pending', 'failed', 'processing')
       AND o.organization_id = $1
       AND o.status = $2::text::job_status
       AND ($3::timestamptz IS NULL OR (o.created_at, o.job_id) > ($3, $4::uuid))
       AND ($3::timestamptz IS NULL OR o.created_at >= $3)
     ORDER BY o.created_at, o.job_id
     LIMIT $5)
    ORDER BY created_at, id
    LIMIT $5
)
SELECT id, created_at
FROM page
ORDER BY created_at, id
