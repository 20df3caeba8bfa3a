-- Status events get time-ordered ids (UUIDv7, RFC 9562), not random ones (v4): the
-- primary key of status_events, kept RETENTION_DAYS, then takes each new event at its right
-- edge instead of on a random leaf of an index as large as the retained events. After a
-- checkpoint, the first change to each page is logged whole (a full-page image): random keys
-- touch a new leaf, and log 8 kB, for most events; ordered keys touch the same few leaves
-- (docs/decisions/0015-time-ordered-event-ids.md, with the figures). The id stays a uuid, and
-- a webhook's `webhook-id` stays the event's id: receivers see no other shape.
--
-- Applied online against the 1.0 release in a test (tests/it/online_migration.rs): a new
-- function and a column's default, which ALTER TABLE changes in the catalog alone (an
-- instant ACCESS EXCLUSIVE lock on status_events, which only the triggers of the worker's
-- completions write; ingest never waits for it). Events already written keep their ids.

-- A UUIDv7 of this moment: the first 48 bits the Unix time in milliseconds, the version
-- nibble 7, the rest random (gen_random_uuid's v4 bits, its variant kept). Ordered by the
-- millisecond; random within one. PostgreSQL 18 has uuidv7(); 15 does not.
CREATE FUNCTION time_ordered_uuid() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
               set_bit(set_bit(
                   overlay(uuid_send(gen_random_uuid())
                           PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                            * 1000)::bigint) FROM 3)
                           FROM 1 FOR 6),
                   52, 1), 53, 1),
               'hex')::uuid
$$;

ALTER TABLE status_events ALTER COLUMN id SET DEFAULT time_ordered_uuid();
