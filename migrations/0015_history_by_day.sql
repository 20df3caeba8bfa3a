-- Issue 17, third storage step: a job's history is partitioned by the day the job was
-- accepted (UTC), and retention drops a whole day (job_history_drop_days below) instead of
-- deleting it row by row and vacuuming after it.
--  * job_requests (the accepted requests), job_outcomes (how jobs ended) and job_attempts
--    (one row per delivery attempt) are partitioned by RANGE of the job's created_at.
--  * Today's tables become their first partitions, "before the cut" (0014_history_keys.sql):
--    notification_jobs, job_outcomes_before (renamed) and notification_deliveries. No row is
--    copied, and they age out under row retention as before (prune.sql).
--  * The previous release, still running while a deploy rolls out, keeps working: it writes
--    notification_jobs and notification_deliveries directly (their own unique indexes, its
--    ON CONFLICT targets, stay), and its job_outcomes rows are routed to the partition of
--    their job's day. Its rows fall before the cut.
--  * The queue (job_queue) is not partitioned: it holds the open jobs only.
-- Takes its locks first, in the order the previous release's ingest and worker take them
-- (records, queue, outcomes, attempts), with a bounded wait shorter than the server's
-- deadlock_timeout (1 s by default): should a statement of that release (its feedback,
-- which goes the other way) wait on this file while holding a lock it needs, this file is
-- the one that gives up, and the runner tries it again. Everything here is catalog work,
-- a few milliseconds.
SET LOCAL lock_timeout = '500ms';
LOCK TABLE notification_jobs, job_queue, job_outcomes, notification_deliveries,
           delivery_feedback, job_states IN ACCESS EXCLUSIVE MODE;

-- 0011's trigger queued jobs inserted by a release older than 0011; the previous release
-- queues its jobs itself.
DROP TRIGGER IF EXISTS job_queue_adopt ON notification_jobs;
DROP FUNCTION IF EXISTS job_queue_adopt();
-- A foreign key cannot point at one partition's rows only; feedback is deleted by its own
-- age (prune.sql).
ALTER TABLE delivery_feedback DROP CONSTRAINT IF EXISTS delivery_feedback_job_id_fkey;

-- The accepted requests. The columns are notification_jobs' (a partition has its parent's),
-- including those only jobs that ended before 0012 use (status and the rest).
CREATE TABLE job_requests (LIKE notification_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
ALTER TABLE job_requests DROP CONSTRAINT notification_jobs_before_cut;
ALTER TABLE notification_jobs
    ADD CONSTRAINT notification_jobs_key UNIQUE USING INDEX notification_jobs_key;
ALTER TABLE job_requests ADD CONSTRAINT job_requests_key UNIQUE (id, created_at);
CREATE INDEX job_requests_listing ON job_requests (organization_id, created_at, id);

-- How jobs ended (0012). The listing index is today's; the retention index
-- (job_outcomes_updated) stays on the partition before the cut only: a day's partition is
-- dropped whole.
ALTER TABLE job_outcomes RENAME TO job_outcomes_before;
CREATE TABLE job_outcomes (LIKE job_outcomes_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
ALTER TABLE job_outcomes DROP CONSTRAINT job_outcomes_before_cut;
ALTER TABLE job_outcomes_before
    ADD CONSTRAINT job_outcomes_key UNIQUE USING INDEX job_outcomes_key;
ALTER TABLE job_outcomes ADD CONSTRAINT job_outcomes_by_job UNIQUE (job_id, created_at);
CREATE INDEX job_outcomes_by_status ON job_outcomes (organization_id, status, created_at, job_id);

-- Delivery attempts, by their job's day (job_created_at; -infinity before the cut).
CREATE TABLE job_attempts (LIKE notification_deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (job_created_at);
ALTER TABLE job_attempts DROP CONSTRAINT notification_deliveries_before_cut;
ALTER TABLE job_attempts ALTER COLUMN job_created_at DROP DEFAULT;
ALTER TABLE notification_deliveries
    ADD CONSTRAINT notification_deliveries_key UNIQUE USING INDEX notification_deliveries_key;
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_key UNIQUE (job_id, job_created_at, attempt);
CREATE INDEX job_attempts_by_message_id ON job_attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- Today's tables become the partitions before the cut. Their validated constraints (0014)
-- prove that their rows fit, so nothing is scanned; each index above finds its match.
DO $$
DECLARE
    cut timestamptz := (SELECT c.cut FROM job_history_cut AS c);
BEGIN
    EXECUTE format('ALTER TABLE job_requests ATTACH PARTITION notification_jobs
                        FOR VALUES FROM (MINVALUE) TO (%L)', cut);
    EXECUTE format('ALTER TABLE job_outcomes ATTACH PARTITION job_outcomes_before
                        FOR VALUES FROM (MINVALUE) TO (%L)', cut);
    EXECUTE format('ALTER TABLE job_attempts ATTACH PARTITION notification_deliveries
                        FOR VALUES FROM (MINVALUE) TO (%L)', cut);
END
$$;

-- Creates the partitions of the days from `first_day` on (`days` of them) that are missing,
-- for each history table: a table of the parent's shape, attached (the attach takes a lock
-- that blocks no read or write of the parent; a new table's indexes are built empty). Days
-- before the cut have their partition already. Returns how many it created. The sweeper
-- calls it every run for the days ahead.
CREATE FUNCTION job_history_add_days(first_day date, days int) RETURNS int
LANGUAGE plpgsql SET lock_timeout = '1s' AS $$
DECLARE
    cut  date := (SELECT (c.cut AT TIME ZONE 'UTC')::date FROM job_history_cut AS c);
    day  date;
    t    text;
    part text;
    made int := 0;
BEGIN
    -- one creator at a time (two sweepers)
    PERFORM pg_advisory_xact_lock(hashtext('job_history_add_days'));
    FOR day IN SELECT d::date FROM generate_series(greatest(first_day, cut),
                                                   first_day + days - 1,
                                                   interval '1 day') AS d LOOP
        FOREACH t IN ARRAY ARRAY['job_requests', 'job_outcomes', 'job_attempts'] LOOP
            part := t || '_' || to_char(day, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(part) IS NOT NULL;
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
                           || CASE WHEN t = 'job_requests' THEN ''
                                   ELSE ' WITH (autovacuum_vacuum_insert_scale_factor = 0.05)'
                              END,
                           part, t);
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           t, part, day::timestamp AT TIME ZONE 'UTC',
                           (day + 1)::timestamp AT TIME ZONE 'UTC');
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END
$$;

-- Drops every day whose end is at or before `cutoff`, when no job accepted that day (or
-- earlier) is still open: its three partitions, after deleting the day's idempotency keys.
-- Returns the days dropped (oldest first). The partitions before the cut are left to row
-- retention (prune.sql). Dropping a partition locks its parent for an instant; a lock not
-- granted in 1 s fails the call, and the next run tries again.
CREATE FUNCTION job_history_drop_days(cutoff timestamptz) RETURNS SETOF date
LANGUAGE plpgsql SET lock_timeout = '1s' AS $$
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
        DELETE FROM idempotency_keys
        WHERE job_created_at >= day::timestamp AT TIME ZONE 'UTC'
          AND job_created_at < day_end;
        EXECUTE format('DROP TABLE IF EXISTS %I, %I, %I',
                       'job_attempts_' || to_char(day, 'YYYYMMDD'),
                       'job_outcomes_' || to_char(day, 'YYYYMMDD'),
                       'job_requests_' || to_char(day, 'YYYYMMDD'));
        RETURN NEXT day;
    END LOOP;
END
$$;

-- The days from yesterday to a week ahead exist from the start.
SELECT job_history_add_days((now() AT TIME ZONE 'UTC')::date - 1, 9);

-- Where each job stands (0012), from the partitioned tables: the outcome row is looked up
-- under its job's day, so only that day's partition is read.
CREATE OR REPLACE VIEW job_states AS
SELECT j.id,
       j.organization_id,
       j.channel,
       j.payload,
       CASE WHEN q.claim_token IS NOT NULL THEN 'processing'::job_status
            WHEN q.last_error IS NOT NULL
                THEN 'failed'::job_status
            WHEN q.id IS NOT NULL THEN 'pending'::job_status
            ELSE coalesce(o.status, j.status) END AS status,
       CASE WHEN q.last_error IS NOT NULL
                THEN 'failed'::job_status
            WHEN q.id IS NOT NULL THEN 'pending'::job_status
            ELSE coalesce(o.status, j.status) END AS recorded_status,
       coalesce(q.attempts, o.attempts, j.attempts) AS attempts,
       coalesce(q.max_attempts, o.max_attempts, j.max_attempts) AS max_attempts,
       coalesce(q.tries, o.tries, j.tries) AS tries,
       coalesce(q.next_attempt_at, o.next_attempt_at, j.next_attempt_at) AS next_attempt_at,
       j.expires_at,
       j.created_at,
       CASE WHEN q.id IS NOT NULL THEN GREATEST(q.updated_at, q.claimed_at)
            ELSE coalesce(o.updated_at, j.updated_at) END AS updated_at,
       q.claim_token,
       q.claimed_at,
       CASE WHEN q.id IS NOT NULL THEN q.last_error
            WHEN o.job_id IS NOT NULL THEN o.last_error
            ELSE j.last_error END AS last_error,
       j.idempotency_key,
       j.request_hash,
       j.trace_header
FROM job_requests AS j
LEFT JOIN job_queue AS q ON q.id = j.id
LEFT JOIN job_outcomes AS o ON o.job_id = j.id AND o.created_at = j.created_at;
