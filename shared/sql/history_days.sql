-- The history's day partitions (0015_history_by_day.sql), once per sweeper run: creates those
-- missing from the day before $1 (the current time; NULL: now()) to a week after it, then,
-- when $2 (retention in days) is above 0, drops every day that ended $2 days or more before
-- $1 and holds no open job, with its idempotency keys. The days before the cut are left to
-- row retention (prune.sql).
WITH added AS (
    SELECT job_history_add_days((coalesce($1::timestamptz, now()) AT TIME ZONE 'UTC')::date - 1,
                                9) AS made
),
dropped AS (
    SELECT day
    FROM added,
         job_history_drop_days(CASE WHEN $2::int > 0
                                    THEN coalesce($1::timestamptz, now())
                                         - make_interval(days => $2::int)
                                    ELSE '-infinity' END) AS day
)
SELECT (SELECT made FROM added) AS added,
       (SELECT count(*) FROM dropped)::int AS dropped,
       (SELECT coalesce(string_agg(day::text, ',' ORDER BY day), '') FROM dropped) AS dropped_days
