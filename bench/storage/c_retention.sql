-- C retention: one UTC day (psql variable day, YYYY-MM-DD) of jobs goes by detaching and
-- dropping its three partitions. DETACH … CONCURRENTLY takes no ACCESS EXCLUSIVE lock on the
-- parent (ingest and the worker go on; it waits for transactions that might still see the
-- partition), and the DROP of a detached table touches nothing else. Refused while a job
-- created that day is still open (in job_queue): a job scheduled up to 30 days ahead.
SELECT format('%s_%s', t, to_char(:'day'::date, 'YYYYMMDD')) AS part_requests
FROM (VALUES ('job_requests')) AS v(t) \gset
SELECT format('%s_%s', t, to_char(:'day'::date, 'YYYYMMDD')) AS part_attempts
FROM (VALUES ('job_attempts')) AS v(t) \gset
SELECT format('%s_%s', t, to_char(:'day'::date, 'YYYYMMDD')) AS part_outcomes
FROM (VALUES ('job_outcomes')) AS v(t) \gset
SELECT EXISTS (SELECT FROM job_queue
               WHERE created_at < ((:'day'::date + 1)::timestamp AT TIME ZONE 'UTC')) AS still_open \gset
\if :still_open
\echo 'retention: a job created on' :'day' 'is still open; nothing dropped'
\quit
\endif
ALTER TABLE job_requests DETACH PARTITION :"part_requests" CONCURRENTLY;
ALTER TABLE job_attempts DETACH PARTITION :"part_attempts" CONCURRENTLY;
ALTER TABLE job_outcomes DETACH PARTITION :"part_outcomes" CONCURRENTLY;
DROP TABLE :"part_requests", :"part_attempts", :"part_outcomes";
