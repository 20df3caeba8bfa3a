-- For tests only (notify_postgres::testing): the given queued jobs due at $2 (a backoff
-- skipped). $1 job ids. Answers the ids changed.
UPDATE job_queue SET next_attempt_at = $2
WHERE id = ANY($1::uuid[])
RETURNING id
