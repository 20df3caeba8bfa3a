-- Take $2 consecutive send slots of channel $1 (one per message, one per part of an SMS)
-- at the channel's full rate $3 (messages per second) times its factor now, if the first of
-- them begins within $4 seconds; $5 the current time (NULL: now()).
-- The row lock orders concurrent takers: each begins where the last one ended, so the
-- slots of every invocation together are 1/rate apart and none is handed out twice.
-- Answers one row: `wait_secs` until the first slot taken (NULL: none taken), the rate in
-- force, `held_until` (the channel is held by a quota until then) and `next_in_secs`, how
-- far ahead the first free slot was.
WITH clock AS (
    SELECT coalesce($5::timestamptz, now()) AS now
),
taken AS (
    UPDATE send_pace AS p
    SET next_slot  = greatest(p.next_slot, c.now)
                     + make_interval(secs => $2::float8
                                     / ($3::float8 * send_pace_factor(p.factor, p.lowered_at, c.now))),
        updated_at = c.now
    FROM clock AS c
    WHERE p.channel = $1
      AND p.held_until <= c.now
      AND greatest(p.next_slot, c.now) <= c.now + make_interval(secs => $4::float8)
    -- the first slot taken: where the taker before this one ended
    RETURNING extract(epoch FROM p.next_slot - c.now)::float8
              - $2::float8 / ($3::float8 * send_pace_factor(p.factor, p.lowered_at, c.now))
              AS wait_secs
)
-- NULL when none was taken (greatest() would turn it into 0)
SELECT (SELECT greatest(wait_secs, 0) FROM taken) AS wait_secs,
       $3::float8 * send_pace_factor(p.factor, p.lowered_at, c.now) AS rate,
       p.held_until,
       greatest(extract(epoch FROM p.next_slot - c.now)::float8, 0) AS next_in_secs
FROM send_pace AS p, clock AS c
WHERE p.channel = $1
