-- The schema the migrations build (PostgreSQL 15, pg_dump --schema-only, the day
-- partitions left out). Written by `make schema`; a test compares it with migrations/.
--
-- PostgreSQL database dump
--



SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: job_priority; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.job_priority AS ENUM (
    'high',
    'normal',
    'low'
);


--
-- Name: job_status; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.job_status AS ENUM (
    'pending',
    'processing',
    'sent',
    'failed',
    'dead',
    'cancelled',
    'expired',
    'delivered',
    'bounced'
);


--
-- Name: history_add_days(date, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.history_add_days(first_day date, days integer) RETURNS integer
    LANGUAGE plpgsql
    SET lock_timeout TO '1s'
    AS $$
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


--
-- Name: history_days_extend(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.history_days_extend() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: history_drop_days(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.history_drop_days(cutoff timestamp with time zone) RETURNS SETOF date
    LANGUAGE plpgsql
    SET lock_timeout TO '100ms'
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


--
-- Name: job_channel(uuid, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_channel(job_id uuid, created_at timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $_$
    SELECT j.channel FROM job_requests AS j
    WHERE j.id = $1 AND j.created_at = $2
$_$;


--
-- Name: job_created_after(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_created_after(id uuid) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT coalesce(job_id_time(id) - interval '1 day', 'infinity')
$$;


--
-- Name: job_created_before(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_created_before(id uuid) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT coalesce(job_id_time(id) + interval '1 day', '-infinity')
$$;


--
-- Name: job_id_floor(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_id_floor(at timestamp with time zone) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;


--
-- Name: job_id_time(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_id_time(id uuid) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT CASE WHEN substr(id::text, 15, 1) = '7'
                THEN to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
                                  / 1000.0) END
$$;


--
-- Name: job_states_between(timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_states_between(lo timestamp with time zone, hi timestamp with time zone) RETURNS TABLE(id uuid, organization_id uuid, channel text, payload jsonb, status public.job_status, attempts integer, max_attempts integer, tries integer, next_attempt_at timestamp with time zone, expires_at timestamp with time zone, created_at timestamp with time zone, updated_at timestamp with time zone, claim_token uuid, claimed_at timestamp with time zone, last_error text, idempotency_key text, request_hash text, trace_header text)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
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


--
-- Name: send_pace_factor(double precision, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.send_pace_factor(factor double precision, lowered_at timestamp with time zone, at timestamp with time zone) RETURNS double precision
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT least(1.0, factor + 0.01 * greatest(extract(epoch FROM at - lowered_at), 0)::float8)
$$;


--
-- Name: time_ordered_uuid(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.time_ordered_uuid() RETURNS uuid
    LANGUAGE sql PARALLEL SAFE
    AS $$
    SELECT encode(
               set_bit(set_bit(
                   overlay(uuid_send(gen_random_uuid())
                           PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                            * 1000)::bigint) FROM 3)
                           FROM 1 FOR 6),
                   52, 1), 53, 1),
               'hex')::uuid
$$;


--
-- Name: status_event_sequence; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.status_event_sequence
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: status_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.status_events (
    id uuid DEFAULT public.time_ordered_uuid() NOT NULL,
    sequence bigint DEFAULT nextval('public.status_event_sequence'::regclass) NOT NULL,
    organization_id uuid NOT NULL,
    job_id uuid NOT NULL,
    type text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    data jsonb,
    published_at timestamp with time zone DEFAULT now(),
    next_attempt_at timestamp with time zone,
    attempts integer,
    claim_token uuid,
    claimed_at timestamp with time zone,
    last_error text,
    tx xid8 DEFAULT pg_current_xact_id(),
    status text,
    previous_status text,
    channel text,
    attempt integer,
    provider_message_id text,
    error_code text,
    error_message text,
    CONSTRAINT status_events_type_check CHECK ((type ~~ 'notification.%'::text))
)
WITH (fillfactor='80');


--
-- Name: status_event_body(public.status_events); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_event_body(e public.status_events) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(e.data,
                    status_event_data(e.job_id, e.organization_id, e.channel, e.status,
                                      e.previous_status, e.attempt, e.provider_message_id,
                                      e.error_code, e.error_message))
$$;


--
-- Name: status_event_data(uuid, uuid, text, text, text, integer, text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_event_data(job_id uuid, organization_id uuid, channel text, status text, previous_status text, attempt integer, provider_message_id text, error_code text, error_message text) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT jsonb_build_object(
               'id', job_id, 'organization_id', organization_id, 'channel', channel,
               'status', status, 'previous_status', previous_status, 'attempt', attempt,
               'provider_message_id', provider_message_id,
               'error', CASE WHEN error_code IS NOT NULL OR error_message IS NOT NULL THEN
                            jsonb_build_object('code', error_code,
                                               'message', status_event_redact(error_message))
                        END)
$$;


--
-- Name: status_event_redact(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_event_redact(message text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT regexp_replace(
               regexp_replace(message, '[^\s<>(),;:"'']+@[^\s<>(),;:"'']+', '[redacted]', 'g'),
               '\+?\d[\d ().-]{5,}\d', '[redacted]', 'g')
$$;


--
-- Name: status_events_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_events_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt, provider_message_id)
    SELECT n.organization_id, n.job_id, 'notification.' || n.status, n.updated_at,
           n.status::text, o.status::text,
           CASE n.provider WHEN 'sns' THEN 'sms' WHEN 'ses' THEN 'email'
                ELSE job_channel(n.job_id, n.created_at) END,
           n.tries, n.provider_message_id
    FROM after_change AS n
    JOIN before_change AS o ON o.job_id = n.job_id AND o.created_at = n.created_at
    WHERE n.status IS DISTINCT FROM o.status;
    RETURN NULL;
END
$$;


--
-- Name: status_events_complained(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_events_complained() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt, provider_message_id,
                               error_code, error_message)
    SELECT o.organization_id, o.job_id, 'notification.complained', n.applied_at,
           o.status::text, o.status::text, n.channel, n.attempt, n.provider_message_id,
           'complaint', status_event_redact(n.subtype)
    FROM after_change AS n
    JOIN before_change AS b ON b.id = n.id
    JOIN job_outcomes AS o ON o.job_id = n.job_id
    WHERE n.kind = 'complaint' AND b.applied_at IS NULL AND n.applied_at IS NOT NULL;
    RETURN NULL;
END
$$;


--
-- Name: status_events_ended(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_events_ended() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt, provider_message_id,
                               error_code, error_message)
    SELECT e.organization_id, e.job_id, 'notification.' || e.status, e.updated_at,
           e.status::text,
           CASE WHEN e.status IN ('sent', 'dead') THEN 'processing'
                WHEN e.tries > CASE WHEN e.status = 'expired' THEN 1 ELSE 0 END
                    THEN 'failed'
                ELSE 'pending' END,
           CASE e.provider WHEN 'sns' THEN 'sms' WHEN 'ses' THEN 'email'
                ELSE job_channel(e.job_id, e.created_at) END,
           e.tries, e.provider_message_id,
           CASE WHEN e.status = 'dead'
                THEN coalesce(e.error_code, split_part(e.last_error, ':', 1)) END,
           CASE WHEN e.status IN ('dead', 'expired')
                THEN status_event_redact(coalesce(e.error_message, e.last_error)) END
    FROM ended AS e;
    RETURN NULL;
END
$$;


--
-- Name: status_events_fan_out(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_events_fan_out() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO webhook_deliveries (endpoint_id, event_id, organization_id, next_attempt_at)
    SELECT w.id, e.id, e.organization_id, e.created_at
    FROM recorded AS e
    JOIN webhook_endpoints AS w ON w.organization_id = e.organization_id
    WHERE w.disabled_at IS NULL
      AND (w.event_types IS NULL OR e.type = ANY (w.event_types));
    RETURN NULL;
END
$$;


--
-- Name: status_events_requeued(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.status_events_requeued() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                               previous_status, channel, attempt)
    SELECT r.organization_id, r.job_id, 'notification.requeued', now(),
           'pending', r.status::text, q.channel, r.tries
    FROM removed AS r
    JOIN job_queue AS q ON q.id = r.job_id;
    RETURN NULL;
END
$$;


--
-- Name: delivery_feedback; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.delivery_feedback (
    id bigint NOT NULL,
    provider_message_id text NOT NULL,
    channel text NOT NULL,
    event_key text NOT NULL,
    kind text NOT NULL,
    subtype text,
    diagnostic text,
    suppresses boolean NOT NULL,
    occurred_at timestamp with time zone NOT NULL,
    received_at timestamp with time zone NOT NULL,
    raw jsonb NOT NULL,
    job_id uuid,
    attempt integer,
    applied_at timestamp with time zone,
    CONSTRAINT delivery_feedback_channel_check CHECK ((channel = ANY (ARRAY['sms'::text, 'email'::text])))
);


--
-- Name: delivery_feedback_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.delivery_feedback ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.delivery_feedback_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: event_cursors; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_cursors (
    consumer text NOT NULL,
    last_tx xid8 NOT NULL,
    last_sequence bigint NOT NULL,
    claim_token uuid,
    claimed_at timestamp with time zone,
    moved_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT event_cursors_consumer_check CHECK ((consumer = 'bus'::text))
);


--
-- Name: history_days; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.history_days (
    day date NOT NULL,
    last_ended_on date NOT NULL,
    CONSTRAINT history_days_check CHECK ((last_ended_on >= day))
);


--
-- Name: idempotency_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.idempotency_keys (
    organization_id uuid NOT NULL,
    idempotency_key text NOT NULL,
    job_id uuid NOT NULL,
    job_created_at timestamp with time zone NOT NULL
);


--
-- Name: job_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.job_attempts (
    job_id uuid NOT NULL,
    job_created_at timestamp with time zone NOT NULL,
    attempt integer NOT NULL,
    provider text NOT NULL,
    provider_message_id text,
    error_code text,
    error_message text,
    outcome text NOT NULL,
    fenced boolean DEFAULT false NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    CONSTRAINT job_attempts_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT job_attempts_outcome_check CHECK ((outcome = ANY (ARRAY['sent'::text, 'retry'::text, 'held'::text, 'dead'::text, 'lost'::text, 'expired'::text]))),
    CONSTRAINT job_attempts_provider_check CHECK ((provider = ANY (ARRAY['sns'::text, 'ses'::text])))
)
PARTITION BY RANGE (job_created_at);


--
-- Name: job_outcomes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.job_outcomes (
    job_id uuid NOT NULL,
    organization_id uuid NOT NULL,
    created_at timestamp with time zone NOT NULL,
    status public.job_status NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    tries integer NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    last_error text,
    updated_at timestamp with time zone NOT NULL,
    provider text,
    provider_message_id text,
    error_code text,
    error_message text,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    CONSTRAINT job_outcomes_provider_check CHECK ((provider = ANY (ARRAY['sns'::text, 'ses'::text]))),
    CONSTRAINT job_outcomes_status_check CHECK ((status = ANY (ARRAY['sent'::public.job_status, 'dead'::public.job_status, 'cancelled'::public.job_status, 'expired'::public.job_status, 'delivered'::public.job_status, 'bounced'::public.job_status])))
)
PARTITION BY RANGE (created_at);


--
-- Name: job_attempt_history; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.job_attempt_history AS
 SELECT d.job_id,
    d.job_created_at,
    d.attempt,
    d.provider,
    d.provider_message_id,
    d.error_code,
    d.error_message,
    d.outcome,
    d.fenced,
    d.started_at,
    d.finished_at
   FROM public.job_attempts d
UNION ALL
 SELECT o.job_id,
    o.created_at AS job_created_at,
    o.tries AS attempt,
    o.provider,
    o.provider_message_id,
    o.error_code,
    o.error_message,
        CASE
            WHEN (o.status = 'dead'::public.job_status) THEN 'dead'::text
            ELSE 'sent'::text
        END AS outcome,
    false AS fenced,
    o.started_at,
    o.finished_at
   FROM public.job_outcomes o
  WHERE (o.started_at IS NOT NULL);


--
-- Name: job_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.job_queue (
    id uuid NOT NULL,
    organization_id uuid NOT NULL,
    created_at timestamp with time zone NOT NULL,
    channel text NOT NULL,
    payload jsonb,
    trace_header text,
    expires_at timestamp with time zone,
    next_attempt_at timestamp with time zone NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    tries integer DEFAULT 0 NOT NULL,
    claim_token uuid,
    claimed_at timestamp with time zone,
    last_error text,
    updated_at timestamp with time zone NOT NULL,
    priority public.job_priority DEFAULT 'normal'::public.job_priority NOT NULL,
    CONSTRAINT job_queue_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT job_queue_check CHECK (((claim_token IS NULL) = (claimed_at IS NULL))),
    CONSTRAINT job_queue_id_check CHECK ((public.job_id_time(id) IS NOT NULL)),
    CONSTRAINT job_queue_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT job_queue_tries_check CHECK ((tries >= 0))
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');


--
-- Name: job_requests; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.job_requests (
    id uuid NOT NULL,
    organization_id uuid NOT NULL,
    created_at timestamp with time zone NOT NULL,
    channel text NOT NULL,
    payload jsonb NOT NULL,
    max_attempts integer NOT NULL,
    send_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    idempotency_key text,
    request_hash text,
    trace_header text,
    priority public.job_priority DEFAULT 'normal'::public.job_priority NOT NULL,
    CONSTRAINT job_requests_channel_check CHECK ((channel = ANY (ARRAY['sms'::text, 'email'::text]))),
    CONSTRAINT job_requests_check CHECK (((idempotency_key IS NULL) = (request_hash IS NULL))),
    CONSTRAINT job_requests_id_check CHECK ((public.job_id_time(id) IS NOT NULL)),
    CONSTRAINT job_requests_idempotency_key_check CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255))),
    CONSTRAINT job_requests_max_attempts_check CHECK ((max_attempts >= 1))
)
PARTITION BY RANGE (created_at);


--
-- Name: job_states; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.job_states AS
 SELECT job_states_between.id,
    job_states_between.organization_id,
    job_states_between.channel,
    job_states_between.payload,
    job_states_between.status,
    job_states_between.attempts,
    job_states_between.max_attempts,
    job_states_between.tries,
    job_states_between.next_attempt_at,
    job_states_between.expires_at,
    job_states_between.created_at,
    job_states_between.updated_at,
    job_states_between.claim_token,
    job_states_between.claimed_at,
    job_states_between.last_error,
    job_states_between.idempotency_key,
    job_states_between.request_hash,
    job_states_between.trace_header
   FROM public.job_states_between('-infinity'::timestamp with time zone, 'infinity'::timestamp with time zone) job_states_between(id, organization_id, channel, payload, status, attempts, max_attempts, tries, next_attempt_at, expires_at, created_at, updated_at, claim_token, claimed_at, last_error, idempotency_key, request_hash, trace_header);


--
-- Name: organization_claim_counts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.organization_claim_counts (
    organization_id uuid NOT NULL,
    minute timestamp with time zone NOT NULL,
    claimed integer NOT NULL,
    per_minute integer NOT NULL,
    granted integer NOT NULL
);


--
-- Name: organization_ingest_counts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.organization_ingest_counts (
    organization_id uuid NOT NULL,
    minute timestamp with time zone NOT NULL,
    requests integer NOT NULL
);


--
-- Name: organization_rate_limits; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.organization_rate_limits (
    organization_id uuid NOT NULL,
    per_minute integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT organization_rate_limits_per_minute_check CHECK ((per_minute >= 0))
);


--
-- Name: queue_settings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.queue_settings (
    id boolean DEFAULT true NOT NULL,
    copies_payload boolean NOT NULL,
    CONSTRAINT queue_settings_id_check CHECK (id)
);


--
-- Name: schema_migration_claims; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migration_claims (
    version integer NOT NULL,
    claimed_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: send_pace; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.send_pace (
    channel text NOT NULL,
    next_slot timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    factor double precision DEFAULT 1 NOT NULL,
    lowered_at timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    held_until timestamp with time zone DEFAULT '1970-01-01 00:00:00+00'::timestamp with time zone NOT NULL,
    hold_reason text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT send_pace_channel_check CHECK ((channel = ANY (ARRAY['sms'::text, 'email'::text]))),
    CONSTRAINT send_pace_factor_check CHECK (((factor > (0)::double precision) AND (factor <= (1)::double precision)))
);


--
-- Name: suppressions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.suppressions (
    organization_id uuid NOT NULL,
    recipient text NOT NULL,
    reason text NOT NULL,
    detail text,
    job_id uuid,
    provider_message_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: webhook_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_attempts (
    id bigint NOT NULL,
    endpoint_id uuid NOT NULL,
    event_id uuid NOT NULL,
    event_type text NOT NULL,
    attempt integer NOT NULL,
    outcome text NOT NULL,
    status_code integer,
    latency_ms integer NOT NULL,
    error text,
    started_at timestamp with time zone NOT NULL,
    next_attempt_at timestamp with time zone,
    CONSTRAINT webhook_attempts_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT webhook_attempts_outcome_check CHECK ((outcome = ANY (ARRAY['delivered'::text, 'retry'::text, 'dead'::text])))
);


--
-- Name: webhook_attempts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.webhook_attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.webhook_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: webhook_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_deliveries (
    id bigint NOT NULL,
    endpoint_id uuid NOT NULL,
    event_id uuid NOT NULL,
    organization_id uuid NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    claim_token uuid,
    claimed_at timestamp with time zone
);


--
-- Name: webhook_deliveries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.webhook_deliveries ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.webhook_deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: webhook_endpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_endpoints (
    id uuid NOT NULL,
    organization_id uuid NOT NULL,
    url text NOT NULL,
    event_types text[],
    secret text NOT NULL,
    previous_secret text,
    previous_until timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    failing_since timestamp with time zone,
    disabled_at timestamp with time zone,
    disabled_reason text,
    CONSTRAINT webhook_endpoints_check CHECK (((previous_secret IS NULL) = (previous_until IS NULL))),
    CONSTRAINT webhook_endpoints_url_check CHECK (((length(url) >= 1) AND (length(url) <= 2048)))
);


--
-- Name: worker_fleet; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.worker_fleet (
    id boolean DEFAULT true NOT NULL,
    decided_at timestamp with time zone DEFAULT '-infinity'::timestamp with time zone NOT NULL,
    CONSTRAINT worker_fleet_id_check CHECK (id)
);


--
-- Name: worker_slots; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.worker_slots (
    slot integer NOT NULL,
    lease uuid,
    until timestamp with time zone DEFAULT '-infinity'::timestamp with time zone NOT NULL,
    starting boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT worker_slots_slot_check CHECK (((slot >= 1) AND (slot <= 100)))
);


--
-- Name: delivery_feedback delivery_feedback_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_feedback
    ADD CONSTRAINT delivery_feedback_pkey PRIMARY KEY (id);


--
-- Name: delivery_feedback delivery_feedback_provider_message_id_event_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.delivery_feedback
    ADD CONSTRAINT delivery_feedback_provider_message_id_event_key_key UNIQUE (provider_message_id, event_key);


--
-- Name: event_cursors event_cursors_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_cursors
    ADD CONSTRAINT event_cursors_pkey PRIMARY KEY (consumer);


--
-- Name: history_days history_days_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.history_days
    ADD CONSTRAINT history_days_pkey PRIMARY KEY (day);


--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (organization_id, idempotency_key);


--
-- Name: job_attempts job_attempts_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_attempts
    ADD CONSTRAINT job_attempts_key UNIQUE (job_id, job_created_at, attempt);


--
-- Name: job_outcomes job_outcomes_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_outcomes
    ADD CONSTRAINT job_outcomes_key UNIQUE (job_id, created_at);


--
-- Name: job_queue job_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_queue
    ADD CONSTRAINT job_queue_pkey PRIMARY KEY (id);


--
-- Name: job_requests job_requests_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_requests
    ADD CONSTRAINT job_requests_key UNIQUE (id, created_at);


--
-- Name: organization_claim_counts organization_claim_counts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.organization_claim_counts
    ADD CONSTRAINT organization_claim_counts_pkey PRIMARY KEY (organization_id, minute);


--
-- Name: organization_ingest_counts organization_ingest_counts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.organization_ingest_counts
    ADD CONSTRAINT organization_ingest_counts_pkey PRIMARY KEY (organization_id, minute);


--
-- Name: organization_rate_limits organization_rate_limits_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.organization_rate_limits
    ADD CONSTRAINT organization_rate_limits_pkey PRIMARY KEY (organization_id);


--
-- Name: queue_settings queue_settings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue_settings
    ADD CONSTRAINT queue_settings_pkey PRIMARY KEY (id);


--
-- Name: schema_migration_claims schema_migration_claims_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migration_claims
    ADD CONSTRAINT schema_migration_claims_pkey PRIMARY KEY (version);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: send_pace send_pace_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.send_pace
    ADD CONSTRAINT send_pace_pkey PRIMARY KEY (channel);


--
-- Name: status_events status_events_data_or_fields; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.status_events
    ADD CONSTRAINT status_events_data_or_fields CHECK (((data IS NOT NULL) OR (status IS NOT NULL))) NOT VALID;


--
-- Name: status_events status_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.status_events
    ADD CONSTRAINT status_events_pkey PRIMARY KEY (id);


--
-- Name: suppressions suppressions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.suppressions
    ADD CONSTRAINT suppressions_pkey PRIMARY KEY (organization_id, recipient);


--
-- Name: webhook_attempts webhook_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_attempts
    ADD CONSTRAINT webhook_attempts_pkey PRIMARY KEY (id);


--
-- Name: webhook_deliveries webhook_deliveries_endpoint_id_event_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_endpoint_id_event_id_key UNIQUE (endpoint_id, event_id);


--
-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id);


--
-- Name: webhook_endpoints webhook_endpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id);


--
-- Name: worker_fleet worker_fleet_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.worker_fleet
    ADD CONSTRAINT worker_fleet_pkey PRIMARY KEY (id);


--
-- Name: worker_slots worker_slots_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.worker_slots
    ADD CONSTRAINT worker_slots_pkey PRIMARY KEY (slot);


--
-- Name: delivery_feedback_by_attempt; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX delivery_feedback_by_attempt ON public.delivery_feedback USING btree (job_id, attempt);


--
-- Name: delivery_feedback_received; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX delivery_feedback_received ON public.delivery_feedback USING btree (received_at);


--
-- Name: delivery_feedback_waiting; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX delivery_feedback_waiting ON public.delivery_feedback USING btree (received_at) WHERE (applied_at IS NULL);


--
-- Name: job_attempts_by_message_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_attempts_by_message_id ON ONLY public.job_attempts USING btree (provider_message_id) WHERE (provider_message_id IS NOT NULL);


--
-- Name: job_outcomes_by_message_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_outcomes_by_message_id ON ONLY public.job_outcomes USING btree (provider_message_id) WHERE (provider_message_id IS NOT NULL);


--
-- Name: job_outcomes_by_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_outcomes_by_status ON ONLY public.job_outcomes USING btree (organization_id, status, created_at, job_id);


--
-- Name: job_queue_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_queue_expires ON public.job_queue USING btree (expires_at) WHERE (expires_at IS NOT NULL);


--
-- Name: job_queue_lanes; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_queue_lanes ON public.job_queue USING btree (priority, next_attempt_at);


--
-- Name: job_queue_lanes_by_org; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_queue_lanes_by_org ON public.job_queue USING btree (organization_id, priority, next_attempt_at);


--
-- Name: job_queue_listing; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_queue_listing ON public.job_queue USING btree (organization_id, created_at, id);


--
-- Name: job_requests_listing; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_requests_listing ON ONLY public.job_requests USING btree (organization_id, created_at, id);


--
-- Name: status_events_stream; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX status_events_stream ON public.status_events USING btree (tx, sequence) WHERE (tx IS NOT NULL);


--
-- Name: status_events_unpublished; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX status_events_unpublished ON public.status_events USING btree (next_attempt_at) WHERE (published_at IS NULL);


--
-- Name: webhook_attempts_by_endpoint; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_attempts_by_endpoint ON public.webhook_attempts USING btree (endpoint_id, id DESC);


--
-- Name: webhook_attempts_started; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_attempts_started ON public.webhook_attempts USING btree (started_at);


--
-- Name: webhook_deliveries_by_endpoint; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_deliveries_by_endpoint ON public.webhook_deliveries USING btree (endpoint_id, next_attempt_at);


--
-- Name: webhook_deliveries_by_event; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_deliveries_by_event ON public.webhook_deliveries USING btree (event_id);


--
-- Name: webhook_deliveries_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_deliveries_due ON public.webhook_deliveries USING btree (next_attempt_at);


--
-- Name: webhook_endpoints_by_org; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_endpoints_by_org ON public.webhook_endpoints USING btree (organization_id, created_at);


--
-- Name: job_outcomes history_days_extend; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER history_days_extend AFTER INSERT ON public.job_outcomes REFERENCING NEW TABLE AS ended FOR EACH STATEMENT EXECUTE FUNCTION public.history_days_extend();


--
-- Name: job_outcomes status_events_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER status_events_changed AFTER UPDATE ON public.job_outcomes REFERENCING OLD TABLE AS before_change NEW TABLE AS after_change FOR EACH STATEMENT EXECUTE FUNCTION public.status_events_changed();


--
-- Name: delivery_feedback status_events_complained; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER status_events_complained AFTER UPDATE ON public.delivery_feedback REFERENCING OLD TABLE AS before_change NEW TABLE AS after_change FOR EACH STATEMENT EXECUTE FUNCTION public.status_events_complained();


--
-- Name: job_outcomes status_events_ended; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER status_events_ended AFTER INSERT ON public.job_outcomes REFERENCING NEW TABLE AS ended FOR EACH STATEMENT EXECUTE FUNCTION public.status_events_ended();


--
-- Name: status_events status_events_fan_out; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER status_events_fan_out AFTER INSERT ON public.status_events REFERENCING NEW TABLE AS recorded FOR EACH STATEMENT EXECUTE FUNCTION public.status_events_fan_out();


--
-- Name: job_outcomes status_events_requeued; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER status_events_requeued AFTER DELETE ON public.job_outcomes REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION public.status_events_requeued();


--
-- Name: webhook_attempts webhook_attempts_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_attempts
    ADD CONSTRAINT webhook_attempts_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES public.webhook_endpoints(id) ON DELETE CASCADE;


--
-- Name: webhook_deliveries webhook_deliveries_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES public.webhook_endpoints(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--


