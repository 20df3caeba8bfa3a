-- For tests only (notify_postgres::testing): the history's partitions of the given days,
-- those missing, as the sweeper would have made them on each day. $1 the days.
SELECT coalesce(sum(history_add_days(d, 1)), 0)::int AS added
FROM unnest($1::date[]) AS d
