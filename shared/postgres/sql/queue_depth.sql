-- The queue by state, and how long the oldest due job has waited in seconds (0 when none is
-- due), as the worker publishes them at most once a minute per instance. $1 is the current
-- time (NULL: the server's now()). One pass over job_queue, the open jobs only: the cost
-- follows the backlog, never the history kept.
--  * due: unclaimed and due now (the backlog);
--  * processing: claimed by a worker;
--  * held: unclaimed, waiting to be tried again after a failed or held attempt (the queue row
--    keeps its error until the next attempt);
--  * scheduled: unclaimed, not due yet and never tried (a `send_at` ahead).
-- queue_by_organization.sql counts the same states (the part `states`) per organization.
SELECT coalesce(extract(epoch FROM coalesce($1::timestamptz, now())
                                   - min(next_attempt_at) FILTER (WHERE claim_token IS NULL
                                       AND next_attempt_at <= coalesce($1::timestamptz, now()))),
                0)::float8 AS age,
-- @part states
       count(*) FILTER (WHERE claim_token IS NULL
                          AND next_attempt_at <= coalesce($1::timestamptz, now())) AS due,
       count(*) FILTER (WHERE claim_token IS NOT NULL) AS processing,
       count(*) FILTER (WHERE claim_token IS NULL
                          AND next_attempt_at > coalesce($1::timestamptz, now())
                          AND last_error IS NOT NULL) AS held,
       count(*) FILTER (WHERE claim_token IS NULL
                          AND next_attempt_at > coalesce($1::timestamptz, now())
                          AND last_error IS NULL) AS scheduled
-- @end states
FROM job_queue
