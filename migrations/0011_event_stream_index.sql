-- migrate: no-transaction
-- The stream's order (0010): the bus reads the events after its cursor, by transaction id
-- and sequence. Built CONCURRENTLY, so no completion waits for it. Events a 1.0 release
-- wrote have no transaction id and stay out of it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS status_events_stream
    ON status_events (tx, sequence) WHERE tx IS NOT NULL;
