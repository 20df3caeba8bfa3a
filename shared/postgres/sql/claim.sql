-- Claim up to $1 due jobs in one statement that commits before any delivery. $2 is the
-- current time (NULL: the server's now(); tests pass a time instead of ageing rows).
-- The claim reads and writes the queue (job_queue: open jobs), and reads each claimed job's
-- payload from its request by id and day, so it costs the same however much history
-- job_requests holds.
-- Lanes: due `high` jobs first, then `normal`, then `low`, each oldest first. Each lane is
-- one range of job_queue_lanes (priority, next_attempt_at), read in order and only as far
-- as the batch still needs: a deep `low` lane costs nothing while `high` jobs fill the
-- batch, and jobs scheduled for later are never read (one ordered scan over all lanes would
-- pass over every lane's future jobs before the next lane's due ones).
-- How: a nested loop over the three lanes, in the order listed (the lateral subquery refers
-- to the lane, so the lanes are the loop's outer side), each lane's rows read, and locked,
-- only as the outer LIMIT pulls them. When the batch is full the loop stops: the rest of a
-- lane, and the lanes after it, are neither read nor locked. One subquery for the three
-- lanes also keeps the statement cheap to plan, which it is on every call (unnamed).
-- SKIP LOCKED: rows another claimer holds are skipped, never waited for, and do not count
-- against the LIMITs (they apply to the rows locked).
-- The UPDATE changes no indexed column, so the claimed version of the row stays on its page
-- with no new index entry (a HOT update); the claimed rows stay in job_queue_lanes, where
-- the scans below pass over them (the jobs in flight).
-- claim_fair.sql picks its `due` rows otherwise and claims them with this same UPDATE (the
-- part `update`, copied there by the build); complete.sql holds both parts, and orders its
-- answer as this does.
-- Why this shape: docs/decisions/0004-claim-with-skip-locked.md, and
-- docs/decisions/0011-pace-and-priority-lanes.md for the lanes.
WITH due AS (
    -- @part due
    SELECT lane_due.id
    FROM (VALUES ('high'::job_priority), ('normal'::job_priority), ('low'::job_priority))
         AS lane (priority)
    CROSS JOIN LATERAL (
        SELECT id
        FROM job_queue
        WHERE priority = lane.priority
          AND claim_token IS NULL
          AND next_attempt_at <= coalesce($2::timestamptz, now())
          -- an expired job is never sent (the sweeper marks it expired)
          AND (expires_at IS NULL OR expires_at > coalesce($2::timestamptz, now()))
        ORDER BY next_attempt_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS lane_due
    -- the batch: the lanes together give at most $1 (each lane's own LIMIT only bounds
    -- that lane)
    LIMIT $1
    -- @end due
),
claimed AS (
    -- @part update
    UPDATE job_queue AS q
    SET attempts    = q.attempts + 1,
        tries       = GREATEST(q.tries, q.attempts) + 1,
        claimed_at  = coalesce($2::timestamptz, now()),
        claim_token = gen_random_uuid()
    FROM due
    WHERE q.id = due.id
    RETURNING q.id, q.organization_id, q.channel,
              -- the payload, stored once: the request's, one probe of job_requests_key in
              -- the partition of the job's day (a subquery per row: never a join the planner
              -- could turn into a scan of the partitions); the queue row's copy where ingest
              -- still writes one (migration 0012)
              coalesce(q.payload,
                       (SELECT r.payload FROM job_requests AS r
                        WHERE r.id = q.id AND r.created_at = q.created_at)) AS payload,
              q.attempts, q.max_attempts, q.tries, q.claim_token, q.claimed_at,
              q.trace_header, q.created_at,
              -- the batch's order, for the answer
              q.priority, q.next_attempt_at
    -- @end update
)
-- the answer in the batch's order, which is the order the worker calls the providers in:
-- lane by lane, each lane's oldest first. The UPDATE's join keeps no order of its own (with
-- a nested loop it happens to keep the lanes'; with a hash join it does not), so the answer
-- is sorted: a batch's few rows, in memory.
SELECT c.id, c.organization_id, c.channel, c.payload, c.attempts, c.max_attempts, c.tries,
       c.claim_token, c.claimed_at, c.trace_header, c.created_at,
       -- @part suppressed
       -- the recipient was suppressed after the job was accepted: the worker ends it `dead`
       -- without calling the provider
       EXISTS (SELECT FROM suppressions AS s
               WHERE s.organization_id = c.organization_id
                 AND s.recipient = c.payload ->> 'to') AS suppressed
       -- @end suppressed
FROM claimed AS c
ORDER BY c.priority, c.next_attempt_at
