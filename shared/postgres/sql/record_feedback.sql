-- Record provider events (one array element each); a copy of an event already recorded
-- (same provider message id and event key) is skipped. Returns the channel, kind and subtype
-- of each event newly recorded.
-- $1 provider message ids, $2 event keys, $3 kinds, $4 subtypes, $5 diagnostics,
-- $6 suppresses, $7 occurred at, $8 raw events, $9 the current time (NULL: now()),
-- $10 channels
INSERT INTO delivery_feedback
    (provider_message_id, event_key, kind, subtype, diagnostic, suppresses, occurred_at, raw,
     channel, received_at)
SELECT t.*, coalesce($9::timestamptz, now())
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bool[],
            $7::timestamptz[], $8::jsonb[], $10::text[])
     AS t(provider_message_id, event_key, kind, subtype, diagnostic, suppresses, occurred_at, raw,
          channel)
ON CONFLICT (provider_message_id, event_key) DO NOTHING
RETURNING channel, kind, subtype
