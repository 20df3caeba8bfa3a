-- Drop rate-limit windows older than an hour (they only matter for the current minute).
WITH claims AS (
    DELETE FROM organization_claim_counts WHERE minute < now() - interval '1 hour'
)
DELETE FROM organization_ingest_counts WHERE minute < now() - interval '1 hour'
