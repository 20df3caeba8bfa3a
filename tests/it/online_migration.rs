//! The online-migration harness: every migration after 1.0 (and the tests' own,
//! `tests/fixtures/migrations/online_test.sql`, after them) is applied to a database that the
//! 1.0 release (`tests/fixtures/release_1_0/`, its statements as it shipped them) is using
//! all the while: its ingest accepting jobs, its worker claiming and completing, its sweeper
//! running its steps, its `GET` reading jobs. Then the release of this code works beside it,
//! and finishes what is left.
//!
//! What it shows, for each migration:
//! - the 1.0 release never fails (no statement of it errs, during or after the migration),
//!   and its ingest is never held for long (the longest insert is printed and bounded);
//! - the two releases work side by side on the migrated schema (a deploy rolls out while the
//!   previous release serves, and a rollback runs it on the newer schema): no job is claimed
//!   twice, every job ends sent, and each side reads the jobs of the other.
//!
//! `ONLINE_MIGRATION_FINISHED` sets the number of finished jobs already there (default
//! 200,000). The figures are printed (`-- --nocapture`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use integration_tests::TestDb;
use integration_tests::factory::Job;
use integration_tests::release_1_0;
use notify_core::domain::{Channel, JobStatus, Priority};
use notify_core::events::{ClaimedEvent, EventStore, Published};
use notify_core::store::{Claim, Complete, Decision, Inserted, JobStore, NewJob};
use notify_postgres::PgStore;
use notify_postgres::migrate;
use tokio::sync::Mutex;
use uuid::Uuid;

const DUE: i64 = 5_000;

/// Every provider call, by job id.
type Sends = Arc<Mutex<HashMap<Uuid, u32>>>;

/// What each task of the 1.0 release met: its statements' errors.
type Errors = Arc<Mutex<Vec<String>>>;

fn finished_jobs() -> i64 {
    std::env::var("ONLINE_MIGRATION_FINISHED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
}

/// A database at 1.0's schema holding `finished` sent jobs and `DUE` due ones of `org`.
async fn at_release_1_0(db: &TestDb, org: Uuid, finished: i64) {
    let mut client = db.client().await;
    let files = integration_tests::migrations_through(release_1_0::SCHEMA_VERSION);
    migrate::run_files(&mut client, &files).await.unwrap();
    Job::new()
        .org(org)
        .status(JobStatus::Sent)
        .attempts(1)
        .insert_many(&client, finished)
        .await;
    Job::new().org(org).insert_many(&client, DUE).await;
    client
        .batch_execute("VACUUM ANALYZE job_queue, job_requests, job_outcomes")
        .await
        .unwrap();
}

/// The 1.0 release at work: its ingest, worker, sweeper and `GET`, each a task on a
/// connection of its own, until told to stop.
struct Release1_0 {
    stop: Arc<AtomicBool>,
    errors: Errors,
    ingest: tokio::task::JoinHandle<(Vec<Uuid>, Vec<Duration>)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Release1_0 {
    async fn start(db: &Arc<TestDb>, org: Uuid, sends: Sends) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let errors: Errors = Arc::default();
        let seen: Arc<Mutex<Vec<Uuid>>> = Arc::default();
        let failed = |errors: &Errors, what: &str, e: tokio_postgres::Error| {
            let errors = errors.clone();
            let line = format!("1.0 {what}: {}", notify_core::error::report(&e));
            async move { errors.lock().await.push(line) }
        };

        let ingest = {
            let (client, stop, errors, seen) = (
                db.client().await,
                stop.clone(),
                errors.clone(),
                seen.clone(),
            );
            tokio::spawn(async move {
                let (mut ids, mut latencies) = (Vec::new(), Vec::new());
                for n in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let started = Instant::now();
                    match release_1_0::ingest(&client, org, &format!("+1555{:07}", n)).await {
                        Ok(id) => {
                            latencies.push(started.elapsed());
                            ids.push(id);
                            seen.lock().await.push(id);
                        }
                        Err(e) => failed(&errors, "ingest", e).await,
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (ids, latencies)
            })
        };
        let worker = {
            let (client, stop, errors, sends) = (
                db.client().await,
                stop.clone(),
                errors.clone(),
                sends.clone(),
            );
            tokio::spawn(async move {
                let mut batch: Vec<release_1_0::Claimed> = Vec::new();
                loop {
                    if !batch.is_empty() {
                        let mut sent = sends.lock().await;
                        for (id, ..) in &batch {
                            *sent.entry(*id).or_default() += 1;
                        }
                    }
                    // a provider call's worth of time, so a migration finds it mid-batch
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let next = if stop.load(Ordering::Relaxed) { 0 } else { 100 };
                    match release_1_0::complete_and_claim(&client, &batch, next).await {
                        Ok((applied, claimed)) => {
                            assert_eq!(applied.len(), batch.len(), "1.0's completions apply");
                            batch = claimed;
                        }
                        Err(e) => {
                            failed(&errors, "worker", e).await;
                            return;
                        }
                    }
                    if next == 0 {
                        return;
                    }
                }
            })
        };
        let sweeper = {
            let (client, stop, errors) = (db.client().await, stop.clone(), errors.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = release_1_0::sweep(&client).await {
                        failed(&errors, "sweeper", e).await;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let get = {
            let (client, stop, errors, seen) = (
                db.client().await,
                stop.clone(),
                errors.clone(),
                seen.clone(),
            );
            tokio::spawn(async move {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let id = {
                        let seen = seen.lock().await;
                        (!seen.is_empty()).then(|| seen[n % seen.len()])
                    };
                    n += 7;
                    if let Some(id) = id {
                        match release_1_0::get(&client, org, id).await {
                            Ok(Some(_)) => {}
                            Ok(None) => {
                                errors.lock().await.push(format!("1.0 GET: {id} not found"))
                            }
                            Err(e) => failed(&errors, "GET", e).await,
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        Self {
            stop,
            errors,
            ingest,
            tasks: vec![worker, sweeper, get],
        }
    }

    /// Stops every task: the jobs its ingest accepted, each insert's latency, and the errors
    /// its statements met.
    async fn stop(self) -> (Vec<Uuid>, Vec<Duration>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let (ids, latencies) = self.ingest.await.unwrap();
        for task in self.tasks {
            task.await.unwrap();
        }
        let errors = self.errors.lock().await.clone();
        (ids, latencies, errors)
    }
}

/// This code's worker, as the 1.0 release's successor: claims, "sends" and completes batches
/// until nothing is due (and `until` says stop).
async fn new_worker(store: &PgStore, sends: &Sends, until: &AtomicBool) {
    loop {
        let batch = store
            .claim(Claim {
                batch_size: 100,
                now: None,
            })
            .await
            .unwrap();
        if batch.is_empty() {
            if until.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let mut completions = Vec::new();
        {
            let mut sent = sends.lock().await;
            for job in &batch {
                *sent.entry(job.id).or_default() += 1;
                completions.push(integration_tests::completion(
                    job,
                    Decision::Sent,
                    Some(&format!("new-{}", job.id)),
                ));
            }
        }
        let report = store
            .complete(Complete {
                completions: &completions,
                now: None,
            })
            .await
            .unwrap();
        assert_eq!(
            report.applied.len(),
            batch.len(),
            "every completion applies"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_migration_after_1_0_applies_online_while_1_0_works() {
    let finished = finished_jobs();
    let org = Uuid::new_v4();
    let db = TestDb::empty().await;
    let fill = Instant::now();
    at_release_1_0(&db, org, finished).await;
    eprintln!(
        "{finished} finished + {DUE} due jobs at schema version {} in {:?}",
        release_1_0::SCHEMA_VERSION,
        fill.elapsed()
    );
    let db = Arc::new(db);
    let sends: Sends = Arc::default();
    let release = Release1_0::start(&db, org, sends.clone()).await;

    // the migrations after 1.0, while it works
    let mut client = db.client().await;
    let migrating = Instant::now();
    let report = migrate::run_files(&mut client, &integration_tests::with_test_migration())
        .await
        .unwrap();
    let migration_time = migrating.elapsed();
    let migrated_at = chrono::Utc::now();
    let after_1_0: Vec<String> = integration_tests::with_test_migration()
        .iter()
        .skip(integration_tests::migrations_through(release_1_0::SCHEMA_VERSION).len())
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(report.applied, after_1_0, "{report:?}");

    // this code's worker beside it, on the migrated schema
    let store = PgStore::connect(db.config.clone()).await.unwrap();
    let beside = Arc::new(AtomicBool::new(false));
    let side_by_side = {
        let (sends, beside) = (sends.clone(), beside.clone());
        let config = db.config.clone();
        tokio::spawn(async move {
            let store = PgStore::connect(config).await.unwrap();
            new_worker(&store, &sends, &beside).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (accepted, latencies, errors) = release.stop().await;
    beside.store(true, Ordering::Relaxed);
    side_by_side.await.unwrap();
    new_worker(&store, &sends, &AtomicBool::new(true)).await;

    let longest = latencies.iter().max().copied().unwrap_or_default();
    eprintln!(
        "applied {:?} in {migration_time:?} while 1.0 worked: its ingest accepted {} jobs, \
         longest insert {longest:?}",
        report.applied,
        accepted.len()
    );
    assert!(errors.is_empty(), "the 1.0 release failed: {errors:#?}");
    assert!(!accepted.is_empty(), "its ingest kept accepting");
    assert!(
        longest < Duration::from_secs(2),
        "its ingest was held for {longest:?}"
    );

    // every job ended sent, each sent once: the claims of the two releases never overlapped
    let sends = sends.lock().await;
    let total = DUE + accepted.len() as i64;
    assert_eq!(sends.len() as i64, total, "every open job was sent");
    let twice: Vec<_> = sends.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "claimed twice: {twice:?}");
    let sent = integration_tests::count(
        &client,
        &format!(
            "SELECT count(*) FROM job_states WHERE status = 'sent' AND organization_id = '{org}'"
        ),
    )
    .await;
    assert_eq!(sent, finished + total);

    // the status events (0004) are written by the database: every job either release ended
    // once the migration committed has its event, 1.0's completions included, and none has two
    let (with_event, events) = {
        let row = client
            .query_one(
                "SELECT count(DISTINCT o.job_id), count(e.id)
                 FROM job_outcomes AS o
                 LEFT JOIN status_events AS e
                   ON e.job_id = o.job_id AND e.type = 'notification.sent'
                 WHERE o.updated_at > $1::timestamptz",
                &[&migrated_at],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    assert!(with_event > 0, "jobs ended after the migration");
    assert_eq!(
        events, with_event,
        "each job ended after the migration has one event"
    );

    // each release reads the jobs of the other
    let by_1_0 = *accepted.last().unwrap();
    let view = store
        .get(org, by_1_0)
        .await
        .unwrap()
        .expect("found by this code");
    assert_eq!(view.status, JobStatus::Sent);
    assert_eq!(view.deliveries.map(|d| d.len()), Some(1));
    let by_new = *sends.keys().find(|id| !accepted.contains(id)).unwrap();
    let got = release_1_0::get(&client, org, by_new).await.unwrap();
    assert_eq!(got, Some(("sent".to_owned(), 1)), "found by 1.0");

    // this code's bus reads every event once: those 1.0 left unpublished (before 0010, by
    // its retry path) and those both releases produced since (by the stream's cursor)
    let recorded = integration_tests::count(&client, "SELECT count(*) FROM status_events").await;
    let mut on_bus: HashMap<Uuid, u32> = HashMap::new();
    // an empty claim is not the end: a transaction open anywhere in the cluster (another
    // test's) holds the stream's horizon back until it ends
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    while (on_bus.len() as i64) < recorded && std::time::Instant::now() < give_up {
        let claimed = store
            .claim_events(10_000, Duration::from_secs(30))
            .await
            .unwrap();
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let done: Vec<Published> = claimed.iter().map(ClaimedEvent::taken).collect();
        store.complete_events(&done).await.unwrap();
        for c in &claimed {
            *on_bus.entry(c.event.id).or_default() += 1;
        }
    }
    assert_eq!(on_bus.len() as i64, recorded, "every event reached the bus");
    assert!(on_bus.values().all(|n| *n == 1), "none reached it twice");

    let valid = integration_tests::count(
        &client,
        "SELECT count(*) FROM pg_index WHERE NOT indisvalid",
    )
    .await;
    assert_eq!(valid, 0, "every index the migrations built is valid");
}

/// `n` SMS jobs of `org` through this release's ingest statement (insert_jobs.sql), due now.
async fn accepted_by_this_release(store: &PgStore, org: Uuid, n: usize) -> Vec<Uuid> {
    let now = chrono::Utc::now();
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob {
            organization_id: org,
            channel: Channel::Sms,
            payload: serde_json::json!({"to": format!("+1555000{i:04}"), "message": format!("m{i}")}),
            max_attempts: 5,
            next_attempt_at: now - chrono::Duration::seconds(1),
            expires_at: now + chrono::Duration::days(1),
            priority: Priority::Normal,
            idempotency: None,
            trace_header: None,
        })
        .collect();
    store
        .insert_many(&jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|inserted| match inserted {
            Inserted::Created(job) => job.id,
            other => panic!("not accepted: {other:?}"),
        })
        .collect()
}

/// The payload is stored once (migration 0012), but a worker of the release before it claims
/// the queue row's copy: on an upgraded database, this release's ingest keeps writing the
/// copy, and a 1.0 worker still running during the rollout sends what was asked. Once the
/// operator ends the copy, this release's claim reads the request's payload; a fresh
/// database never copies.
#[tokio::test]
async fn a_1_0_worker_still_running_gets_the_payloads_this_release_accepted() {
    let org = Uuid::new_v4();
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    let files = integration_tests::migrations_through(release_1_0::SCHEMA_VERSION);
    migrate::run_files(&mut client, &files).await.unwrap();
    migrate::run_files(
        &mut client,
        &integration_tests::migrations_through(i32::MAX),
    )
    .await
    .unwrap();
    let copies = "SELECT count(*) FROM queue_settings WHERE copies_payload";
    assert_eq!(
        integration_tests::count(&client, copies).await,
        1,
        "upgraded: copies"
    );
    let store = PgStore::connect(db.config.clone()).await.unwrap();

    let ids = accepted_by_this_release(&store, org, 5).await;
    let rows = client
        .query(
            release_1_0::CLAIM,
            &[&10_i64, &None::<chrono::DateTime<chrono::Utc>>],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), ids.len());
    for row in &rows {
        let payload: Option<serde_json::Value> = row.get("payload");
        assert!(
            payload.is_some_and(|p| p["to"].as_str().is_some_and(|to| to.starts_with("+1555"))),
            "1.0's claim got a payload"
        );
    }

    // the operator ends the copy: nothing more is copied, and this release's claim reads
    // the payload from the request
    client
        .batch_execute("UPDATE queue_settings SET copies_payload = false")
        .await
        .unwrap();
    let ids = accepted_by_this_release(&store, org, 3).await;
    let copied = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_queue WHERE payload IS NOT NULL AND claim_token IS NULL",
    )
    .await;
    assert_eq!(copied, 0, "no copy written");
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), ids.len());
    for job in &claimed {
        assert!(ids.contains(&job.id));
        assert!(
            job.payload["message"]
                .as_str()
                .is_some_and(|m| m.starts_with('m'))
        );
    }

    // installed fresh, no earlier release ran: no copy from the start
    let fresh = TestDb::new().await;
    let fresh_client = fresh.client().await;
    assert_eq!(integration_tests::count(&fresh_client, copies).await, 0);
}
