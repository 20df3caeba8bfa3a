-- Attempts mean provider calls that could have been the message's fault.
--
-- `attempts` is the budget spent (compared with max_attempts); `tries` counts every provider
-- call the job was claimed for, and numbers its delivery rows. An account or configuration
-- error, an outage, or a claim the worker gave back without calling the provider refunds the
-- attempt but keeps the try, so delivery rows stay one per call, never overwritten.
-- Jobs from before this migration have tries = 0: the claim numbers the next try after
-- GREATEST(tries, attempts), which continues their old numbering. No row is rewritten here.
ALTER TABLE notification_jobs ADD COLUMN tries int NOT NULL DEFAULT 0 CHECK (tries >= 0);

-- A job past its expiry is never sent: the claim skips it and the sweeper makes it `expired`.
-- NULL (jobs from before this migration) never expires. Ingest sets it from the request's
-- `expires_at`, else `send_at` + JOB_MAX_AGE_SECS.
ALTER TABLE notification_jobs ADD COLUMN expires_at timestamptz;
ALTER TYPE job_status ADD VALUE IF NOT EXISTS 'expired';

-- 'held': an attempt refunded (account/configuration trouble, or an outage), retried later.
-- 'expired': the sweeper's row for a job that expired before it could be delivered.
ALTER TABLE notification_deliveries
    DROP CONSTRAINT notification_deliveries_outcome_check,
    ADD CONSTRAINT notification_deliveries_outcome_check
        CHECK (outcome IN ('sent', 'retry', 'held', 'dead', 'lost', 'expired')) NOT VALID;
ALTER TABLE notification_deliveries VALIDATE CONSTRAINT notification_deliveries_outcome_check;
