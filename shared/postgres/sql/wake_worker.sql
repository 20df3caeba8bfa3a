-- Wake: take slot 1 for a worker invocation about to be started, when no worker holds a slot
-- (none runs, none is starting), and answer the lease the started invocation joins with. No
-- row: a worker runs or is starting and will claim what is due, so no wake is sent.
-- $1 how long the started invocation has to join, in seconds (then the slot is free again:
-- a lost wake blocks the next one that long at most); $2 true: only when a job is due and
-- unclaimed (a worker handing over at its deadline); $3 the current time (NULL: now()).
-- Run after the commit that made a job due (never inside it): a worker that leaves frees its
-- slot, commits, then claims once more, so this statement either sees the leaving worker's
-- slot, and then the job committed before that last claim, which takes it, or sees no slot
-- and wakes (the race of leaving, closed without a lock).
-- Concurrent wakers queue on slot 1's row lock; each after the first finds it held again
-- (the UPDATE re-reads the row it waited for) and wakes nobody: a burst starts one worker.
-- With a worker running, slot 1 or another is held and the statement reads a few rows and
-- writes none.
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
)
UPDATE worker_slots AS s
SET lease      = gen_random_uuid(),
    until      = c.now + make_interval(secs => $1::float8),
    starting   = true,
    updated_at = c.now
FROM clock AS c
WHERE s.slot = 1
  AND s.until <= c.now
  AND NOT EXISTS (SELECT FROM worker_slots AS held WHERE held.until > c.now)
  AND (NOT $2::boolean
       OR EXISTS (SELECT FROM job_queue AS q
                  WHERE q.claim_token IS NULL
                    AND q.next_attempt_at <= c.now
                    AND (q.expires_at IS NULL OR q.expires_at > c.now)))
RETURNING s.lease
