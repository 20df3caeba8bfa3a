//! Provider feedback end to end: the worker delivers through the real SDKs to the local
//! stand-in, then the `feedback` handler receives events in the shapes AWS documents (SES
//! event records inside SNS records, SNS SMS delivery-status lines inside a gzip+base64
//! CloudWatch Logs event) naming the message ids the worker recorded.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use integration_tests::stand_in::{self, Recipients, insert_jobs};
use integration_tests::{TestDb, completion};
use notify_core::delivery::DeliveryConfig;
use notify_core::domain::Channel;
use notify_core::feedback::{self, events};
use notify_core::store::{
    At, Claim, Complete, Decision, FeedbackStore, JobStore, RecordFeedback, SuppressionStore,
};
use notify_core::sweeper::{self, SweeperConfig};
use notify_core::worker::{self, WorkerConfig};
use notify_delivery::aws_deliverer;
use notify_postgres::PgStore;
use serde_json::{Value, json};
use tokio_postgres::Client;
use uuid::Uuid;

const EMAIL_FROM: &str = "noreply@notify-tests.example.com";

/// A job the worker delivered: its organization, recipient and provider message id.
#[derive(Debug, Clone)]
struct Sent {
    id: Uuid,
    org: Uuid,
    to: String,
    message_id: String,
}

/// The real worker, with the real SDK clients, against the stand-in.
async fn run_worker(store: &PgStore) -> worker::WorkerSummary {
    stand_in::verify_sender(EMAIL_FROM).await;
    let deliverer = aws_deliverer(&DeliveryConfig::new(EMAIL_FROM)).await;
    let config = WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM));
    let deadline = Instant::now() + Duration::from_secs(120);
    worker::run(store, &deliverer, &config, deadline)
        .await
        .unwrap()
}

/// Inserts the jobs and runs the real worker over them against the stand-in.
async fn deliver(db: &TestDb, store: &PgStore, jobs: &[(Channel, Value)]) -> Vec<Sent> {
    let client = db.client().await;
    let ids = insert_jobs(&client, jobs, 5).await;
    run_worker(store).await;
    let mut sent = Vec::new();
    for (id, payload) in ids {
        let row = client
            .query_one(
                "SELECT j.organization_id, d.provider_message_id
                 FROM job_states j JOIN job_attempt_history d ON d.job_id = j.id
                 WHERE j.id = $1 AND j.status = 'sent'",
                &[&id],
            )
            .await
            .unwrap_or_else(|e| panic!("job {id} was sent with a message id: {e}"));
        sent.push(Sent {
            id,
            org: row.get(0),
            to: payload["to"].as_str().unwrap().to_owned(),
            message_id: row.get(1),
        });
    }
    sent
}

fn fixture(name: &str) -> String {
    let path = format!("{}/fixtures/feedback/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// An SES fixture (an SNS event) naming `message_id`.
fn ses_event(name: &str, message_id: &str) -> Value {
    serde_json::from_str(&fixture(name).replace("MESSAGE_ID", message_id)).unwrap()
}

/// An SMS delivery-status fixture naming `message_id`, as the awslogs event Lambda receives.
fn sms_event(name: &str, message_id: &str) -> Value {
    let decoded: Value =
        serde_json::from_str(&fixture(name).replace("MESSAGE_ID", message_id)).unwrap();
    events::encode_awslogs(&decoded)
}

async fn status(client: &Client, id: Uuid) -> String {
    client
        .query_one(
            "SELECT status::text, coalesce(last_error, '') FROM job_states WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

async fn suppressed(store: &PgStore, sent: &Sent) -> bool {
    let recipient = sent.to.to_lowercase();
    store
        .list_suppressions(sent.org, None, 1000)
        .await
        .unwrap()
        .iter()
        .any(|s| s.recipient == recipient)
}

fn emails(recipients: &Recipients, n: usize) -> Vec<(Channel, Value)> {
    (0..n)
        .map(|i| {
            // as ingest stores `to`: normalised, the suppression list's key
            let to = recipients.email().to_lowercase();
            (
                Channel::Email,
                json!({"to": to, "subject": format!("s{i}"), "text": "t"}),
            )
        })
        .collect()
}

#[tokio::test]
async fn ses_delivery_bounce_and_complaint_change_status_and_suppress() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let sent = deliver(&db, &store, &emails(&Recipients::new(), 3)).await;
    let (delivered, bounced, complained) = (&sent[0], &sent[1], &sent[2]);

    let mut summaries = Vec::new();
    for (job, name) in [
        (delivered, "ses-delivery.json"),
        (bounced, "ses-bounce-permanent.json"),
        (complained, "ses-complaint.json"),
    ] {
        summaries.push(
            feedback::handle(&store, &ses_event(name, &job.message_id))
                .await
                .unwrap(),
        );
    }
    assert!(
        summaries
            .iter()
            .all(|s| s.events == 1 && s.malformed == 0 && s.report.applied == 1)
    );
    assert_eq!(status(&client, delivered.id).await, "delivered");
    assert_eq!(status(&client, bounced.id).await, "bounced");
    assert_eq!(
        status(&client, complained.id).await,
        "sent",
        "a complaint changes no status"
    );

    // the recipients that bounced or complained are suppressed for their organization only
    assert!(!suppressed(&store, delivered).await);
    assert!(suppressed(&store, bounced).await);
    assert!(suppressed(&store, complained).await);
    let elsewhere = Sent {
        org: Uuid::new_v4(),
        ..bounced.clone()
    };
    assert!(!suppressed(&store, &elsewhere).await);

    // GET shows the feedback on the attempt
    let view = store.get(bounced.org, bounced.id).await.unwrap().unwrap();
    let attempt = &view.deliveries.unwrap()[0];
    assert_eq!(attempt.feedback.len(), 1);
    assert_eq!(attempt.feedback[0].kind, "bounce");
    assert_eq!(
        attempt.feedback[0].subtype.as_deref(),
        Some("Permanent/General")
    );
    assert!(
        attempt.feedback[0]
            .diagnostic
            .as_deref()
            .unwrap()
            .contains("550")
    );

    // the same event again changes nothing; a late Delivery does not undo the bounce
    let again = feedback::handle(
        &store,
        &ses_event("ses-bounce-permanent.json", &bounced.message_id),
    )
    .await
    .unwrap();
    assert_eq!(again.report.duplicates, 1);
    assert!(again.report.recorded.is_empty());
    assert_eq!(again.report.applied, 0);
    feedback::handle(&store, &ses_event("ses-delivery.json", &bounced.message_id))
        .await
        .unwrap();
    assert_eq!(status(&client, bounced.id).await, "bounced");
    let rows = integration_tests::count(
        &client,
        &format!(
            "SELECT count(*) FROM delivery_feedback WHERE job_id = '{}'",
            bounced.id
        ),
    )
    .await;
    assert_eq!(rows, 2, "the bounce once, and the late delivery recorded");
}

/// A send to an address on SES's account-level suppression list comes back as a permanent
/// bounce (subtype `OnAccountSuppressionList`): the job is bounced and the recipient
/// suppressed, but SES leaves it out of its bounce rate, and so does the `Bounces` metric.
#[tokio::test]
async fn a_bounce_from_the_accounts_suppression_list_is_not_in_the_bounce_rate() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let sent = deliver(&db, &store, &emails(&Recipients::new(), 2)).await;
    let general = ses_event("ses-bounce-permanent.json", &sent[0].message_id);
    let on_list: Value = serde_json::from_str(
        &fixture("ses-bounce-permanent.json")
            .replace("MESSAGE_ID", &sent[1].message_id)
            .replace(
                r#"\"bounceSubType\":\"General\""#,
                r#"\"bounceSubType\":\"OnAccountSuppressionList\""#,
            ),
    )
    .unwrap();
    assert_ne!(
        on_list,
        ses_event("ses-bounce-permanent.json", &sent[1].message_id)
    );
    let mut records = general["Records"].as_array().unwrap().clone();
    records.extend(on_list["Records"].as_array().unwrap().iter().cloned());
    let summary = feedback::handle(&store, &json!({ "Records": records }))
        .await
        .unwrap();
    assert_eq!(summary.report.recorded["email"]["bounce"], 2);
    assert_eq!(summary.report.account_suppressed_bounces, 1);
    for job in &sent {
        assert_eq!(status(&client, job.id).await, "bounced");
        assert!(suppressed(&store, job).await);
    }
    let line: Value = serde_json::from_str(&feedback::metrics_line(&summary, 1)).unwrap();
    assert_eq!(line["Bounces"], 1, "{line}");
}

#[tokio::test]
async fn sms_delivery_status_logs_deliver_or_bounce_and_suppress_opted_out_numbers() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let recipients = Recipients::new();
    let jobs: Vec<_> = (0..3)
        .map(|i| {
            (
                Channel::Sms,
                json!({"to": recipients.phone(), "message": format!("code {i}")}),
            )
        })
        .collect();
    let sent = deliver(&db, &store, &jobs).await;

    let ok = feedback::handle(
        &store,
        &sms_event("sns-sms-success.json", &sent[0].message_id),
    )
    .await
    .unwrap();
    // the fixture as documented: "Unknown error attempting to reach phone"
    let unreachable = feedback::handle(
        &store,
        &sms_event("sns-sms-failure.json", &sent[1].message_id),
    )
    .await
    .unwrap();
    let opted_out_event = sms_event_with_response(
        "sns-sms-failure.json",
        &sent[2].message_id,
        "This phone number is opted out",
    );
    let opted_out = feedback::handle(&store, &opted_out_event).await.unwrap();
    for summary in [&ok, &unreachable, &opted_out] {
        assert_eq!(
            (summary.events, summary.report.applied),
            (1, 1),
            "{summary:?}"
        );
    }
    assert_eq!(status(&client, sent[0].id).await, "delivered");
    assert_eq!(status(&client, sent[1].id).await, "bounced");
    assert_eq!(status(&client, sent[2].id).await, "bounced");
    assert!(!suppressed(&store, &sent[0]).await);
    assert!(
        !suppressed(&store, &sent[1]).await,
        "a failure to reach the phone may pass"
    );
    assert!(
        suppressed(&store, &sent[2]).await,
        "an opted-out number is suppressed"
    );
}

/// The SMS fixture with another provider response in its status line.
fn sms_event_with_response(name: &str, message_id: &str, response: &str) -> Value {
    let mut decoded: Value =
        serde_json::from_str(&fixture(name).replace("MESSAGE_ID", message_id)).unwrap();
    let line = decoded["logEvents"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut status: Value = serde_json::from_str(&line).unwrap();
    status["delivery"]["providerResponse"] = json!(response);
    decoded["logEvents"][0]["message"] = json!(status.to_string());
    events::encode_awslogs(&decoded)
}

#[tokio::test]
async fn an_event_before_its_attempt_waits_and_an_unknown_one_is_dropped_later() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let early_id = format!("early-{}", Uuid::new_v4());
    let unknown_id = format!("unknown-{}", Uuid::new_v4());
    for id in [&early_id, &unknown_id] {
        let summary = feedback::handle(&store, &ses_event("ses-delivery.json", id))
            .await
            .unwrap();
        assert_eq!(
            (summary.events, summary.report.applied),
            (1, 0),
            "kept, not applied"
        );
    }

    // the worker records the attempt after the event arrived
    integration_tests::factory::Job::new()
        .email()
        .insert(&client)
        .await;
    let job = store
        .claim(Claim {
            batch_size: 1,
            now: None,
        })
        .await
        .unwrap()
        .remove(0);
    store
        .complete(Complete {
            completions: &[completion(&job, Decision::Sent, Some(&early_id))],
            now: None,
        })
        .await
        .unwrap();
    let config = SweeperConfig::new(600, 120, 100).unwrap();
    let swept = sweeper::run_once(&store, &config, At::SERVER)
        .await
        .unwrap();
    assert_eq!(swept.feedback_applied, 1);
    assert_eq!(
        swept.feedback_dropped, 0,
        "the unknown one is still inside its window"
    );
    assert_eq!(status(&client, job.id).await, "delivered");

    // past the window the unknown one is dropped and counted
    let later = Some(chrono::Utc::now() + chrono::Duration::hours(2));
    let swept = sweeper::run_once(&store, &config, At { now: later })
        .await
        .unwrap();
    assert_eq!(swept.feedback_dropped, 1);
    let left = integration_tests::count(&client, "SELECT count(*) FROM delivery_feedback").await;
    assert_eq!(left, 1, "only the applied event is kept");
}

#[tokio::test]
async fn a_malformed_record_is_counted_and_the_good_ones_in_its_batch_apply() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let sent = deliver(&db, &store, &emails(&Recipients::new(), 2)).await;
    let record = |job: &Sent| ses_event("ses-delivery.json", &job.message_id)["Records"][0].clone();
    let mut broken = record(&sent[0]);
    broken["Sns"]["Message"] = json!("{\"eventType\": \"Delivery\", \"mail\": 7}");
    let batch = json!({"Records": [record(&sent[0]), broken, record(&sent[1])]});

    let summary = feedback::handle(&store, &batch).await.unwrap();
    assert_eq!((summary.events, summary.malformed), (2, 1));
    assert_eq!(summary.report.applied, 2);
    assert_eq!(status(&client, sent[0].id).await, "delivered");
    assert_eq!(status(&client, sent[1].id).await, "delivered");
}

#[tokio::test]
async fn a_queued_job_to_a_newly_suppressed_recipient_dies_without_a_provider_call() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let recipients = Recipients::new();
    let to = recipients.email();
    let ids = insert_jobs(
        &client,
        &[(
            Channel::Email,
            // as ingest stores it (normalised: tests/it/suppressions.rs shows that)
            json!({"to": to.to_lowercase(), "subject": "s", "text": "t"}),
        )],
        5,
    )
    .await;
    let (id, _) = ids[0].clone();
    let org: Uuid = client
        .query_one(
            "SELECT organization_id FROM job_requests WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    store
        .add_suppression(org, &to.to_lowercase(), Some("test"))
        .await
        .unwrap();

    let summary = run_worker(&store).await;
    assert_eq!(summary.dead, 1);
    let row = client
        .query_one(
            "SELECT status::text, last_error FROM job_states WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "dead");
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some("suppressed")
    );
    let received = stand_in::received().await;
    let calls: HashMap<&str, usize> = received
        .email
        .iter()
        .flat_map(|m| m.to.iter())
        .filter(|t| t.eq_ignore_ascii_case(&to))
        .fold(HashMap::new(), |mut m, t| {
            *m.entry(t.as_str()).or_default() += 1;
            m
        });
    assert!(calls.is_empty(), "the provider was never called: {calls:?}");
}

/// The feedback function matches its events among the jobs accepted in the days around them
/// (`feedback::jobs_window`, three days back): an event naming a job accepted two days before
/// it applies at once; one naming a job accepted five days before waits, and the sweeper's
/// next run, which searches every day kept, applies it.
#[tokio::test]
async fn an_event_for_a_job_older_than_its_window_is_applied_by_the_sweepers_pass() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let mut jobs = Vec::new();
    for days in [2.0, 5.0] {
        let id = integration_tests::factory::Job::new()
            .email()
            .created_ago(days * 86_400.0)
            .insert(&client)
            .await;
        let job = store
            .claim(Claim {
                batch_size: 1,
                now: None,
            })
            .await
            .unwrap()
            .remove(0);
        assert_eq!(job.id, id);
        let message_id = format!("m-{id}");
        store
            .complete(Complete {
                completions: &[completion(&job, Decision::Sent, Some(&message_id))],
                now: None,
            })
            .await
            .unwrap();
        jobs.push((id, message_id));
    }
    let event = |message_id: &str| feedback::FeedbackEvent {
        channel: Channel::Email,
        provider_message_id: message_id.to_owned(),
        key: format!("delivery:{message_id}"),
        kind: feedback::FeedbackKind::Delivery,
        subtype: None,
        diagnostic: None,
        occurred_at: chrono::Utc::now(),
        raw: json!({}),
    };
    let events: Vec<_> = jobs.iter().map(|(_, m)| event(m)).collect();
    let report = store
        .record_feedback(RecordFeedback {
            events: &events,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(
        report.applied, 1,
        "only the job inside the window: {report:?}"
    );
    assert_eq!(status(&client, jobs[0].0).await, "delivered");
    assert_eq!(status(&client, jobs[1].0).await, "sent", "waits");

    let config = SweeperConfig::new(600, 120, 100).unwrap();
    let swept = sweeper::run_once(&store, &config, At::SERVER)
        .await
        .unwrap();
    assert_eq!(swept.feedback_applied, 1);
    assert_eq!(status(&client, jobs[1].0).await, "delivered");
}

/// A job's history is kept RETENTION_DAYS after the job ended, not after the day it was
/// accepted: a job accepted today and sent a month later (a scheduled send) keeps its outcome
/// and message id, so the bounce that comes two days after the send finds it: the job ends
/// `bounced`, the recipient is suppressed, and `GET` finds the job. Its day goes
/// RETENTION_DAYS after the send.
#[tokio::test]
async fn a_job_sent_a_month_after_it_was_accepted_can_still_bounce_days_later() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let now = chrono::Utc::now();
    let at = |days: i64| Some(now + chrono::Duration::days(days));
    let id = integration_tests::factory::Job::new()
        .email()
        .due_in(30.0 * 86_400.0 - 60.0)
        .insert(&client)
        .await;
    let row = client
        .query_one(
            "SELECT organization_id, payload ->> 'to', (created_at AT TIME ZONE 'UTC')::date
             FROM job_requests WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let (org, to): (Uuid, String) = (row.get(0), row.get(1));
    // the job's day, as the database's clock made it
    let today = row.get::<_, chrono::NaiveDate>(2).to_string();
    let mut config = SweeperConfig::new(600, 120, 1_000).unwrap();
    config.retention_days = 30;
    // the sweeper runs every day; the job is due on day 30 and sent then
    for day in [1, 15, 29] {
        sweeper::run_once(&store, &config, At { now: at(day) })
            .await
            .unwrap();
    }
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: at(30),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let message_id = "0100018c2f3a4b5c-late-send-000000";
    let done = notify_core::store::Completion {
        started_at: claimed[0].claimed_at,
        finished_at: claimed[0].claimed_at,
        ..completion(&claimed[0], Decision::Sent, Some(message_id))
    };
    let report = store
        .complete(Complete {
            completions: &[done],
            now: at(30),
        })
        .await
        .unwrap();
    assert_eq!(report.applied, vec![id]);
    for day in [31, 32] {
        let swept = sweeper::run_once(&store, &config, At { now: at(day) })
            .await
            .unwrap();
        assert!(
            !swept.history.dropped_days.contains(&today),
            "day {day}: the job's day is kept: {swept:?}"
        );
    }

    // the bounce, two days after the send (applied by the feedback function, or by the
    // sweeper's pass when the event's time falls outside the function's window)
    feedback::handle(&store, &ses_event("ses-bounce-permanent.json", message_id))
        .await
        .unwrap();
    sweeper::run_once(&store, &config, At { now: at(32) })
        .await
        .unwrap();
    assert_eq!(status(&client, id).await, "bounced");
    let sent = Sent {
        id,
        org,
        to,
        message_id: message_id.to_owned(),
    };
    assert!(
        suppressed(&store, &sent).await,
        "the recipient is suppressed"
    );
    let view = store
        .get(org, id)
        .await
        .unwrap()
        .expect("GET finds the job");
    assert_eq!(view.status, notify_core::domain::JobStatus::Bounced);
    assert_eq!(
        view.deliveries.unwrap()[0].provider_message_id.as_deref(),
        Some(message_id)
    );

    // RETENTION_DAYS after the send, the day goes
    let swept = sweeper::run_once(&store, &config, At { now: at(62) })
        .await
        .unwrap();
    assert!(swept.history.dropped_days.contains(&today), "{swept:?}");
    assert!(store.get(org, id).await.unwrap().is_none());
}
