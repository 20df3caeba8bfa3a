-- A worker invocation leaves the fleet: its slot ($1), held under its lease ($2), is free from
-- now on ($3: the current time, NULL: now()). A slot that passed to another holder (this one
-- joined or left too late) is left alone. Also frees a slot taken for an invocation that
-- could not be started (its wake failed).
UPDATE worker_slots
SET until = coalesce($3::timestamptz, now()), starting = false,
    updated_at = coalesce($3::timestamptz, now())
WHERE slot = $1
  AND lease = $2
