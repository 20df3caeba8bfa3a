-- Count $2 requests of organization $1 in the window of the minute of $3 (the current time;
-- NULL: now()); returns the new total and
-- the seconds until the window ends.
INSERT INTO organization_ingest_counts AS t (organization_id, minute, requests)
VALUES ($1, date_trunc('minute', coalesce($3::timestamptz, now())), $2)
ON CONFLICT (organization_id, minute) DO UPDATE SET requests = t.requests + EXCLUDED.requests
RETURNING requests,
          ceil(EXTRACT(EPOCH FROM date_trunc('minute', coalesce($3::timestamptz, now())) + interval '1 minute' - coalesce($3::timestamptz, now())))::int AS resets_in_secs
