-- Drops the history of every day whose jobs all ended more than $2 seconds before $1 (the
-- current time; NULL: now()) and none of which is open (history_drop_days, 0001_jobs.sql:
-- each day whole, its idempotency keys with it). $2 is the longer of RETENTION_DAYS and the
-- feedback window: a job's history stays that long after it ended, whichever day it was
-- accepted. Returns the days dropped.
SELECT count(*)::int AS dropped,
       coalesce(string_agg(day::text, ',' ORDER BY day), '') AS dropped_days
FROM history_drop_days(coalesce($1::timestamptz, now()) - make_interval(secs => $2)) AS day
