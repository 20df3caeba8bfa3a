-- Priority lanes (docs/decisions/0011-pace-and-priority-lanes.md).
--
-- Applied online against the 1.0 release in a test (tests/it/online_migration.rs). Adding a
-- column with a constant default rewrites nothing (the default is kept in the catalog), so
-- ALTER TABLE holds its ACCESS EXCLUSIVE lock on job_requests (and its partitions) and
-- job_queue for an instant. The lane indexes are built CONCURRENTLY by the next file.

-- The two ALTERs lock job_queue and job_requests in turn, and 1.0's statements lock them in
-- either order (ingest job_requests first, the sweeper job_queue first): waiting behind one
-- of them while it waits behind this file is a deadlock, which PostgreSQL breaks by killing
-- one side after deadlock_timeout (1 s), maybe the 1.0 statement. Giving up first (this
-- lock_timeout) rolls this file back instead, and the runner tries it again shortly
-- (migrate.rs): the 1.0 release waits at most this long and never fails.
SET LOCAL lock_timeout = '200ms';

-- A job's lane: the claim takes due `high` jobs first, then `normal`, then `low`, each
-- oldest first. The enum sorts in this order.
CREATE TYPE job_priority AS ENUM ('high', 'normal', 'low');

-- as the caller asked (GET and the listing show it); 1.0's ingest, still serving during a
-- deploy, inserts without it: `normal`
ALTER TABLE job_requests ADD COLUMN priority job_priority NOT NULL DEFAULT 'normal';
-- a copy of the request's: the claim reads no other table
ALTER TABLE job_queue ADD COLUMN priority job_priority NOT NULL DEFAULT 'normal';
