-- The fleet's census, for the decision to start more workers: taken by one worker at a time,
-- at most once every $1 seconds fleet-wide (the turn, worker_fleet's row); the worker whose
-- turn it is learns how many slots are held (`held`: workers running or starting) and how
-- many jobs are due and unclaimed, counted up to $2 (the most the decision can use). The
-- others get `turn` false and nothing counted, and decide nothing: workers deciding together
-- never start the same missing worker twice, and the backlog is counted once a turn.
-- $3 the current time (NULL: now()).
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
),
turn AS (
    UPDATE worker_fleet AS f
    SET decided_at = c.now
    FROM clock AS c
    WHERE f.decided_at <= c.now - make_interval(secs => $1::float8)
    RETURNING true AS taken
)
SELECT t.taken AS turn,
       CASE WHEN t.taken
            THEN (SELECT count(*) FROM worker_slots AS s WHERE s.until > c.now)
            ELSE 0 END AS held,
       -- counted only on the turn: a CASE evaluates the subquery only when it is needed
       CASE WHEN t.taken
            THEN (SELECT count(*)
                  FROM (SELECT
                        FROM job_queue AS q
                        WHERE q.claim_token IS NULL
                          AND q.next_attempt_at <= c.now
                          AND (q.expires_at IS NULL OR q.expires_at > c.now)
                        LIMIT $2) AS due)
            ELSE 0 END AS due
FROM clock AS c,
     (SELECT EXISTS (SELECT FROM turn) AS taken) AS t
