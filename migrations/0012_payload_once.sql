-- A job's payload is stored once, in its request (job_requests), where ingest writes it and
-- history keeps it; the queue row no longer carries a copy. The claim reads the request's
-- payload by its id and day (one index probe into one partition: claim.sql). An email's
-- payload is most of what a job writes, and the copy was written at ingest and again by
-- every update of the queue row that moved it off its page (docs/decisions/
-- 0017-payload-stored-once.md, with the figures).
--
-- A release before this one claims the queue row's copy: while one may still run, ingest and
-- requeue keep writing it. So the copy is kept where the database is upgraded, and dropped
-- where it is installed fresh (no earlier release ever ran against it): the migration runner
-- says which (notify.migrating_from: the version its run started from). Once every function
-- of an upgraded stack runs this release, and no rollback to an earlier one is wanted, the
-- operator ends the copy (docs/operations.md, "Upgrading from 1.0"):
--     UPDATE queue_settings SET copies_payload = false;
-- The claim of this release reads the copy when there is one, and the request otherwise.
--
-- Online against the 1.0 release (tests/it/online_migration.rs): NOT NULL dropped from a
-- column (a catalog change under a short lock timeout; the runner tries again) and a new
-- table. 1.0 keeps writing and reading its copy.
SET LOCAL lock_timeout = '500ms';

ALTER TABLE job_queue ALTER COLUMN payload DROP NOT NULL;

-- One row: whether ingest and requeue copy each payload into the queue row.
CREATE TABLE queue_settings (
    id             boolean PRIMARY KEY DEFAULT true CHECK (id),
    copies_payload boolean NOT NULL
);
INSERT INTO queue_settings (copies_payload)
VALUES (coalesce(current_setting('notify.migrating_from', true), '1')::int > 0);
