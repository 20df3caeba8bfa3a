-- The queue by organization and state, the busiest first (`make queue`): $1 the current time
-- (NULL: now()), $2 at most this many organizations. States as in queue_depth.sql; the open
-- jobs only, one pass over job_queue.
SELECT organization_id,
       -- @include queue_depth.sql#states
       count(*) FILTER (WHERE claim_token IS NULL
                          AND next_attempt_at <= coalesce($1::timestamptz, now())) AS due,
       count(*) FILTER (WHERE claim_token IS NOT NULL) AS processing,
       count(*) FILTER (WHERE claim_token IS NULL
                          AND next_attempt_at > coalesce($1::timestamptz, now())
                          AND last_error IS NOT NULL) AS held,
       count(*) FILTER (WHERE claim_token IS NULL
                          AND next_attempt_at > coalesce($1::timestamptz, now())
                          AND last_error IS NULL) AS scheduled
       -- @end queue_depth.sql#states
       , min(next_attempt_at) FILTER (WHERE claim_token IS NULL
                          AND next_attempt_at <= coalesce($1::timestamptz, now())) AS oldest_due
FROM job_queue
GROUP BY organization_id
ORDER BY count(*) DESC, organization_id
LIMIT $2
