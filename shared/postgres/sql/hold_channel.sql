-- Hold channel $1 until $2 (a provider quota is spent; $3 says which): no slot is taken
-- before then (take_send_slots.sql), and the channel's due jobs nobody holds wait until
-- then, their attempts untouched, so the claim does not hand them to workers only to be
-- given back. At most $4 jobs move per call: a deeper queue is moved by the jobs' own
-- claims, each given back to $2. An earlier hold is only ever extended.
-- $5 the current time (NULL: now()). Answers the jobs moved.
WITH held AS (
    UPDATE send_pace
    SET held_until  = greatest(held_until, $2::timestamptz),
        hold_reason = $3,
        updated_at  = coalesce($5::timestamptz, now())
    WHERE channel = $1
    RETURNING held_until
),
waiting AS (
    SELECT q.id
    FROM job_queue AS q
    WHERE q.channel = $1
      AND q.claim_token IS NULL
      AND q.next_attempt_at < $2::timestamptz
      AND q.next_attempt_at <= coalesce($5::timestamptz, now())
    ORDER BY q.next_attempt_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE job_queue AS q
SET next_attempt_at = (SELECT held_until FROM held),
    updated_at      = coalesce($5::timestamptz, now())
FROM waiting AS w
WHERE q.id = w.id
RETURNING q.id
