-- The completions complete.sql did not apply (their claim token no longer held the claim),
-- each told apart by what its job's history already holds:
--  * a repeat: the completion committed before (its answer was lost on the way, or the claim
--    that followed it failed) and the worker records it again. Its attempt is recorded
--    already, by the statement that applied it: a job_attempts row of its try number that is
--    neither the sweeper's `lost` row nor fenced, or its job's outcome row holding that try.
--    Nothing changes; it comes back with `recorded` true.
--  * a late completion: the sweeper took the claim back (writing a `lost` row for the
--    attempt) while the worker was delivering. What the worker learnt is added to that row
--    once (the provider may have accepted the message after all), marked fenced; it comes
--    back with `recorded` false. A repeat of it changes nothing more.
-- A try number belongs to one claim (each claim counts the next), so neither kind can be
-- taken for the other.
-- $1 ids, $2 tries, $3 outcomes, $4 providers, $5 provider message ids, $6 error codes,
-- $7 error messages, $8 started, $9 finished, $10 the jobs' creation times,
-- $11, $12 the window [lo, hi) those times lie in: only their days' partitions are planned.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[],
                $7::text[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[])
         AS t(job_id, attempt, outcome, provider, provider_message_id, error_code,
              error_message, started_at, finished_at, job_created_at)
),
recorded AS (
    SELECT i.job_id
    FROM input AS i
    WHERE EXISTS (SELECT FROM job_attempts AS a
                  WHERE a.job_id = i.job_id AND a.job_created_at = i.job_created_at
                    AND a.attempt = i.attempt AND a.outcome <> 'lost' AND NOT a.fenced
                    AND a.job_created_at >= $11 AND a.job_created_at < $12)
       OR EXISTS (SELECT FROM job_outcomes AS o
                  WHERE o.job_id = i.job_id AND o.created_at = i.job_created_at
                    AND o.tries = i.attempt AND o.started_at IS NOT NULL
                    AND o.created_at >= $11 AND o.created_at < $12)
),
late AS (
    INSERT INTO job_attempts AS d
        (job_id, job_created_at, attempt, provider, provider_message_id, error_code,
         error_message, outcome, fenced, started_at, finished_at)
    SELECT i.job_id, i.job_created_at, i.attempt, i.provider, i.provider_message_id,
           i.error_code, i.error_message, i.outcome, true, i.started_at, i.finished_at
    FROM input AS i
    WHERE i.job_id NOT IN (SELECT job_id FROM recorded)
    ON CONFLICT (job_id, job_created_at, attempt) DO UPDATE
    SET provider_message_id = COALESCE(d.provider_message_id, EXCLUDED.provider_message_id),
        error_message       = concat_ws('; ', d.error_message,
                                        'late completion: ' || EXCLUDED.outcome),
        fenced              = true
    WHERE NOT d.fenced
)
SELECT i.job_id AS id, i.job_id IN (SELECT job_id FROM recorded) AS recorded
FROM input AS i
