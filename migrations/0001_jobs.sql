-- Jobs: the queue of open jobs, and each job's history partitioned by the day it was accepted.
-- docs/design.md describes this schema; docs/decisions/ records why it has this shape.
--
-- A job is open (pending, failed, processing) while it has a row in job_queue, and ended
-- (sent, delivered, bounced, dead, expired, cancelled) once it has a row in job_outcomes: the
-- statement that ends a job deletes the one and inserts the other. Its request (job_requests)
-- is written once, by ingest; its attempts (job_attempts, and the last one inline in its
-- outcome row) are written once each. Only provider feedback (sent -> delivered, bounced)
-- and requeue (dead -> back in the queue) change a history row afterwards.

-- Where a job stands. The queue and the outcome rows hold only the statuses their part of
-- the life cycle has; job_states derives pending, failed and processing from the queue row.
CREATE TYPE job_status AS ENUM
    ('pending', 'processing', 'sent', 'failed', 'dead', 'cancelled', 'expired', 'delivered',
     'bounced');

-- Job ids are UUIDv7, made by ingest: their first 48 bits are the Unix time in milliseconds at
-- which the id was made, an instant before the job's created_at (the database's clock). A
-- lookup by id alone reads the partitions of the days around that instant only.
-- job_created_after/job_created_before give that window: a day either side of the id's time,
-- wide enough for any sane difference between the two clocks. They are IMMUTABLE, so the
-- planner folds them with the id's value and plans those days' partitions alone. An id that is
-- not a UUIDv7 names no job: its window is empty.
CREATE FUNCTION job_id_time(id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT CASE WHEN substr(id::text, 15, 1) = '7'
                THEN to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
                                  / 1000.0) END
$$;
CREATE FUNCTION job_created_after(id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT coalesce(job_id_time(id) - interval '1 day', 'infinity')
$$;
CREATE FUNCTION job_created_before(id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT coalesce(job_id_time(id) + interval '1 day', '-infinity')
$$;
-- The lowest UUIDv7 made at `at` or later: every id made before `at` sorts below it.
CREATE FUNCTION job_id_floor(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

-- The open jobs: what the worker sends, and what claiming, fencing and sweeping need. The
-- claim, the sweeper and expiry read and write this table alone, so their cost does not grow
-- with history. A job has a row here from its acceptance until it ends.
--  * claim: sets claim_token (fresh on every claim) and claimed_at, counts the attempt
--    (`attempts`, compared with max_attempts) and the try (`tries`, which numbers the job's
--    attempt rows: one per provider call, refunded attempts included). Every later write for
--    that attempt is conditioned on the token (fencing).
--  * a retry: the claim cleared, next_attempt_at later, last_error set (the job is `failed`).
--  * no index names a column the claim changes, so a claim is a HOT update: the new version
--    stays on its page, with no index entry, and only the changed bytes are logged (which is
--    why those columns come last, and why the table leaves half of each page free).
CREATE TABLE job_queue (
    id              uuid PRIMARY KEY CHECK (job_id_time(id) IS NOT NULL),
    organization_id uuid NOT NULL,
    -- the job's (its request's created_at): its day, and listing order
    created_at      timestamptz NOT NULL,
    -- a copy of the request's: the claim reads no other table
    channel         text NOT NULL,
    payload         jsonb NOT NULL,
    trace_header    text,
    expires_at      timestamptz,
    next_attempt_at timestamptz NOT NULL,
    attempts        int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- a requeued dead job gets a fresh budget on top of the attempts it used
    max_attempts    int NOT NULL CHECK (max_attempts >= 1),
    tries           int NOT NULL DEFAULT 0 CHECK (tries >= 0),
    claim_token     uuid,
    claimed_at      timestamptz,
    -- the error of the last attempt: set, the job is `failed`
    last_error      text,
    updated_at      timestamptz NOT NULL,
    CHECK ((claim_token IS NULL) = (claimed_at IS NULL))
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
-- claim.sql: the due jobs in order (it passes over the claimed rows at the head: the jobs in
-- flight, at most workers × batch)
CREATE INDEX job_queue_next ON job_queue (next_attempt_at);
-- claim_fair.sql: each organization's due jobs
CREATE INDEX job_queue_next_by_org ON job_queue (organization_id, next_attempt_at);
-- list_jobs.sql with an open status
CREATE INDEX job_queue_listing ON job_queue (organization_id, created_at, id);
-- expire.sql
CREATE INDEX job_queue_expires ON job_queue (expires_at) WHERE expires_at IS NOT NULL;

-- A job's history: three tables partitioned by the job's creation day (UTC), one partition
-- of each per day, made ahead and dropped whole by history_add_days/history_drop_days below.
-- Retention never deletes a history row by row.

-- The accepted request, as the caller asked for it: written once by ingest.
CREATE TABLE job_requests (
    id              uuid NOT NULL CHECK (job_id_time(id) IS NOT NULL),
    organization_id uuid NOT NULL,
    created_at      timestamptz NOT NULL,
    channel         text NOT NULL CHECK (channel IN ('sms', 'email')),
    -- `to` as ingest normalised it (domain::normalize_recipient): the suppression list's key
    payload         jsonb NOT NULL,
    max_attempts    int NOT NULL CHECK (max_attempts >= 1),
    -- not sent before this (the request's send_at, else its acceptance)
    send_at         timestamptz NOT NULL,
    -- never sent after this
    expires_at      timestamptz,
    idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_hash    text,
    -- the X-Ray trace header of the request that made the job, passed on to the provider
    trace_header    text,
    CHECK ((idempotency_key IS NULL) = (request_hash IS NULL)),
    CONSTRAINT job_requests_key UNIQUE (id, created_at)
) PARTITION BY RANGE (created_at);
-- list_jobs.sql for every status: an organization's jobs in page order
CREATE INDEX job_requests_listing ON job_requests (organization_id, created_at, id);

-- Where an ended job ended, and its last attempt when the worker ended it: one row per ended
-- job, inserted by the statement that ends it. Feedback (sent -> delivered, bounced) and
-- requeue (a dead job back in the queue: the row goes, its attempt moves to job_attempts)
-- are the only changes after.
CREATE TABLE job_outcomes (
    job_id              uuid NOT NULL,
    organization_id     uuid NOT NULL,
    -- the job's: its day
    created_at          timestamptz NOT NULL,
    status              job_status NOT NULL
        CHECK (status IN ('sent', 'dead', 'cancelled', 'expired', 'delivered', 'bounced')),
    attempts            int NOT NULL,
    max_attempts        int NOT NULL,
    tries               int NOT NULL,
    next_attempt_at     timestamptz NOT NULL,
    last_error          text,
    -- when the job ended (and when feedback last changed its status)
    updated_at          timestamptz NOT NULL,
    -- the attempt that ended it, when the worker did (its number is `tries`); NULL for a job
    -- cancelled, expired or buried by the sweeper, whose last attempt is a job_attempts row
    provider            text CHECK (provider IN ('sns', 'ses')),
    provider_message_id text,
    error_code          text,
    error_message       text,
    started_at          timestamptz,
    finished_at         timestamptz,
    CONSTRAINT job_outcomes_key UNIQUE (job_id, created_at)
) PARTITION BY RANGE (created_at);
-- list_jobs.sql with a final status
CREATE INDEX job_outcomes_by_status ON job_outcomes (organization_id, status, created_at, job_id);
-- apply_feedback.sql
CREATE INDEX job_outcomes_by_message_id ON job_outcomes (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- Every other attempt: retries, held attempts (refunded: not the message's fault), the
-- sweeper's `lost` rows, expiry's row, and late completions of a swept claim (fenced).
CREATE TABLE job_attempts (
    job_id              uuid NOT NULL,
    -- the job's: its day
    job_created_at      timestamptz NOT NULL,
    -- the claim's try number
    attempt             int NOT NULL CHECK (attempt >= 1),
    provider            text NOT NULL CHECK (provider IN ('sns', 'ses')),
    provider_message_id text,
    error_code          text,
    error_message       text,
    outcome             text NOT NULL
        CHECK (outcome IN ('sent', 'retry', 'held', 'dead', 'lost', 'expired')),
    -- written by a worker whose claim had been swept and taken again
    fenced              boolean NOT NULL DEFAULT false,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL,
    CONSTRAINT job_attempts_key UNIQUE (job_id, job_created_at, attempt)
) PARTITION BY RANGE (job_created_at);
-- apply_feedback.sql
CREATE INDEX job_attempts_by_message_id ON job_attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- Idempotency keys, unique per organization while their job is kept. Not partitioned: a
-- unique index of a partitioned table must include the partition key, which would let a key
-- be used again the next day. history_drop_days deletes a day's keys with its partitions.
CREATE TABLE idempotency_keys (
    organization_id uuid NOT NULL,
    idempotency_key text NOT NULL,
    job_id          uuid NOT NULL,
    job_created_at  timestamptz NOT NULL,
    PRIMARY KEY (organization_id, idempotency_key)
);
CREATE INDEX idempotency_keys_by_day ON idempotency_keys (job_created_at);

-- The history's days: one row per day whose partitions exist, and the last day on which one
-- of that day's jobs ended. A day is kept RETENTION_DAYS (and at least the feedback window)
-- after that last end, not after the day itself: a job accepted today and ended in a month
-- keeps its history, and can still be bounced, suppressed and read, for as long as one that
-- ended today.
CREATE TABLE history_days (
    day           date PRIMARY KEY,
    last_ended_on date NOT NULL,
    CHECK (last_ended_on >= day)
);

-- Every statement that ends jobs inserts their outcome rows: this moves their days' last end
-- forward, in the same transaction. It writes only when a day's last end moves (a job ending
-- on a later day than any before it), so on the worker's path it costs one index probe per
-- statement and day, and a write once per day and later day.
CREATE FUNCTION history_days_extend() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE history_days AS h
    SET last_ended_on = e.ended_on
    FROM (SELECT (created_at AT TIME ZONE 'UTC')::date AS day,
                 max((updated_at AT TIME ZONE 'UTC')::date) AS ended_on
          FROM ended
          GROUP BY 1) AS e
    WHERE h.day = e.day AND h.last_ended_on < e.ended_on;
    RETURN NULL;
END
$$;
CREATE TRIGGER history_days_extend
    AFTER INSERT ON job_outcomes
    REFERENCING NEW TABLE AS ended
    FOR EACH STATEMENT EXECUTE FUNCTION history_days_extend();

-- Makes the partitions of `days` days from `first_day` that are missing, and their rows in
-- history_days; returns how many partitions it made. Each partition is made apart and then
-- attached, which locks its parent in SHARE UPDATE EXCLUSIVE mode only: ingest and the worker
-- go on meanwhile. One maker at a time (two sweepers).
CREATE FUNCTION history_add_days(first_day date, days int) RETURNS int
LANGUAGE plpgsql SET lock_timeout = '1s' AS $$
DECLARE
    d    date;
    t    text;
    part text;
    made int := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('history_days'));
    FOR d IN SELECT g::date FROM generate_series(first_day, first_day + days - 1,
                                                 interval '1 day') AS g LOOP
        FOREACH t IN ARRAY ARRAY['job_requests', 'job_outcomes', 'job_attempts'] LOOP
            part := t || '_' || to_char(d, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(part) IS NOT NULL;
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
                           || CASE WHEN t = 'job_requests' THEN ''
                                   ELSE ' WITH (autovacuum_vacuum_insert_scale_factor = 0.05)'
                              END,
                           part, t);
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           t, part, d::timestamp AT TIME ZONE 'UTC',
                           (d + 1)::timestamp AT TIME ZONE 'UTC');
            made := made + 1;
        END LOOP;
        INSERT INTO history_days (day, last_ended_on) VALUES (d, d)
        ON CONFLICT (day) DO NOTHING;
    END LOOP;
    RETURN made;
END
$$;

-- Drops every day whose last job ended before `cutoff` (the day after its last end is over
-- by then) and that has no open job; returns the days it dropped. For each such day, in a
-- subtransaction of its own:
--  1. its idempotency keys are deleted (row by row: the one part that takes time, done
--     before any lock on the day's history is held);
--  2. its partitions are locked (ACCESS EXCLUSIVE). Whatever writes a day's history (the
--     completion that ends one of its jobs, a requeue that puts one back in the queue) holds
--     a lock on a partition of that day until it commits, so from here on nothing can, and
--     everything committed before is seen by the reads below (a new snapshot);
--  3. the day is read again: its last end (history_days) and its open jobs (the queue, by
--     the ids made from a day before the day to a day after it, then by created_at);
--  4. its partitions are dropped.
-- A day whose locks are not granted within 100 ms (a long read of its history, a concurrent
-- requeue), or that turns out to be still in use, is left as it was, its keys and locks
-- given back with the subtransaction, for a later run. The locks of steps 2 to 4 are held
-- for milliseconds: a requeue that waits on them (it holds its parent tables' lock and waits
-- for a partition's, the reverse order) waits that long, never long enough to deadlock.
CREATE FUNCTION history_drop_days(cutoff timestamptz) RETURNS SETOF date
LANGUAGE plpgsql SET lock_timeout = '100ms' AS $$
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
            DELETE FROM idempotency_keys
            WHERE job_created_at >= day_start AND job_created_at < day_end;
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

-- The days from yesterday to a week ahead exist from the start; the sweeper keeps them ahead.
SELECT history_add_days((now() AT TIME ZONE 'UTC')::date - 1, 9);

-- Where each job accepted in [lo, hi) stands: its queue row while it is open (processing while
-- a worker holds its claim, failed when its last attempt failed, pending otherwise), its
-- outcome row once it ended. A SQL function that is one SELECT, STABLE, with no SET clause is
-- inlined where it is called in FROM, so its window prunes both tables' partitions as a WHERE
-- clause would: a lookup by id passes the id's window (get_job.sql), a page the window of its
-- jobs (jobs_within.sql).
CREATE FUNCTION job_states_between(lo timestamptz, hi timestamptz)
RETURNS TABLE (id uuid, organization_id uuid, channel text, payload jsonb, status job_status,
               attempts int, max_attempts int, tries int, next_attempt_at timestamptz,
               expires_at timestamptz, created_at timestamptz, updated_at timestamptz,
               claim_token uuid, claimed_at timestamptz, last_error text,
               idempotency_key text, request_hash text, trace_header text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT j.id,
       j.organization_id,
       j.channel,
       j.payload,
       CASE WHEN q.claim_token IS NOT NULL THEN 'processing'::job_status
            WHEN q.last_error IS NOT NULL THEN 'failed'::job_status
            WHEN q.id IS NOT NULL THEN 'pending'::job_status
            ELSE o.status END,
       coalesce(q.attempts, o.attempts),
       coalesce(q.max_attempts, o.max_attempts),
       coalesce(q.tries, o.tries),
       coalesce(q.next_attempt_at, o.next_attempt_at),
       j.expires_at,
       j.created_at,
       coalesce(GREATEST(q.updated_at, q.claimed_at), o.updated_at),
       q.claim_token,
       q.claimed_at,
       coalesce(q.last_error, o.last_error),
       j.idempotency_key,
       j.request_hash,
       j.trace_header
FROM job_requests AS j
LEFT JOIN job_queue AS q ON q.id = j.id
LEFT JOIN job_outcomes AS o ON o.job_id = j.id AND o.created_at = j.created_at
    AND o.created_at >= lo AND o.created_at < hi
WHERE j.created_at >= lo AND j.created_at < hi
$$;

-- Every job as it stands, for an operator in psql (the statements pass a window).
CREATE VIEW job_states AS
SELECT * FROM job_states_between('-infinity', 'infinity');

-- Every attempt of every job: its job_attempts rows, and the last attempt of a job the
-- worker ended, from its outcome row. GET lists a job's attempts from it; so can an operator.
CREATE VIEW job_attempt_history AS
SELECT d.job_id, d.job_created_at, d.attempt, d.provider, d.provider_message_id,
       d.error_code, d.error_message, d.outcome, d.fenced, d.started_at, d.finished_at
FROM job_attempts AS d
UNION ALL
SELECT o.job_id, o.created_at, o.tries, o.provider, o.provider_message_id,
       o.error_code, o.error_message,
       CASE WHEN o.status = 'dead' THEN 'dead' ELSE 'sent' END, false, o.started_at,
       o.finished_at
FROM job_outcomes AS o
WHERE o.started_at IS NOT NULL;
