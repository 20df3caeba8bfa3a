//! Cancel, requeue and listing through the ingest handler, against a real PostgreSQL.

use std::collections::HashSet;
use std::sync::Arc;

use integration_tests::TestDb;
use integration_tests::apigw::{ApiRequest, Version, header, new_org, parts};
use integration_tests::factory::Job;
use lambda_http::http::StatusCode;
use notify_core::domain::JobStatus;
use serde_json::{Value, json};
// every answer checked against the API contract (functions/ingest/openapi.yaml)
use integration_tests::contract::Ingest;
use notify_api::IngestConfig;
use notify_core::store::{Claim, Complete, Decision, JobStore};
use uuid::Uuid;

async fn service(db: &TestDb) -> Ingest {
    Ingest::new(Arc::new(db.store().await), IngestConfig::default())
}

fn sms(n: usize) -> Value {
    json!({"channel": "sms", "to": "+15555550100", "message": format!("message {n}")})
}

async fn create(ingest: &Ingest, org: Uuid, n: usize) -> String {
    let (status, body) = parts(
        &ingest
            .handle(ApiRequest::post(Version::V2, &sms(n)).org(org).build())
            .await,
    );
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// A job of `org` in the given status, as the factory inserts it.
async fn job_in(db: &TestDb, org: Uuid, status: &str) -> String {
    let status = JobStatus::parse(status).expect("a job status");
    Job::new()
        .org(org)
        .status(status)
        .insert(&db.client().await)
        .await
        .to_string()
}

fn post(version: Version, id: &str, action: &str, org: Uuid) -> ApiRequest {
    ApiRequest::new(version, "POST", &format!("/notifications/{id}/{action}")).org(org)
}

#[tokio::test]
async fn cancel_and_requeue_allow_exactly_their_transitions() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    // (status before, action, expected HTTP status, status after)
    let cases = [
        ("pending", "cancel", StatusCode::OK, "cancelled"),
        ("failed", "cancel", StatusCode::OK, "cancelled"),
        ("processing", "cancel", StatusCode::CONFLICT, "processing"),
        ("sent", "cancel", StatusCode::CONFLICT, "sent"),
        ("dead", "cancel", StatusCode::CONFLICT, "dead"),
        ("cancelled", "cancel", StatusCode::CONFLICT, "cancelled"),
        ("dead", "requeue", StatusCode::OK, "pending"),
        ("pending", "requeue", StatusCode::CONFLICT, "pending"),
        ("failed", "requeue", StatusCode::CONFLICT, "failed"),
        ("processing", "requeue", StatusCode::CONFLICT, "processing"),
        ("sent", "requeue", StatusCode::CONFLICT, "sent"),
        ("cancelled", "requeue", StatusCode::CONFLICT, "cancelled"),
    ];
    for (i, (before, action, expected, after)) in cases.into_iter().enumerate() {
        let id = job_in(&db, org, before).await;
        let version = if i % 2 == 0 { Version::V2 } else { Version::V1 };
        let (status, body) = parts(&ingest.handle(post(version, &id, action, org).build()).await);
        assert_eq!(status, expected, "{action} a {before} job: {body}");
        if status == StatusCode::CONFLICT {
            assert_eq!(body["error"]["code"], "invalid_transition");
        } else {
            assert_eq!(body["status"], after);
        }
        let (_, job) = parts(
            &ingest
                .handle(ApiRequest::get(version, &id).org(org).build())
                .await,
        );
        assert_eq!(job["status"], after, "{action} a {before} job");
    }
    // another organization's job, an unknown id, a malformed id, a wrong method
    let id = create(&ingest, org, 99).await;
    let (status, _) = parts(
        &ingest
            .handle(post(Version::V2, &id, "cancel", new_org()).build())
            .await,
    );
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = parts(
        &ingest
            .handle(post(Version::V2, &Uuid::new_v4().to_string(), "requeue", org).build())
            .await,
    );
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = parts(
        &ingest
            .handle(post(Version::V2, "nope", "cancel", org).build())
            .await,
    );
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let response = ingest
        .handle(
            ApiRequest::new(Version::V2, "GET", &format!("/notifications/{id}/cancel"))
                .org(org)
                .build(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(header(&response, "allow"), Some("POST"));
}

#[tokio::test]
async fn a_cancelled_job_is_never_claimed_and_a_requeued_one_keeps_its_history() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let store = db.store().await;
    let org = new_org();
    let cancelled = create(&ingest, org, 1).await;
    let (status, _) = parts(
        &ingest
            .handle(post(Version::V2, &cancelled, "cancel", org).build())
            .await,
    );
    assert_eq!(status, StatusCode::OK);

    let dying = create(&ingest, org, 2).await;
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "only the job not cancelled is claimed");
    assert_eq!(claimed[0].id.to_string(), dying);
    let dead = integration_tests::completion(&claimed[0], Decision::Dead, None);
    store
        .complete(Complete {
            completions: &[dead],
            now: None,
        })
        .await
        .unwrap();

    let (status, body) = parts(
        &ingest
            .handle(post(Version::V1, &dying, "requeue", org).build())
            .await,
    );
    assert_eq!(status, StatusCode::OK, "{body}");
    let again = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 2, "attempt numbers keep counting");
    assert_eq!(
        again[0].max_attempts, 6,
        "a fresh budget of 5 on top of the 1 used"
    );
    let sent = integration_tests::completion(&again[0], Decision::Sent, Some("m-2"));
    store
        .complete(Complete {
            completions: &[sent],
            now: None,
        })
        .await
        .unwrap();
    let (_, job) = parts(
        &ingest
            .handle(ApiRequest::get(Version::V2, &dying).org(org).build())
            .await,
    );
    assert_eq!(job["status"], "sent");
    let outcomes: Vec<&str> = job["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["dead", "sent"], "the history is kept");
}

/// A requeued job goes back to its own lane: requeue.sql and requeue_dead.sql copy the
/// request's priority into the queue row they make.
#[tokio::test]
async fn a_requeued_job_keeps_its_priority() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let store = db.store().await;
    let client = db.client().await;
    let org = new_org();
    let mut ids = Vec::new();
    for priority in ["high", "low"] {
        let mut body = sms(ids.len());
        body["priority"] = json!(priority);
        let (status, created) = parts(
            &ingest
                .handle(ApiRequest::post(Version::V2, &body).org(org).build())
                .await,
        );
        assert_eq!(status, StatusCode::ACCEPTED, "{created}");
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let dead: Vec<_> = claimed
        .iter()
        .map(|job| integration_tests::completion(job, Decision::Dead, None))
        .collect();
    store
        .complete(Complete {
            completions: &dead,
            now: None,
        })
        .await
        .unwrap();

    // the high one alone, then the low one with every other dead job
    let (status, body) = parts(
        &ingest
            .handle(post(Version::V2, &ids[0], "requeue", org).build())
            .await,
    );
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = parts(
        &ingest
            .handle(requeue_dead(org, json!({"status": "dead"})).build())
            .await,
    );
    assert_eq!((status, &body), (StatusCode::OK, &json!({"requeued": 1})));
    for (id, priority) in ids.iter().zip(["high", "low"]) {
        let queued: String = client
            .query_one(
                "SELECT priority::text FROM job_queue WHERE id = $1::text::uuid",
                &[id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(queued, priority, "the queue row of {id}");
        let (_, job) = parts(
            &ingest
                .handle(ApiRequest::get(Version::V1, id).org(org).build())
                .await,
        );
        assert_eq!(
            (job["status"].as_str(), job["priority"].as_str()),
            (Some("pending"), Some(priority))
        );
    }
}

/// Cancels racing claims: every job ends either cancelled (and never claimed) or claimed
/// (and the cancel refused), never both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cancel_and_claim_never_both_win() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let org = new_org();
    let ids = Job::new().org(org).insert_many(&client, 400).await;
    let claimer = db.store().await;
    let claims = tokio::spawn(async move {
        let mut claimed = HashSet::new();
        loop {
            let batch = claimer
                .claim(Claim {
                    batch_size: 7,
                    now: None,
                })
                .await
                .unwrap();
            if batch.is_empty() {
                return claimed;
            }
            claimed.extend(batch.into_iter().map(|j| j.id));
        }
    });
    let canceller = db.store().await;
    let cancels = tokio::spawn(async move {
        let mut cancelled = HashSet::new();
        for id in ids.into_iter().rev() {
            if let notify_core::store::Transition::Done(_) =
                canceller.cancel(org, id).await.unwrap()
            {
                cancelled.insert(id);
            }
        }
        cancelled
    });
    let (claimed, cancelled) = (claims.await.unwrap(), cancels.await.unwrap());
    assert!(
        claimed.is_disjoint(&cancelled),
        "no job both claimed and cancelled"
    );
    assert_eq!(
        claimed.len() + cancelled.len(),
        400,
        "every job went one way"
    );
    assert!(
        !claimed.is_empty() && !cancelled.is_empty(),
        "the two really raced"
    );
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'cancelled'),
                    count(*) FILTER (WHERE status = 'processing')
             FROM job_states",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0) as usize, row.get::<_, i64>(1) as usize),
        (cancelled.len(), claimed.len())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_pages_through_every_job_once_while_new_ones_arrive() {
    let db = TestDb::new().await;
    let ingest = Arc::new(service(&db).await);
    let org = new_org();
    let client = db.client().await;
    let existing: HashSet<String> = Job::new()
        .org(org)
        .created_ago(60.0)
        .insert_many(&client, 1_000)
        .await
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    // another tenant's jobs never show
    let other = new_org();
    let others_job = create(&ingest, other, 0).await;

    // new jobs keep arriving while we page
    let writer = {
        let ingest = ingest.clone();
        tokio::spawn(async move {
            for n in 0..100 {
                create(&ingest, org, n).await;
            }
        })
    };
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut path = "/notifications?limit=37".to_owned();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let response = ingest
            .handle(ApiRequest::new(Version::V2, "GET", &path).org(org).build())
            .await;
        let (status, page) = parts(&response);
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        for item in page["items"].as_array().unwrap() {
            seen.push(item["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages < 100, "paging ends");
    }
    writer.await.unwrap();
    let unique: HashSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no job listed twice");
    assert!(existing.is_subset(&unique), "no existing job missed");
    assert!(
        !unique.contains(&others_job),
        "another organization's job is never listed"
    );
    assert!(pages >= 28, "1,000 jobs in pages of 37");

    // a status filter, and bad parameters
    let (status, page) = parts(
        &ingest
            .handle(
                ApiRequest::new(Version::V1, "GET", "/notifications?status=dead")
                    .org(org)
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["items"].as_array().unwrap().len(), 0);
    let (status, err) = parts(
        &ingest
            .handle(
                ApiRequest::new(Version::V2, "GET", "/notifications?status=lost&limit=9999")
                    .org(org)
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["error"]["fields"].as_array().unwrap().len(), 2);
}

/// Shared buffers (hit + read) the plan of one listing page (list_jobs.sql: its ids and days)
/// touched.
async fn buffers_for_listing(db: &TestDb, org: Uuid, status: &str) -> (i64, usize) {
    let client = db.client().await;
    let list = &notify_postgres::sql::LIST_JOBS;
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}", list.sql);
    let none_time: Option<chrono::DateTime<chrono::Utc>> = None;
    let none_id: Option<Uuid> = None;
    let rows = client
        .query_typed(
            &explain,
            &[
                (&org, list.params[0].clone()),
                (&status, list.params[1].clone()),
                (&none_time, list.params[2].clone()),
                (&none_id, list.params[3].clone()),
                (&50_i64, list.params[4].clone()),
            ],
        )
        .await
        .unwrap();
    let plan: Value = rows[0].get(0);
    let top = &plan[0]["Plan"];
    let buffers =
        top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap();
    (buffers, top["Actual Rows"].as_u64().unwrap() as usize)
}

#[tokio::test]
async fn a_status_filtered_page_reads_the_status_index_not_every_job() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let org = new_org();
    Job::new()
        .org(org)
        .status(JobStatus::Sent)
        .insert_many(&client, 300_000)
        .await;
    Job::new()
        .org(org)
        .status(JobStatus::Dead)
        .insert_many(&client, 60)
        .await;
    client
        .batch_execute("VACUUM ANALYZE job_requests, job_outcomes")
        .await
        .unwrap();

    let (buffers, rows) = buffers_for_listing(&db, org, "dead").await;
    let table_pages = integration_tests::count(
        &client,
        "SELECT sum(pg_relation_size(relid))::bigint / 8192 FROM pg_partition_tree('job_requests')",
    )
    .await;
    eprintln!(
        "a page of 50 dead jobs among 300,000 sent: {buffers} shared buffers \
         (the job records alone: {table_pages} pages)"
    );
    assert_eq!(rows, 50);
    // the page (its ids and days) is found in the outcome rows' status index, about a page
    // of index and heap; jobs_within.sql then reads each listed job in its day (sweeper.rs
    // checks that plan)
    assert!(
        buffers < 15 * rows as i64 && buffers * 5 < table_pages,
        "a filtered page reads about a page of index and heap, not the organization's 300k jobs: {buffers} buffers"
    );
}

fn requeue_dead(org: Uuid, body: Value) -> ApiRequest {
    ApiRequest::new(Version::V2, "POST", "/notifications/requeue")
        .org(org)
        .body(body.to_string())
}

/// An outage's dead jobs back in the queue in one call: the organization's own, those that
/// died in the window with the error named, at most `limit`; the rest untouched.
#[tokio::test]
async fn a_bulk_requeue_puts_back_only_the_dead_jobs_its_filter_names() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let client = db.client().await;
    let (org, other) = (new_org(), new_org());
    let dead = |org: Uuid, error: &str, died_ago: f64| {
        Job::new()
            .org(org)
            .status(JobStatus::Dead)
            .attempts(5)
            .last_error(error)
            .updated_ago(died_ago)
    };
    // the outage: four throttled jobs that died 10 to 40 minutes ago
    let outage = dead(org, "Throttling: Rate exceeded", 600.0)
        .insert_many(&client, 4)
        .await;
    let earlier = dead(org, "Throttling: Rate exceeded", 7200.0)
        .insert(&client)
        .await;
    let invalid = dead(org, "InvalidParameter: bad number", 600.0)
        .insert(&client)
        .await;
    let others = dead(other, "Throttling: Rate exceeded", 600.0)
        .insert(&client)
        .await;
    let sent = Job::new()
        .org(org)
        .status(JobStatus::Sent)
        .insert(&client)
        .await;
    let since = (chrono::Utc::now() - chrono::TimeDelta::minutes(30)).to_rfc3339();
    let filter = json!({"status": "dead", "since": since, "error_code": "Throttling", "limit": 3});
    let (status, body) = parts(
        &ingest
            .handle(requeue_dead(org, filter.clone()).build())
            .await,
    );
    assert_eq!((status, &body), (StatusCode::OK, &json!({"requeued": 3})));
    let (_, body) = parts(&ingest.handle(requeue_dead(org, filter).build()).await);
    assert_eq!(
        body,
        json!({"requeued": 1}),
        "the limit leaves the rest to the next call"
    );
    let status_of = |id: Uuid| {
        let client = &client;
        async move {
            client
                .query_one("SELECT status::text FROM job_states WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    for id in &outage {
        assert_eq!(status_of(*id).await, "pending");
    }
    for (id, why) in [
        (earlier, "died before since"),
        (invalid, "another error"),
        (others, "another organization's"),
    ] {
        assert_eq!(status_of(id).await, "dead", "{why}");
    }
    assert_eq!(status_of(sent).await, "sent");
    // requeued as one requeue does: a fresh budget on top of the attempts used, due now
    let claimed = db
        .store()
        .await
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    let ids: HashSet<Uuid> = claimed.iter().map(|j| j.id).collect();
    assert_eq!(ids, outage.iter().copied().collect());
    assert!(
        claimed
            .iter()
            .all(|j| j.attempt == 6 && j.max_attempts == 10)
    );
}

#[tokio::test]
async fn a_bulk_requeue_of_anything_but_dead_jobs_is_refused_and_changes_nothing() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let id = Job::new()
        .org(org)
        .status(JobStatus::Dead)
        .insert(&db.client().await)
        .await;
    for body in [
        json!({}),
        json!({"status": "failed"}),
        json!({"status": "dead", "limit": 1001}),
        json!({"status": "dead", "since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"}),
        json!({"status": "dead", "ids": [id]}),
    ] {
        let (status, answer) = parts(&ingest.handle(requeue_dead(org, body.clone()).build()).await);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "validation_failed", "{body}");
    }
    let job = JobStore::get(&db.store().await, org, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.status, JobStatus::Dead);
    let response = ingest
        .handle(
            ApiRequest::new(Version::V2, "GET", "/notifications/requeue")
                .org(org)
                .build(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(header(&response, "allow"), Some("POST"));
}

/// `make queue`'s report: the queue by state and organization, the oldest due job, the day's
/// dead jobs by error code and the suppression lists, from the store's own statements.
#[tokio::test]
async fn the_queue_report_counts_states_organizations_dead_codes_and_suppressions() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let (busy, quiet) = (new_org(), new_org());
    Job::new()
        .org(busy)
        .due_in(-120.0)
        .insert_many(&client, 3)
        .await;
    Job::new()
        .org(busy)
        .status(JobStatus::Processing)
        .insert(&client)
        .await;
    Job::new()
        .org(busy)
        .status(JobStatus::Failed)
        .due_in(600.0)
        .insert(&client)
        .await;
    Job::new().org(quiet).due_in(3600.0).insert(&client).await;
    let dead = |error: &str| {
        Job::new()
            .org(quiet)
            .status(JobStatus::Dead)
            .last_error(error)
            .updated_ago(60.0)
    };
    dead("Throttling: Rate exceeded")
        .insert_many(&client, 2)
        .await;
    dead("InvalidParameter: bad number").insert(&client).await;
    // a death older than the window is left out
    dead("Throttling: Rate exceeded")
        .updated_ago(3.0 * 86400.0)
        .insert(&client)
        .await;
    notify_core::store::SuppressionStore::add_suppression(&store, busy, "+15555550100", None)
        .await
        .unwrap();
    let report = store
        .queue_report(None, std::time::Duration::from_secs(86400), 10)
        .await
        .unwrap();
    let d = report.depth;
    assert_eq!((d.due, d.processing, d.held, d.scheduled), (3, 1, 1, 1));
    assert!((119.0..=125.0).contains(&d.backlog_age_secs), "{d:?}");
    let orgs: Vec<(Uuid, u64, u64, u64, u64)> = report
        .organizations
        .iter()
        .map(|o| (o.organization_id, o.due, o.processing, o.held, o.scheduled))
        .collect();
    assert_eq!(orgs, [(busy, 3, 1, 1, 0), (quiet, 0, 0, 0, 1)]);
    assert!(report.organizations[0].oldest_due.is_some());
    let dead: Vec<(&str, u64)> = report
        .dead
        .iter()
        .map(|d| (d.error_code.as_str(), d.jobs))
        .collect();
    assert_eq!(dead, [("Throttling", 2), ("InvalidParameter", 1)]);
    assert_eq!(report.suppressions, [("manual".to_owned(), 1)]);
    let text = report.to_string();
    for line in [
        "due 3  processing 1  held 1  scheduled 1",
        &busy.to_string(),
        "Throttling",
        "manual",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
}
