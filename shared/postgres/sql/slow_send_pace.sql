-- The provider throttled channel $1 for its rate: halve the share of the rate in force (at
-- most once a second: the calls in flight when the provider pushed back are one throttle,
-- not sixteen), down to 0.05. It climbs back by itself (send_pace_factor).
-- $2 the current time (NULL: now()). Answers the new factor, none when it was lowered
-- within the last second.
UPDATE send_pace AS p
SET factor     = greatest(0.05, send_pace_factor(p.factor, p.lowered_at, c.now) * 0.5),
    lowered_at = c.now,
    updated_at = c.now
FROM (SELECT coalesce($2::timestamptz, now()) AS now) AS c
WHERE p.channel = $1
  AND p.lowered_at <= c.now - interval '1 second'
RETURNING p.factor
