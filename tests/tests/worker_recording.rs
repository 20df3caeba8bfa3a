//! The at-least-once window: a batch's results are written as they arrive, so a worker that
//! dies mid-batch re-sends only what it had not yet recorded, not the whole batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use integration_tests::{insert_due_jobs, TestDb};
use shared::delivery::{Deliverer, DeliveryConfig, DeliveryError};
use shared::store::ClaimedJob;
use shared::worker::{self, WorkerConfig};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_attempts_are_recorded_while_others_are_in_flight() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let ids = insert_due_jobs(&client, 5).await;
    let deliverer = Arc::new(OneSlow {
        slow: ids[0],
        release: Notify::new(),
    });
    let store = Arc::new(db.store().await);
    let cfg = WorkerConfig {
        batch_size: 5,
        concurrency: 5,
        ..WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
    };
    let run = {
        let (store, deliverer) = (store.clone(), deliverer.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            worker::run(store.as_ref(), deliverer.as_ref(), &cfg, deadline).await
        })
    };

    // the four fast attempts are written while the slow one is still in flight
    let mut recorded = 0;
    for _ in 0..250 {
        recorded =
            integration_tests::count(&client, "SELECT count(*) FROM job_attempt_history").await;
        if recorded == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    let sent: i64 = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_states WHERE status = 'sent'",
    )
    .await;
    assert_eq!(sent, 5);
}
