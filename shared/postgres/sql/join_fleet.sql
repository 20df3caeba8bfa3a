-- A worker invocation joins the fleet: it takes over the slot its wake took for it (lease $1;
-- NULL for an invocation the schedule started) while that is still held for it, or else the
-- lowest free slot of the first $3 (WORKER_MAX_INVOCATIONS), and holds it until $2, when it
-- stops claiming. No row: the first $3 slots are all held, so as many workers run (or are
-- starting) as may, and this one claims nothing. $4 the current time (NULL: now()).
-- SKIP LOCKED: two invocations joining at once take two slots, never the same one.
WITH clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
),
mine AS (
    UPDATE worker_slots AS s
    SET until = $2, starting = false, updated_at = c.now
    FROM clock AS c
    WHERE s.lease = $1
      AND s.until > c.now
    RETURNING s.slot, s.lease
),
free AS (
    SELECT s.slot
    FROM worker_slots AS s, clock AS c
    WHERE s.until <= c.now
      AND s.slot <= $3
      AND NOT EXISTS (SELECT FROM mine)
    ORDER BY s.slot
    LIMIT 1
    FOR UPDATE OF s SKIP LOCKED
),
taken AS (
    UPDATE worker_slots AS s
    SET lease = gen_random_uuid(), until = $2, starting = false, updated_at = c.now
    FROM free, clock AS c
    WHERE s.slot = free.slot
    RETURNING s.slot, s.lease
)
SELECT slot, lease FROM mine
UNION ALL
SELECT slot, lease FROM taken
