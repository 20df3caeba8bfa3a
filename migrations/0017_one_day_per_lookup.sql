-- Issue 17: a lookup by id reads one day of outcome rows, and retention never holds the
-- history's tables for more than an instant.
--
-- 1. job_states (0015) finds a job's outcome row under the job's created_at, through an outer
--    join. A window on the record's created_at (0016_job_day_from_id.sql) does not pass through
--    that join to the outcome rows, so a GET planned, and read, the outcome partition of every
--    day kept: with 41 days, 11 ms to plan and 41 index scans to run.
--    job_states_between(lo, hi) is the view with the window on both tables. A SQL function that
--    is one SELECT, STABLE, with no SET clause is inlined by the planner where it is called in
--    FROM, so its window folds and prunes partitions as a WHERE clause does. The view is now
--    the unbounded window, so there is one definition of where a job stands, and the
--    statements of the previous release, which read the view, keep working.
CREATE FUNCTION job_states_between(lo timestamptz, hi timestamptz)
RETURNS TABLE (id uuid, organization_id uuid, channel text, payload jsonb, status job_status,
               recorded_status job_status, attempts int, max_attempts int, tries int,
               next_attempt_at timestamptz, expires_at timestamptz, created_at timestamptz,
               updated_at timestamptz, claim_token uuid, claimed_at timestamptz,
               last_error text, idempotency_key text, request_hash text, trace_header text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT j.id,
       j.organization_id,
       j.channel,
       j.payload,
       CASE WHEN q.claim_token IS NOT NULL THEN 'processing'::job_status
            WHEN q.last_error IS NOT NULL
                THEN 'failed'::job_status
            WHEN q.id IS NOT NULL THEN 'pending'::job_status
            ELSE coalesce(o.status, j.status) END,
       CASE WHEN q.last_error IS NOT NULL
                THEN 'failed'::job_status
            WHEN q.id IS NOT NULL THEN 'pending'::job_status
            ELSE coalesce(o.status, j.status) END,
       coalesce(q.attempts, o.attempts, j.attempts),
       coalesce(q.max_attempts, o.max_attempts, j.max_attempts),
       coalesce(q.tries, o.tries, j.tries),
       coalesce(q.next_attempt_at, o.next_attempt_at, j.next_attempt_at),
       j.expires_at,
       j.created_at,
       CASE WHEN q.id IS NOT NULL THEN GREATEST(q.updated_at, q.claimed_at)
            ELSE coalesce(o.updated_at, j.updated_at) END,
       q.claim_token,
       q.claimed_at,
       CASE WHEN q.id IS NOT NULL THEN q.last_error
            WHEN o.job_id IS NOT NULL THEN o.last_error
            ELSE j.last_error END,
       j.idempotency_key,
       j.request_hash,
       j.trace_header
FROM job_requests AS j
LEFT JOIN job_queue AS q ON q.id = j.id
LEFT JOIN job_outcomes AS o ON o.job_id = j.id AND o.created_at = j.created_at
    AND o.created_at >= lo AND o.created_at < hi
WHERE j.created_at >= lo AND j.created_at < hi
$$;

-- Replacing the view locks it for an instant; a statement that reads it for long (a listing)
-- would hold this file, and every read queued behind it, so the wait is bounded and the
-- runner tries the file again.
SET LOCAL lock_timeout = '1s';
CREATE OR REPLACE VIEW job_states AS
SELECT * FROM job_states_between('-infinity', 'infinity');

-- 2. Dropping a day's partitions locks their parents (ACCESS EXCLUSIVE, for an instant), and
--    a lock request that waits also holds back every insert behind it: with 0015's 1 s
--    lock_timeout, a long read of the history could stall ingest and the worker for a second,
--    then fail the sweeper's run (SweeperErrorsAlarm). Now each day is dropped in a
--    subtransaction that waits at most 100 ms: a day whose locks are not granted in that time
--    stays, with its idempotency keys, and so do the days after it; the sweeper's next run
--    (a minute later) tries again. The call returns the days it dropped, as before.
CREATE OR REPLACE FUNCTION job_history_drop_days(cutoff timestamptz) RETURNS SETOF date
LANGUAGE plpgsql SET lock_timeout = '100ms' AS $$
DECLARE
    oldest_open timestamptz;
    day         date;
    day_end     timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('job_history_add_days'));
    FOR day IN SELECT to_date(right(c.relname, 8), 'YYYYMMDD')
               FROM pg_inherits AS i
               JOIN pg_class AS c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'job_requests'::regclass
                 AND c.relname ~ '^job_requests_[0-9]{8}$'
               ORDER BY 1 LOOP
        day_end := (day + 1)::timestamp AT TIME ZONE 'UTC';
        EXIT WHEN cutoff IS NULL OR day_end > cutoff;
        -- the queue is read (it has no index on created_at) only when a day is due, once a
        -- day, not at every run of the sweeper
        IF oldest_open IS NULL THEN
            oldest_open := coalesce((SELECT min(created_at) FROM job_queue), 'infinity');
        END IF;
        EXIT WHEN day_end > oldest_open;
        BEGIN
            DELETE FROM idempotency_keys
            WHERE job_created_at >= day::timestamp AT TIME ZONE 'UTC'
              AND job_created_at < day_end;
            EXECUTE format('DROP TABLE IF EXISTS %I, %I, %I',
                           'job_attempts_' || to_char(day, 'YYYYMMDD'),
                           'job_outcomes_' || to_char(day, 'YYYYMMDD'),
                           'job_requests_' || to_char(day, 'YYYYMMDD'));
        EXCEPTION WHEN lock_not_available THEN
            RAISE WARNING 'job_history_drop_days: % kept until a later run: %', day, SQLERRM;
            EXIT;
        END;
        RETURN NEXT day;
    END LOOP;
END
$$;
