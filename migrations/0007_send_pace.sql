-- The providers' pace, shared by every worker invocation
-- (docs/decisions/0011-pace-and-priority-lanes.md). A new table and function: applied online
-- against the 1.0 release in a test (tests/it/online_migration.rs), nothing of 1.0's touched.

-- Each channel's pace at its provider, shared by every worker invocation: one row per
-- channel, updated by take_send_slots.sql under its row lock, so invocations running at
-- once hand out slots one after another and never the same one.
--  * Slots: a message may be handed to the provider at its slot's time, one slot per
--    message (per part of an SMS); slots are 1/rate apart. next_slot is the first slot no
--    one has taken.
--  * A rate throttle multiplies the rate by `factor` (halved at each throttle, at most once
--    a second, down to 0.05), which climbs back by 0.01 a second from lowered_at
--    (send_pace_factor below): a halving is undone within 50 seconds.
--  * A daily-quota throttle holds the channel until held_until: nothing is handed to the
--    provider before then.
CREATE TABLE send_pace (
    channel     text PRIMARY KEY CHECK (channel IN ('sms', 'email')),
    next_slot   timestamptz NOT NULL DEFAULT 'epoch',
    factor      double precision NOT NULL DEFAULT 1 CHECK (factor > 0 AND factor <= 1),
    lowered_at  timestamptz NOT NULL DEFAULT 'epoch',
    held_until  timestamptz NOT NULL DEFAULT 'epoch',
    hold_reason text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO send_pace (channel) VALUES ('sms'), ('email');

-- The share of the channel's rate in force `at`: `factor` as lowered at `lowered_at`, plus
-- 0.01 for every second since, at most 1.
CREATE FUNCTION send_pace_factor(factor double precision, lowered_at timestamptz,
                                 at timestamptz) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT least(1.0, factor + 0.01 * greatest(extract(epoch FROM at - lowered_at), 0)::float8)
$$;
