-- Drop events that waited longer than $1 seconds for an attempt with their provider message
-- id (a message this service did not send, or one whose attempt was never recorded), up to
-- $2 rows. $3 the current time (NULL: now()). Returns how many were dropped.
WITH gone AS (
    DELETE FROM delivery_feedback
    WHERE id IN (SELECT id FROM delivery_feedback
                 WHERE applied_at IS NULL
                   AND received_at < coalesce($3::timestamptz, now()) - make_interval(secs => $1)
                 ORDER BY received_at
                 LIMIT $2)
    RETURNING 1
)
SELECT count(*)::bigint AS dropped FROM gone
