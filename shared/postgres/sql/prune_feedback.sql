-- Deletes up to $2 provider events received more than $1 days before $3 (the current time;
-- NULL: now()), oldest first; returns how many. Events are kept as long after they arrived
-- as a job's history after it ended. SKIP LOCKED: never waits on anyone.
WITH gone AS (
    DELETE FROM delivery_feedback
    WHERE id IN (SELECT id FROM delivery_feedback
                 WHERE received_at < coalesce($3::timestamptz, now()) - make_interval(days => $1)
                 ORDER BY received_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS pruned FROM gone
