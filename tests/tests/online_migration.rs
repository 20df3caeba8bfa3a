//! Migration 0011 (the queue leaves the job table) on a deployed database, online: 1M finished
//! jobs and 10k due ones, a worker of the previous release working them and its ingest
//! accepting more while the migration runs, then the new release taking over.
//!
//! What it shows:
//! - the migration moves only the open jobs (the finished ones stay where they are) and holds
//!   its locks briefly: the previous release's ingest is never blocked for long;
//! - the previous release's worker stops at the migration (its statements fail) instead of
//!   claiming beside the new one, and its in-flight batch is swept and delivered by the new
//!   release: every job ends sent, none is lost, and only that batch can be sent twice;
//! - jobs the previous ingest accepts during and after the migration are queued too.
//!
//! The same for the later storage steps, each with the release before it at work: 0014 and
//! 0015 (the history partitioned by day) and 0018 (a job's last attempt in its outcome row).
//!
//! `ONLINE_MIGRATION_FINISHED` sets the number of finished jobs (default 1,000,000; a smaller
//! number makes a quick local run). The figures are printed (`-- --nocapture`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use integration_tests::TestDb;
use shared::migrate;
use shared::store::{Decision, JobStore, PgStore};
use tokio::sync::Mutex;
use uuid::Uuid;

const DUE: i64 = 10_000;
const ORG: &str = "00000000-0000-4000-8000-00000000a011";

/// The two tests here each fill a million jobs and time the previous release's inserts while a
/// migration runs: they run one at a time, so neither measures the other's load (side by side
/// on 2 cores, an insert once waited 2.4 s).
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// The previous release's claim (shared/sql/claim.sql before 0011), trimmed to what the
/// test needs back.
const OLD_CLAIM: &str = "
    WITH due AS (
        SELECT id FROM notification_jobs
        WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
          AND (expires_at IS NULL OR expires_at > now())
        ORDER BY next_attempt_at LIMIT $1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE notification_jobs AS j
    SET status = 'processing', attempts = j.attempts + 1,
        tries = GREATEST(j.tries, j.attempts) + 1, claimed_at = now(),
        claim_token = gen_random_uuid(), updated_at = now()
    FROM due WHERE j.id = due.id
    RETURNING j.id, j.claim_token";

/// The previous release's completion of a sent batch (fenced by the claim token).
const OLD_COMPLETE: &str = "
    UPDATE notification_jobs AS j
    SET status = 'sent', updated_at = now()
    FROM unnest($1::uuid[], $2::uuid[]) AS c(id, claim_token)
    WHERE j.id = c.id AND j.claim_token = c.claim_token AND j.status = 'processing'";

/// The previous release's ingest insert (no queue row).
const OLD_INSERT: &str = "
    INSERT INTO notification_jobs (id, organization_id, channel, payload, max_attempts,
                                   next_attempt_at, expires_at)
    VALUES (gen_random_uuid(), $1, 'sms',
            jsonb_build_object('to', '+1555' || lpad($2::text, 7, '0'), 'message', 'hi'), 5,
            now(), now() + interval '1 day')
    RETURNING id";

/// Every provider call, by job id.
type Sends = Arc<Mutex<HashMap<Uuid, u32>>>;

fn finished_jobs() -> i64 {
    std::env::var("ONLINE_MIGRATION_FINISHED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// A database at 0010 with `finished` sent jobs over the last 29 days and `DUE` due ones.
async fn deployed(db: &TestDb, finished: i64) {
    let mut client = db.client().await;
    let before = integration_tests::migrations_before("0011");
    migrate::run_files(&mut client, &before).await.unwrap();
    client
        .execute(
            "INSERT INTO notification_jobs
                 (organization_id, channel, payload, status, attempts, tries, next_attempt_at,
                  created_at, updated_at, claimed_at, claim_token)
             SELECT $1::text::uuid, 'sms',
                    jsonb_build_object('to', '+1555' || lpad((g % 10000000)::text, 7, '0'),
                                       'message', 'Your invoice is paid'),
                    'sent', 1, 1, t, t, t, t, gen_random_uuid()
             FROM generate_series(1, $2::bigint) AS g,
                  LATERAL (SELECT now() - (g % 2505600) * interval '1 second' AS t) AS ts",
            &[&ORG, &finished],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO notification_jobs
                 (organization_id, channel, payload, next_attempt_at, expires_at)
             SELECT $1::text::uuid, 'sms',
                    jsonb_build_object('to', '+1666' || lpad(g::text, 7, '0'), 'message', 'hi'),
                    now() - interval '1 minute', now() + interval '1 day'
             FROM generate_series(1, $2::bigint) AS g",
            &[&ORG, &DUE],
        )
        .await
        .unwrap();
    client
        .batch_execute("VACUUM ANALYZE notification_jobs")
        .await
        .unwrap();
}

/// The previous release's worker: claims batches of 100, "sends" them, completes them, until
/// a statement fails (the migration) or it is told to stop. Returns its in-flight batch at
/// that moment (claimed and sent, never completed) and why it stopped.
async fn old_worker(db: &TestDb, sends: Sends, stop: Arc<AtomicBool>) -> (Vec<Uuid>, String) {
    let client = db.client().await;
    loop {
        if stop.load(Ordering::Relaxed) {
            return (Vec::new(), "stopped".into());
        }
        let rows = match client.query(OLD_CLAIM, &[&100i64]).await {
            Ok(rows) => rows,
            Err(e) => return (Vec::new(), format!("claim failed: {}", cause(&e))),
        };
        let (ids, tokens): (Vec<Uuid>, Vec<Uuid>) = rows
            .iter()
            .map(|r| (r.get::<_, Uuid>(0), r.get::<_, Uuid>(1)))
            .unzip();
        {
            let mut sent = sends.lock().await;
            for id in &ids {
                *sent.entry(*id).or_default() += 1;
            }
        }
        // a provider call's worth of time, so the migration finds it mid-queue
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Err(e) = client.execute(OLD_COMPLETE, &[&ids, &tokens]).await {
            return (ids, format!("completion failed: {}", cause(&e)));
        }
    }
}

/// The server's message for a failed statement.
fn cause(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_else(|| e.to_string())
}

/// The previous release's ingest: one job at a time until told to stop; each insert's
/// latency.
async fn old_ingest(db: &TestDb, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let client = db.client().await;
    let org: Uuid = ORG.parse().unwrap();
    let mut latencies = Vec::new();
    for n in 0i64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let started = Instant::now();
        client
            .query_one(OLD_INSERT, &[&org, &n.to_string()])
            .await
            .unwrap();
        latencies.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    latencies
}

/// The new release's worker: the old worker's lost batch swept, then claims until the queue
/// is empty.
async fn new_worker(store: &PgStore, sends: &Sends) {
    let later = Some(Utc::now() + chrono::Duration::hours(1));
    store
        .sweep(Duration::from_secs(600), 10_000, later)
        .await
        .unwrap();
    loop {
        let batch = store.claim(100, later).await.unwrap();
        if batch.is_empty() {
            return;
        }
        let mut completions = Vec::new();
        {
            let mut sent = sends.lock().await;
            for job in &batch {
                *sent.entry(job.id).or_default() += 1;
                completions.push(integration_tests::completion(
                    job,
                    Decision::Sent,
                    Some("m"),
                ));
            }
        }
        let report = store.complete(&completions, later).await.unwrap();
        assert_eq!(
            report.applied.len(),
            batch.len(),
            "every completion applies"
        );
    }
}

/// The previous release at work on the database while a migration runs: its worker and its
/// ingest, spawned, and the provider calls they make.
struct Previous<W> {
    sends: Sends,
    stop: Arc<AtomicBool>,
    worker: tokio::task::JoinHandle<W>,
    ingest: tokio::task::JoinHandle<Vec<Duration>>,
}

impl<W: Send + 'static> Previous<W> {
    /// Spawns `worker` and `ingest` on `db`, and gives them half a second to get going.
    async fn start<FW, FI>(
        db: &Arc<TestDb>,
        worker: impl FnOnce(Arc<TestDb>, Sends, Arc<AtomicBool>) -> FW,
        ingest: impl FnOnce(Arc<TestDb>, Arc<AtomicBool>) -> FI,
    ) -> Self
    where
        FW: std::future::Future<Output = W> + Send + 'static,
        FI: std::future::Future<Output = Vec<Duration>> + Send + 'static,
    {
        let sends: Sends = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = tokio::spawn(worker(db.clone(), sends.clone(), stop.clone()));
        let ingest = tokio::spawn(ingest(db.clone(), stop.clone()));
        tokio::time::sleep(Duration::from_millis(500)).await;
        Self {
            sends,
            stop,
            worker,
            ingest,
        }
    }

    /// Lets it go on a little after the migration, then stops it: what its worker returned,
    /// each insert's latency of its ingest, and the provider calls so far.
    async fn stop(self) -> (W, Vec<Duration>, Sends) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.stop.store(true, Ordering::Relaxed);
        let worker = self.worker.await.unwrap();
        let latencies = self.ingest.await.unwrap();
        (worker, latencies, self.sends)
    }
}

/// The organization's jobs that ended sent.
async fn sent_jobs(client: &tokio_postgres::Client) -> i64 {
    integration_tests::count(
        client,
        &format!(
            "SELECT count(*) FROM job_states WHERE status = 'sent' AND organization_id = '{ORG}'"
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_queue_moves_out_online_while_the_previous_release_works() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let finished = finished_jobs();
    let db = TestDb::empty().await;
    let fill = Instant::now();
    deployed(&db, finished).await;
    eprintln!(
        "{finished} finished + {DUE} due jobs at 0010 in {:?}",
        fill.elapsed()
    );

    let db = Arc::new(db);
    let previous = Previous::start(
        &db,
        |db, sends, stop| async move { old_worker(&db, sends, stop).await },
        |db, stop| async move { old_ingest(&db, stop).await },
    )
    .await;

    let mut client = db.client().await;
    let migrating = Instant::now();
    // up to 0014: the previous release here is older than 0011 (its ingest writes no queue
    // row), and 0015 drops the trigger that queues its jobs, for a deploy goes release by
    // release; 0015 follows below, once it has stopped
    let report = migrate::run_files(&mut client, &integration_tests::migrations_before("0015"))
        .await
        .unwrap();
    let migration_time = migrating.elapsed();
    assert!(
        report.applied.iter().any(|n| n.starts_with("0011_")),
        "{report:?}"
    );

    // the previous ingest keeps going a little after the migration (its jobs are adopted)
    let ((in_flight, why), latencies, sends) = previous.stop().await;
    assert!(
        why.contains("does not exist"),
        "the previous release's worker stops at the migration: {why}"
    );
    let worst_insert = latencies.iter().max().copied().unwrap_or_default();
    let old_sent = sends.lock().await.len();

    migrate::run(&mut client).await.unwrap();
    let store = db.store().await;
    new_worker(&store, &sends).await;

    let accepted = DUE + latencies.len() as i64;
    let sent = sent_jobs(&client).await;
    assert_eq!(
        sent,
        finished + accepted,
        "every job ends sent, the finished ones too"
    );
    assert_eq!(
        integration_tests::count(&client, "SELECT count(*) FROM job_queue").await,
        0
    );
    let sends = sends.lock().await;
    assert_eq!(sends.len() as i64, accepted, "every accepted job was sent");
    let twice: Vec<_> = sends
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        twice.iter().all(|id| in_flight.contains(id)),
        "only the previous worker's in-flight batch may be sent twice: {} of {}",
        twice.len(),
        in_flight.len()
    );
    assert!(
        worst_insert < Duration::from_secs(2),
        "the previous ingest is never blocked for long: {worst_insert:?}"
    );
    eprintln!(
        "migrations 0011 to 0013: {migration_time:?}; previous worker sent {old_sent} before it stopped \
         ({why}), {} in flight; previous ingest: {} inserts, slowest {worst_insert:?}; \
         sent twice: {}",
        in_flight.len(),
        latencies.len(),
        twice.len()
    );
}

/// A database as `release` leaves it: `finished` sent jobs over the last 29 days (record,
/// outcome row, delivery row) and `DUE` due ones (record and queue row). At 0013 the
/// records and delivery rows are in notification_jobs and notification_deliveries; at 0017
/// in the tables partitioned by day (job_requests, job_attempts: under the job's day).
async fn deployed_at(release: Release, db: &TestDb, finished: i64) {
    let mut client = db.client().await;
    let (next, records, deliveries, day, day_value) = match release {
        Release::R0013 => (
            "0014",
            "notification_jobs",
            "notification_deliveries",
            "",
            "",
        ),
        Release::R0017 => (
            "0018",
            "job_requests",
            "job_attempts",
            "job_created_at, ",
            "t, ",
        ),
    };
    let before = integration_tests::migrations_before(next);
    migrate::run_files(&mut client, &before).await.unwrap();
    client
        .execute(
            &format!(
                "WITH src AS MATERIALIZED (
                     SELECT gen_random_uuid() AS id, g,
                            now() - (g % 2505600) * interval '1 second' AS t
                     FROM generate_series(1, $2::bigint) AS g
                 ),
                 jobs AS (
                     INSERT INTO {records}
                         (id, organization_id, channel, payload, next_attempt_at, created_at,
                          updated_at)
                     SELECT id, $1::text::uuid, 'sms',
                            jsonb_build_object('to', '+1555' || lpad((g % 10000000)::text, 7, '0'),
                                               'message', 'Your invoice is paid'),
                            t, t, t
                     FROM src
                 ),
                 ended AS (
                     INSERT INTO job_outcomes
                         (job_id, organization_id, created_at, status, attempts, max_attempts,
                          tries, next_attempt_at, updated_at)
                     SELECT id, $1::text::uuid, t, 'sent', 1, 5, 1, t, t FROM src
                 )
                 INSERT INTO {deliveries}
                     (job_id, {day}attempt, provider, provider_message_id, outcome, started_at,
                      finished_at)
                 SELECT id, {day_value}1, 'sns', id::text, 'sent', t, t FROM src"
            ),
            &[&ORG, &finished],
        )
        .await
        .unwrap();
    client
        .execute(
            &format!(
                "WITH jobs AS (
                     INSERT INTO {records}
                         (organization_id, channel, payload, next_attempt_at, expires_at)
                     SELECT $1::text::uuid, 'sms',
                            jsonb_build_object('to', '+1666' || lpad(g::text, 7, '0'),
                                               'message', 'hi'),
                            now() - interval '1 minute', now() + interval '1 day'
                     FROM generate_series(1, $2::bigint) AS g
                     RETURNING id, organization_id, channel, payload, next_attempt_at,
                               expires_at, max_attempts, created_at
                 )
                 INSERT INTO job_queue (id, organization_id, channel, payload, next_attempt_at,
                                        expires_at, max_attempts, created_at, updated_at)
                 SELECT id, organization_id, channel, payload, next_attempt_at, expires_at,
                        max_attempts, created_at, created_at
                 FROM jobs"
            ),
            &[&ORG, &DUE],
        )
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "VACUUM ANALYZE {records}, job_outcomes, {deliveries}, job_queue"
        ))
        .await
        .unwrap();
}

/// A previous release whose worker runs beside a migration.
#[derive(Debug, Clone, Copy)]
enum Release {
    /// before 0014 (the history not partitioned yet)
    R0013,
    /// before 0018 (last attempts as rows of job_attempts)
    R0017,
}

/// That release's worker: its completion-and-claim statement in batches of 100, until told
/// to stop (after completing its batch in hand). Stops with the error of a failed
/// statement: there must be none.
async fn old_worker_of(
    release: Release,
    db: &TestDb,
    sends: Sends,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    use integration_tests::{release_0013, release_0017};
    let client = db.client().await;
    let mut in_hand: Vec<release_0017::Claimed> = Vec::new();
    loop {
        let batch = if stop.load(Ordering::Relaxed) { 0 } else { 100 };
        in_hand = match release {
            Release::R0013 => {
                let plain: Vec<_> = in_hand.iter().map(|c| (c.0, c.1, c.2)).collect();
                release_0013::complete_and_claim(&client, &plain, batch)
                    .await
                    .map(|claimed| {
                        // that release's claim does not return the creation time (nor needs it)
                        let now = Utc::now();
                        claimed
                            .into_iter()
                            .map(|(a, b, c)| (a, b, c, now))
                            .collect()
                    })
            }
            Release::R0017 => release_0017::complete_and_claim(&client, &in_hand, batch).await,
        }
        .map_err(|e| cause(&e))?;
        if batch == 0 {
            return Ok(());
        }
        let mut sent = sends.lock().await;
        for claimed in &in_hand {
            *sent.entry(claimed.0).or_default() += 1;
        }
        drop(sent);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// That release's ingest: one job at a time (every other one keyed), until told to stop;
/// each insert's latency. (0017's insert_jobs.sql is today's, unchanged since.)
async fn old_ingest_of(release: Release, db: &TestDb, stop: Arc<AtomicBool>) -> Vec<Duration> {
    use integration_tests::release_0013;
    let insert_jobs: &str = match release {
        Release::R0013 => release_0013::INSERT_JOBS,
        Release::R0017 => &shared::store::sql::INSERT_JOBS.sql,
    };
    let client = db.client().await;
    let org: Uuid = ORG.parse().unwrap();
    let mut latencies = Vec::new();
    for n in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = (n % 2 == 0).then(|| format!("key-{n}"));
        let started = Instant::now();
        release_0013::ingest_with(&client, insert_jobs, org, key.as_deref())
            .await
            .unwrap()
            .expect("a new job");
        latencies.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    latencies
}

/// A database as `release` leaves it, with `finished` finished jobs (see [`deployed_at`]),
/// and that release's worker and ingest at work on it.
async fn deployed_and_working(
    release: Release,
    finished: i64,
) -> (Arc<TestDb>, Previous<Result<(), String>>) {
    let db = TestDb::empty().await;
    let fill = Instant::now();
    deployed_at(release, &db, finished).await;
    eprintln!(
        "{finished} finished + {DUE} due jobs at {release:?} in {:?}",
        fill.elapsed()
    );
    let db = Arc::new(db);
    let previous = Previous::start(
        &db,
        move |db, sends, stop| async move { old_worker_of(release, &db, sends, stop).await },
        move |db, stop| async move { old_ingest_of(release, &db, stop).await },
    )
    .await;
    (db, previous)
}

/// 0014 and 0015 (the history partitioned by day) on a deployed database, online: 1M
/// finished and 10k due jobs, the previous release (0013) working them and accepting more
/// throughout. Its worker and ingest never fail and are never blocked for long (0014 builds
/// its keys CONCURRENTLY; 0015 is catalog work); then the current release finishes the rest:
/// every job sent exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_history_is_partitioned_online_while_the_previous_release_works() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let finished = finished_jobs();
    let (db, previous) = deployed_and_working(Release::R0013, finished).await;

    let mut client = db.client().await;
    let started = Instant::now();
    migrate::run_files(&mut client, &integration_tests::migrations_before("0015"))
        .await
        .unwrap();
    let keys_time = started.elapsed();
    let started = Instant::now();
    let report = migrate::run(&mut client).await.unwrap();
    let partition_time = started.elapsed();
    assert_eq!(report.applied[0], "0015_history_by_day.sql", "{report:?}");

    let (worked, latencies, sends) = previous.stop().await;
    worked.expect("the previous release's worker never fails");
    let worst_insert = latencies.iter().max().copied().unwrap_or_default();
    let old_sent = sends.lock().await.len();

    let store = db.store().await;
    new_worker(&store, &sends).await;

    let accepted = DUE + latencies.len() as i64;
    let sent = sent_jobs(&client).await;
    assert_eq!(sent, finished + accepted, "every job ends sent");
    let sends = sends.lock().await;
    assert_eq!(sends.len() as i64, accepted, "every accepted job was sent");
    assert!(
        sends.values().all(|n| *n == 1),
        "none twice: the previous worker completed all it claimed"
    );
    let keys = integration_tests::count(&client, "SELECT count(*) FROM idempotency_keys").await;
    assert_eq!(
        keys,
        latencies.len().div_ceil(2) as i64,
        "every key the previous ingest used is in idempotency_keys"
    );
    assert!(
        worst_insert < Duration::from_secs(2),
        "the previous ingest is never blocked for long: {worst_insert:?}"
    );
    eprintln!(
        "0014: {keys_time:?}, 0015: {partition_time:?}; previous worker sent {old_sent}; \
         previous ingest: {} inserts, slowest {worst_insert:?}",
        latencies.len()
    );
}

/// 0018 (a job's last attempt in its outcome row) on a deployed database, online: 1M
/// finished and 10k due jobs, the previous release (0017) working them and accepting more
/// throughout. Its worker and ingest never fail and are never blocked for long (0018 adds
/// nullable columns, a catalog change, and builds the message-id index on each partition
/// CONCURRENTLY); then the current release finishes the rest: every job sent exactly once,
/// and the history reads the same whichever release wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_last_attempt_moves_into_the_outcome_row_online_while_the_previous_release_works() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let finished = finished_jobs();
    let (db, previous) = deployed_and_working(Release::R0017, finished).await;

    let mut client = db.client().await;
    let started = Instant::now();
    let report = migrate::run(&mut client).await.unwrap();
    let migration_time = started.elapsed();
    assert_eq!(
        report.applied,
        ["0018_final_attempt_inline.sql"],
        "{report:?}"
    );

    let (worked, latencies, sends) = previous.stop().await;
    worked.expect("the previous release's worker never fails");
    let worst_insert = latencies.iter().max().copied().unwrap_or_default();
    let old_sent: Vec<Uuid> = sends.lock().await.keys().copied().collect();
    assert!(!old_sent.is_empty(), "the previous worker worked beside it");

    let store = db.store().await;
    new_worker(&store, &sends).await;

    let accepted = DUE + latencies.len() as i64;
    assert_eq!(
        sent_jobs(&client).await,
        finished + accepted,
        "every job ends sent"
    );
    let sends = sends.lock().await;
    assert_eq!(sends.len() as i64, accepted, "every accepted job was sent");
    assert!(
        sends.values().all(|n| *n == 1),
        "none twice: the previous worker completed all it claimed"
    );
    assert!(
        worst_insert < Duration::from_secs(2),
        "the previous ingest is never blocked for long: {worst_insert:?}"
    );
    // the previous release's last attempts are rows of job_attempts, the current one's are
    // in their outcome rows: every job reads one attempt either way
    let inline = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_outcomes WHERE provider_message_id IS NOT NULL",
    )
    .await;
    assert_eq!(
        inline,
        accepted - old_sent.len() as i64,
        "the current worker's completions hold their attempt"
    );
    let org: Uuid = ORG.parse().unwrap();
    let new_sent = sends.keys().find(|id| !old_sent.contains(id)).unwrap();
    for id in [old_sent[0], *new_sent] {
        let job = store.get(org, id).await.unwrap().expect("the job");
        let attempts = job.deliveries.expect("its attempts");
        assert_eq!(attempts.len(), 1, "{id}: {attempts:?}");
        assert_eq!(attempts[0].attempt, 1, "{id}");
    }
    // the message-id index is whole: valid, with one on every partition
    let partitions_without = integration_tests::count(
        &client,
        "SELECT count(*) FROM pg_inherits AS i
         WHERE i.inhparent = 'job_outcomes'::regclass
           AND NOT EXISTS (SELECT FROM pg_inherits AS ii
                           JOIN pg_index AS x ON x.indexrelid = ii.inhrelid
                           WHERE ii.inhparent = 'job_outcomes_by_message_id'::regclass
                             AND x.indrelid = i.inhrelid)",
    )
    .await;
    assert_eq!(partitions_without, 0);
    eprintln!(
        "0018: {migration_time:?}; previous worker sent {}; previous ingest: {} inserts, \
         slowest {worst_insert:?}",
        old_sent.len(),
        latencies.len()
    );
}
