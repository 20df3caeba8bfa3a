//! The bus's stream of status events (migrations 0010, 0011; `claim_events.sql`,
//! `complete_events.sql`): every committed event is read once, in the order of its
//! transaction, after a cursor one reader holds at a time; an event the bus refused is
//! retried apart; a reader lost past its lease is fenced.
//!
//! The events are written as the triggers write them since 0013 (the columns they name, the
//! rest by default), on connections of their own, so that transactions can be held open.
//! The horizon is the cluster's: a transaction of another test's database, still open, may
//! hold it back, so each read that expects events reads until they come (a bounded wait).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use integration_tests::TestDb;
use notify_core::events::{ClaimedEvent, EventStore, Published};
use notify_postgres::PgStore;
use tokio_postgres::GenericClient;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);

/// Records `n` events of `org`, as a status change's trigger does, in the client's current
/// transaction (or its own): their ids, in the order of their making.
async fn record(client: &impl GenericClient, org: Uuid, n: i64) -> Vec<Uuid> {
    client
        .query(
            "INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                                        previous_status, channel, attempt)
             SELECT $1, gen_random_uuid(), 'notification.sent', now(), 'sent', 'processing',
                    'sms', 1
             FROM generate_series(1, $2::bigint) AS g
             ORDER BY g
             RETURNING id",
            &[&org, &n],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn published(claimed: &[ClaimedEvent]) -> Vec<Published> {
    claimed.iter().map(ClaimedEvent::taken).collect()
}

/// The first claim that answers events (or the last, empty, after 10 s): the horizon may
/// wait for another test's transaction.
async fn first_claim(store: &PgStore) -> Vec<ClaimedEvent> {
    let started = Instant::now();
    loop {
        let claimed = store.claim_events(100, LEASE).await.unwrap();
        if !claimed.is_empty() || started.elapsed() > Duration::from_secs(10) {
            return claimed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Claims and publishes until `want` events came (or 10 s passed): every event read, in
/// the order read.
async fn drain(store: &PgStore, want: usize) -> Vec<Uuid> {
    let started = Instant::now();
    let mut read = Vec::new();
    while read.len() < want && started.elapsed() < Duration::from_secs(10) {
        let claimed = store.claim_events(100, LEASE).await.unwrap();
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let applied = store.complete_events(&published(&claimed)).await.unwrap();
        assert_eq!(applied as usize, claimed.len(), "every result recorded");
        read.extend(claimed.iter().map(|c| c.event.id));
    }
    read
}

#[tokio::test]
async fn each_committed_event_is_read_once_in_its_transaction_s_order_none_rolled_back() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let org = Uuid::new_v4();
    let (mut early, mut later, mut undone) =
        (db.client().await, db.client().await, db.client().await);

    // an open transaction takes its id first and writes an event
    let early_tx = early.transaction().await.unwrap();
    let first = record(&early_tx, org, 1).await;
    // a later transaction commits three after it
    let tx = later.transaction().await.unwrap();
    let committed = record(&tx, org, 3).await;
    tx.commit().await.unwrap();
    // and one rolls back
    let tx = undone.transaction().await.unwrap();
    let rolled_back = record(&tx, org, 2).await;
    tx.rollback().await.unwrap();

    // while the first is open, the cursor waits behind it: passing it would leave its event
    // behind the cursor when it commits
    for _ in 0..3 {
        let claimed = store.claim_events(100, LEASE).await.unwrap();
        assert!(
            claimed.is_empty(),
            "read past an open transaction: {:?}",
            claimed.iter().map(|c| c.event.id).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    early_tx.commit().await.unwrap();
    let read = drain(&store, 4).await;
    let expected: Vec<Uuid> = first.iter().chain(&committed).copied().collect();
    assert_eq!(read, expected, "each once, the earlier transaction's first");
    assert!(rolled_back.iter().all(|id| !read.contains(id)));

    // nothing more, and nothing was written to the events themselves
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(store.claim_events(100, LEASE).await.unwrap().is_empty());
    let client = db.client().await;
    let unclaimed = integration_tests::count(
        &client,
        "SELECT count(*) FROM status_events
         WHERE published_at IS NOT NULL AND claim_token IS NULL AND attempts IS NULL",
    )
    .await;
    assert_eq!(unclaimed, 4);
}

#[tokio::test]
async fn a_refused_event_is_retried_apart_and_one_reader_holds_the_stream() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let org = Uuid::new_v4();
    let ids = record(&client, org, 5).await;

    let claimed = first_claim(&store).await;
    assert_eq!(claimed.iter().map(|c| c.event.id).collect::<Vec<_>>(), ids);
    assert!(claimed.iter().all(|c| c.attempts == 1));
    let token = claimed[0].claim_token;
    assert!(
        claimed.iter().all(|c| c.claim_token == token),
        "one claim, the cursor's"
    );

    // a second reader meanwhile gets nothing: the stream is held
    record(&client, org, 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(store.claim_events(100, LEASE).await.unwrap().is_empty());

    // the bus took three and refused two
    let due_now = chrono::Utc::now() - chrono::Duration::seconds(1);
    let mut done = published(&claimed);
    for p in &mut done[3..] {
        p.retry_at = Some(due_now);
        p.error = Some("ThrottlingException: Rate exceeded".into());
    }
    assert_eq!(store.complete_events(&done).await.unwrap(), 5);

    // the refused two come back on their own claims, their attempt counted; the stream
    // goes on from where the cursor moved (the two recorded meanwhile)
    let next = store.claim_events(100, LEASE).await.unwrap();
    let refused: Vec<&ClaimedEvent> = next.iter().filter(|c| c.attempts == 2).collect();
    let mut refused_ids: Vec<Uuid> = refused.iter().map(|c| c.event.id).collect();
    refused_ids.sort();
    let mut expected = ids[3..].to_vec();
    expected.sort();
    assert_eq!(refused_ids, expected);
    assert!(refused.iter().all(|c| c.claim_token != token));
    assert_eq!(next.len(), 4, "{next:?}");
    assert_eq!(store.complete_events(&published(&next)).await.unwrap(), 4);
    assert!(store.claim_events(100, LEASE).await.unwrap().is_empty());
    let waiting = integration_tests::count(
        &client,
        "SELECT count(*) FROM status_events WHERE published_at IS NULL",
    )
    .await;
    assert_eq!(waiting, 0, "every event published");
}

#[tokio::test]
async fn a_reader_past_its_lease_loses_the_cursor_and_its_late_completion_is_fenced() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let ids = record(&client, Uuid::new_v4(), 3).await;
    let lost = first_claim(&store).await;
    assert_eq!(lost.len(), 3);

    // a reader for whom the holder has held it too long takes it, and reads the same events
    tokio::time::sleep(Duration::from_millis(20)).await;
    let taken = store.claim_events(100, Duration::ZERO).await.unwrap();
    assert_eq!(taken.iter().map(|c| c.event.id).collect::<Vec<_>>(), ids);
    assert_ne!(taken[0].claim_token, lost[0].claim_token);

    // the lost reader's completion, refusals included, changes nothing
    let mut late = published(&lost);
    late[0].retry_at = Some(chrono::Utc::now());
    assert_eq!(store.complete_events(&late).await.unwrap(), 0, "fenced");
    assert_eq!(
        integration_tests::count(
            &client,
            "SELECT count(*) FROM status_events WHERE published_at IS NULL"
        )
        .await,
        0
    );
    assert_eq!(store.complete_events(&published(&taken)).await.unwrap(), 3);
    assert!(store.claim_events(100, LEASE).await.unwrap().is_empty());
    let read: HashSet<Uuid> = taken.iter().map(|c| c.event.id).collect();
    assert_eq!(read.len(), 3);
}

/// Migration 0013: an event's fields are columns and its `data` is built as it is read. An
/// event written before it (its JSON stored, no columns) reads as it was written, and one
/// written after reads the same from its columns; the bus's claim answers both.
#[tokio::test]
async fn an_event_reads_the_same_from_its_stored_json_or_from_its_columns() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let (org, job) = (Uuid::new_v4(), Uuid::new_v4());
    let fields = "$2::uuid, $1::uuid, 'email', 'dead', 'processing', 3, 'm-1', 'Throttling',
                  'rate exceeded for ann@example.com'";
    client
        .execute(
            &format!(
                "INSERT INTO status_events (organization_id, job_id, type, created_at, data,
                                            next_attempt_at)
                 VALUES ($1, $2, 'notification.dead', now(), status_event_data({fields}), now())"
            ),
            &[&org, &job],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO status_events (organization_id, job_id, type, created_at, status,
                                        previous_status, channel, attempt,
                                        provider_message_id, error_code, error_message)
             VALUES ($1, $2, 'notification.dead', now(), 'dead', 'processing', 'email', 3,
                     'm-1', 'Throttling',
                     status_event_redact('rate exceeded for ann@example.com'))",
            &[&org, &job],
        )
        .await
        .unwrap();
    // a new event stores no JSON, and no row stores both or neither
    assert_eq!(
        integration_tests::count(
            &client,
            "SELECT count(*) FROM status_events WHERE (data IS NULL) = (status IS NULL)"
        )
        .await,
        0
    );
    let read = first_claim(&store).await;
    assert_eq!(read.len(), 2);
    assert_eq!(read[0].event.data, read[1].event.data);
    let data = &read[1].event.data;
    assert_eq!(data["id"], job.to_string());
    assert_eq!(data["organization_id"], org.to_string());
    assert_eq!(data["channel"], "email");
    assert_eq!(data["previous_status"], "processing");
    assert_eq!(data["attempt"], 3);
    assert_eq!(data["error"]["code"], "Throttling");
    assert_eq!(data["error"]["message"], "rate exceeded for [redacted]");
    // neither shape is refused by the check, and a row with neither is
    let neither = client
        .execute(
            "INSERT INTO status_events (organization_id, job_id, type, created_at,
                                        next_attempt_at)
             VALUES ($1, $2, 'notification.sent', now(), now())",
            &[&org, &job],
        )
        .await;
    assert!(
        neither.is_err(),
        "an event with neither its JSON nor its fields"
    );
}

/// The operator's replay to the bus (docs/events.md, "Replay"): published events sent back to
/// the retry path by hand are claimed again, each attempt counted from 1, though a stream
/// event never counted one (0013 leaves its `attempts` NULL).
#[tokio::test]
async fn the_documented_replay_sends_published_events_to_the_bus_again() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let ids = record(&client, Uuid::new_v4(), 2).await;
    assert_eq!(drain(&store, 2).await, ids);
    client
        .execute(
            "UPDATE status_events
             SET published_at = NULL, next_attempt_at = now(), claim_token = NULL,
                 claimed_at = NULL
             WHERE created_at >= now() - interval '1 hour'",
            &[],
        )
        .await
        .unwrap();
    let again = store.claim_events(100, LEASE).await.unwrap();
    let mut read: Vec<Uuid> = again.iter().map(|c| c.event.id).collect();
    read.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(read, want);
    assert!(again.iter().all(|c| c.attempts == 1), "{again:?}");
}
