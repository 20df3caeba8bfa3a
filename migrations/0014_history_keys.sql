-- migrate: no-transaction
-- Issue 17, third storage step, part one: what the tables of a job's history need before
-- 0015 makes each of them the first partition of a table partitioned by the job's creation
-- day. Nothing here blocks the previous release for more than an instant: the keys are built
-- CONCURRENTLY, the constraints are added NOT VALID and validated apart (a scan that blocks
-- no write), and the new column has a constant default (no rewrite).
--
-- The cut: jobs accepted before it keep their history in today's tables (notification_jobs,
-- job_outcomes, notification_deliveries), which 0015 attaches as the partition "before the
-- cut", aged out row by row under retention as before. Jobs accepted from it on go to one
-- partition per day, which retention drops whole. On a database that holds jobs, the cut
-- is the second midnight (UTC) from now, after any deploy window: the previous release,
-- still running while a deploy rolls out, inserts into today's tables directly, and its rows
-- must fall before the cut. On an empty database it is today's midnight.
CREATE TABLE IF NOT EXISTS job_history_cut (
    single bool PRIMARY KEY DEFAULT true CHECK (single),
    cut    timestamptz NOT NULL
);
INSERT INTO job_history_cut (cut)
SELECT date_trunc('day', now(), 'UTC')
       + CASE WHEN EXISTS (SELECT FROM notification_jobs) THEN interval '2 days'
              ELSE interval '0 days' END
ON CONFLICT (single) DO NOTHING;

-- Idempotency keys leave the job records: a unique index on a partitioned table must include
-- the partition key, so keys by day would let a key be used again the next day. One row per
-- keyed job, kept as long as its job (retention deletes the keys of a day before it drops the
-- day's partitions: job_history_drop_days in 0015).
CREATE TABLE IF NOT EXISTS idempotency_keys (
    organization_id uuid NOT NULL,
    idempotency_key text NOT NULL,
    job_id          uuid NOT NULL,
    job_created_at  timestamptz NOT NULL,
    PRIMARY KEY (organization_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_by_day ON idempotency_keys (job_created_at);

-- The previous release inserts keyed jobs into notification_jobs directly (its ON CONFLICT
-- reads that table's own unique index, which stays): their keys are copied as they come.
CREATE OR REPLACE FUNCTION idempotency_keys_remember() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idempotency_keys (organization_id, idempotency_key, job_id, job_created_at)
    VALUES (NEW.organization_id, NEW.idempotency_key, NEW.id, NEW.created_at)
    ON CONFLICT (organization_id, idempotency_key) DO NOTHING;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER idempotency_keys_remember
    AFTER INSERT ON notification_jobs
    FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION idempotency_keys_remember();

-- The keys already used (after the trigger, so none is missed). Reads the records and
-- blocks nobody.
INSERT INTO idempotency_keys (organization_id, idempotency_key, job_id, job_created_at)
SELECT organization_id, idempotency_key, id, created_at
FROM notification_jobs
WHERE idempotency_key IS NOT NULL
ON CONFLICT (organization_id, idempotency_key) DO NOTHING;

-- Each delivery row names its job's creation time, the key of the partitioned attempts
-- table. The rows already written, and those the previous release writes, say -infinity
-- ("before the cut"): the reads look for a job's attempts under both.
DO $$
BEGIN
    SET LOCAL lock_timeout = '500ms';
    ALTER TABLE notification_deliveries
        ADD COLUMN IF NOT EXISTS job_created_at timestamptz NOT NULL DEFAULT '-infinity';
END
$$;

-- The unique keys the partitioned tables will have (a unique key there must include the
-- partition key); 0015 turns these indexes into constraints, which the attach matches.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS notification_jobs_key
    ON notification_jobs (id, created_at);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS job_outcomes_key
    ON job_outcomes (job_id, created_at);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS notification_deliveries_key
    ON notification_deliveries (job_id, job_created_at, attempt);
-- Provider feedback is kept for the retention period after it arrived (it was deleted
-- with its job's record, a foreign key 0015 drops).
CREATE INDEX CONCURRENTLY IF NOT EXISTS delivery_feedback_received
    ON delivery_feedback (received_at);

-- "Before the cut", as constraints the attach can trust without scanning under its lock:
-- added NOT VALID (an instant's lock, one table per statement, so this file never holds one
-- table's lock while it waits for another's: the previous release takes them in its own
-- order; the first version of this file took two in one statement and deadlocked with its
-- ingest in tests/tests/online_migration.rs), then validated by a scan that blocks no write.
-- The lock waits are shorter than the server's deadlock_timeout (1 s by default), so this
-- file gives up first, and the runner runs the statement again.
DO $$
BEGIN
    SET LOCAL lock_timeout = '500ms';
    ALTER TABLE notification_jobs DROP CONSTRAINT IF EXISTS notification_jobs_before_cut;
    EXECUTE format('ALTER TABLE notification_jobs ADD CONSTRAINT notification_jobs_before_cut
                        CHECK (created_at < %L) NOT VALID',
                   (SELECT cut FROM job_history_cut));
END
$$;
DO $$
BEGIN
    SET LOCAL lock_timeout = '500ms';
    IF to_regclass('job_outcomes_before') IS NULL THEN -- not yet renamed by 0015
        ALTER TABLE job_outcomes DROP CONSTRAINT IF EXISTS job_outcomes_before_cut;
        EXECUTE format('ALTER TABLE job_outcomes ADD CONSTRAINT job_outcomes_before_cut
                            CHECK (created_at < %L) NOT VALID',
                       (SELECT cut FROM job_history_cut));
    END IF;
END
$$;
DO $$
BEGIN
    SET LOCAL lock_timeout = '500ms';
    ALTER TABLE notification_deliveries
        DROP CONSTRAINT IF EXISTS notification_deliveries_before_cut;
    EXECUTE format('ALTER TABLE notification_deliveries
                        ADD CONSTRAINT notification_deliveries_before_cut
                        CHECK (job_created_at < %L) NOT VALID',
                   (SELECT cut FROM job_history_cut));
END
$$;
ALTER TABLE notification_jobs VALIDATE CONSTRAINT notification_jobs_before_cut;
ALTER TABLE job_outcomes VALIDATE CONSTRAINT job_outcomes_before_cut;
ALTER TABLE notification_deliveries VALIDATE CONSTRAINT notification_deliveries_before_cut;
