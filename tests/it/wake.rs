//! The wake through the real Lambda SDK (notify-lambda's invoker) when Lambda does not
//! answer as hoped: it refuses (its own error on the wire, which the SDK reads), it cannot be
//! reached, or it never answers (as `cargo lambda watch` does until the worker returns). A
//! request is answered at once either way, its job is kept for the schedule, and a refused
//! wake is counted by the code Lambda gave.

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::TestDb;
use integration_tests::apigw::{ApiRequest, Version, new_org, parts};
use integration_tests::contract::Ingest;
use integration_tests::proxy::Proxy;
use lambda_http::http::StatusCode;
use notify_api::IngestConfig;
use notify_core::fleet::{self, FleetStore, Invoker, TakeWake, Wake, WakeEvent, WakeReason, Waker};
use notify_lambda::LambdaInvoker;
use serde_json::json;

/// The SDK's settings with the Lambda endpoint at `endpoint` (test credentials and region).
async fn sdk(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sns::config::Credentials::new(
            "testing", "testing", None, None, "tests",
        ))
        .endpoint_url(endpoint)
        .load()
        .await
}

/// Lambda refusing an invocation as it does when the function's reserved concurrency is used
/// up: 429, `TooManyRequestsException` in the error-type header and the body (Lambda API
/// reference, Invoke, Errors).
fn too_many_requests() -> Vec<u8> {
    let body = r#"{"Reason":"ReservedFunctionConcurrentInvocationLimitExceeded","Type":"User","message":"Rate Exceeded."}"#;
    format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n\
         x-amzn-ErrorType: TooManyRequestsException\r\n\
         x-amzn-RequestId: 6b1e6bd0-0000-4000-8000-000000000000\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn event() -> WakeEvent {
    WakeEvent {
        lease: uuid::Uuid::new_v4(),
        reason: WakeReason::Accepted,
    }
}

#[tokio::test]
async fn a_refused_wake_fails_with_lambdas_own_error_code() {
    let lambda = Proxy::answering(too_many_requests()).await;
    let invoker = LambdaInvoker::new(&sdk(&lambda.endpoint()).await, "notifications-worker");
    let err = invoker.invoke(&event()).await.unwrap_err();
    assert_eq!(err.code, "TooManyRequestsException", "{err:?}");
    assert!(lambda.answered() >= 1);
    // started in its task, the same start ends Failed (and counts WakeFailed)
    let started = fleet::start(Arc::new(invoker), event()).await.unwrap();
    assert_eq!(started, fleet::Started::Failed);
}

#[tokio::test]
async fn an_unreachable_lambda_fails_the_wake_not_the_request() {
    let db = TestDb::new().await;
    // a port nothing listens on
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let invoker = LambdaInvoker::new(&sdk(&endpoint).await, "notifications-worker");
    let err = invoker.invoke(&event()).await.unwrap_err();
    assert_eq!(err.code, "dispatch", "{err:?}");

    let store = Arc::new(db.store().await);
    let ingest = Ingest::new(store.clone(), IngestConfig::default())
        .with_waker(Waker::new(store.clone(), Arc::new(invoker)));
    let asked = Instant::now();
    let response = ingest
        .handle(
            ApiRequest::post(
                Version::V2,
                &json!({"channel": "sms", "to": "+15555550100", "message": "Your code is 1"}),
            )
            .org(new_org())
            .build(),
        )
        .await;
    let (status, body) = parts(&response);
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "the answer waited {:?}",
        asked.elapsed()
    );
    let queued =
        integration_tests::count(&db.client().await, "SELECT count(*) FROM job_queue").await;
    assert_eq!(queued, 1, "the job is kept for the schedule");
    // the failed wake keeps its slot until its join window is over: no second wake meanwhile
    assert_eq!(
        store
            .wake(TakeWake {
                join_within: fleet::JOIN_WITHIN,
                only_if_due: false,
                now: None,
            })
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_lambda_that_never_answers_holds_the_request_a_quarter_second_at_most() {
    let db = TestDb::new().await;
    // accepts connections and reads, never answers: Lambda hung, or cargo lambda watch
    // holding an event invocation's answer until the worker returns
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        loop {
            let (socket, _) = silent.accept().await.unwrap();
            open.push(socket);
        }
    });
    let invoker = LambdaInvoker::new(&sdk(&endpoint).await, "notifications-worker");
    let store = Arc::new(db.store().await);
    let waker = Waker::new(store.clone(), Arc::new(invoker));
    let asked = Instant::now();
    assert_eq!(
        waker.wake(WakeReason::Accepted).await,
        Wake::Started(fleet::Started::Pending)
    );
    let waited = asked.elapsed();
    assert!(
        waited >= fleet::WAKE_WAIT && waited < fleet::WAKE_WAIT + Duration::from_millis(250),
        "waited {waited:?}"
    );
    held.abort();
}
