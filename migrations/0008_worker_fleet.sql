-- The worker fleet: which worker invocations run or are about to, so that ingest starts a
-- worker only when none runs, a worker leaves without stranding a job accepted as it left,
-- and a worker starts more when the backlog needs them, never more than
-- WORKER_MAX_INVOCATIONS at once (docs/decisions/0012-wake-linger-fan-out.md). New tables
-- only: applied online against the 1.0 release in a test (tests/it/online_migration.rs),
-- nothing of 1.0's touched.

-- One row per place a worker invocation may hold; an invocation claims jobs only while it
-- holds one, and the first WORKER_MAX_INVOCATIONS are used. Held until `until`: a running
-- invocation's delivery deadline (it claims nothing after it), or, for one being started,
-- the time it has to join (wake_worker.sql, grow_fleet.sql). Past `until` a slot is free,
-- whatever became of its holder: a crashed invocation frees its slot by its own deadline.
--  * Slot 1 is the wake's: ingest takes it only when no slot is held (wake_worker.sql), and
--    the row lock orders concurrent wakers, so a burst of requests starts one worker.
--  * A holder is known by its lease; every write for a holder names the lease, so one whose
--    slot passed to another (it was late) never frees the other's.
CREATE TABLE worker_slots (
    slot       int PRIMARY KEY CHECK (slot BETWEEN 1 AND 100),
    lease      uuid,
    until      timestamptz NOT NULL DEFAULT '-infinity',
    -- taken for an invocation that has not joined yet
    starting   boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO worker_slots (slot) SELECT generate_series(1, 100);

-- Whose turn it is to decide whether the fleet should grow: one decision at a time,
-- fleet-wide, at most once per interval (fleet_census.sql), so workers deciding together
-- never start the same missing worker twice, and the backlog is counted once.
CREATE TABLE worker_fleet (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    decided_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO worker_fleet DEFAULT VALUES;
