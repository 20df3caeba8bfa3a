-- The jobs $1 as they stand, all accepted within [$2, $3) (their days, from
-- idempotency_key_jobs.sql). The window is a parameter, so the statement is planned over
-- those days' partitions only (job_states_between, 0017_one_day_per_lookup.sql): joined to
-- the key rows in one statement, it was planned over every day kept (about 7 ms with 39).
SELECT s.id, s.status::text, s.next_attempt_at, s.request_hash, s.idempotency_key
FROM job_states_between($2, $3) AS s
WHERE s.id = ANY($1::uuid[])
