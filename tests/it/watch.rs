//! The four functions under the real `cargo lambda watch`: ingest through
//! its function-URL emulation (`/lambda-url/ingest/…`, which parses the reply as a
//! `LambdaFunctionUrlResponse`), the worker, the sweeper and feedback through `cargo lambda
//! invoke`, against this test's own migrated database and the AWS stand-in — as a user's curl
//! would. Feedback gets events in the shapes AWS sends (`tests/fixtures/feedback/`) naming the
//! message ids the worker recorded.
//!
//! Slow on a cold target folder: watch compiles each function on its first call (the test
//! builds them first, see `watch::prebuild`). Needs cargo-lambda (`make test` installs it).

use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::stand_in::{self, Recipients};
use integration_tests::watch::{self, CALL, FIRST_CALL, Reply, Watch};
use integration_tests::{TestDb, count};
use notify_core::feedback::events;
use notify_core::telemetry::emf::{
    INGEST_METRICS, QUEUE_DEPTH, QUEUE_STATES, WORKER_METRICS, published,
};
use serde_json::{Value, json};
use uuid::Uuid;

const SENDER: &str = "noreply@watch-tests.example.com";
const SCHEDULED: &str = "tests/fixtures/events/scheduled.json";
/// The X-Ray header the test's POSTs carry (used unless watch gives the invocation its own).
const TRACE: &str = "Root=1-67a1b2c3-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1";

/// The JSON objects in the watch log (each function's log lines and metric documents).
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(&line[line.find('{')?..]).ok())
        .filter(Value::is_object)
        .collect()
}

/// The names an EMF document publishes.
fn metric_names(document: &Value) -> Vec<String> {
    published(&document.to_string())
        .unwrap_or_else(|| panic!("not an EMF document: {document}"))
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

fn is_time(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| chrono::DateTime::parse_from_rfc3339(s).is_ok())
}

/// A feedback fixture naming `message_id`, written into `dir` as the event Lambda receives
/// (for `cargo lambda invoke --data-file`): an SES fixture as it is (an SNS event), an SMS
/// delivery-status batch gzip + base64 inside `{"awslogs":{"data":…}}`, as CloudWatch Logs
/// sends it. Returns the file's path.
fn feedback_event(dir: &Path, name: &str, message_id: &str) -> String {
    let fixture = watch::root().join("tests/fixtures/feedback").join(name);
    let text = std::fs::read_to_string(&fixture)
        .unwrap_or_else(|e| panic!("{}: {e}", fixture.display()))
        .replace("MESSAGE_ID", message_id);
    let mut event: Value = serde_json::from_str(&text).expect("a JSON fixture");
    if event.get("logEvents").is_some() {
        event = events::encode_awslogs(&event);
    }
    let path = dir.join(name);
    std::fs::write(&path, event.to_string()).unwrap();
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// The functions' settings under watch: this test's database (`url`, straight to the server:
/// statements prepared, as `make watch` sets them), the stand-in (its sender verified), the
/// local organization header, and the log level `level`.
pub(crate) async fn settings(
    url: String,
    level: (&'static str, &str),
) -> Vec<(&'static str, String)> {
    stand_in::verify_sender(SENDER).await;
    let mut env: Vec<(&str, String)> = vec![
        ("DATABASE_URL", url),
        ("MIGRATE_ON_START", "true".into()),
        ("DATABASE_PREPARED_STATEMENTS", "true".into()),
        ("ALLOW_ORG_HEADER", "true".into()),
        ("EMAIL_FROM", SENDER.into()),
        (level.0, level.1.into()),
    ];
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        let value = std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: run the tests with `make test`"));
        env.push((name, value));
    }
    env
}

/// POST /notifications through watch: `body` as the organization's JSON request.
async fn post(watch: &Watch, org: &str, body: &str, timeout: Duration) -> Reply {
    let headers = [
        ("Content-Type", "application/json"),
        ("X-Organization-Id", org),
        ("X-Amzn-Trace-Id", TRACE),
    ];
    watch
        .request(
            "POST",
            "ingest",
            "/notifications",
            &headers,
            Some(body),
            timeout,
        )
        .await
}

/// GET /notifications/{id} through watch: the job as its organization sees it.
async fn get_job(watch: &Watch, org: &str, id: &str) -> Value {
    let got = watch
        .request(
            "GET",
            "ingest",
            &format!("/notifications/{id}"),
            &[("X-Organization-Id", org)],
            None,
            CALL,
        )
        .await;
    assert_eq!(got.status, 200, "GET {id}: {got:?}");
    got.json()
}

/// The error body's code and the fields it names.
fn error(reply: &Reply) -> (String, Vec<String>) {
    let body = reply.json();
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "an error names its cause: {}",
        reply.body
    );
    let fields = body["error"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("fields is a list: {}", reply.body))
        .iter()
        .map(|f| f["field"].as_str().unwrap_or_default().to_owned())
        .collect();
    (code, fields)
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_worker_sweeper_and_feedback_under_cargo_lambda_watch() {
    // first: without cargo-lambda this test cannot run, and says so
    integration_tests::watch::cargo_lambda();
    let started = Instant::now();
    let db = TestDb::new().await;
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by make test");
    let url = notify_postgres::db::url_with_dbname(&server, &db.name)
        .expect("DATABASE_URL must be a postgres:// URL for this test");
    let watch = Watch::start(&settings(url, ("RUST_LOG", "info")).await).await;
    let org = Uuid::new_v4().to_string();
    let json_org = [
        ("Content-Type", "application/json"),
        ("X-Organization-Id", org.as_str()),
    ];
    let recipients = Recipients::new();
    let phone = recipients.phone();
    let email = recipients.email();

    // POST → 202 (the first call compiles ingest if it is not fresh)
    let sms_body = json!({"channel": "sms", "to": phone, "message": "Invoice 42 is paid"});
    let created = post(&watch, &org, &sms_body.to_string(), FIRST_CALL).await;
    eprintln!(
        "watch: first answer after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(created.status, 202, "{created:?}");
    let job = created.json();
    let id = job["id"].as_str().expect("an id").to_owned();
    Uuid::parse_str(&id).expect("the id is a UUID");
    assert_eq!(job["status"], "pending", "{job}");
    assert!(is_time(&job["next_attempt_at"]), "{job}");
    assert_eq!(
        job.as_object().unwrap().len(),
        3,
        "{{id, status, next_attempt_at}}: {job}"
    );
    assert_eq!(
        created.header("location"),
        Some(format!("/notifications/{id}").as_str())
    );
    assert_eq!(created.header("content-type"), Some("application/json"));
    assert!(created.header("x-request-id").is_some(), "{created:?}");

    let email_body = json!({"channel": "email", "to": email, "subject": "Your receipt",
                            "text": "Thanks for your payment."});
    let created_email = post(&watch, &org, &email_body.to_string(), CALL).await;
    assert_eq!(created_email.status, 202, "{created_email:?}");
    let email_id = created_email.json()["id"].as_str().unwrap().to_owned();

    // GET → 200, the job as it is now
    let view = get_job(&watch, &org, &id).await;
    assert_eq!(view["id"], id.as_str());
    assert_eq!(view["channel"], "sms");
    assert_eq!(view["to"], phone.as_str());
    assert_eq!(view["status"], "pending");
    assert_eq!(
        (view["attempts"].as_i64(), view["max_attempts"].as_i64()),
        (Some(0), Some(5))
    );
    assert_eq!(view["deliveries"], json!([]), "{view}");
    assert!(view["last_error"].is_null(), "{view}");

    // 400: a body that is not JSON, and one with invalid fields (each named)
    let not_json = post(&watch, &org, "{not json", CALL).await;
    assert_eq!(not_json.status, 400, "{not_json:?}");
    assert_eq!(error(&not_json).0, "invalid_json");
    let invalid = post(
        &watch,
        &org,
        r#"{"channel":"sms","to":"+0555","message":""}"#,
        CALL,
    )
    .await;
    assert_eq!(invalid.status, 400, "{invalid:?}");
    assert_eq!(
        error(&invalid),
        (
            "validation_failed".into(),
            vec!["to".into(), "message".into()]
        )
    );

    // 404: an unknown id, another organization's job, an unknown path
    for (path, org) in [
        (format!("/notifications/{}", Uuid::new_v4()), org.clone()),
        (format!("/notifications/{id}"), Uuid::new_v4().to_string()),
        ("/nowhere".to_owned(), org.clone()),
    ] {
        let missing = watch
            .request(
                "GET",
                "ingest",
                &path,
                &[("X-Organization-Id", &org)],
                None,
                CALL,
            )
            .await;
        assert_eq!(missing.status, 404, "GET {path}: {missing:?}");
        assert_eq!(error(&missing), ("not_found".into(), vec![]), "GET {path}");
    }

    // 405, with the methods the path allows
    let wrong = watch
        .request(
            "DELETE",
            "ingest",
            &format!("/notifications/{id}"),
            &json_org,
            None,
            CALL,
        )
        .await;
    assert_eq!(wrong.status, 405, "{wrong:?}");
    assert_eq!(error(&wrong), ("method_not_allowed".into(), vec![]));
    assert_eq!(wrong.header("allow"), Some("GET"));

    // what ingest wrote: the two accepted jobs, nothing for the refused requests
    let client = db.client().await;
    assert_eq!(count(&client, "SELECT count(*) FROM job_requests").await, 2);

    // the worker sends both; the stand-in got them
    let worked = watch.invoke("worker", SCHEDULED, FIRST_CALL).await;
    assert!(worked["elapsed_ms"].is_u64(), "{worked}");
    let mut summary = worked.clone();
    summary.as_object_mut().unwrap().remove("elapsed_ms");
    assert_eq!(
        summary,
        json!({"claimed": 2, "sent": 2, "retried": 0, "held": 0, "dead": 0, "released": 0,
               "fenced": 0, "batches": 1,
               // no bus and no webhook endpoint here: the dispatch had nothing to do
               "events": {"published": 0, "publish_failed": 0, "webhooks_delivered": 0,
                          "webhooks_failed": 0, "webhooks_dead": 0, "endpoints_disabled": 0,
                          "fenced": 0, "webhook_backlog_age_secs": 0},
               // no WORKER_FUNCTION_NAME here: the schedule's invocation, which starts none
               "fleet": {"slot": 1, "woken": false, "started": 0, "handed_off": false,
                         "starts_failed": 0, "stayed": 0}}),
        "worker summary"
    );
    // the worker's output: one EMF document with every documented worker metric, and the
    // delivery's line naming the job, the trace it was created under, the invocation's
    // request id and its cold start
    let stored: Option<String> = client
        .query_one(
            "SELECT trace_header FROM job_requests WHERE id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    let stored = stored.expect("ingest stores the trace header it ran under");
    let lines = json_lines(&watch.log());
    let documents: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("_aws").is_some() && l.get("Sent").is_some())
        .collect();
    assert_eq!(
        documents.len(),
        1,
        "one metric line per invocation: {documents:?}"
    );
    let names = metric_names(documents[0]);
    for metric in WORKER_METRICS {
        assert!(
            names.iter().any(|n| n == metric),
            "{metric} missing: {}",
            documents[0]
        );
    }
    assert_eq!(documents[0]["Sent"], 2, "{}", documents[0]);
    for channel in ["SmsProviderLatency", "EmailProviderLatency"] {
        assert_eq!(
            documents[0][channel].as_array().map(Vec::len),
            Some(1),
            "one latency per provider call, as an array: {}",
            documents[0]
        );
    }
    // the queue by state, each a QueueDepth document with its State
    let states: Vec<&str> = lines
        .iter()
        .filter(|l| l.get("_aws").is_some() && l.get(QUEUE_DEPTH).is_some())
        .filter_map(|l| l["State"].as_str())
        .collect();
    assert_eq!(states, QUEUE_STATES, "{}", watch.log_tail(30));
    let delivered = lines
        .iter()
        .find(|l| l["message"] == "delivered to the provider" && l["job_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no delivery line for {id}:\n{}", watch.log_tail(30)));
    assert_eq!(delivered["trace_id"], stored.as_str(), "{delivered}");
    assert_eq!(delivered["level"], "INFO", "{delivered}");
    assert_eq!(delivered["cold_start"], true, "{delivered}");
    assert!(
        delivered["request_id"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{delivered}"
    );
    // ingest's: a document per request, the refusals by code
    let ingest: Vec<&Value> = lines
        .iter()
        .filter(|l| l.get("_aws").is_some() && l.get("Accepted").is_some())
        .collect();
    assert!(ingest.iter().any(|d| d["Accepted"] == 1), "{ingest:?}");
    for document in &ingest {
        let names = metric_names(document);
        assert!(
            INGEST_METRICS.iter().all(|m| names.iter().any(|n| n == m)),
            "{document}"
        );
    }
    assert!(
        ingest
            .iter()
            .any(|d| d["Code"] == "validation_failed" && d["Refused"] == 1),
        "{ingest:?}"
    );

    let received = stand_in::received().await;
    let sms: Vec<_> = received
        .sms
        .iter()
        .filter(|m| m.phone_number == phone)
        .collect();
    assert_eq!(sms.len(), 1, "{:?}", received.sms);
    assert_eq!(sms[0].message, "Invoice 42 is paid");
    let mail: Vec<_> = received
        .email
        .iter()
        .filter(|m| m.to == [email.clone()])
        .collect();
    assert_eq!(mail.len(), 1, "{:?}", received.email);
    assert_eq!(
        (mail[0].source.as_str(), mail[0].subject.as_str()),
        (SENDER, "Your receipt")
    );

    // GET → the job as sent, with its attempt and the provider's message id
    let view = get_job(&watch, &org, &id).await;
    assert_eq!(
        (view["status"].as_str(), view["attempts"].as_i64()),
        (Some("sent"), Some(1)),
        "{view}"
    );
    let deliveries = view["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 1, "{view}");
    assert_eq!(deliveries[0]["attempt"], 1);
    assert_eq!(deliveries[0]["provider"], "sns");
    assert_eq!(deliveries[0]["outcome"], "sent");
    assert_eq!(
        deliveries[0]["provider_message_id"],
        sms[0].message_id.as_str()
    );
    assert_eq!(
        count(
            &client,
            &format!("SELECT count(*) FROM job_states WHERE id = '{email_id}' AND status = 'sent'")
        )
        .await,
        1
    );

    // the providers report back through feedback: an SES Bounce (an SNS event) naming the
    // email's message id, as the worker recorded it
    let email_view = get_job(&watch, &org, &email_id).await;
    assert_eq!(email_view["status"], "sent", "{email_view}");
    let email_message_id = email_view["deliveries"][0]["provider_message_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the email's attempt has a message id: {email_view}"))
        .to_owned();
    let bounce = feedback_event(&watch.dir, "ses-bounce-permanent.json", &email_message_id);
    let answer = watch.invoke("feedback", &bounce, FIRST_CALL).await;
    assert_eq!(
        answer,
        json!({"events": 1, "malformed": 0, "recorded": {"email": {"bounce": 1}},
               "duplicates": 0, "applied": 1, "jobs_changed": 1, "suppressed": 1}),
        "feedback's answer to the SES Bounce"
    );
    let bounced = get_job(&watch, &org, &email_id).await;
    assert_eq!(bounced["status"], "bounced", "{bounced}");
    let feedback = &bounced["deliveries"][0]["feedback"];
    assert_eq!(
        (
            feedback[0]["type"].as_str(),
            feedback[0]["subtype"].as_str()
        ),
        (Some("bounce"), Some("Permanent/General")),
        "{bounced}"
    );
    assert_eq!(feedback.as_array().map(Vec::len), Some(1), "{bounced}");
    // SNS delivers at least once: the same event again changes nothing
    let again = watch.invoke("feedback", &bounce, CALL).await;
    assert_eq!(
        again,
        json!({"events": 1, "malformed": 0, "recorded": {}, "duplicates": 1, "applied": 0,
               "jobs_changed": 0, "suppressed": 0}),
        "feedback's answer to the same SES Bounce again"
    );
    // the recipient is suppressed for this organization: a new POST is refused
    let refused = post(&watch, &org, &email_body.to_string(), CALL).await;
    assert_eq!(refused.status, 422, "{refused:?}");
    assert_eq!(
        error(&refused),
        ("recipient_suppressed".into(), vec!["to".into()])
    );
    assert_eq!(
        count(&client, "SELECT count(*) FROM job_requests").await,
        2,
        "a refused POST writes nothing"
    );

    // an SNS SMS delivery-status line (SUCCESS) in a CloudWatch Logs awslogs event, naming the
    // SMS's message id
    let success = feedback_event(
        &watch.dir,
        "sns-sms-success.json",
        sms[0].message_id.as_str(),
    );
    let answer = watch.invoke("feedback", &success, CALL).await;
    assert_eq!(
        answer,
        json!({"events": 1, "malformed": 0, "recorded": {"sms": {"delivery": 1}},
               "duplicates": 0, "applied": 1, "jobs_changed": 1, "suppressed": 0}),
        "feedback's answer to the SMS delivery-status log event"
    );
    let delivered = get_job(&watch, &org, &id).await;
    assert_eq!(delivered["status"], "delivered", "{delivered}");
    assert_eq!(
        delivered["deliveries"][0]["feedback"][0]["type"], "delivery",
        "{delivered}"
    );

    // the sweeper: nothing stuck, nothing old enough to prune, no feedback waiting
    let swept = watch.invoke("sweeper", SCHEDULED, FIRST_CALL).await;
    assert!(swept["elapsed_ms"].is_u64(), "{swept}");
    let mut summary = swept.clone();
    summary.as_object_mut().unwrap().remove("elapsed_ms");
    assert_eq!(
        summary,
        json!({"requeued": 0, "dead": 0, "expired": 0, "feedback_pruned": 0,
               "history": {"added": 0, "dropped": 0, "dropped_days": ""},
               "feedback_applied": 0, "feedback_dropped": 0, "dispatch_swept": 0,
               "events_pruned": 0}),
        "sweeper summary"
    );

    // a second worker run finds nothing due
    let idle = watch.invoke("worker", SCHEDULED, CALL).await;
    assert_eq!(
        (idle["claimed"].as_u64(), idle["batches"].as_u64()),
        (Some(0), Some(0)),
        "{idle}"
    );

    drop(watch);
    eprintln!(
        "watch: test done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The local path a user takes, with ingest waking the worker as `make watch` sets it up: a
/// notification posted through watch reaches the stand-in with no manual invoke, the caller's
/// answer does not wait for the worker's run (watch answers an event invocation only once
/// the function returns), and a second one after the first worker left is woken again.
#[tokio::test(flavor = "multi_thread")]
async fn a_posted_notification_is_delivered_by_the_worker_it_woke() {
    integration_tests::watch::cargo_lambda();
    let db = TestDb::new().await;
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by make test");
    let url = notify_postgres::db::url_with_dbname(&server, &db.name)
        .expect("DATABASE_URL must be a postgres:// URL for this test");
    let watch = Watch::start_waking(&settings(url, ("RUST_LOG", "info")).await).await;
    let org = Uuid::new_v4().to_string();
    let recipients = Recipients::new();
    let client = db.client().await;

    let mut latencies = Vec::new();
    for (round, text) in ["Your code is 4242", "Your code is 1717"]
        .iter()
        .enumerate()
    {
        let phone = recipients.phone();
        let body = json!({"channel": "sms", "to": phone, "message": text, "priority": "high"});
        let asked = Instant::now();
        let deadline = asked + if round == 0 { FIRST_CALL } else { CALL };
        // the stand-in is watched from the moment of the POST: the worker may deliver before
        // ingest answers
        let reaching = {
            let phone = phone.clone();
            tokio::spawn(async move {
                loop {
                    let got = stand_in::received().await;
                    if got.sms.iter().any(|m| m.phone_number == phone) {
                        return Some(asked.elapsed());
                    }
                    if Instant::now() > deadline {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        let created = post(
            &watch,
            &org,
            &body.to_string(),
            if round == 0 { FIRST_CALL } else { CALL },
        )
        .await;
        let answered = asked.elapsed();
        assert_eq!(created.status, 202, "{created:?}");
        // the wake waits on watch's answer a quarter of a second at most (fleet::WAKE_WAIT)
        if round > 0 {
            assert!(
                answered < Duration::from_secs(2),
                "the answer waited for the worker: {answered:?}"
            );
        }
        let id = created.json()["id"].as_str().unwrap().to_owned();
        let reached = reaching.await.unwrap().unwrap_or_else(|| {
            panic!(
                "round {round}: the SMS never reached the stand-in; watch log:\n{}",
                watch.log_tail(40)
            )
        });
        latencies.push(reached);
        assert_eq!(get_job(&watch, &org, &id).await["status"], "sent");
        // the worker lingers (WORKER_IDLE_MS, 2 s) and leaves: its slot is free again
        let left = Instant::now() + Duration::from_secs(30);
        while count(
            &client,
            "SELECT count(*) FROM worker_slots WHERE until > now()",
        )
        .await
            > 0
        {
            assert!(Instant::now() < left, "the woken worker never left");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!(
        "watch: accept → stand-in {:.0} ms (the worker's first start), then {:.0} ms (a \
         warm instance woken again)",
        latencies[0].as_secs_f64() * 1000.0,
        latencies[1].as_secs_f64() * 1000.0
    );
    // a warm instance woken again: within a second, on this machine and under watch
    assert!(
        latencies[1] < Duration::from_secs(1),
        "a warm worker took {:?}",
        latencies[1]
    );
    // a wake's task logs and counts its start when watch answers the invocation, which it
    // does once the worker has returned: a moment after the worker freed its slot
    let counted = |lines: &[Value]| {
        let started = lines
            .iter()
            .filter(|l| l["message"] == "worker started" && l["reason"] == "accepted")
            .count();
        let sent = lines
            .iter()
            .filter(|l| l.get("_aws").is_some() && l.get("WakeSent").is_some())
            .count();
        (started, sent)
    };
    let answered = Instant::now() + Duration::from_secs(10);
    let mut seen = counted(&json_lines(&watch.log()));
    while seen != (2, 2) && Instant::now() < answered {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = counted(&json_lines(&watch.log()));
    }
    assert_eq!(
        seen,
        (2, 2),
        "one wake per notification, each logged as started and counted as WakeSent"
    );
}

/// No log line carries a recipient or a message body, at any level: ingest and the worker run
/// under `cargo lambda watch` at TRACE (every crate's lines, the AWS SDK's and the driver's
/// included), deliver an SMS and an email through the stand-in, and then meet a failing
/// constraint each, whose PostgreSQL error DETAIL holds the whole failing row (recipient and
/// body). Their log holds the errors, by SQLSTATE, constraint and table, and none of the
/// recipients or texts.
#[tokio::test(flavor = "multi_thread")]
async fn no_recipient_or_body_reaches_the_logs_at_trace() {
    integration_tests::watch::cargo_lambda();
    let db = TestDb::new().await;
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by make test");
    let url = notify_postgres::db::url_with_dbname(&server, &db.name)
        .expect("DATABASE_URL must be a postgres:// URL for this test");
    let watch = Watch::start(&settings(url, ("AWS_LAMBDA_LOG_LEVEL", "TRACE")).await).await;
    let org = Uuid::new_v4().to_string();
    let client = db.client().await;
    // what must never be logged
    let secrets = [
        "+15555550181",
        "+15555550182",
        "+15555550183",
        "logs.sent@example.com",
        "Sms body 7361",
        "Email text 5521",
        "Email subject 8812",
        "Refused body 4417",
        "Claimed body 9034",
    ];

    // delivered: an SMS and an email, through the SDKs at TRACE
    for body in [
        json!({"channel": "sms", "to": "+15555550181", "message": "Sms body 7361"}),
        json!({"channel": "email", "to": "logs.sent@example.com", "subject": "Email subject 8812",
               "text": "Email text 5521"}),
    ] {
        let created = post(&watch, &org, &body.to_string(), FIRST_CALL).await;
        assert_eq!(created.status, 202, "{created:?}");
    }
    let worked = watch.invoke("worker", SCHEDULED, FIRST_CALL).await;
    assert_eq!(worked["sent"], 2, "{worked}");

    // ingest meets a failing constraint: its insert fails, the row in DETAIL
    client
        .batch_execute(
            "ALTER TABLE job_requests ADD CONSTRAINT logs_test_refused
                 CHECK (payload ->> 'message' <> 'Refused body 4417')",
        )
        .await
        .unwrap();
    let refused = json!({"channel": "sms", "to": "+15555550182", "message": "Refused body 4417"});
    let answer = post(&watch, &org, &refused.to_string(), CALL).await;
    assert_eq!(answer.status, 500, "{answer:?}");
    assert!(
        !answer.body.contains("4417") && !answer.body.contains("+15555550182"),
        "the answer: {}",
        answer.body
    );

    // the worker meets one: its claim fails on the row it would claim, the row in DETAIL. The
    // queue row carries the payload's copy, as on a database upgraded from 1.0 (migration
    // 0012), so that row holds the recipient and the body
    client
        .batch_execute("UPDATE queue_settings SET copies_payload = true")
        .await
        .unwrap();
    let claimed = json!({"channel": "sms", "to": "+15555550183", "message": "Claimed body 9034"});
    let created = post(&watch, &org, &claimed.to_string(), CALL).await;
    assert_eq!(created.status, 202, "{created:?}");
    client
        .batch_execute(
            "ALTER TABLE job_queue ADD CONSTRAINT logs_test_claimed
                 CHECK (claim_token IS NULL OR payload ->> 'message' <> 'Claimed body 9034')",
        )
        .await
        .unwrap();
    let failed = watch.invoke_raw("worker", SCHEDULED, CALL).await;
    assert!(!failed.success, "the worker's claim fails: {failed:?}");

    // a moment for the last lines to reach the log
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = watch.log();
    assert!(
        log.lines().count() > 100,
        "TRACE lines were written: {} lines",
        log.lines().count()
    );
    for (constraint, table) in [
        ("logs_test_refused", "job_requests"),
        ("logs_test_claimed", "job_queue"),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("23514") && l.contains(constraint) && l.contains(table)),
            "the error is logged by SQLSTATE, constraint and table ({constraint})"
        );
    }
    for secret in secrets {
        let found: Vec<&str> = log.lines().filter(|l| l.contains(secret)).collect();
        assert!(
            found.is_empty(),
            "{secret:?} reached the log:\n{}",
            found.join("\n")
        );
    }
}
