-- migrate: no-transaction
-- Built CONCURRENTLY: both tables are large and written by every attempt on a deployed
-- service.

-- Feedback finds its attempt by the provider message id.
CREATE INDEX CONCURRENTLY IF NOT EXISTS notification_deliveries_by_message_id
    ON notification_deliveries (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- Retention finds every finished job, the final statuses added since 0003 included (an
-- index whose predicate names fewer statuses than prune.sql cannot serve it).
CREATE INDEX CONCURRENTLY IF NOT EXISTS notification_jobs_finished_any
    ON notification_jobs (updated_at)
    WHERE status IN ('sent', 'dead', 'cancelled', 'expired', 'delivered', 'bounced');
DROP INDEX CONCURRENTLY IF EXISTS notification_jobs_finished;
