-- The X-Ray trace header of the request that created the job (`Root=1-…;Parent=…;Sampled=…`),
-- NULL when there was none. The worker logs it with the job id on the delivery's log lines and
-- passes it as `X-Amzn-Trace-Id` on the provider call, so one notification can be followed
-- from its POST to SNS or SES. Ingest keeps at most 256 printable ASCII characters (checked
-- there: a CHECK here would scan the whole table under an exclusive lock).
-- A nullable column without a default: a catalog change, no row is rewritten.
ALTER TABLE notification_jobs ADD COLUMN trace_header text;
