-- migrate: no-transaction
-- The lanes' indexes, built without blocking writes (migrate.rs runs this file statement by
-- statement, outside a transaction), then the indexes they replace dropped the same way.
-- claim.sql reads each lane's due jobs in order, a range of job_queue_lanes per lane.
-- Between the drops and the deploy of this release, the 1.0 release's claim (ORDER BY
-- next_attempt_at) sorts the due jobs instead of reading them in order: slower on a deep
-- queue, still correct.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_queue_lanes
    ON job_queue (priority, next_attempt_at);
-- claim_fair.sql: each organization's due jobs, lane by lane
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_queue_lanes_by_org
    ON job_queue (organization_id, priority, next_attempt_at);
DROP INDEX CONCURRENTLY IF EXISTS job_queue_next;
DROP INDEX CONCURRENTLY IF EXISTS job_queue_next_by_org;
