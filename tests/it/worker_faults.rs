//! The worker loop with an in-process fake delivery port (fault injection) over a real
//! PostgreSQL: retries and backoff, dead jobs, timeouts, fencing, panics, deadlines, polling.
//!
//! Each job's payload carries a `script`: what the fake does on call (try) 1, 2, … (the last
//! entry repeats): `"ok"`, `"hang"`, `"slow"` (700 ms, then ok), `"panic"`, `"fence"` (the job
//! is swept and claimed again during the call, then ok), or an error code to fail with.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use integration_tests::TestDb;
use integration_tests::stand_in::insert_jobs;
use notify_core::delivery::{Deliverer, DeliveryConfig, DeliveryError};
use notify_core::domain::Channel;
use notify_core::store::{
    At, Claim, ClaimedJob, Complete, CompleteAndClaim, CompleteReport, CountIngest,
    DropHistoryDays, DroppedDays, Expire, IngestWindow, Inserted, JobView, ListCursor, NewJob,
    PruneFeedback, Release, StoreError, Sweep, SweepReport, Transition,
};
use notify_core::worker::{self, WorkerConfig, WorkerSummary};
use serde_json::{Value, json};
use tokio_postgres::Client;
use uuid::Uuid;

struct Fake {
    /// Used by `"fence"` to play the sweeper and a second worker.
    db: Client,
    calls: AtomicU64,
}

#[async_trait]
impl Deliverer for Fake {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let script = job.payload["script"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let step = script
            .get(job.call as usize - 1)
            .or(script.last())
            .and_then(Value::as_str)
            .unwrap_or("ok")
            .to_owned();
        match step.as_str() {
            "ok" => {}
            "hang" => tokio::time::sleep(Duration::from_secs(3600)).await,
            "slow" => tokio::time::sleep(Duration::from_millis(700)).await,
            "panic" => panic!("injected panic"),
            "fence" => integration_tests::factory::steal_claim(&self.db, job.id).await,
            code => return Err(DeliveryError::new(code, format!("injected {code}"))),
        }
        Ok(format!("fake-{}-{}", job.id, job.call))
    }
}

async fn fake(db: &TestDb) -> Fake {
    Fake {
        db: db.client().await,
        calls: AtomicU64::new(0),
    }
}

fn config() -> WorkerConfig {
    WorkerConfig {
        batch_size: 10,
        concurrency: 4,
        provider_timeout: Duration::from_secs(2),
        ..WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
    }
}

fn in_a_minute() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn scripted(script: &[&str]) -> (Channel, Value) {
    (
        Channel::Sms,
        json!({"to": "+15555550100", "message": "hi", "script": script}),
    )
}

#[derive(Debug)]
struct JobRow {
    status: String,
    attempts: i32,
    next_attempt_at: DateTime<Utc>,
    claim_token: Option<Uuid>,
    last_error: Option<String>,
}

async fn job(client: &Client, id: Uuid) -> JobRow {
    let row = client
        .query_one(
            "SELECT status::text, attempts, next_attempt_at, claim_token, last_error
             FROM job_states WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    JobRow {
        status: row.get(0),
        attempts: row.get(1),
        next_attempt_at: row.get(2),
        claim_token: row.get(3),
        last_error: row.get(4),
    }
}

#[derive(Debug, PartialEq)]
struct Delivery {
    attempt: i32,
    outcome: String,
    error_code: Option<String>,
    provider_message_id: Option<String>,
    fenced: bool,
}

async fn deliveries(client: &Client, id: Uuid) -> Vec<Delivery> {
    client
        .query(
            "SELECT attempt, outcome, error_code, provider_message_id, fenced
             FROM job_attempt_history WHERE job_id = $1 ORDER BY attempt",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| Delivery {
            attempt: r.get(0),
            outcome: r.get(1),
            error_code: r.get(2),
            provider_message_id: r.get(3),
            fenced: r.get(4),
        })
        .collect()
}

async fn make_due(client: &Client, id: Uuid) {
    integration_tests::factory::make_due_now(client, &[id]).await;
}

async fn run(db: &TestDb, deliverer: &Fake, cfg: &WorkerConfig) -> WorkerSummary {
    let store = db.store().await;
    worker::run(&store, deliverer, cfg, in_a_minute())
        .await
        .expect("the worker run succeeds")
}

#[tokio::test]
async fn an_outage_then_success_is_sent_after_the_backoff_with_its_attempt_given_back() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let id = insert_jobs(&client, &[scripted(&["Throttling", "ok"])], 5).await[0].0;

    let before = Utc::now();
    let first = run(&db, &fake, &config()).await;
    let after = Utc::now();
    assert_eq!(
        (first.claimed, first.held, first.sent),
        (1, 1, 0),
        "{first:?}"
    );
    let row = job(&client, id).await;
    assert_eq!(
        (row.status.as_str(), row.attempts),
        ("failed", 0),
        "attempt given back"
    );
    assert_eq!(
        row.last_error.as_deref(),
        Some("Throttling: injected Throttling")
    );
    // attempt 1: a one-minute step, jittered over [30 s, 60 s]
    assert!(
        row.next_attempt_at >= before + chrono::Duration::seconds(30)
            && row.next_attempt_at <= after + chrono::Duration::seconds(60),
        "next attempt at {} (run between {before} and {after})",
        row.next_attempt_at
    );

    let early = run(&db, &fake, &config()).await;
    assert_eq!(early.claimed, 0, "not due before its backoff ends");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);

    make_due(&client, id).await;
    let second = run(&db, &fake, &config()).await;
    assert_eq!((second.claimed, second.sent), (1, 1), "{second:?}");
    let row = job(&client, id).await;
    assert_eq!(
        (row.status.as_str(), row.attempts),
        ("sent", 1),
        "only the call that could have been the message's fault is spent"
    );
    assert_eq!(row.last_error, None);
    let rows = deliveries(&client, id).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].outcome, "held");
    assert_eq!(rows[0].error_code.as_deref(), Some("Throttling"));
    assert_eq!(rows[0].provider_message_id, None);
    assert_eq!(rows[1].outcome, "sent");
    assert_eq!(rows[1].provider_message_id, Some(format!("fake-{id}-2")));
}

#[tokio::test]
async fn permanent_error_is_dead_after_one_attempt() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let id = insert_jobs(&client, &[scripted(&["InvalidParameter", "ok"])], 5).await[0].0;

    let summary = run(&db, &fake, &config()).await;
    assert_eq!((summary.claimed, summary.dead), (1, 1), "{summary:?}");
    let row = job(&client, id).await;
    assert_eq!((row.status.as_str(), row.attempts), ("dead", 1));
    let rows = deliveries(&client, id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].outcome, "dead");
    assert_eq!(rows[0].error_code.as_deref(), Some("InvalidParameter"));

    make_due(&client, id).await;
    assert_eq!(run(&db, &fake, &config()).await.claimed, 0, "dead is final");
}

#[tokio::test]
async fn always_transient_is_dead_after_exactly_max_attempts() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let max_attempts = 4;
    // a code nobody knows: transient, and it may be the message's fault, so it spends
    let id = insert_jobs(&client, &[scripted(&["UnmodeledFailure"])], max_attempts).await[0].0;

    let mut runs = 0;
    loop {
        let summary = run(&db, &fake, &config()).await;
        if summary.claimed == 0 {
            break;
        }
        runs += 1;
        assert!(runs <= 10, "the job never ends");
        make_due(&client, id).await;
    }
    assert_eq!(runs, max_attempts);
    assert_eq!(fake.calls.load(Ordering::SeqCst), max_attempts as u64);
    let row = job(&client, id).await;
    assert_eq!((row.status.as_str(), row.attempts), ("dead", max_attempts));
    let rows = deliveries(&client, id).await;
    assert_eq!(
        rows.len(),
        max_attempts as usize,
        "one delivery row per attempt"
    );
    assert_eq!(
        rows.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        (1..=max_attempts).collect::<Vec<_>>()
    );
    assert!(rows[..3].iter().all(|r| r.outcome == "retry"));
    assert_eq!(rows[3].outcome, "dead");
    assert!(
        rows.iter()
            .all(|r| r.error_code.as_deref() == Some("UnmodeledFailure"))
    );
}

#[tokio::test]
async fn a_hanging_provider_call_times_out_and_is_held() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let id = insert_jobs(&client, &[scripted(&["hang", "ok"])], 5).await[0].0;
    let cfg = WorkerConfig {
        provider_timeout: Duration::from_millis(300),
        ..config()
    };

    let started = Instant::now();
    let summary = tokio::time::timeout(Duration::from_secs(10), run(&db, &fake, &cfg))
        .await
        .expect("the worker does not wait for a hanging call");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!((summary.claimed, summary.held), (1, 1), "{summary:?}");
    let row = job(&client, id).await;
    assert_eq!(
        row.status, "failed",
        "due again later, not stuck in processing"
    );
    assert_eq!(
        row.attempts, 0,
        "a timeout is the provider's trouble: attempt given back"
    );
    let rows = deliveries(&client, id).await;
    assert_eq!(rows[0].error_code.as_deref(), Some("Timeout"));
    assert_eq!(rows[0].outcome, "held");

    make_due(&client, id).await;
    assert_eq!(run(&db, &fake, &cfg).await.sent, 1);
    assert_eq!(job(&client, id).await.status, "sent");
}

#[tokio::test]
async fn a_fenced_completion_leaves_the_job_alone_and_records_the_attempt() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let jobs = insert_jobs(&client, &[scripted(&["fence"]), scripted(&["ok"])], 5).await;
    let (fenced, normal) = (jobs[0].0, jobs[1].0);

    let summary = run(&db, &fake, &config()).await;
    assert_eq!(summary.claimed, 2);
    assert_eq!(summary.fenced, 1, "{summary:?}");
    assert_eq!(
        summary.sent, 1,
        "only the job still under our claim counts as sent"
    );

    let row = job(&client, fenced).await;
    assert_eq!(
        row.status, "processing",
        "the newer claim's state is untouched"
    );
    assert!(row.claim_token.is_some());
    let rows = deliveries(&client, fenced).await;
    assert_eq!(
        rows,
        vec![Delivery {
            attempt: 1,
            outcome: "sent".into(),
            error_code: None,
            provider_message_id: Some(format!("fake-{fenced}-1")),
            fenced: true,
        }],
        "the attempt is recorded, marked fenced, with what the provider said"
    );
    assert_eq!(job(&client, normal).await.status, "sent");
}

#[tokio::test]
async fn a_panicking_delivery_does_not_lose_its_batch_mates() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let mut specs = vec![scripted(&["panic", "ok"])];
    specs.extend((0..6).map(|_| scripted(&["ok"])));
    specs.push(scripted(&["MessageRejected"]));
    let jobs = insert_jobs(&client, &specs, 5).await;

    let summary = run(&db, &fake, &config()).await;
    assert_eq!(
        (
            summary.claimed,
            summary.sent,
            summary.retried,
            summary.dead,
            summary.batches
        ),
        (8, 6, 1, 1, 1),
        "{summary:?}"
    );
    let panicked = jobs[0].0;
    assert_eq!(job(&client, panicked).await.status, "failed");
    let rows = deliveries(&client, panicked).await;
    assert_eq!(rows[0].error_code.as_deref(), Some("WorkerPanic"));
    for (id, _) in &jobs[1..7] {
        assert_eq!(job(&client, *id).await.status, "sent");
    }
    assert_eq!(job(&client, jobs[7].0).await.status, "dead");
}

#[tokio::test]
async fn account_trouble_waits_the_longest_backoff_even_on_the_last_attempt() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let id = insert_jobs(&client, &[scripted(&["AccountSuspendedException"])], 1).await[0].0;

    let before = Utc::now();
    let summary = run(&db, &fake, &config()).await;
    assert_eq!((summary.held, summary.dead), (1, 0), "{summary:?}");
    let row = job(&client, id).await;
    assert_eq!(
        (row.status.as_str(), row.attempts),
        ("failed", 0),
        "kept for when a person fixes the account, its one attempt given back"
    );
    let wait = row.next_attempt_at - before;
    assert!(
        wait >= chrono::Duration::minutes(30) && wait <= chrono::Duration::minutes(31),
        "{wait}"
    );
}

#[tokio::test]
async fn no_batch_starts_that_could_outlive_the_deadline() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let specs: Vec<_> = (0..20).map(|_| scripted(&["slow"])).collect();
    insert_jobs(&client, &specs, 5).await;
    let cfg = WorkerConfig {
        batch_size: 100,
        concurrency: 2,
        provider_timeout: Duration::from_secs(1),
        ..config()
    };
    let store = db.store().await;

    // too little time for even one call: nothing is claimed
    let soon = Instant::now() + worker::SAFETY_MARGIN + Duration::from_millis(500);
    let summary = worker::run(&store, &fake, &cfg, soon).await.unwrap();
    assert_eq!(summary.claimed, 0);

    // room for two waves of two calls, then less and less
    let deadline = Instant::now() + worker::SAFETY_MARGIN + Duration::from_millis(2500);
    let summary = worker::run(&store, &fake, &cfg, deadline).await.unwrap();
    let finished = Instant::now();
    assert!(
        finished + worker::SAFETY_MARGIN <= deadline + Duration::from_secs(1),
        "finished {:?} before the deadline, less than the margin",
        deadline.saturating_duration_since(finished)
    );
    assert!(summary.claimed >= 4 && summary.claimed < 20, "{summary:?}");
    assert_eq!(summary.sent, summary.claimed);
    let processing: i64 = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_states WHERE status = 'processing'",
    )
    .await;
    assert_eq!(processing, 0, "every claimed job was completed");
}

#[tokio::test]
async fn polling_delivers_a_job_that_arrives_while_the_worker_waits() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let cfg = WorkerConfig {
        provider_timeout: Duration::from_millis(500),
        poll: Duration::from_secs(4),
        ..config()
    };
    let store = db.store().await;
    let started = Instant::now();
    // polls until 4 s before the deadline (a batch could still start until 3.5 s before)
    let deadline = started + Duration::from_secs(8);

    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let client = client;
        insert_jobs(&client, &[scripted(&["ok"])], 5).await[0].0
    });
    let summary = worker::run(&store, &fake, &cfg, deadline).await.unwrap();
    let elapsed = started.elapsed();
    let id = late.await.unwrap();
    assert_eq!((summary.claimed, summary.sent), (1, 1), "{summary:?}");
    assert!(
        elapsed >= Duration::from_millis(3900) && elapsed < Duration::from_millis(5500),
        "polled until {:?} before the deadline",
        Duration::from_secs(8).saturating_sub(elapsed)
    );
    let check = db.client().await;
    assert_eq!(job(&check, id).await.status, "sent");
}

#[tokio::test]
async fn the_handler_takes_any_event_and_answers_with_the_summary() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    insert_jobs(&client, &[scripted(&["ok"]), scripted(&["Throttling"])], 5).await;
    let store = db.store().await;
    let scheduled = json!({
        "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/worker"], "detail": {}
    });
    let mut context = lambda_runtime::Context::default();
    context.deadline = (Utc::now() + chrono::Duration::seconds(30)).timestamp_millis() as u64;
    let event = lambda_runtime::LambdaEvent::new(scheduled, context);
    let summary = worker::handle(event, &store, &fake, &config())
        .await
        .unwrap();

    let value = serde_json::to_value(summary).unwrap();
    let keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
    let mut expected = [
        "claimed",
        "sent",
        "retried",
        "held",
        "dead",
        "released",
        "fenced",
        "batches",
        "elapsed_ms",
    ];
    expected.sort_unstable();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort_unstable();
    assert_eq!(keys_sorted, expected);
    assert_eq!(value["claimed"], 2);
    assert_eq!(value["sent"], 1);
    assert_eq!(value["held"], 1);
    assert_eq!(value["batches"], 1);

    // `{}` from `cargo lambda invoke`, with a bare context: an empty queue, a quick answer
    let started = Instant::now();
    let event = lambda_runtime::LambdaEvent::new(json!({}), lambda_runtime::Context::default());
    let summary = worker::handle(event, &store, &fake, &config())
        .await
        .unwrap();
    assert_eq!(summary.claimed, 0);
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// An outage longer than the whole budget: every round held, nothing spent, and the job is
/// delivered once the provider is back, with the one attempt that reached it.
#[tokio::test]
async fn an_outage_longer_than_the_budget_kills_nothing() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let mut script = vec!["Throttling", "Http5xx", "Timeout", "DispatchFailure"];
    script.extend(["ServiceUnavailable", "Throttling", "ok"]);
    let id = insert_jobs(&client, &[scripted(&script)], 2).await[0].0;
    for round in 1..=7 {
        let summary = run(&db, &fake, &config()).await;
        assert_eq!(summary.claimed, 1, "round {round}: {summary:?}");
        assert_eq!(summary.dead, 0, "round {round}: never buried for an outage");
        make_due(&client, id).await;
    }
    let row = job(&client, id).await;
    assert_eq!((row.status.as_str(), row.attempts), ("sent", 1));
    let rows = deliveries(&client, id).await;
    assert_eq!(
        rows.iter()
            .map(|r| (r.attempt, r.outcome.as_str()))
            .collect::<Vec<_>>(),
        [
            (1, "held"),
            (2, "held"),
            (3, "held"),
            (4, "held"),
            (5, "held"),
            (6, "held"),
            (7, "sent")
        ],
        "one row per provider call, numbered by try"
    );
}

/// Account trouble for several rounds, then the account is fixed: delivered with the budget
/// intact (max_attempts 1 would have buried it at the first error if it spent).
#[tokio::test]
async fn account_trouble_for_rounds_then_recovery_delivers_with_the_budget_intact() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let script = [
        "AccountSuspendedException",
        "SendingPausedException",
        "AccountSuspendedException",
        "ok",
    ];
    let id = insert_jobs(&client, &[scripted(&script)], 1).await[0].0;
    for round in 1..=3 {
        let summary = run(&db, &fake, &config()).await;
        assert_eq!((summary.held, summary.dead), (1, 0), "round {round}");
        assert_eq!(
            job(&client, id).await.attempts,
            0,
            "round {round}: nothing spent"
        );
        make_due(&client, id).await;
    }
    assert_eq!(run(&db, &fake, &config()).await.sent, 1);
    let row = job(&client, id).await;
    assert_eq!((row.status.as_str(), row.attempts), ("sent", 1));
    let outcomes: Vec<String> = deliveries(&client, id)
        .await
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(outcomes, ["held", "held", "held", "sent"]);
}

/// The store fails to record results (twice: the retry on a fresh connection fails too), so
/// the worker stops mid-batch: jobs it never handed to the provider are due again at once
/// with their attempt refunded; the ones it did hand over are left for the sweeper.
#[tokio::test]
async fn a_store_error_mid_batch_gives_untried_jobs_back_at_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let fake = fake(&db).await;
    let specs: Vec<_> = (0..5).map(|_| scripted(&["slow"])).collect();
    let ids: Vec<Uuid> = insert_jobs(&client, &specs, 5)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let store = FailingRecords::new(db.store().await, 2);
    let cfg = WorkerConfig {
        concurrency: 1,
        ..config()
    };
    let err = worker::run(&store, &fake, &cfg, in_a_minute())
        .await
        .expect_err("the store error fails the invocation");
    assert!(err.to_string().contains("unexpected value"), "{err}");
    assert_eq!(
        store.failures_left.load(Ordering::SeqCst),
        0,
        "recording was tried twice"
    );

    let calls = fake.calls.load(Ordering::SeqCst);
    let mut given_back = 0;
    for id in &ids {
        let row = job(&client, *id).await;
        match row.status.as_str() {
            "pending" => {
                given_back += 1;
                assert_eq!(row.attempts, 0, "attempt refunded");
                assert_eq!(row.claim_token, None, "claim cleared");
                assert!(row.next_attempt_at <= Utc::now(), "due again at once");
                assert!(deliveries(&client, *id).await.is_empty(), "never called");
            }
            "processing" => assert_eq!(row.attempts, 1, "handed over: left for the sweeper"),
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(
        given_back as u64 + calls,
        5,
        "every job either called or given back"
    );
    assert!(
        given_back >= 3,
        "only the first calls started: {given_back} given back"
    );

    // and the next run delivers the given-back jobs
    let summary = run(&db, &fake, &config()).await;
    assert_eq!(summary.sent, given_back as u64, "{summary:?}");
}

/// A store whose recording of results fails the first `failures_left` times, and otherwise
/// takes `delay` longer than the database; `recorded` counts the completions it committed.
pub(crate) struct FailingRecords {
    pub inner: notify_postgres::PgStore,
    pub failures_left: AtomicU64,
    pub delay: Duration,
    pub recorded: AtomicU64,
}

impl FailingRecords {
    /// A store over `inner` whose recording fails `failures` times.
    pub fn new(inner: notify_postgres::PgStore, failures: u64) -> Self {
        Self {
            inner,
            failures_left: AtomicU64::new(failures),
            delay: Duration::ZERO,
            recorded: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl notify_core::store::JobStore for FailingRecords {
    async fn insert(&self, job: &NewJob) -> Result<Inserted, StoreError> {
        self.inner.insert(job).await
    }
    async fn insert_many(&self, jobs: &[NewJob]) -> Result<Vec<Inserted>, StoreError> {
        self.inner.insert_many(jobs).await
    }
    async fn get(&self, org: Uuid, id: Uuid) -> Result<Option<JobView>, StoreError> {
        self.inner.get(org, id).await
    }
    async fn cancel(&self, org: Uuid, id: Uuid) -> Result<Transition, StoreError> {
        self.inner.cancel(org, id).await
    }
    async fn requeue(&self, org: Uuid, id: Uuid) -> Result<Transition, StoreError> {
        self.inner.requeue(org, id).await
    }
    async fn list(
        &self,
        org: Uuid,
        status: Option<notify_core::domain::JobStatus>,
        after: Option<ListCursor>,
        limit: u32,
    ) -> Result<Vec<JobView>, StoreError> {
        self.inner.list(org, status, after, limit).await
    }
    async fn claim(&self, p: Claim) -> Result<Vec<ClaimedJob>, StoreError> {
        self.inner.claim(p).await
    }
    async fn complete(&self, p: Complete<'_>) -> Result<CompleteReport, StoreError> {
        self.inner.complete(p).await
    }
    async fn complete_and_claim(
        &self,
        p: CompleteAndClaim<'_>,
    ) -> Result<(CompleteReport, Vec<ClaimedJob>), StoreError> {
        let left = self.failures_left.load(Ordering::SeqCst);
        if left > 0 {
            self.failures_left.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::Corrupt("injected failure to record".into()));
        }
        tokio::time::sleep(self.delay).await;
        let done = self.inner.complete_and_claim(p).await?;
        self.recorded
            .fetch_add(p.completions.len() as u64, Ordering::SeqCst);
        Ok(done)
    }
    async fn release(&self, p: Release<'_>) -> Result<Vec<Uuid>, StoreError> {
        self.inner.release(p).await
    }
    async fn requeue_dead(
        &self,
        p: notify_core::store::RequeueDead<'_>,
    ) -> Result<u64, StoreError> {
        self.inner.requeue_dead(p).await
    }
    async fn expire(&self, p: Expire) -> Result<u64, StoreError> {
        self.inner.expire(p).await
    }
    async fn sweep(&self, p: Sweep) -> Result<SweepReport, StoreError> {
        self.inner.sweep(p).await
    }
    async fn prune_feedback(&self, p: PruneFeedback) -> Result<u64, StoreError> {
        self.inner.prune_feedback(p).await
    }
    async fn add_history_days(&self, p: At) -> Result<u32, StoreError> {
        self.inner.add_history_days(p).await
    }
    async fn drop_history_days(&self, p: DropHistoryDays) -> Result<DroppedDays, StoreError> {
        self.inner.drop_history_days(p).await
    }
    async fn count_ingest(&self, p: CountIngest) -> Result<IngestWindow, StoreError> {
        self.inner.count_ingest(p).await
    }
    async fn prune_rate_windows(&self, p: At) -> Result<u64, StoreError> {
        self.inner.prune_rate_windows(p).await
    }
    async fn queue_depth(&self, p: At) -> Result<notify_core::store::QueueDepth, StoreError> {
        self.inner.queue_depth(p).await
    }
}
