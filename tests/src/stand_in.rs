//! The local AWS stand-in (moto's server): what it received, and unique recipients so tests
//! running at once against one server can tell their messages apart.
//!
//! `AWS_ENDPOINT_URL` names the server (set by `make test`). `GET /moto-api/data.json` dumps
//! moto's state; the parts read here look like
//!
//! ```json
//! {"sns": {"SMS": [{"message_id": "…", "phone_number": "+1…", "message": "…"}]},
//!  "ses": {"Message": [{"id": "…", "source": "…", "subject": "…", "body": "…",
//!                       "destinations": {"ToAddresses": ["…"]}}]}}
//! ```
//!
//! (moto keeps only the HTML part of an email that has both parts.)

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

/// The stand-in's base URL.
pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").expect(
        "AWS_ENDPOINT_URL is not set: run the tests with `make test`, which starts the stand-in",
    )
}

/// One SMS moto accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sms {
    pub message_id: String,
    pub phone_number: String,
    pub message: String,
}

/// One email moto accepted (its `ToAddresses`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    pub message_id: String,
    pub source: String,
    pub to: Vec<String>,
    pub subject: String,
    /// The HTML part when there was one, else the text part.
    pub body: String,
}

/// Everything the stand-in received so far.
#[derive(Debug, Default)]
pub struct Received {
    pub sms: Vec<Sms>,
    pub email: Vec<Email>,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Reads `/moto-api/data.json`.
pub async fn received() -> Received {
    let data = get_json("/moto-api/data.json").await;
    let list = |service: &str, model: &str| -> Vec<Value> {
        data.get(service)
            .and_then(|s| s.get(model))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let sms = list("sns", "SMS")
        .iter()
        .map(|m| Sms {
            message_id: text(m, "message_id"),
            phone_number: text(m, "phone_number"),
            message: text(m, "message"),
        })
        .collect();
    let email = list("ses", "Message")
        .iter()
        .map(|m| Email {
            message_id: text(m, "id"),
            source: text(m, "source"),
            to: m
                .pointer("/destinations/ToAddresses")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            subject: text(m, "subject"),
            body: text(m, "body"),
        })
        .collect();
    Received { sms, email }
}

/// A plain HTTP/1.0 GET of a JSON document from the stand-in.
async fn get_json(path: &str) -> Value {
    let base = endpoint();
    let authority = base
        .strip_prefix("http://")
        .expect("AWS_ENDPOINT_URL must be an http:// URL")
        .trim_end_matches('/')
        .to_owned();
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(&authority)
            .unwrap_or_else(|e| panic!("connect to the stand-in at {authority}: {e}"));
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: {authority}\r\nAccept: application/json\r\n\r\n"
        )
        .unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an HTTP response");
        let head = String::from_utf8_lossy(&raw[..split]);
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "GET {path}: {head}"
        );
        serde_json::from_slice(&raw[split + 4..]).expect("a JSON body")
    })
    .await
    .unwrap()
}

/// Makes `identity` (an address or a domain) a verified SES sender; moto refuses to send
/// from anything else.
pub async fn verify_sender(identity: &str) {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .load()
        .await;
    let ses = aws_sdk_sesv2::Client::new(&sdk);
    if let Err(err) = ses
        .create_email_identity()
        .email_identity(identity)
        .send()
        .await
    {
        let already = err
            .as_service_error()
            .is_some_and(|e| e.is_already_exists_exception());
        assert!(
            already,
            "create the SES identity {identity}: {}",
            aws_sdk_sesv2::error::DisplayErrorContext(&err)
        );
    }
}

/// A prefix no other test (or test run) uses: recipients built from it are this test's own.
pub struct Recipients {
    phone_prefix: String,
    email_tag: String,
    next: AtomicU64,
}

impl Recipients {
    pub fn new() -> Self {
        let random = uuid::Uuid::new_v4().as_u128();
        // "+1" and 8 random digits (first one non-zero), then a 5-digit counter: E.164
        let digits = 10_000_000 + (random % 90_000_000);
        Self {
            phone_prefix: format!("+1{digits}"),
            email_tag: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
            next: AtomicU64::new(0),
        }
    }

    fn next(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        assert!(n < 100_000, "too many recipients for one prefix");
        n
    }

    /// A phone number no one else uses.
    pub fn phone(&self) -> String {
        format!("{}{:05}", self.phone_prefix, self.next())
    }

    /// An email address no one else uses.
    pub fn email(&self) -> String {
        format!("r{}-{}@example.org", self.next(), self.email_tag)
    }

    /// Whether `to` was made by this set.
    pub fn owns(&self, to: &str) -> bool {
        to.starts_with(&self.phone_prefix)
            || to.ends_with(&format!("-{}@example.org", self.email_tag))
    }
}

impl Default for Recipients {
    fn default() -> Self {
        Self::new()
    }
}

/// Test fixture: inserts due jobs with the given channels and payloads (each of its own
/// organization), through the store's statements for tests; returns each job's id with its
/// payload.
pub async fn insert_jobs(
    client: &tokio_postgres::Client,
    jobs: &[(notify_core::domain::Channel, Value)],
    max_attempts: i32,
) -> Vec<(uuid::Uuid, Value)> {
    let start = chrono::Utc::now();
    let rows: Vec<notify_postgres::testing::TestJob> = jobs
        .iter()
        .zip(0..)
        .map(
            |((channel, payload), n)| notify_postgres::testing::TestJob {
                max_attempts,
                // created in this order, a microsecond apart
                created_at: start + chrono::TimeDelta::microseconds(n),
                ..notify_postgres::testing::TestJob::due(
                    uuid::Uuid::new_v4(),
                    *channel,
                    payload.clone(),
                )
            },
        )
        .collect();
    let ids = notify_postgres::testing::insert_jobs(client, &rows)
        .await
        .expect("insert fixture jobs");
    ids.into_iter()
        .zip(jobs.iter().map(|(_, payload)| payload.clone()))
        .collect()
}

/// aws-config's defaults as the functions load them, pointed at the stand-in
/// ([`endpoint`]) explicitly, with its dummy credentials.
pub async fn sdk() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .endpoint_url(endpoint())
        .region(aws_config::Region::new(
            std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
        ))
        .credentials_provider(aws_sdk_eventbridge::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await
}

/// A new event bus named `bus` with one rule (`pattern`) sending what matches to a new SQS
/// queue (moto routes EventBridge rules to SQS); returns the queue's URL.
pub async fn rule_to_queue(sdk: &aws_config::SdkConfig, bus: &str, pattern: Value) -> String {
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    events
        .create_event_bus()
        .name(bus)
        .send()
        .await
        .expect("create the bus");
    let queue_url = sqs
        .create_queue()
        .queue_name(format!("{bus}-rule"))
        .send()
        .await
        .expect("create the queue")
        .queue_url()
        .expect("a queue URL")
        .to_owned();
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("read the queue's ARN");
    let queue_arn = attributes
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .expect("the queue's ARN")
        .to_owned();
    events
        .put_rule()
        .name("to-queue")
        .event_bus_name(bus)
        .event_pattern(pattern.to_string())
        .send()
        .await
        .expect("create the rule");
    events
        .put_targets()
        .rule("to-queue")
        .event_bus_name(bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(queue_arn)
                .build()
                .expect("a target"),
        )
        .send()
        .await
        .expect("target the queue");
    queue_url
}

/// The queue's messages as JSON, read until `wanted` have arrived or 30 s have passed, then
/// once more (briefly) to catch any beyond them.
pub async fn read_queue(sdk: &aws_config::SdkConfig, queue_url: &str, wanted: usize) -> Vec<Value> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut bodies = Vec::new();
    let mut extra_look = false;
    loop {
        let received = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive from the queue");
        for message in received.messages() {
            let body = message.body().expect("a message body");
            bodies.push(serde_json::from_str(body).expect("a JSON event"));
        }
        if extra_look || std::time::Instant::now() > deadline {
            break;
        }
        extra_look = bodies.len() >= wanted;
    }
    bodies
}

/// A job as the claim hands it to a deliverer (first attempt, fresh claim), for tests that
/// call an adapter directly.
pub fn claimed_job(
    channel: notify_core::domain::Channel,
    payload: Value,
) -> notify_core::store::ClaimedJob {
    let now = chrono::Utc::now();
    notify_core::store::ClaimedJob {
        id: uuid::Uuid::now_v7(),
        organization_id: uuid::Uuid::new_v4(),
        channel,
        payload,
        attempt: 1,
        max_attempts: 5,
        call: 1,
        claim_token: uuid::Uuid::new_v4(),
        claimed_at: now,
        created_at: now,
        suppressed: false,
        trace_header: None,
    }
}
