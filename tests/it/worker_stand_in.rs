//! The worker with the real SNS and SES v2 adapters against the local AWS stand-in (moto's
//! server): every job delivered once, recorded with the provider's message id; the stand-in's
//! own records compared with the jobs.
//!
//! The stand-in's state is shared by every test running at once, so each test uses
//! recipients of its own ([`Recipients`]) and reads back only those.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::TestDb;
use integration_tests::stand_in::{self, Recipients, insert_jobs};
use notify_core::delivery::{DeliveryConfig, Router};
use notify_core::domain::Channel;
use notify_core::worker::{self, WorkerConfig};
use notify_delivery::aws_deliverer;
use serde_json::{Value, json};
use tokio_postgres::Client;
use uuid::Uuid;

const EMAIL_FROM: &str = "noreply@notify-tests.example.com";

async fn deliverer() -> Router {
    stand_in::verify_sender(EMAIL_FROM).await;
    aws_deliverer(&DeliveryConfig::new(EMAIL_FROM)).await
}

fn config() -> WorkerConfig {
    WorkerConfig {
        batch_size: 50,
        concurrency: 16,
        ..WorkerConfig::new(DeliveryConfig::new(EMAIL_FROM))
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(300)
}

/// `n` jobs, alternately SMS and email, the emails with text, html, both, and a reply-to.
fn mixed_jobs(recipients: &Recipients, n: usize) -> Vec<(Channel, Value)> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                (
                    Channel::Sms,
                    json!({"to": recipients.phone(), "message": format!("code {i}")}),
                )
            } else {
                let to = recipients.email();
                let payload = match (i / 2) % 3 {
                    0 => json!({"to": to, "subject": format!("s{i}"), "text": format!("t{i}")}),
                    1 => json!({"to": to, "subject": format!("s{i}"), "html": format!("<p>h{i}</p>")}),
                    _ => json!({"to": to, "subject": format!("s{i}"), "text": format!("t{i}"),
                                "html": format!("<p>h{i}</p>"), "reply_to": "help@example.com"}),
                };
                (Channel::Email, payload)
            }
        })
        .collect()
}

/// Each job's delivery rows: (provider, outcome, provider message id, error code).
async fn delivery_rows(
    client: &Client,
) -> HashMap<Uuid, Vec<(String, String, Option<String>, Option<String>)>> {
    let mut map: HashMap<Uuid, Vec<_>> = HashMap::new();
    for row in client
        .query(
            "SELECT job_id, provider, outcome, provider_message_id, error_code
             FROM job_attempt_history ORDER BY job_id, attempt",
            &[],
        )
        .await
        .unwrap()
    {
        map.entry(row.get(0))
            .or_default()
            .push((row.get(1), row.get(2), row.get(3), row.get(4)));
    }
    map
}

/// Checks that every job is sent, has exactly one delivery row carrying the provider's
/// message id, and that the stand-in received exactly one message per recipient, the job's.
async fn assert_each_delivered_once(
    client: &Client,
    recipients: &Recipients,
    jobs: &[(Uuid, Value)],
) {
    let not_sent: i64 = integration_tests::count(
        client,
        "SELECT count(*) FROM job_states WHERE status <> 'sent'",
    )
    .await;
    assert_eq!(not_sent, 0, "every job is sent");

    let rows = delivery_rows(client).await;
    assert_eq!(rows.len(), jobs.len(), "every job has delivery rows");
    let received = stand_in::received().await;
    let mut sms_by_phone: HashMap<&str, Vec<&stand_in::Sms>> = HashMap::new();
    for sms in received
        .sms
        .iter()
        .filter(|s| recipients.owns(&s.phone_number))
    {
        sms_by_phone.entry(&sms.phone_number).or_default().push(sms);
    }
    let mut email_by_to: HashMap<&str, Vec<&stand_in::Email>> = HashMap::new();
    for email in &received.email {
        for to in email.to.iter().filter(|to| recipients.owns(to)) {
            email_by_to.entry(to).or_default().push(email);
        }
    }
    let sms_jobs = jobs
        .iter()
        .filter(|(_, p)| p.get("message").is_some())
        .count();
    assert_eq!(
        sms_by_phone.len(),
        sms_jobs,
        "one SMS recipient per SMS job"
    );
    assert_eq!(
        email_by_to.len(),
        jobs.len() - sms_jobs,
        "one email recipient per email job"
    );

    for (id, payload) in jobs {
        let job_rows = &rows[id];
        assert_eq!(
            job_rows.len(),
            1,
            "job {id}: exactly one delivery row: {job_rows:?}"
        );
        let (provider, outcome, message_id, error_code) = &job_rows[0];
        assert_eq!(outcome, "sent");
        assert_eq!(error_code, &None);
        let message_id = message_id.as_deref().expect("the provider's message id");
        let to = payload["to"].as_str().unwrap();
        if let Some(message) = payload.get("message") {
            assert_eq!(provider, "sns");
            let got = &sms_by_phone[to];
            assert_eq!(got.len(), 1, "{to} received exactly one SMS");
            assert_eq!(got[0].message_id, message_id);
            assert_eq!(got[0].message, message.as_str().unwrap());
        } else {
            assert_eq!(provider, "ses");
            let got = &email_by_to[to];
            assert_eq!(got.len(), 1, "{to} received exactly one email");
            assert_eq!(got[0].message_id, message_id);
            assert_eq!(got[0].to, vec![to.to_owned()]);
            assert_eq!(got[0].source, EMAIL_FROM);
            assert_eq!(got[0].subject, payload["subject"].as_str().unwrap());
            // moto keeps the html part when there is one
            let body = payload.get("html").or(payload.get("text")).unwrap();
            assert_eq!(got[0].body, body.as_str().unwrap());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_mixed_jobs_are_each_delivered_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let recipients = Recipients::new();
    let jobs = insert_jobs(&client, &mixed_jobs(&recipients, 200), 5).await;
    let deliverer = deliverer().await;
    let store = db.store().await;

    let summary = worker::run(&store, &deliverer, &config(), deadline())
        .await
        .unwrap();
    assert_eq!(
        (summary.claimed, summary.sent, summary.retried, summary.dead),
        (200, 200, 0, 0),
        "{summary:?}"
    );
    assert_eq!(summary.batches, 4, "batches of 50");
    assert_each_delivered_once(&client, &recipients, &jobs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_deliver_two_thousand_jobs_exactly_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let recipients = Recipients::new();
    let jobs = insert_jobs(&client, &mixed_jobs(&recipients, 2000), 5).await;
    let deliverer = Arc::new(deliverer().await);

    let mut workers = Vec::new();
    for _ in 0..4 {
        let store = db.store().await; // each worker on its own connection, as in Lambda
        let deliverer = deliverer.clone();
        workers.push(tokio::spawn(async move {
            worker::run(&store, deliverer.as_ref(), &config(), deadline())
                .await
                .unwrap()
        }));
    }
    let mut total = worker::WorkerSummary::default();
    let mut with_work = 0;
    for w in workers {
        let s = w.await.unwrap();
        with_work += usize::from(s.claimed > 0);
        total.claimed += s.claimed;
        total.sent += s.sent;
        total.retried += s.retried;
        total.dead += s.dead;
        total.fenced += s.fenced;
    }
    assert_eq!(
        (
            total.claimed,
            total.sent,
            total.retried,
            total.dead,
            total.fenced
        ),
        (2000, 2000, 0, 0, 0),
        "{total:?}"
    );
    assert!(with_work > 1, "the workers ran at once");
    assert_each_delivered_once(&client, &recipients, &jobs).await;
}

#[tokio::test]
async fn an_invalid_phone_number_is_dead_with_the_providers_code() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let recipients = Recipients::new();
    let jobs = insert_jobs(
        &client,
        &[
            // not E.164 (a leading zero): the stand-in answers InvalidParameter, as SNS does
            (Channel::Sms, json!({"to": "+0123456789", "message": "hi"})),
            // a payload the worker cannot read: dead without calling the provider
            (
                Channel::Email,
                json!({"to": recipients.email(), "subject": "no body"}),
            ),
            (
                Channel::Sms,
                json!({"to": recipients.phone(), "message": "fine"}),
            ),
        ],
        5,
    )
    .await;
    let deliverer = deliverer().await;
    let store = db.store().await;

    let summary = worker::run(&store, &deliverer, &config(), deadline())
        .await
        .unwrap();
    assert_eq!((summary.sent, summary.dead), (1, 2), "{summary:?}");
    let rows = delivery_rows(&client).await;
    let status = |id: Uuid| {
        let client = &client;
        async move {
            client
                .query_one(
                    "SELECT status::text, attempts FROM job_states WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap()
        }
    };
    let invalid = status(jobs[0].0).await;
    assert_eq!(
        (invalid.get::<_, &str>(0), invalid.get::<_, i32>(1)),
        ("dead", 1)
    );
    let (provider, outcome, message_id, code) = &rows[&jobs[0].0][0];
    assert_eq!((provider.as_str(), outcome.as_str()), ("sns", "dead"));
    assert_eq!(code.as_deref(), Some("InvalidParameter"));
    assert_eq!(message_id, &None);
    let error: String = client
        .query_one(
            "SELECT error_message FROM job_attempt_history WHERE job_id = $1",
            &[&jobs[0].0],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        error.contains("E164"),
        "the provider's message is kept: {error}"
    );

    assert_eq!(rows[&jobs[1].0][0].3.as_deref(), Some("InvalidPayload"));
    assert_eq!(status(jobs[1].0).await.get::<_, &str>(0), "dead");
    assert_eq!(rows[&jobs[2].0][0].1, "sent");
    let received = stand_in::received().await;
    assert!(
        !received.sms.iter().any(|s| s.phone_number == "+0123456789"),
        "the stand-in refused it"
    );
}
