-- The bus reads status events from a cursor instead of claiming them row by row. Until now
-- each event was written three times: inserted, then updated by the bus's claim (its
-- claim token and attempt) and by its completion (published_at), each update a new row
-- version in every index, since next_attempt_at is indexed and published_at is in the
-- partial index's predicate. Now an event is inserted once and left alone: the bus keeps
-- one row, its position in the stream, and moves it past each batch it published
-- (docs/decisions/0016-events-published-from-a-cursor.md, with the figures).
--
-- The stream is ordered by the writing transaction's id, then the event's sequence. A
-- cursor cannot follow the sequence alone: a transaction that drew a smaller number may
-- commit after one that drew a larger, and the cursor would have passed it. Every
-- transaction whose id is below the oldest one still running (the xmin of a current
-- snapshot) has ended, and no new one can take such an id: the stream is read only below
-- that horizon, so nothing is ever added behind the cursor. An event of a transaction that
-- rolled back is never seen. (The horizon waits for a long writing transaction; the bus
-- then lags behind it, by design: PgQ's ticks work the same way.)
--
-- Only events the bus refused get a second write: published_at goes back to NULL with a
-- retry time, and the claim of claim_events.sql takes them as before, through the partial
-- index that now holds those alone. The same path publishes the events a 1.0 release left
-- unpublished, which carry no transaction id.
--
-- Online against the 1.0 release (tests/it/online_migration.rs): a nullable column with no
-- default and two defaults, which ALTER TABLE changes in the catalog alone, under a short
-- lock timeout (the runner tries again); a new table. The 1.0 release's completions keep
-- producing events through the triggers (0004), and this release's bus reads each once,
-- those written before this migration included. A worker built between 0004 and this one,
-- still running during a rollout, finds every new event published (its claim reads
-- published_at IS NULL): it leaves them to the cursor and publishes nothing twice. The
-- stream's index is built CONCURRENTLY by 0011.
SET LOCAL lock_timeout = '500ms';

ALTER TABLE status_events ADD COLUMN tx xid8;
ALTER TABLE status_events ALTER COLUMN tx SET DEFAULT pg_current_xact_id();
-- handed to the stream at once; NULL again only while waiting for a retry
ALTER TABLE status_events ALTER COLUMN published_at SET DEFAULT now();

-- Where each reader of the stream stands: the last event it published, by (tx, sequence).
-- One reader at a time holds a consumer's row, under a claim token that its completion
-- checks (complete_events.sql); a holder lost for longer than the lease gives it up to the
-- next claim, and its late completion is fenced.
CREATE TABLE event_cursors (
    consumer      text PRIMARY KEY CHECK (consumer IN ('bus')),
    last_tx       xid8 NOT NULL,
    last_sequence bigint NOT NULL,
    claim_token   uuid,
    claimed_at    timestamptz,
    moved_at      timestamptz NOT NULL DEFAULT now()
);
-- Starts at this transaction's horizon: an event with a lower transaction id was written
-- before the defaults above (no tx, published_at NULL: the retry path takes it); any other
-- belongs to a transaction still running now or later, all of them at or above it (the
-- lock on status_events, held to this commit, keeps them from writing an event before).
INSERT INTO event_cursors (consumer, last_tx, last_sequence)
VALUES ('bus', pg_snapshot_xmin(pg_current_snapshot()), 0);
