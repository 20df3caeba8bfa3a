-- migrate: no-transaction
-- The claim becomes a HOT update (issue 17): no index of job_queue names a column the claim
-- changes (claim_token, claimed_at, attempts, tries), so the new row version goes on the
-- same page with no index entry, and only the changed bytes are logged. The partial indexes
-- of 0011 (`WHERE claim_token IS NULL`) named the claim token in their predicates, which made
-- every claim write an entry in the primary key and in the sweeper's index.
--  * The claim and the fair claim read the due time in order and skip the claimed rows:
--    at most the jobs in flight (workers × batch), which the claim finds at the head of
--    the index.
--  * The sweeper reads the queue itself (open jobs only; once a minute).
--  * Listing the open jobs reads the queue by (organization, created_at, id).
--  * fillfactor 50: room on each page for the claimed versions of its rows.
-- The previous release's statements work unchanged on these indexes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_queue_next ON job_queue (next_attempt_at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_queue_next_by_org
    ON job_queue (organization_id, next_attempt_at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_queue_listing
    ON job_queue (organization_id, created_at, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_queue_expires
    ON job_queue (expires_at) WHERE expires_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS job_queue_due;
DROP INDEX CONCURRENTLY IF EXISTS job_queue_due_by_org;
DROP INDEX CONCURRENTLY IF EXISTS job_queue_claimed;
DROP INDEX CONCURRENTLY IF EXISTS job_queue_expiring;
ALTER TABLE job_queue SET (fillfactor = 50);
