//! Status events as a user meets them: the functions under the real `cargo lambda watch`,
//! webhooks registered through the API and received by a receiver that verifies every
//! delivery with the Python `standardwebhooks` library from PyPI
//! (tests/scripts/webhook_receiver.py), and the EventBridge bus of the AWS stand-in with a rule
//! to an SQS queue, read back.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::TestDb;
use integration_tests::stand_in;
use integration_tests::watch::{CALL, FIRST_CALL, Reply, Watch, root, scratch_dir};
use serde_json::{Value, json};
use uuid::Uuid;

const SCHEDULED: &str = "tests/fixtures/events/scheduled.json";

/// The Python of `.venv-tools`, where `make test` installs `standardwebhooks`.
fn python() -> PathBuf {
    let venv = std::env::var_os("TOOLS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-tools"));
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "{} is missing: `make test` installs it (tests/scripts/tools.sh, \
         `tools_install webhooks`)",
        python.display()
    );
    python
}

/// tests/scripts/webhook_receiver.py, answering the first `fail_first` deliveries of each
/// event 500; stopped when dropped.
struct PyReceiver {
    child: Child,
    port: u16,
    secret: PathBuf,
    record: PathBuf,
}

impl PyReceiver {
    fn start(dir: &Path, name: &str, fail_first: u32) -> Self {
        let (secret, record, ready) = (
            dir.join(format!("{name}.secret")),
            dir.join(format!("{name}.jsonl")),
            dir.join(format!("{name}.port")),
        );
        let child = Command::new(python())
            .arg(root().join("tests/scripts/webhook_receiver.py"))
            .args(["--port", "0", "--quiet"])
            .arg("--secret-file")
            .arg(&secret)
            .arg("--record")
            .arg(&record)
            .args(["--fail-first", &fail_first.to_string()])
            .arg("--ready")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
            .spawn()
            .expect("start the webhook receiver");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&ready)
                .ok()
                .and_then(|p| p.trim().parse().ok())
            {
                break port;
            }
            assert!(
                Instant::now() < deadline,
                "the webhook receiver did not start: {}",
                std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        Self {
            child,
            port,
            secret,
            record,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks", self.port)
    }

    /// Every delivery it received: headers, body, whether `standardwebhooks` verified it,
    /// and what it answered.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

impl Drop for PyReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The functions' settings under watch (`crate::watch::settings`: this test's database, the
/// stand-in, the local organization header, `RUST_LOG=info`), and `extra`.
async fn settings(db: &TestDb, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL is set by make test");
    let url = notify_postgres::db::url_with_dbname(&server, &db.name).expect("a postgres:// URL");
    let mut env = crate::watch::settings(url, ("RUST_LOG", "info")).await;
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

async fn call(watch: &Watch, method: &str, org: Uuid, path: &str, body: Option<Value>) -> Reply {
    let org = org.to_string();
    let text = body.map(|b| b.to_string());
    watch
        .request(
            method,
            "ingest",
            path,
            &[
                ("Content-Type", "application/json"),
                ("X-Organization-Id", &org),
            ],
            text.as_deref(),
            FIRST_CALL,
        )
        .await
}

async fn register(watch: &Watch, org: Uuid, body: Value) -> Reply {
    call(watch, "POST", org, "/webhooks", Some(body)).await
}

async fn send_sms(watch: &Watch, org: Uuid, to: &str, extra: Value) -> String {
    let mut body = json!({"channel": "sms", "to": to, "message": "Your code is 4321"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let reply = call(watch, "POST", org, "/notifications", Some(body)).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    reply.json()["id"].as_str().unwrap().to_owned()
}

/// The id `POST /webhooks` answered.
fn created_id(created: &Value) -> String {
    created["id"].as_str().expect("an id").to_owned()
}

/// The type and notification id of a received delivery.
fn what(delivery: &Value) -> (String, String) {
    let body: Value = serde_json::from_str(delivery["body"].as_str().unwrap()).unwrap();
    (
        body["type"].as_str().unwrap().to_owned(),
        body["data"]["id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn signed_events_reach_each_organizations_webhooks_and_the_bus_under_watch() {
    integration_tests::watch::cargo_lambda();
    let db = TestDb::new().await;
    let dir = scratch_dir("events-watch");
    // the bus, with a rule sending one organization's events to a queue
    let sdk = stand_in::sdk().await;
    let bus = format!("notify-events-{}", Uuid::new_v4().simple());
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let queue = stand_in::rule_to_queue(
        &sdk,
        &bus,
        json!({"source": ["notification-service"],
               "detail-type": ["Notification Status Changed"],
               "detail": {"data": {"organization_id": [a.to_string()]}}}),
    )
    .await;
    let flaky = PyReceiver::start(&dir, "a", 1);
    let steady = PyReceiver::start(&dir, "b", 0);
    let watch = Watch::start(
        &settings(
            &db,
            &[
                ("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true"),
                ("EVENT_BUS_NAME", &bus),
            ],
        )
        .await,
    )
    .await;

    // a's endpoint takes every type; b's only `notification.sent`
    let created = register(&watch, a, json!({"url": flaky.url()})).await;
    assert_eq!(created.status, 201, "{created:?}");
    let a_hook = created.json();
    let secret = a_hook["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{a_hook}");
    std::fs::write(&flaky.secret, secret).unwrap();
    let created = register(
        &watch,
        b,
        json!({"url": steady.url(), "events": ["notification.sent"]}),
    )
    .await;
    assert_eq!(created.status, 201, "{created:?}");
    std::fs::write(&steady.secret, created.json()["secret"].as_str().unwrap()).unwrap();
    let listed = call(&watch, "GET", a, "/webhooks", None).await;
    assert_eq!(listed.status, 200);
    let items = listed.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1, "a sees its own endpoint only: {items:?}");
    assert!(items[0].get("secret").is_none(), "the secret is shown once");

    // a: two SMS and a cancellation; b: one SMS
    let a_sent = [
        send_sms(&watch, a, "+15555550181", json!({})).await,
        send_sms(&watch, a, "+15555550182", json!({})).await,
    ];
    let later = send_sms(
        &watch,
        a,
        "+15555550183",
        json!({"send_at": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()}),
    )
    .await;
    let cancelled = call(
        &watch,
        "POST",
        a,
        &format!("/notifications/{later}/cancel"),
        None,
    )
    .await;
    assert_eq!(cancelled.status, 200, "{cancelled:?}");
    let b_sent = send_sms(&watch, b, "+15555550184", json!({})).await;

    // the worker sends, then dispatches: a's endpoint answers each event 500 once
    let first = watch.invoke("worker", SCHEDULED, FIRST_CALL).await;
    assert_eq!(first["sent"], 3, "{first}");
    assert_eq!(first["events"]["webhooks_delivered"], 1, "{first}");
    assert_eq!(first["events"]["webhooks_failed"], 3, "{first}");
    assert_eq!(first["events"]["published"], 4, "{first}");
    // a's endpoint failed every call so far: its GET says since when
    let a_id = created_id(&a_hook);
    let endpoint = call(&watch, "GET", a, &format!("/webhooks/{a_id}"), None).await;
    assert_eq!(endpoint.status, 200, "{endpoint:?}");
    assert!(
        endpoint.json()["failing_since"].is_string(),
        "{}",
        endpoint.body
    );
    assert_eq!(endpoint.json()["disabled"], false);
    assert!(endpoint.json().get("secret").is_none());
    let hidden = call(&watch, "GET", b, &format!("/webhooks/{a_id}"), None).await;
    assert_eq!(hidden.status, 404, "another organization's endpoint");
    // the retry is due about 5 s later
    tokio::time::sleep(Duration::from_secs(6)).await;
    let second = watch.invoke("worker", SCHEDULED, CALL).await;
    assert_eq!(second["events"]["webhooks_delivered"], 3, "{second}");
    let endpoint = call(&watch, "GET", a, &format!("/webhooks/{a_id}"), None).await;
    assert!(
        endpoint.json()["failing_since"].is_null(),
        "it answers again: {}",
        endpoint.body
    );

    // every delivery verified by standardwebhooks; each organization's to its own endpoint
    let to_a = flaky.received();
    let to_b = steady.received();
    for delivery in to_a.iter().chain(&to_b) {
        assert_eq!(
            delivery["verified"], true,
            "standardwebhooks refused a delivery: {delivery}"
        );
    }
    assert_eq!(
        to_b.iter().map(what).collect::<Vec<_>>(),
        [("notification.sent".to_owned(), b_sent.clone())]
    );
    let mut expected: Vec<(String, String)> = a_sent
        .iter()
        .map(|id| ("notification.sent".to_owned(), id.clone()))
        .chain([("notification.cancelled".to_owned(), later.clone())])
        .collect();
    expected.sort();
    for answered in [500, 204] {
        let mut got: Vec<(String, String)> = to_a
            .iter()
            .filter(|d| d["status"] == answered)
            .map(what)
            .collect();
        got.sort();
        assert_eq!(got, expected, "answered {answered}");
    }
    // a retry carries the same webhook-id
    for (_, id) in &expected {
        let ids: Vec<&Value> = to_a
            .iter()
            .filter(|d| what(d).1 == *id)
            .map(|d| &d["headers"]["webhook-id"])
            .collect();
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[0], ids[1], "a retry keeps its webhook-id");
    }
    // nothing of a recipient or a message body in any event
    for delivery in to_a.iter().chain(&to_b) {
        let body = delivery["body"].as_str().unwrap();
        assert!(!body.contains("+1555") && !body.contains("4321"), "{body}");
    }

    // the deliveries list shows the retry and the delivery
    let attempts = call(
        &watch,
        "GET",
        a,
        &format!("/webhooks/{a_id}/deliveries"),
        None,
    )
    .await;
    assert_eq!(attempts.status, 200, "{attempts:?}");
    let attempts = attempts.json()["items"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 6, "{attempts:?}");
    assert_eq!(
        attempts.iter().filter(|t| t["status_code"] == 500).count(),
        3
    );
    assert_eq!(
        attempts
            .iter()
            .filter(|t| t["outcome"] == "delivered")
            .count(),
        3
    );
    // and to another organization it does not exist
    let hidden = call(
        &watch,
        "GET",
        b,
        &format!("/webhooks/{a_id}/deliveries"),
        None,
    )
    .await;
    assert_eq!(hidden.status, 404);

    // the bus: a's four events reached the queue through the rule, as their envelopes
    let messages = stand_in::read_queue(&sdk, &queue, 4).await;
    let mut on_bus: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            assert_eq!(m["source"], "notification-service", "{m}");
            assert_eq!(m["detail-type"], "Notification Status Changed", "{m}");
            (
                m["detail"]["type"].as_str().unwrap().to_owned(),
                m["detail"]["data"]["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    on_bus.sort();
    assert_eq!(
        on_bus, expected,
        "only a's events match the rule, each once"
    );

    // the metrics of the dispatch
    let log = watch.log();
    for metric in notify_core::telemetry::emf::EVENT_METRICS {
        assert!(
            log.contains(&format!("\"{metric}\"")),
            "{metric} is not emitted"
        );
    }

    // rotate a's secret: the old one still signs beside the new one
    let rotated = call(
        &watch,
        "POST",
        a,
        &format!("/webhooks/{a_id}/rotate-secret"),
        None,
    )
    .await;
    assert_eq!(rotated.status, 200, "{rotated:?}");
    assert_ne!(rotated.json()["secret"].as_str(), Some(secret));
    let deleted = call(&watch, "DELETE", b, &format!("/webhooks/{a_id}"), None).await;
    assert_eq!(deleted.status, 404, "b cannot delete a's endpoint");
    let deleted = call(&watch, "DELETE", a, &format!("/webhooks/{a_id}"), None).await;
    assert_eq!(deleted.status, 204);
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_urls_to_private_addresses_are_refused_at_registration_and_at_each_call() {
    integration_tests::watch::cargo_lambda();
    let db = TestDb::new().await;
    let dir = scratch_dir("events-ssrf");
    let watch = Watch::start(&settings(&db, &[]).await).await;
    let org = Uuid::new_v4();
    for url in [
        "http://hooks.example.com/in",
        "https://127.0.0.1/in",
        "https://10.1.2.3/in",
        "https://172.16.0.1/in",
        "https://192.168.1.1/in",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/in",
        "https://[fd00::1]/in",
        "https://[fe80::1]/in",
        "https://[::ffff:127.0.0.1]/in",
        "https://224.0.0.1/in",
        "https://0.0.0.0/in",
        "https://localhost/in",
        "https://2130706433/in",
    ] {
        let refused = register(&watch, org, json!({"url": url})).await;
        assert_eq!(refused.status, 400, "{url}: {refused:?}");
        let body = refused.json();
        assert_eq!(body["error"]["fields"][0]["field"], "url", "{url}: {body}");
    }
    let none = call(&watch, "GET", org, "/webhooks", None).await;
    assert_eq!(none.json()["items"], json!([]), "nothing was registered");

    // an endpoint whose host resolves to a private address (written straight to the database,
    // as a DNS change after registration would leave it): this machine's own name, which
    // resolves to a loopback address. The worker refuses it at the call, once resolved, and
    // sends nothing.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("this machine's name")
        .trim()
        .to_owned();
    let addresses: Vec<_> = tokio::net::lookup_host((host.as_str(), 443))
        .await
        .map(|a| a.collect())
        .unwrap_or_default();
    assert!(
        !addresses.is_empty()
            && addresses
                .iter()
                .all(|a| !notify_core::webhooks::ip_allowed(a.ip())),
        "this test needs the machine's name ({host}) to resolve to non-public addresses only, \
         as /etc/hosts makes it on Debian; it resolves to {addresses:?}"
    );
    let receiver = PyReceiver::start(&dir, "private", 0);
    std::fs::write(&receiver.secret, notify_core::webhooks::new_secret()).unwrap();
    let endpoint = Uuid::now_v7();
    db.client()
        .await
        .execute(
            "INSERT INTO webhook_endpoints (id, organization_id, url, secret)
             VALUES ($1, $2, $3, $4)",
            &[
                &endpoint,
                &org,
                &format!("https://{host}:{}/hooks", receiver.port),
                &notify_core::webhooks::new_secret(),
            ],
        )
        .await
        .unwrap();
    send_sms(&watch, org, "+15555550191", json!({})).await;
    let worked = watch.invoke("worker", SCHEDULED, FIRST_CALL).await;
    assert_eq!(worked["events"]["webhooks_failed"], 1, "{worked}");
    let attempts = call(
        &watch,
        "GET",
        org,
        &format!("/webhooks/{endpoint}/deliveries"),
        None,
    )
    .await
    .json();
    let error = attempts["items"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("may not reach"),
        "refused for its address: {attempts}"
    );
    assert_eq!(attempts["items"][0]["status_code"], Value::Null);
    assert!(
        receiver.received().is_empty(),
        "nothing reached the address"
    );
}
