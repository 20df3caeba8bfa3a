-- C2 retention, second part (after c_retention.sql has dropped the day's partitions): the
-- keys of jobs older than $1 days before $3 (NULL: now()), up to $2 per batch; the sweeper's
-- loop runs it until it deletes nothing.
WITH doomed AS (
    SELECT organization_id, idempotency_key
    FROM idempotency_keys
    WHERE created_at < coalesce($3::timestamptz, now()) - make_interval(days => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys AS k
USING doomed AS d
WHERE k.organization_id = d.organization_id AND k.idempotency_key = d.idempotency_key
