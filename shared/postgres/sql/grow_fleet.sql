-- Fan-out: take up to $1 free slots of the first $2 (WORKER_MAX_INVOCATIONS) for worker
-- invocations about to be started, each held for $3 seconds for its invocation to join
-- (join_fleet.sql), then free again; answers one lease per slot taken, which the caller
-- hands to the invocation it starts. $4 the current time (NULL: now()).
-- SKIP LOCKED: slots being taken by a concurrent joiner or waker are passed over, and
-- however many take at once, the held slots never exceed $2.
WITH clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
),
free AS (
    SELECT s.slot
    FROM worker_slots AS s, clock AS c
    WHERE s.until <= c.now
      AND s.slot <= $2
    ORDER BY s.slot
    LIMIT $1
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE worker_slots AS s
SET lease      = gen_random_uuid(),
    until      = c.now + make_interval(secs => $3::float8),
    starting   = true,
    updated_at = c.now
FROM free, clock AS c
WHERE s.slot = free.slot
RETURNING s.lease
