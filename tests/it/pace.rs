//! The providers' pace through real SES v2 calls: the worker's real SES adapter and
//! `GetAccount` reader against the stand-in (moto), through the SES front
//! (`integration_tests::ses_front`), which answers `GetAccount` in its wire shape, records
//! when each `SendEmail` arrived, and refuses sends as SES does when a test says so.
//!
//! - Several invocations at once, together, never outrun the account's rate, and every job
//!   is sent exactly once.
//! - A daily-quota throttle holds the channel, spending no attempt, until the quota can have
//!   recovered; then every job goes out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::TestDb;
use integration_tests::proxy::Proxy;
use integration_tests::ses_front::SesFront;
use integration_tests::stand_in::{self, Recipients, insert_jobs};
use notify_core::delivery::{DeliveryConfig, Router};
use notify_core::domain::Channel;
use notify_core::fleet::{
    Crew, FleetConfig, InvokeError, Invoker, Started, Wake, WakeEvent, WakeReason, Waker,
};
use notify_core::pace::{EmailRate, PaceConfig, PaceStore, Paced};
use notify_core::worker::{self, WorkerConfig};
use notify_delivery::{SesQuota, deliverer_from};
use notify_postgres::PgStore;
use serde_json::json;

const EMAIL_FROM: &str = "noreply@notify-tests.example.com";

fn upstream() -> String {
    std::env::var("AWS_ENDPOINT_URL")
        .expect("AWS_ENDPOINT_URL names the stand-in (tests/scripts/services.sh stand_in_up)")
}

/// One worker instance: its own paced deliverer (its own quota cache), as a Lambda
/// instance has, sharing the store's pace with every other.
fn paced(sdk: &aws_config::SdkConfig, store: Arc<PgStore>, config: PaceConfig) -> Paced<Router> {
    Paced::new(
        deliverer_from(sdk, &DeliveryConfig::new(EMAIL_FROM)),
        store as Arc<dyn PaceStore>,
        Some(Box::new(SesQuota::from_sdk(sdk))),
        config,
    )
}

/// The rate read from the account (`GetAccount`), all of it.
const FROM_ACCOUNT: PaceConfig = PaceConfig {
    email: EmailRate::FromAccount,
    ses_headroom: 1.0,
    sms_rate: None,
};

fn emails(recipients: &Recipients, n: usize) -> Vec<(Channel, serde_json::Value)> {
    (0..n)
        .map(|i| {
            (
                Channel::Email,
                json!({"to": recipients.email(), "subject": format!("s{i}"), "text": "t"}),
            )
        })
        .collect()
}

/// What each test of the SES path starts from: the front before moto (the sender verified),
/// the SDK's settings pointing at it, a database holding `n` email jobs, their ids, and a
/// store on it.
struct Setup {
    front: SesFront,
    sdk: aws_config::SdkConfig,
    db: TestDb,
    client: tokio_postgres::Client,
    ids: Vec<uuid::Uuid>,
    store: Arc<PgStore>,
}

async fn setup(n: usize) -> Setup {
    stand_in::verify_sender(EMAIL_FROM).await;
    let front = SesFront::start(&upstream()).await;
    let sdk = front.sdk_config().await;
    let db = TestDb::new().await;
    let client = db.client().await;
    let jobs = insert_jobs(&client, &emails(&Recipients::new(), n), 3).await;
    let ids = jobs.iter().map(|(id, _)| *id).collect();
    let store = Arc::new(db.store().await);
    Setup {
        front,
        sdk,
        db,
        client,
        ids,
        store,
    }
}

/// The most sends in any one-second window [t, t + 1 s) starting at a send.
fn busiest_second(mut times: Vec<Instant>) -> usize {
    times.sort();
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| t.duration_since(times[i]) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn four_invocations_together_stay_under_the_accounts_rate_and_send_each_job_once() {
    const JOBS: usize = 40;
    let Setup {
        front,
        sdk,
        db,
        client,
        ids,
        ..
    } = setup(JOBS).await;
    // the account's rate: 5 emails a second
    front.set_quota(5.0, 1_000_000.0, 0.0);

    // four invocations at once, each claiming 10 at a time: they work side by side
    let cfg = WorkerConfig {
        batch_size: 10,
        concurrency: 4,
        ..WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM))
    };
    let mut invocations = Vec::new();
    for _ in 0..4 {
        let store = Arc::new(db.store().await);
        invocations.push((store.clone(), paced(&sdk, store, FROM_ACCOUNT)));
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let summaries = futures::future::join_all(
        invocations
            .iter()
            .map(|(store, deliverer)| worker::run(&**store, deliverer, &cfg, deadline)),
    )
    .await;
    let took = started.elapsed();
    let summaries: Vec<_> = summaries.into_iter().map(Result::unwrap).collect();
    assert!(
        summaries.iter().filter(|s| s.sent > 0).count() >= 2,
        "the invocations sent side by side: {summaries:?}"
    );
    assert_eq!(
        summaries.iter().map(|s| s.sent).sum::<u64>(),
        JOBS as u64,
        "{summaries:?}"
    );

    let times = front.send_times();
    let busiest = busiest_second(times.clone());
    println!(
        "{JOBS} emails at 5/s by 4 invocations in {took:?}: busiest second {busiest}, \
         GetAccount calls {}",
        front.account_calls()
    );
    assert_eq!(times.len(), JOBS, "one SendEmail per job, no more");
    assert_eq!(front.sends_forwarded(), JOBS as u64);
    // 5 a second, one more for the clocks' tolerance (a call leaves a little after its slot)
    assert!(busiest <= 6, "{busiest} SendEmail calls within one second");
    // 40 sends 0.2 s apart span 7.8 s: a pace that did not hold would send them at once
    assert!(took >= Duration::from_secs(7), "took {took:?}");
    assert!(
        (1..=4).contains(&front.account_calls()),
        "each instance reads the quota once: {}",
        front.account_calls()
    );

    // every job sent once, with one attempt
    let rows = client
        .query(
            "SELECT job_id, status::text, attempts FROM job_outcomes WHERE job_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), JOBS);
    for row in rows {
        assert_eq!(row.get::<_, String>(1), "sent");
        assert_eq!(row.get::<_, i32>(2), 1);
    }
    let attempts = client
        .query_one(
            "SELECT count(*) FROM job_attempt_history WHERE job_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(attempts, JOBS as i64, "one provider call per job");
    // the metric line reports the rate in force
    let line: serde_json::Value = serde_json::from_str(&invocations[0].1.metric_line()).unwrap();
    assert_eq!(line["EmailSendRate"], 5.0);
    assert!(line["PacedSeconds"].as_f64().unwrap() > 0.0, "{line}");
}

/// Starts each worker invocation in-process, as Lambda would: its own store connection and
/// its own paced deliverer (its own quota cache), joining the fleet with the wake's event.
#[derive(Clone)]
struct Fleet(Arc<FleetInner>);

struct FleetInner {
    db: TestDb,
    sdk: aws_config::SdkConfig,
    cfg: WorkerConfig,
    fleet: FleetConfig,
    runs: std::sync::Mutex<Vec<tokio::task::JoinHandle<worker::WorkerSummary>>>,
}

#[async_trait::async_trait]
impl Invoker for Fleet {
    async fn invoke(&self, event: &WakeEvent) -> Result<(), InvokeError> {
        let me = self.clone();
        let payload = event.payload();
        let run = tokio::spawn(async move {
            let inner = &me.0;
            let store = Arc::new(inner.db.store().await);
            let deliverer = paced(&inner.sdk, store.clone(), FROM_ACCOUNT);
            let deadline = Instant::now() + Duration::from_secs(60);
            let invoker: Arc<dyn Invoker> = Arc::new(me.clone());
            let mut crew = Crew::join(&*store, Some(invoker), &inner.fleet, &payload, deadline)
                .await
                .unwrap()
                .expect("the slot taken for it");
            let summary = worker::run_in(&*store, &deliverer, &inner.cfg, deadline, &mut crew)
                .await
                .unwrap();
            crew.finish().await;
            summary
        });
        self.0.runs.lock().unwrap().push(run);
        Ok(())
    }
}

/// The pace with fan-out: provider calls slowed to 100–150 ms each (a proxy before the
/// front), one call in flight a worker, so one worker sends 6 to 10 a second and the account
/// allows 25. The backlog starts more workers, as many as the rate keeps busy (3 or 4, not
/// the 8 the backlog alone asks for), and together they still stay under it, each job sent
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_grown_by_fan_out_stays_under_the_accounts_rate_and_sends_each_job_once() {
    const JOBS: usize = 150;
    let Setup {
        front,
        db,
        client,
        ids,
        ..
    } = setup(JOBS).await;
    front.set_quota(25.0, 1_000_000.0, 0.0);
    let front_address: std::net::SocketAddr = front
        .endpoint_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let slow = Proxy::with_delay(front_address, Duration::from_millis(50)).await;
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".to_owned());
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .endpoint_url(slow.endpoint())
        .region(aws_config::Region::new(region))
        .credentials_provider(aws_sdk_sesv2::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await;
    let fleet = Fleet(Arc::new(FleetInner {
        db,
        sdk,
        cfg: WorkerConfig {
            batch_size: 4,
            concurrency: 1,
            ..WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM))
        },
        fleet: FleetConfig {
            idle: Duration::from_millis(300),
            max_invocations: 8,
            horizon: Duration::from_secs(1),
            ..FleetConfig::default()
        },
        runs: std::sync::Mutex::new(Vec::new()),
    }));
    let waker_store = Arc::new(fleet.0.db.store().await);
    let started = Instant::now();
    let woke = Waker::new(waker_store, Arc::new(fleet.clone()))
        .wake(WakeReason::Accepted)
        .await;
    assert_eq!(woke, Wake::Started(Started::Accepted));
    // every worker leaves once the queue is empty; the first started the others
    loop {
        let done = fleet.0.runs.lock().unwrap().iter().all(|r| r.is_finished());
        if done && front.sends_forwarded() == JOBS as u64 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the backlog was not sent"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    let runs: Vec<_> = std::mem::take(&mut *fleet.0.runs.lock().unwrap());
    let mut summaries = Vec::new();
    for run in runs {
        summaries.push(run.await.unwrap());
    }
    let times = front.send_times();
    let busiest = busiest_second(times.clone());
    println!(
        "{JOBS} emails at 25/s by {} invocations in {took:?}: busiest second {busiest}",
        summaries.len()
    );
    // a worker sends 6 to 10 a second here (its calls take 100 to 150 ms): the rate keeps 3
    // or 4 busy, and the backlog alone would have asked for the max, 8
    assert!(
        (3..=4).contains(&summaries.len()),
        "as many workers as the rate keeps busy: {summaries:?}"
    );
    assert!(
        summaries.iter().all(|s| s.sent > 0),
        "each of them sent: {summaries:?}"
    );
    assert_eq!(times.len(), JOBS, "one SendEmail per job, no more");
    // 25 a second, one more for the clocks' tolerance
    assert!(busiest <= 26, "{busiest} SendEmail calls within one second");
    assert!(took >= Duration::from_secs(5), "took {took:?}");
    let sent = client
        .query_one(
            "SELECT count(*) FROM job_outcomes WHERE job_id = ANY($1) AND status = 'sent'
                 AND attempts = 1",
            &[&ids],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(sent, JOBS as i64, "every job sent once, with one attempt");
}

#[tokio::test]
async fn a_daily_quota_throttle_holds_the_channel_without_spending_attempts_then_recovers() {
    const JOBS: usize = 20;
    let Setup {
        front,
        sdk,
        client,
        ids,
        store,
        // the database lives as long as the test
        db: _db,
        ..
    } = setup(JOBS).await;
    front.set_quota(1000.0, 200.0, 150.0);
    front.refuse_sends(Some((
        400,
        "ThrottlingException",
        "Daily message quota exceeded.",
    )));
    let cfg = WorkerConfig {
        batch_size: 20,
        concurrency: 4,
        ..WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM))
    };
    let deadline = || Instant::now() + Duration::from_secs(60);

    let deliverer = paced(&sdk, store.clone(), FROM_ACCOUNT);
    let summary = worker::run(&*store, &deliverer, &cfg, deadline())
        .await
        .unwrap();
    let refused = front.send_times().len() as u64;
    assert!(
        (1..=4).contains(&refused),
        "only the calls in flight met the throttle: {refused}"
    );
    assert_eq!(front.sends_forwarded(), 0);
    assert_eq!(summary.sent, 0, "{summary:?}");
    assert_eq!(summary.held, refused, "{summary:?}");
    assert_eq!(summary.released, JOBS as u64 - refused, "{summary:?}");
    let stats = deliverer.take_stats();
    assert_eq!(stats.throttled, refused);
    assert_eq!(stats.quota_held, JOBS as u64);

    // the channel is held a minute (150 of 200 sent: the quota may free at any time), and
    // every job waits for it with its attempts untouched
    let pace = client
        .query_one(
            "SELECT extract(epoch FROM held_until - now())::float8, hold_reason
             FROM send_pace WHERE channel = 'email'",
            &[],
        )
        .await
        .unwrap();
    let held_for: f64 = pace.get(0);
    assert!((50.0..=61.0).contains(&held_for), "held for {held_for} s");
    assert_eq!(pace.get::<_, String>(1), "daily quota exceeded");
    let queued = client
        .query(
            "SELECT attempts, claim_token IS NULL,
                    extract(epoch FROM next_attempt_at - now())::float8
             FROM job_queue WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(queued.len(), JOBS, "every job is still open");
    for row in &queued {
        assert_eq!(row.get::<_, i32>(0), 0, "no attempt spent");
        assert!(row.get::<_, bool>(1), "not claimed");
        let due_in: f64 = row.get(2);
        assert!(due_in >= 50.0, "due when the hold ends, not in {due_in} s");
    }

    // a worker meanwhile hands nothing to SES
    let during = worker::run(
        &*store,
        &paced(&sdk, store.clone(), FROM_ACCOUNT),
        &cfg,
        deadline(),
    )
    .await
    .unwrap();
    assert_eq!(during.claimed, 0, "{during:?}");
    assert_eq!(front.send_times().len() as u64, refused);

    // the quota recovers; the hold ends (as time would end it) and every job goes out
    front.refuse_sends(None);
    client
        .batch_execute(
            "UPDATE send_pace SET held_until = now() - interval '1 second' WHERE channel = 'email';
             UPDATE job_queue SET next_attempt_at = now() - interval '1 second'",
        )
        .await
        .unwrap();
    let after = worker::run(
        &*store,
        &paced(&sdk, store.clone(), FROM_ACCOUNT),
        &cfg,
        deadline(),
    )
    .await
    .unwrap();
    assert_eq!(after.sent, JOBS as u64, "{after:?}");
    let ended = client
        .query(
            "SELECT status::text, attempts FROM job_outcomes WHERE job_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(ended.len(), JOBS);
    for row in ended {
        assert_eq!(row.get::<_, String>(0), "sent");
        assert_eq!(
            row.get::<_, i32>(1),
            1,
            "the throttled call spent no attempt"
        );
    }
}

/// The real deliverer, noting the order in which jobs reach it (the provider calls).
struct CallOrder {
    inner: Router,
    calls: std::sync::Mutex<Vec<uuid::Uuid>>,
}

#[async_trait::async_trait]
impl notify_core::delivery::Deliverer for CallOrder {
    async fn deliver(
        &self,
        job: &notify_core::store::ClaimedJob,
    ) -> Result<String, notify_core::delivery::DeliveryError> {
        self.calls.lock().unwrap().push(job.id);
        self.inner.deliver(job).await
    }
}

#[tokio::test]
async fn ten_high_jobs_posted_after_a_thousand_normal_ones_are_among_the_first_16_calls() {
    use integration_tests::apigw::{ApiRequest, Version, new_org, parts};
    use lambda_http::http::StatusCode;

    stand_in::verify_sender(EMAIL_FROM).await;
    let db = TestDb::new().await;
    let store = Arc::new(db.store().await);
    let ingest = integration_tests::contract::Ingest::new(
        store.clone(),
        notify_api::IngestConfig::default(),
    );
    let org = new_org();
    let recipients = Recipients::new();
    // a thousand `normal` SMS in two batches (a bulk send), then ten `high` ones, one by one
    for _ in 0..2 {
        let items: Vec<_> = (0..500)
            .map(|i| json!({"channel": "sms", "to": recipients.phone(), "message": format!("bulk {i}")}))
            .collect();
        let response = ingest
            .handle(
                ApiRequest::new(Version::V2, "POST", "/notifications/batch")
                    .body(json!({"notifications": items}).to_string())
                    .org(org)
                    .build(),
            )
            .await;
        let (status, body) = parts(&response);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["accepted"], 500, "{}", body["results"][0]);
    }
    let mut high = Vec::new();
    for i in 0..10 {
        let body = json!({"channel": "sms", "to": recipients.phone(),
                          "message": format!("code {i}"), "priority": "high"});
        let (status, body) = parts(
            &ingest
                .handle(ApiRequest::post(Version::V2, &body).org(org).build())
                .await,
        );
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        high.push(body["id"].as_str().unwrap().parse::<uuid::Uuid>().unwrap());
    }

    // the next invocation, at the template's defaults (batch 100, 32 calls in flight)
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .load()
        .await;
    let deliverer = CallOrder {
        inner: deliverer_from(&sdk, &DeliveryConfig::new(EMAIL_FROM)),
        calls: Default::default(),
    };
    let cfg = WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM));
    let summary = worker::run(
        &*store,
        &deliverer,
        &cfg,
        Instant::now() + Duration::from_secs(120),
    )
    .await
    .unwrap();
    assert_eq!(summary.sent, 1010, "{summary:?}");
    let calls = deliverer.calls.lock().unwrap().clone();
    let first: Vec<_> = calls.iter().take(16).collect();
    let missing: Vec<_> = high.iter().filter(|id| !first.contains(id)).collect();
    assert!(
        missing.is_empty(),
        "high jobs not among the first 16 provider calls: {missing:?} (first calls: {first:?})"
    );
}

#[tokio::test]
async fn jobs_without_a_slot_before_the_deadline_go_back_untried_and_the_invocation_stops() {
    let Setup {
        front,
        sdk,
        client,
        ids,
        store,
        // the database lives as long as the test
        db: _db,
        ..
    } = setup(10).await;
    // one email a second, and an invocation that must stop in 6 s: with the provider's 1 s
    // and the worker's 3 s margin kept, slots may be waited for 2 s at most
    let one_a_second = PaceConfig {
        email: EmailRate::Fixed(1.0),
        ..PaceConfig::default()
    };
    let cfg = WorkerConfig {
        batch_size: 10,
        concurrency: 10,
        provider_timeout: Duration::from_secs(1),
        ..WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM))
    };
    let deliverer = paced(&sdk, store.clone(), one_a_second);
    let summary = worker::run(
        &*store,
        &deliverer,
        &cfg,
        Instant::now() + Duration::from_secs(6),
    )
    .await
    .unwrap();
    assert_eq!(
        summary.batches, 1,
        "no claim after the slots ran out: {summary:?}"
    );
    assert!(
        (2..=4).contains(&summary.sent),
        "the slots of the 2 s it could wait: {summary:?}"
    );
    assert_eq!(summary.sent + summary.released, 10, "{summary:?}");
    assert_eq!(front.send_times().len() as u64, summary.sent);
    assert_eq!(deliverer.take_stats().no_slot, summary.released);
    // given back untried: due now, no attempt spent, no claim left
    let open = client
        .query(
            "SELECT attempts, tries, claim_token IS NULL, next_attempt_at <= now()
             FROM job_queue WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(open.len() as u64, summary.released);
    for row in open {
        assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1)), (0, 0));
        assert!(row.get::<_, bool>(2) && row.get::<_, bool>(3));
    }
}

#[tokio::test]
async fn a_rate_throttle_halves_the_shared_rate_and_holds_the_job_a_second_without_an_attempt() {
    let Setup {
        front,
        sdk,
        client,
        ids,
        store,
        // the database lives as long as the test
        db: _db,
        ..
    } = setup(5).await;
    front.refuse_sends(Some((
        400,
        "ThrottlingException",
        "Maximum sending rate exceeded.",
    )));
    let ten_a_second = PaceConfig {
        email: EmailRate::Fixed(10.0),
        ..PaceConfig::default()
    };
    let cfg = WorkerConfig {
        batch_size: 5,
        concurrency: 5,
        ..WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM))
    };
    let deadline = || Instant::now() + Duration::from_secs(60);
    let deliverer = paced(&sdk, store.clone(), ten_a_second);
    let summary = worker::run(&*store, &deliverer, &cfg, deadline())
        .await
        .unwrap();
    assert_eq!(summary.held, 5, "{summary:?}");
    assert_eq!(deliverer.take_stats().throttled, 5);
    // five throttles within a second: one halving
    let factor: f64 = client
        .query_one("SELECT factor FROM send_pace WHERE channel = 'email'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(factor, 0.5);
    let held = client
        .query(
            "SELECT attempts, extract(epoch FROM next_attempt_at - now())::float8
             FROM job_queue WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(held.len(), 5);
    for row in held {
        assert_eq!(row.get::<_, i32>(0), 0, "no attempt spent");
        let due_in: f64 = row.get(1);
        assert!((0.0..=2.1).contains(&due_in), "due again in {due_in} s");
    }

    // the provider takes them again: due within two seconds, sent at the lowered rate
    front.refuse_sends(None);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let after = worker::run(&*store, &deliverer, &cfg, deadline())
        .await
        .unwrap();
    assert_eq!(after.sent, 5, "{after:?}");
    let rate = deliverer.take_stats().rate[1].expect("email is paced");
    assert!(
        (5.0..6.0).contains(&rate),
        "half the rate, climbing back 1 % a second: {rate}"
    );
}
