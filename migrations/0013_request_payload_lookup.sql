-- The claim's lookup of a claimed job's payload in its request, as a function whose plan is
-- kept per connection. Written inline (a scalar subquery in claim.sql), the lookup named
-- every day's partition of job_requests, and the claim was planned with all of them on every
-- call: with 30 days of history, planning cost more than the claim's work (docs/decisions/
-- 0019-payload-lookup-planned-once.md, with the figures). PL/pgSQL plans its query once per
-- connection and keeps the plan (a generic one after five calls); the partition is chosen as
-- it runs, one index probe of job_requests_key in the job's day.
--
-- Online against the 1.0 release (tests/it/online_migration.rs): a new function, nothing
-- else; 1.0 never calls it.
CREATE FUNCTION request_payload(job_id uuid, job_created_at timestamptz) RETURNS jsonb
    LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN (SELECT r.payload FROM job_requests AS r
            WHERE r.id = job_id AND r.created_at = job_created_at);
END
$$;
