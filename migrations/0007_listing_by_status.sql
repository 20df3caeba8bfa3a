-- migrate: no-transaction
-- Listing filtered by status reads this index (organization, status, created_at, id) instead
-- of every job of the organization. Built CONCURRENTLY, so a deployed queue keeps claiming
-- and ingesting while it builds: the runner applies this file outside a transaction, one
-- statement at a time, and then checks that the index is valid.
CREATE INDEX CONCURRENTLY IF NOT EXISTS notification_jobs_listing_by_status
    ON notification_jobs (organization_id, status, created_at, id);
