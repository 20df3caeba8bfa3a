-- Issue 17: a lookup by id alone (GET, cancel's and requeue's checks, a job's attempts) reads
-- the history of the job's day only, not every day's partition. Ids made since 0011 are
-- UUIDv7: their first 48 bits are the Unix time in milliseconds at which ingest made the id,
-- an instant before the record's created_at (the database's clock). These functions give a
-- window of a day either side of it, wide enough for any sane difference between the two
-- clocks; for any other id (a v4 id from before 0011) the window is unbounded. They are
-- IMMUTABLE, so the planner folds them with the id's value and plans only the partitions of
-- those days (about 40 otherwise, at the default retention, each costing planning time).
CREATE FUNCTION job_created_after(id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT CASE WHEN substr(id::text, 15, 1) = '7'
                THEN to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
                                  / 1000.0 - 86400)
                ELSE '-infinity'::timestamptz END
$$;
CREATE FUNCTION job_created_before(id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT CASE WHEN substr(id::text, 15, 1) = '7'
                THEN to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
                                  / 1000.0 + 86400)
                ELSE 'infinity'::timestamptz END
$$;
