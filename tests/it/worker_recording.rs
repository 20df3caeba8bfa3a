//! The at-least-once window: results are written as they arrive (per tick), so a worker that
//! dies mid-batch re-sends only what it had not yet recorded, not the whole batch; and the
//! pipeline: a free slot takes the next job without waiting for the batch's slowest call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use integration_tests::{TestDb, insert_due_jobs};
use notify_core::delivery::{Deliverer, DeliveryConfig, DeliveryError};
use notify_core::store::ClaimedJob;
use notify_core::worker::{self, WorkerConfig};
use tokio::sync::Notify;
use uuid::Uuid;

/// Delivers every job at once, except one that waits until released.
struct OneSlow {
    slow: Uuid,
    release: Notify,
}

#[async_trait]
impl Deliverer for OneSlow {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        if job.id == self.slow {
            self.release.notified().await;
        }
        Ok(format!("m-{}", job.id))
    }
}

/// A worker running on its own task over `jobs` due jobs, the first of them slow until
/// released.
struct SlowRun {
    client: tokio_postgres::Client,
    ids: Vec<Uuid>,
    deliverer: Arc<OneSlow>,
    run: tokio::task::JoinHandle<Result<worker::WorkerSummary, notify_core::store::StoreError>>,
    _db: TestDb,
}

async fn one_slow(jobs: i64, batch_size: u32, concurrency: usize) -> SlowRun {
    let db = TestDb::new().await;
    let client = db.client().await;
    let ids = insert_due_jobs(&client, jobs).await;
    let deliverer = Arc::new(OneSlow {
        slow: ids[0],
        release: Notify::new(),
    });
    let store = Arc::new(db.store().await);
    let cfg = WorkerConfig {
        batch_size,
        concurrency,
        ..WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
    };
    let run = {
        let (store, deliverer) = (store.clone(), deliverer.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            worker::run(store.as_ref(), deliverer.as_ref(), &cfg, deadline).await
        })
    };
    SlowRun {
        client,
        ids,
        deliverer,
        run,
        _db: db,
    }
}

/// `count_sql`'s count once it reaches `want`, or the last one after 5 s.
async fn count_until(client: &tokio_postgres::Client, count_sql: &str, want: i64) -> i64 {
    let mut counted = 0;
    for _ in 0..250 {
        counted = integration_tests::count(client, count_sql).await;
        if counted == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    counted
}

const SENT: &str = "SELECT count(*) FROM job_states WHERE status = 'sent'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_attempts_are_recorded_while_others_are_in_flight() {
    let SlowRun {
        client,
        ids,
        deliverer,
        run,
        _db,
    } = one_slow(5, 5, 5).await;

    // the four fast attempts are written while the slow one is still in flight
    let recorded = count_until(&client, "SELECT count(*) FROM job_attempt_history", 4).await;
    assert_eq!(
        recorded, 4,
        "the finished attempts are recorded before the batch ends"
    );
    let slow_status: String = client
        .query_one(
            "SELECT status::text FROM job_states WHERE id = $1",
            &[&ids[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slow_status, "processing");

    deliverer.release.notify_one();
    let summary = run.await.unwrap().unwrap();
    assert_eq!((summary.claimed, summary.sent, summary.batches), (5, 5, 1));
    assert_eq!(integration_tests::count(&client, SENT).await, 5);
}

/// A slow call holds its slot, not the worker: while it runs, the other slot delivers the
/// rest of its batch and of the batches claimed after it (a worker that claimed per batch
/// would wait for the slow call before its next claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_leaves_the_other_slots_claiming_and_delivering() {
    let SlowRun {
        client,
        deliverer,
        run,
        _db,
        ..
    } = one_slow(20, 5, 2).await;
    let sent = count_until(&client, SENT, 19).await;
    deliverer.release.notify_one();
    assert_eq!(
        sent, 19,
        "every other job (four batches) sent while the slow call held one slot"
    );
    let summary = run.await.unwrap().unwrap();
    assert_eq!((summary.claimed, summary.sent), (20, 20), "{summary:?}");
    assert_eq!(summary.batches, 4, "claims of 5: {summary:?}");
}

/// Answers at once, and notes how many messages were handed over and not yet recorded
/// (`recorded` is what the store committed) when each call starts.
struct Answering {
    store: Arc<crate::worker_faults::FailingRecords>,
    handed: AtomicU64,
    most_unrecorded: AtomicU64,
}

#[async_trait]
impl Deliverer for Answering {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        let handed = self.handed.fetch_add(1, Ordering::SeqCst) + 1;
        let unrecorded = handed - self.store.recorded.load(Ordering::SeqCst);
        self.most_unrecorded.fetch_max(unrecorded, Ordering::SeqCst);
        Ok(format!("m-{}", job.id))
    }
}

/// However fast the provider answers and however slow the writes, a worker never has more
/// than twice its calls in flight handed over and unrecorded (decision 0007: what a kill may
/// re-send), and the next calls run while a write is on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_and_unrecorded_stays_within_twice_the_calls_in_flight() {
    let db = TestDb::new().await;
    let client = db.client().await;
    insert_due_jobs(&client, 200).await;
    let mut store = crate::worker_faults::FailingRecords::new(db.store().await, 0);
    store.delay = Duration::from_millis(30);
    let store = Arc::new(store);
    let deliverer = Answering {
        store: store.clone(),
        handed: AtomicU64::new(0),
        most_unrecorded: AtomicU64::new(0),
    };
    let cfg = WorkerConfig {
        batch_size: 100,
        concurrency: 4,
        // claims of a whole batch fit the minute
        provider_timeout: Duration::from_secs(1),
        ..WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let summary = worker::run(store.as_ref(), &deliverer, &cfg, deadline)
        .await
        .unwrap();
    assert_eq!((summary.claimed, summary.sent), (200, 200), "{summary:?}");
    let most = deliverer.most_unrecorded.load(Ordering::SeqCst);
    let bound = 2 * cfg.concurrency as u64;
    assert!(
        most <= bound,
        "at most {bound} handed over and unrecorded, found {most}"
    );
    assert_eq!(
        worker::window(&cfg) as u64,
        bound,
        "the window's documented size"
    );
    assert!(
        most > cfg.concurrency as u64,
        "calls ran while a write was on its way: at most {most} unrecorded"
    );
}

/// Holds every delivery until released; `dead` fails permanently (the provider refuses it).
struct Gate {
    dead: Uuid,
    open: tokio::sync::Semaphore,
}

#[async_trait]
impl Deliverer for Gate {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        self.open.acquire().await.expect("the gate stays").forget();
        if job.id == self.dead {
            return Err(DeliveryError::new(
                "InvalidParameter",
                "injected: not a number",
            ));
        }
        Ok(format!("m-{}", job.id))
    }
}

/// A completion is applied once. With a per-organization rate limit the worker completes a
/// batch and then claims the next in two statements; when the claim fails after the
/// completions committed, the worker records the same results again (it cannot know what
/// committed). That second recording applies nothing twice: each attempt keeps one row, none
/// is taken for a late (fenced) completion, and a job it ended `dead` can be requeued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_recorded_again_after_its_claim_failed_is_applied_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let ids = insert_due_jobs(&client, 3).await;
    let deliverer = Arc::new(Gate {
        dead: ids[0],
        open: tokio::sync::Semaphore::new(0),
    });
    let store = Arc::new(
        notify_postgres::PgStore::new(db.config.clone())
            .with_rate_limit(1_000)
            .with_statement_timeout(Duration::from_secs(1)),
    );
    store.ready().await.unwrap();
    let cfg = WorkerConfig {
        batch_size: 3,
        concurrency: 3,
        ..WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
    };
    let run = {
        let (store, deliverer) = (store.clone(), deliverer.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            worker::run(store.as_ref(), deliverer.as_ref(), &cfg, deadline).await
        })
    };
    // the batch is claimed (its rate-limit reservation committed) and in delivery
    for _ in 0..250 {
        let claimed = integration_tests::count(
            &client,
            "SELECT count(*) FROM job_states WHERE status = 'processing'",
        )
        .await;
        if claimed == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // from now on every claim waits on the rate-limit counters, past the statement timeout
    let mut holder = db.client().await;
    let hold = holder.transaction().await.unwrap();
    hold.batch_execute("LOCK TABLE organization_claim_counts IN EXCLUSIVE MODE")
        .await
        .unwrap();
    deliverer.open.add_permits(3);
    let err = run
        .await
        .unwrap()
        .expect_err("the worker's fresh claim cannot get its lock either");
    assert!(err.is_unavailable(), "{err}");
    hold.rollback().await.unwrap();

    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE fenced), count(DISTINCT (job_id, attempt))
             FROM job_attempt_history",
            &[],
        )
        .await
        .unwrap();
    let (attempts, fenced, distinct): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (attempts, fenced, distinct),
        (3, 0, 3),
        "one row per attempt, none fenced"
    );
    let statuses: Vec<String> = client
        .query(
            "SELECT status::text FROM job_states WHERE id = ANY($1) ORDER BY id = $2 DESC",
            &[&ids, &ids[0]],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(statuses, ["dead", "sent", "sent"]);

    // the dead job goes back in the queue, its attempt with it
    let org: Uuid = client
        .query_one(
            "SELECT organization_id FROM job_requests WHERE id = $1",
            &[&ids[0]],
        )
        .await
        .unwrap()
        .get(0);
    let requeued = notify_core::store::JobStore::requeue(store.as_ref(), org, ids[0])
        .await
        .unwrap();
    assert!(
        matches!(requeued, notify_core::store::Transition::Done(_)),
        "{requeued:?}"
    );
    let kept = integration_tests::count(
        &client,
        &format!(
            "SELECT count(*) FROM job_attempt_history WHERE job_id = '{}'",
            ids[0]
        ),
    )
    .await;
    assert_eq!(kept, 1);
}
