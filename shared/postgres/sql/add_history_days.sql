-- The history's day partitions from the day before $1 (the current time; NULL: now()) to a
-- week after it: makes those missing (history_add_days, 0001_jobs.sql) and returns how many
-- it made. The sweeper runs this first at every run, whatever else fails: ingest needs
-- today's partitions.
SELECT history_add_days((coalesce($1::timestamptz, now()) AT TIME ZONE 'UTC')::date - 1, 9)
           AS added
