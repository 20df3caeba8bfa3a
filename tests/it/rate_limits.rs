//! Per-organization rate limits: enforced at claim time (fair across tenants, exact under
//! concurrent claimers) and at ingest (429 with RateLimit-* headers).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use integration_tests::TestDb;
use integration_tests::apigw::{ApiRequest, Version, header, new_org, parts};
use lambda_http::http::StatusCode;
use serde_json::json;
// every answer checked against the API contract (functions/ingest/openapi.yaml)
use integration_tests::contract::Ingest;
use notify_api::IngestConfig;
use notify_core::domain::Channel;
use notify_core::store::{At, Claim, JobStore};
use notify_postgres::PgStore;
use notify_postgres::testing::TestJob;
use tokio_postgres::Client;
use uuid::Uuid;

/// Waits out the end of the current minute when it is near, so a test's windows hold.
async fn clear_of_minute_end(client: &Client) {
    let left: f64 = client
        .query_one(
            "SELECT EXTRACT(EPOCH FROM date_trunc('minute', now()) + interval '1 minute' - now())::float8",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if left < 8.0 {
        tokio::time::sleep(std::time::Duration::from_secs_f64(left + 0.2)).await;
    }
}

async fn add_jobs(client: &Client, org: Uuid, n: i64, age_secs: f64) {
    let start = chrono::Utc::now() - chrono::TimeDelta::microseconds((age_secs * 1e6) as i64);
    let jobs: Vec<TestJob> = (1..=n)
        .map(|g| TestJob {
            // due in this order, a microsecond apart
            next_attempt_at: start + chrono::TimeDelta::microseconds(g),
            ..TestJob::due(
                org,
                Channel::Sms,
                json!({"to": "+15555550100", "message": "m"}),
            )
        })
        .collect();
    notify_postgres::testing::insert_jobs(client, &jobs)
        .await
        .unwrap();
}

async fn limited_store(db: &TestDb, per_minute: u32) -> PgStore {
    let store = PgStore::new(db.config.clone()).with_rate_limit(per_minute);
    store.ready().await.unwrap();
    store
}

/// Per organization: how many jobs were claimed, and in how many minute windows.
async fn claimed_by_org(client: &Client) -> HashMap<Uuid, (i64, i64)> {
    client
        .query(
            "SELECT j.organization_id, count(*),
                    (SELECT count(*) FROM organization_claim_counts c
                     WHERE c.organization_id = j.organization_id)
             FROM job_states j WHERE status = 'processing' GROUP BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

#[tokio::test]
async fn a_noisy_tenant_does_not_delay_another_tenants_jobs() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let (noisy, quiet) = (new_org(), new_org());
    add_jobs(&client, noisy, 10_000, 600.0).await; // older: first in plain FIFO order
    add_jobs(&client, quiet, 10, 1.0).await;
    clear_of_minute_end(&client).await;
    let store = limited_store(&db, 100).await;

    let first = store
        .claim(Claim {
            batch_size: 100,
            now: None,
        })
        .await
        .unwrap();
    let quiet_in_first = first.iter().filter(|j| j.organization_id == quiet).count();
    assert_eq!(
        quiet_in_first, 10,
        "the other tenant's jobs are all in the first batch"
    );
    assert_eq!(first.len(), 100);

    // claim until nothing more may be taken this minute
    let mut noisy_total = first.iter().filter(|j| j.organization_id == noisy).count();
    loop {
        let batch = store
            .claim(Claim {
                batch_size: 100,
                now: None,
            })
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        assert!(batch.iter().all(|j| j.organization_id == noisy));
        noisy_total += batch.len();
    }
    let counts = claimed_by_org(&client).await;
    let (claimed, windows) = counts[&noisy];
    assert_eq!(claimed as usize, noisy_total);
    assert!(windows >= 1);
    assert_eq!(
        noisy_total as i64,
        100 * windows,
        "exactly its budget per minute window"
    );
}

#[tokio::test]
async fn overrides_apply_per_organization() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let (small, default, unlimited) = (new_org(), new_org(), new_org());
    add_jobs(&client, small, 50, 10.0).await;
    add_jobs(&client, default, 50, 10.0).await;
    add_jobs(&client, unlimited, 50, 10.0).await;
    client
        .execute(
            "INSERT INTO organization_rate_limits (organization_id, per_minute)
             VALUES ($1, 5), ($2, 0)",
            &[&small, &unlimited],
        )
        .await
        .unwrap();
    clear_of_minute_end(&client).await;
    let store = limited_store(&db, 20).await;
    while !store
        .claim(Claim {
            batch_size: 100,
            now: None,
        })
        .await
        .unwrap()
        .is_empty()
    {}
    let counts = claimed_by_org(&client).await;
    assert_eq!(
        counts[&small].0,
        5 * counts[&small].1,
        "the override: 5 a minute"
    );
    assert_eq!(
        counts[&default].0,
        20 * counts[&default].1,
        "the default: 20 a minute"
    );
    assert_eq!(
        counts[&unlimited].0, 50,
        "an override of 0 is no limit, as RATE_LIMIT_PER_ORG_PER_MIN=0 is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_never_exceed_the_budget_together() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let org = new_org();
    add_jobs(&client, org, 2_000, 10.0).await;
    clear_of_minute_end(&client).await;
    let mut claimers = Vec::new();
    for _ in 0..4 {
        let store = limited_store(&db, 150).await;
        claimers.push(tokio::spawn(async move {
            let mut n = 0;
            loop {
                let batch = store
                    .claim(Claim {
                        batch_size: 40,
                        now: None,
                    })
                    .await
                    .unwrap();
                if batch.is_empty() {
                    return n;
                }
                n += batch.len();
            }
        }));
    }
    let mut total = 0;
    for c in claimers {
        total += c.await.unwrap();
    }
    let (claimed, windows) = claimed_by_org(&client).await[&org];
    assert_eq!(claimed as usize, total);
    assert!(
        total as i64 <= 150 * windows,
        "{total} claimed in {windows} window(s)"
    );
    assert!(total >= 150, "the budget was used");
}

#[tokio::test]
async fn ingest_answers_429_with_ratelimit_headers_past_the_burst() {
    let db = TestDb::new().await;
    let client = db.client().await;
    clear_of_minute_end(&client).await;
    let ingest = Ingest::new(
        Arc::new(db.store().await),
        IngestConfig {
            allow_org_header: false,
            rate_limit_per_min: 3,
            ..IngestConfig::default()
        },
    );
    let (flooder, other) = (new_org(), new_org());
    let body = json!({"channel": "sms", "to": "+15555550100", "message": "hi"});
    for remaining in ["2", "1", "0"] {
        let response = ingest
            .handle(ApiRequest::post(Version::V2, &body).org(flooder).build())
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        assert_eq!(header(&response, "ratelimit-limit"), Some("3"));
        assert_eq!(header(&response, "ratelimit-remaining"), Some(remaining));
    }
    let response = ingest
        .handle(ApiRequest::post(Version::V1, &body).org(flooder).build())
        .await;
    let (status, err) = parts(&response);
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(err["error"]["code"], "rate_limited");
    assert_eq!(header(&response, "ratelimit-remaining"), Some("0"));
    let reset: u32 = header(&response, "ratelimit-reset")
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&reset));
    assert_eq!(
        header(&response, "retry-after"),
        Some(reset.to_string().as_str())
    );

    // another tenant is not affected; reads are not counted
    let response = ingest
        .handle(ApiRequest::post(Version::V2, &body).org(other).build())
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let response = ingest
        .handle(
            ApiRequest::new(Version::V2, "GET", "/notifications")
                .org(flooder)
                .build(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let rows: i64 = integration_tests::count(&client, "SELECT count(*) FROM job_requests").await;
    assert_eq!(rows, 4, "the refused request wrote no job");
}

/// Records the organization of every job handed to it, in order.
#[derive(Default)]
struct Recorder {
    calls: std::sync::Mutex<Vec<(Uuid, Uuid)>>,
}

#[async_trait::async_trait]
impl notify_core::delivery::Deliverer for Recorder {
    async fn deliver(
        &self,
        job: &notify_core::store::ClaimedJob,
    ) -> Result<String, notify_core::delivery::DeliveryError> {
        self.calls
            .lock()
            .unwrap()
            .push((job.organization_id, job.id));
        Ok(format!("recorded-{}", job.id))
    }
}

/// The rate-limited worker end to end: the worker's own loop (a separate completion, then
/// the fair claim) over two organizations. Each gets exactly its budget this minute, batches
/// alternate between them, and a job swept from a lost worker and claimed again counts
/// against its organization's budget like any other.
#[tokio::test]
async fn the_rate_limited_worker_delivers_each_budget_round_robin() {
    use integration_tests::factory::Job;
    use notify_core::worker::{WorkerConfig, run};

    let db = TestDb::new().await;
    let client = db.client().await;
    let (first, second) = (new_org(), new_org());
    add_jobs(&client, first, 15, 60.0).await; // older: plain FIFO would take these first
    add_jobs(&client, second, 15, 30.0).await;
    // a job of `first` left in processing by a lost worker three hours ago
    let lost = Job::new()
        .org(first)
        .attempts(1)
        .claimed_ago(10_800.0)
        .insert(&client)
        .await;
    clear_of_minute_end(&client).await;
    let store = limited_store(&db, 6).await;
    // swept two hours ago (the clock is a parameter), so it is first in its line now
    let two_hours_ago = Some(chrono::Utc::now() - chrono::Duration::hours(2));
    let swept = notify_core::sweeper::run_once(
        &store,
        &notify_core::sweeper::SweeperConfig::new(600, 120, 100).unwrap(),
        At { now: two_hours_ago },
    )
    .await
    .unwrap();
    assert_eq!(swept.requeued, 1);

    let recorder = Recorder::default();
    let config = WorkerConfig {
        batch_size: 4,
        concurrency: 1,
        // short enough that claims of a whole batch fit the 30 s beside the jobs still held
        provider_timeout: std::time::Duration::from_secs(1),
        rate_limit_per_org_per_min: 6,
        ..WorkerConfig::new(notify_core::delivery::DeliveryConfig::new(
            "noreply@example.com",
        ))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let summary = run(&store, &recorder, &config, deadline).await.unwrap();
    let calls = recorder.calls.lock().unwrap().clone();

    assert_eq!(summary.sent, 12, "{summary:?}");
    let per_org = |org: Uuid| calls.iter().filter(|(o, _)| *o == org).count();
    assert_eq!((per_org(first), per_org(second)), (6, 6), "each its budget");
    assert!(
        calls.iter().any(|(_, id)| *id == lost),
        "the swept job was claimed again"
    );
    // round-robin: every batch of four holds two of each
    for batch in calls.chunks(4) {
        let of_first = batch.iter().filter(|(o, _)| *o == first).count();
        assert_eq!(of_first, 2, "batch {batch:?}");
    }
    let counted: Vec<(Uuid, i32)> = client
        .query(
            "SELECT organization_id, claimed FROM organization_claim_counts
             WHERE minute = date_trunc('minute', now()) ORDER BY organization_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(counted.len(), 2, "{counted:?}");
    assert!(counted.iter().all(|(_, n)| *n == 6), "{counted:?}");
    let due: i64 = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_states WHERE status IN ('pending', 'failed')",
    )
    .await;
    assert_eq!(due, 31 - 12, "the rest waits for the next minute");
}

/// Rows the open transaction of another connection holds locked, seen from `client`: every
/// row minus those this connection can lock without waiting.
async fn rows_locked_by_others(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT (SELECT count(*) FROM job_queue)
                  - (SELECT count(*) FROM (SELECT 1 FROM job_queue
                                           FOR UPDATE SKIP LOCKED) AS free)",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn the_fair_claim_locks_only_the_rows_it_claims() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let orgs: Vec<Uuid> = (0..200).map(|_| new_org()).collect();
    for org in &orgs {
        add_jobs(&client, *org, 200, 60.0).await;
    }
    client
        .batch_execute("ANALYZE job_requests, job_queue")
        .await
        .unwrap();

    // the claim statement itself, held open in a transaction so its locks can be counted
    let mut claimer = db.client().await;
    let tx = claimer.transaction().await.unwrap();
    let statement = &notify_postgres::sql::CLAIM_FAIR;
    let now: Option<chrono::DateTime<chrono::Utc>> = None;
    let claimed = tx
        .query_typed(
            statement.sql,
            &[
                (&100_i64, statement.params[0].clone()),
                (&now, statement.params[1].clone()),
                (&1_000_i32, statement.params[2].clone()),
            ],
        )
        .await
        .unwrap();
    let locked = rows_locked_by_others(&client).await;
    tx.rollback().await.unwrap();
    eprintln!(
        "fair claim, 200 organizations × 200 due jobs, batch 100: {} claimed, {locked} rows locked",
        claimed.len()
    );
    assert_eq!(claimed.len(), 100);
    let per_org: HashMap<Uuid, usize> = claimed.iter().fold(HashMap::new(), |mut m, row| {
        *m.entry(row.get("organization_id")).or_default() += 1;
        m
    });
    assert!(
        per_org.values().all(|&n| n == 1),
        "round-robin: one job from each of 100 organizations"
    );
    assert_eq!(
        locked, 100,
        "a claim locks the rows it claims and no others"
    );
}

/// Lanes within the fair claim: every organization's `high` jobs first, round-robin across
/// organizations within each lane, and no organization past its budget whatever its lane.
#[tokio::test]
async fn the_fair_claim_goes_lane_by_lane_and_keeps_each_budget() {
    let db = TestDb::new().await;
    let client = db.client().await;
    clear_of_minute_end(&client).await;
    let (a, b, c) = (new_org(), new_org(), new_org());
    // a and c: normal jobs; b: older low jobs, and three high ones posted last
    add_jobs(&client, b, 20, 30.0).await;
    add_jobs(&client, a, 20, 20.0).await;
    add_jobs(&client, c, 20, 20.0).await;
    add_jobs(&client, b, 3, 0.0).await;
    client
        .batch_execute(&format!(
            "UPDATE job_queue SET priority = 'low' WHERE organization_id = '{b}';
             UPDATE job_queue SET priority = 'high' WHERE id IN (
                 SELECT id FROM job_queue WHERE organization_id = '{b}'
                 ORDER BY next_attempt_at DESC LIMIT 3)"
        ))
        .await
        .unwrap();
    let store = limited_store(&db, 6).await;
    // (organization, lane) of each job one claim of `batch` took, in the claim's answer's
    // order (the order the worker calls the providers in)
    let claim = |batch: u32| {
        let (store, client) = (&store, &client);
        async move {
            let claimed = store
                .claim(Claim {
                    batch_size: batch,
                    now: None,
                })
                .await
                .unwrap();
            let ids: Vec<Uuid> = claimed.iter().map(|j| j.id).collect();
            let rows = client
                .query(
                    "SELECT id, organization_id, priority::text FROM job_queue WHERE id = ANY($1)",
                    &[&ids],
                )
                .await
                .unwrap();
            let lanes: HashMap<Uuid, (Uuid, String)> = rows
                .iter()
                .map(|r| (r.get(0), (r.get(1), r.get(2))))
                .collect();
            ids.iter()
                .map(|id| lanes[id].clone())
                .collect::<Vec<(Uuid, String)>>()
        }
    };
    let got = claim(11).await;
    let count = |org: Uuid, lane: &str| got.iter().filter(|(o, l)| *o == org && l == lane).count();
    assert_eq!(count(b, "high"), 3, "b's high jobs first: {got:?}");
    assert_eq!(
        count(b, "low"),
        0,
        "no low job while normal ones wait: {got:?}"
    );
    // the eight places left, shared by a and c round-robin (each within its 6 a minute)
    assert_eq!((count(a, "normal"), count(c, "normal")), (4, 4), "{got:?}");
    // and the answer in that order: the high jobs, then a's and c's in turns
    let lanes: Vec<&str> = got.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(lanes[..3], ["high"; 3], "{got:?}");
    for turn in got[3..].chunks(2) {
        let orgs: HashSet<Uuid> = turn.iter().map(|(o, _)| *o).collect();
        assert_eq!(orgs, HashSet::from([a, c]), "a and c in turns: {got:?}");
    }

    // the next claims: a and c reach their budget of 6; b's low jobs fill the rest, within
    // b's budget (3 high already taken, 3 left)
    let got = claim(50).await;
    let count = |org: Uuid, lane: &str| got.iter().filter(|(o, l)| *o == org && l == lane).count();
    assert_eq!(
        (count(a, "normal"), count(c, "normal"), count(b, "low")),
        (2, 2, 3),
        "every organization within its budget: {got:?}"
    );
}
