-- The fair, rate-limited claim (used when RATE_LIMIT_PER_ORG_PER_MIN is set).
-- $1 batch size, $2 the current time (NULL: now()), $3 the default jobs per organization per
-- minute (overrides in organization_rate_limits). $1 and $2 as in claim.sql, whose UPDATE
-- ends this statement. Like claim.sql it reads the queue (job_queue), open jobs only.
--  * Each organization with due jobs offers at most what is left of its budget this minute,
--    its highest lane first; the batch takes them lane by lane (`high`, `normal`, `low`),
--    and within a lane round-robin (every organization's oldest first), so a noisy tenant
--    cannot fill a batch while another waits, and no tenant's `low` jobs go before
--    another's `high` ones.
--  * The budget is reserved by an upsert on organization_claim_counts, which works on the
--    latest committed count (not this statement's snapshot): concurrent claimers never take
--    more than the budget together.
--  * SKIP LOCKED as in claim.sql: rows another claimer holds are skipped. The rows are
--    chosen first and only the chosen ones locked, so a claim locks at most $1 rows however
--    many organizations have due jobs.
--  * The claim itself is claim.sql's UPDATE (its part `update`), copied below by the build.
--    Its answer is put back in the batch's order, which a join does not keep.
-- Why this shape: docs/decisions/0005-fair-claim-per-organization.md.
WITH RECURSIVE orgs AS (
    -- the organizations with due jobs, one index probe each (a loose index scan)
    (SELECT organization_id
     FROM job_queue
     WHERE claim_token IS NULL AND next_attempt_at <= coalesce($2::timestamptz, now())
     ORDER BY organization_id
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.organization_id
            FROM job_queue AS j
            WHERE j.claim_token IS NULL AND j.next_attempt_at <= coalesce($2::timestamptz, now())
              AND j.organization_id > orgs.organization_id
            ORDER BY j.organization_id
            LIMIT 1)
    FROM orgs
    WHERE orgs.organization_id IS NOT NULL
),
-- an override of 0 means what RATE_LIMIT_PER_ORG_PER_MIN=0 means: no limit
limits AS (
    SELECT o.organization_id,
           CASE WHEN l.per_minute = 0 THEN 2147483647 ELSE coalesce(l.per_minute, $3::int) END
               AS per_minute
    FROM orgs AS o
    LEFT JOIN organization_rate_limits AS l ON l.organization_id = o.organization_id
    WHERE o.organization_id IS NOT NULL
),
budgets AS (
    SELECT o.organization_id,
           o.per_minute,
           GREATEST(o.per_minute - coalesce(c.claimed, 0), 0) AS left_now
    FROM limits AS o
    LEFT JOIN organization_claim_counts AS c
           ON c.organization_id = o.organization_id
          AND c.minute = date_trunc('minute', coalesce($2::timestamptz, now()))
),
-- the next rows in line: read, not locked (a claim must lock only what it claims)
candidates AS (
    SELECT c.id, c.organization_id, c.priority, c.next_attempt_at,
           row_number() OVER (PARTITION BY c.organization_id, c.priority
                              ORDER BY c.next_attempt_at) AS turn
    FROM budgets AS b
    CROSS JOIN LATERAL (
        -- job_queue_lanes_by_org, in order
        SELECT id, organization_id, priority, next_attempt_at
        FROM job_queue
        WHERE organization_id = b.organization_id
          AND claim_token IS NULL
          AND next_attempt_at <= coalesce($2::timestamptz, now())
          AND (expires_at IS NULL OR expires_at > coalesce($2::timestamptz, now()))
        ORDER BY priority, next_attempt_at
        LIMIT LEAST(b.left_now::bigint, $1::bigint)
    ) AS c
),
chosen AS (
    SELECT id, priority, turn
    FROM candidates
    ORDER BY priority, turn, next_attempt_at
    LIMIT $1::bigint
),
-- only the chosen rows are locked; one another claimer holds (or claimed since this
-- statement's snapshot: the conditions are checked again on the latest row) is skipped
locked AS (
    SELECT j.id, j.organization_id, ch.priority, ch.turn, j.next_attempt_at
    FROM job_queue AS j
    JOIN chosen AS ch ON ch.id = j.id
    WHERE j.claim_token IS NULL
      AND j.next_attempt_at <= coalesce($2::timestamptz, now())
      AND (j.expires_at IS NULL OR j.expires_at > coalesce($2::timestamptz, now()))
    FOR UPDATE OF j SKIP LOCKED
),
-- each organization's locked rows in its own order (a skipped row leaves no gap)
picked AS (
    SELECT id, organization_id,
           row_number() OVER (PARTITION BY organization_id ORDER BY priority, turn) AS turn
    FROM locked
),
wanted AS (
    SELECT p.organization_id, count(*)::int AS n, b.per_minute
    FROM picked AS p
    JOIN budgets AS b ON b.organization_id = p.organization_id
    GROUP BY p.organization_id, b.per_minute
),
reserved AS (
    INSERT INTO organization_claim_counts AS t
        (organization_id, minute, claimed, per_minute, granted)
    SELECT organization_id, date_trunc('minute', coalesce($2::timestamptz, now())), LEAST(n, per_minute), per_minute,
           LEAST(n, per_minute)
    FROM wanted
    ON CONFLICT (organization_id, minute) DO UPDATE
    SET granted    = LEAST(EXCLUDED.granted, GREATEST(EXCLUDED.per_minute - t.claimed, 0)),
        claimed    = t.claimed
                     + LEAST(EXCLUDED.granted, GREATEST(EXCLUDED.per_minute - t.claimed, 0)),
        per_minute = EXCLUDED.per_minute
    RETURNING organization_id, granted
),
due AS (
    SELECT p.id
    FROM picked AS p
    JOIN reserved AS r ON r.organization_id = p.organization_id
    WHERE p.turn <= r.granted
),
-- the claim: claim.sql's UPDATE, whose answer comes in the order of its join
claimed AS (
    -- @include claim.sql#update
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
    -- @end claim.sql#update
)
-- the answer in the batch's order, which is the order the worker calls the providers in:
-- lane by lane, round-robin across organizations within a lane, each organization's oldest
-- first
SELECT c.id, c.organization_id, c.channel, c.payload, c.attempts, c.max_attempts, c.tries,
       c.claim_token, c.claimed_at, c.trace_header, c.created_at,
       -- @include claim.sql#suppressed
       -- the recipient was suppressed after the job was accepted: the worker ends it `dead`
       -- without calling the provider
       EXISTS (SELECT FROM suppressions AS s
               WHERE s.organization_id = c.organization_id
                 AND s.recipient = c.payload ->> 'to') AS suppressed
       -- @end claim.sql#suppressed
FROM claimed AS c
JOIN locked AS l ON l.id = c.id
ORDER BY l.priority, l.turn, l.next_attempt_at
