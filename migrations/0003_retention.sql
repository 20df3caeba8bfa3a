-- Retention: the sweeper prunes finished jobs (sent, dead) older than RETENTION_DAYS.
-- This index finds them without scanning the live queue.
CREATE INDEX notification_jobs_finished
    ON notification_jobs (updated_at)
    WHERE status IN ('sent', 'dead');
