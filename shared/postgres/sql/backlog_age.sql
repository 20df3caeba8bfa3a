-- How long the oldest due job has waited, in seconds (0 when none is due). $1 is the current
-- time (NULL: the server's now()). min() reads the head of job_queue_next, past the jobs in
-- flight, however long the queue.
SELECT coalesce(extract(epoch FROM coalesce($1::timestamptz, now()) - min(next_attempt_at)),
                0)::float8 AS age
FROM job_queue
WHERE claim_token IS NULL
  AND next_attempt_at <= coalesce($1::timestamptz, now())
