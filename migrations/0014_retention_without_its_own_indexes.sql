-- migrate: no-transaction
-- Retention finds what it deletes through keys every row already has, and two indexes that
-- served it alone go. Each cost every job one index entry, written in the hot path for a
-- statement that runs once a day (docs/decisions/0019-event-fields-as-columns.md, with the
-- figures):
--  * status_events_created: an event's id is a UUIDv7 (0009), made when the event was, so
--    the events older than the retention are a range of the primary key (prune_events.sql,
--    job_id_floor: the same layout as a job's id);
--  * idempotency_keys_by_day: a day's keys are those of the day's requests, each found by
--    its primary key (organization, key) from the request that carries it, in the day's
--    partition of job_requests that retention drops next.
--
-- Online against the 1.0 release (tests/it/online_migration.rs): the function is replaced
-- first (the next retention run uses it), then each index is dropped CONCURRENTLY (no
-- insert waits). Run again after an interruption, each statement finds its work done.
-- 1.0's retention is this function: it never reads the index again.

CREATE OR REPLACE FUNCTION history_drop_days(cutoff timestamptz) RETURNS SETOF date
LANGUAGE plpgsql
SET lock_timeout = '100ms'
AS $$
DECLARE
    d         date;
    day_start timestamptz;
    day_end   timestamptz;
    parts     text[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('history_days'));
    FOR d IN SELECT h.day FROM history_days AS h
             WHERE (h.last_ended_on + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff
             ORDER BY h.day LOOP
        day_start := d::timestamp AT TIME ZONE 'UTC';
        day_end := (d + 1)::timestamp AT TIME ZONE 'UTC';
        parts := ARRAY(SELECT t || '_' || to_char(d, 'YYYYMMDD')
                       FROM unnest(ARRAY['job_attempts', 'job_outcomes', 'job_requests']) AS t
                       WHERE to_regclass(t || '_' || to_char(d, 'YYYYMMDD')) IS NOT NULL);
        BEGIN
            -- the day's keys, through its requests (a key and its request are written by one
            -- statement, on one day: insert_jobs.sql)
            DELETE FROM idempotency_keys AS k
            USING job_requests AS r
            WHERE r.created_at >= day_start AND r.created_at < day_end
              AND r.idempotency_key IS NOT NULL
              AND k.organization_id = r.organization_id
              AND k.idempotency_key = r.idempotency_key
              AND k.job_id = r.id;
            IF cardinality(parts) > 0 THEN
                EXECUTE 'LOCK TABLE ' || (SELECT string_agg(quote_ident(p), ', ') FROM unnest(parts) AS p)
                        || ' IN ACCESS EXCLUSIVE MODE';
            END IF;
            IF NOT EXISTS (SELECT FROM history_days AS h
                           WHERE h.day = d
                             AND (h.last_ended_on + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff)
               OR EXISTS (SELECT FROM job_queue AS q
                          WHERE q.id >= job_id_floor(day_start - interval '1 day')
                            AND q.id < job_id_floor(day_end + interval '1 day')
                            AND q.created_at >= day_start AND q.created_at < day_end) THEN
                -- in use after all: undo the subtransaction (its keys come back, its locks go)
                RAISE SQLSTATE 'NSKEP';
            END IF;
            IF cardinality(parts) > 0 THEN
                EXECUTE 'DROP TABLE ' || (SELECT string_agg(quote_ident(p), ', ') FROM unnest(parts) AS p);
            END IF;
            DELETE FROM history_days WHERE day = d;
        EXCEPTION
            WHEN SQLSTATE 'NSKEP' THEN
                CONTINUE;
            WHEN lock_not_available OR deadlock_detected THEN
                RAISE WARNING 'history_drop_days: % kept until a later run: %', d, SQLERRM;
                CONTINUE;
        END;
        RETURN NEXT d;
    END LOOP;
END
$$;

DROP INDEX CONCURRENTLY IF EXISTS status_events_created;
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_by_day;
