-- Drop rate-limit windows older than an hour before $1 (the current time; NULL: now()); they
-- only matter for the current minute.
WITH claims AS (
    DELETE FROM organization_claim_counts WHERE minute < coalesce($1::timestamptz, now()) - interval '1 hour'
)
DELETE FROM organization_ingest_counts WHERE minute < coalesce($1::timestamptz, now()) - interval '1 hour'
