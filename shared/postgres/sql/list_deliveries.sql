-- A job's attempts in order, each with the provider feedback recorded against it: its rows
-- of job_attempts and the last attempt its outcome row holds (job_attempt_history), read in
-- the partitions of the days its id gives only.
SELECT d.attempt, d.provider, d.provider_message_id, d.error_code, d.error_message, d.outcome,
       d.fenced, d.started_at, d.finished_at,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'type', f.kind, 'subtype', f.subtype, 'diagnostic', f.diagnostic,
                   'occurred_at', f.occurred_at) ORDER BY f.occurred_at, f.id), '[]')
        FROM delivery_feedback AS f
        WHERE f.job_id = d.job_id AND f.attempt = d.attempt) AS feedback
FROM job_attempt_history AS d
WHERE d.job_id = $1
  AND d.job_created_at >= job_created_after($1) AND d.job_created_at < job_created_before($1)
ORDER BY d.attempt
