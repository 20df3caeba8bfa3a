-- migrate: no-transaction
-- Issue 17, fourth storage step: a job's last attempt is written in its outcome row, not as
-- a row of its own. A job sent at its first try wrote two history rows, an attempt row
-- (job_attempts) and an outcome row (job_outcomes), each a heap tuple with its own index
-- entries; now it writes one, a little wider (`make bench` measures what each shape writes,
-- in its part 9).
--  * job_outcomes gains the attempt's columns. The worker's completion (complete.sql) fills
--    them when it ends a job; its attempt number is the row's `tries` (the claim's try
--    number), its outcome `dead` for a dead job, `sent` otherwise (feedback may have made the
--    job delivered or bounced since), and it is never fenced (a fenced completion ends
--    nothing). An outcome row without them (cancelled, expired, swept, or written before
--    this file) adds no attempt.
--  * job_attempts keeps every other attempt: retries, held attempts, the sweeper's `lost`
--    rows, late completions, and every attempt written before this file.
--  * job_attempt_history is the union the readers use: a job's attempts (GET), feedback
--    matching by provider message id, the tests' accounting.
--  * requeue (a dead job back in the queue) moves the inline attempt to job_attempts before
--    it deletes the outcome row.
-- The previous release, still running while a deploy rolls out, keeps working: it writes its
-- last attempts as rows of job_attempts, which read the same through the view. Its own reads
-- do not see the attempts the new release writes inline: for the minutes of a rollout its
-- GET lists a job's attempts without the last one, and its feedback leaves the events of
-- such a job waiting, for the sweeper of the new release (which applies what waits, every
-- minute) to apply.
--
-- Online: the columns are added to the parent (nullable, no default: a catalog change, no
-- row rewritten) with a bounded wait for the lock; the message-id index is built on each
-- partition CONCURRENTLY (no write waits for it; the partitions of the days before this file
-- hold no message id yet, so their indexes are empty) and attached to the parent's, which is
-- valid once every partition has its own. A partition the sweeper adds meanwhile gets its
-- index when it is attached.
DO $$
BEGIN
    SET LOCAL lock_timeout = '500ms';
    ALTER TABLE job_outcomes
        ADD COLUMN IF NOT EXISTS provider            text,
        ADD COLUMN IF NOT EXISTS provider_message_id text,
        ADD COLUMN IF NOT EXISTS error_code          text,
        ADD COLUMN IF NOT EXISTS error_message       text,
        ADD COLUMN IF NOT EXISTS started_at          timestamptz,
        ADD COLUMN IF NOT EXISTS finished_at         timestamptz;
    CREATE INDEX IF NOT EXISTS job_outcomes_by_message_id ON ONLY job_outcomes
        (provider_message_id) WHERE provider_message_id IS NOT NULL;
    -- Every attempt of every job: the rows of job_attempts, and the last attempt of a job
    -- that ended under the worker, from its outcome row (under its job's day: created_at).
    CREATE OR REPLACE VIEW job_attempt_history AS
    SELECT d.job_id, d.job_created_at, d.attempt, d.provider, d.provider_message_id,
           d.error_code, d.error_message, d.outcome, d.fenced, d.started_at, d.finished_at
    FROM job_attempts AS d
    UNION ALL
    SELECT o.job_id, o.created_at, o.tries, o.provider, o.provider_message_id,
           o.error_code, o.error_message,
           CASE WHEN o.status = 'dead' THEN 'dead' ELSE 'sent' END, false, o.started_at,
           o.finished_at
    FROM job_outcomes AS o
    WHERE o.started_at IS NOT NULL;
END
$$;
-- each partition without its index yet, CONCURRENTLY
SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I (provider_message_id) '
              'WHERE provider_message_id IS NOT NULL', c.relname || '_by_message_id', c.relname)
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = 'job_outcomes'::regclass
  AND NOT EXISTS (SELECT FROM pg_inherits AS ii
                  JOIN pg_index AS x ON x.indexrelid = ii.inhrelid
                  WHERE ii.inhparent = 'job_outcomes_by_message_id'::regclass
                    AND x.indrelid = c.oid)
ORDER BY c.relname \gexec
-- then attached to the parent's
SELECT format('ALTER INDEX job_outcomes_by_message_id ATTACH PARTITION %I',
              c.relname || '_by_message_id')
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = 'job_outcomes'::regclass
  AND to_regclass(quote_ident(c.relname || '_by_message_id')) IS NOT NULL
  AND NOT EXISTS (SELECT FROM pg_inherits AS ii
                  WHERE ii.inhparent = 'job_outcomes_by_message_id'::regclass
                    AND ii.inhrelid = to_regclass(quote_ident(c.relname || '_by_message_id')))
ORDER BY c.relname \gexec
