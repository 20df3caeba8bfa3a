//! Routing and the refusals that come before any store call, without a database: the store
//! here fails the test if it is called at all (but for suppressed recipients, when a test
//! gives it a list to answer with: the insert leaves those out).

use std::sync::Arc;

use async_trait::async_trait;
use lambda_http::http::{self, StatusCode};
use lambda_http::{Body, Request, RequestExt};
use uuid::Uuid;

use super::{Ingest, IngestConfig, MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES};
use notify_core::events::{
    ClaimedEvent, ClaimedWebhook, Published, WebhookAttemptView, WebhookEndpoint, WebhookReport,
    WebhookResult,
};
use notify_core::store::*;

/// The API contract's checker, the one the integration tests use: every answer below is
/// checked against functions/ingest/openapi.yaml.
use api_contract as contract;

/// A store that must never be reached; with a suppression list, `suppressed` answers from it.
#[derive(Default)]
struct Untouchable {
    suppression_list: Option<Vec<String>>,
}

fn touched<T>(what: &str) -> Result<T, StoreError> {
    panic!("the store was called ({what}): this request should have been refused before")
}

#[async_trait]
impl JobStore for Untouchable {
    async fn insert(&self, job: &NewJob) -> Result<Inserted, StoreError> {
        let mut answers = self.insert_many(std::slice::from_ref(job)).await?;
        Ok(answers.remove(0))
    }
    /// Only jobs to recipients on the suppression list, which the insert leaves out.
    async fn insert_many(&self, jobs: &[NewJob]) -> Result<Vec<Inserted>, StoreError> {
        match &self.suppression_list {
            Some(list)
                if jobs
                    .iter()
                    .all(|job| list.iter().any(|r| job.payload["to"] == r.as_str())) =>
            {
                Ok(jobs.iter().map(|_| Inserted::Suppressed).collect())
            }
            _ => touched("insert_many"),
        }
    }
    async fn get(&self, _: Uuid, _: Uuid) -> Result<Option<JobView>, StoreError> {
        touched("get")
    }
    async fn cancel(&self, _: Uuid, _: Uuid) -> Result<Transition, StoreError> {
        touched("cancel")
    }
    async fn requeue(&self, _: Uuid, _: Uuid) -> Result<Transition, StoreError> {
        touched("requeue")
    }
    async fn list(
        &self,
        _: Uuid,
        _: Option<notify_core::domain::JobStatus>,
        _: Option<ListCursor>,
        _: u32,
    ) -> Result<Vec<JobView>, StoreError> {
        touched("list")
    }
    async fn claim(&self, _: Claim) -> Result<Vec<ClaimedJob>, StoreError> {
        touched("claim")
    }
    async fn complete(&self, _: Complete<'_>) -> Result<CompleteReport, StoreError> {
        touched("complete")
    }
    async fn complete_and_claim(
        &self,
        _: CompleteAndClaim<'_>,
    ) -> Result<(CompleteReport, Vec<ClaimedJob>), StoreError> {
        touched("complete_and_claim")
    }
    async fn release(&self, _: Release<'_>) -> Result<Vec<Uuid>, StoreError> {
        touched("release")
    }
    async fn requeue_dead(&self, _: RequeueDead<'_>) -> Result<u64, StoreError> {
        touched("requeue_dead")
    }
    async fn expire(&self, _: Expire) -> Result<u64, StoreError> {
        touched("expire")
    }
    async fn sweep(&self, _: Sweep) -> Result<SweepReport, StoreError> {
        touched("sweep")
    }
    async fn prune_feedback(&self, _: PruneFeedback) -> Result<u64, StoreError> {
        touched("prune_feedback")
    }
    async fn add_history_days(&self, _: At) -> Result<u32, StoreError> {
        touched("add_history_days")
    }
    async fn drop_history_days(&self, _: DropHistoryDays) -> Result<DroppedDays, StoreError> {
        touched("drop_history_days")
    }
    async fn count_ingest(&self, _: CountIngest) -> Result<IngestWindow, StoreError> {
        touched("count_ingest")
    }
    async fn prune_rate_windows(&self, _: At) -> Result<u64, StoreError> {
        touched("prune_rate_windows")
    }
    async fn queue_depth(&self, _: At) -> Result<QueueDepth, StoreError> {
        touched("queue_depth")
    }
}

#[async_trait]
impl SuppressionStore for Untouchable {
    async fn list_suppressions(
        &self,
        _: Uuid,
        _: Option<&str>,
        _: u32,
    ) -> Result<Vec<Suppression>, StoreError> {
        touched("list_suppressions")
    }
    async fn add_suppression(
        &self,
        _: Uuid,
        _: &str,
        _: Option<&str>,
    ) -> Result<(Suppression, bool), StoreError> {
        touched("add_suppression")
    }
    async fn remove_suppression(&self, _: Uuid, _: &str) -> Result<bool, StoreError> {
        touched("remove_suppression")
    }
}

#[async_trait]
impl FeedbackStore for Untouchable {
    async fn record_feedback(&self, _: RecordFeedback<'_>) -> Result<FeedbackReport, StoreError> {
        touched("record_feedback")
    }
    async fn apply_waiting_feedback(&self, _: At) -> Result<FeedbackReport, StoreError> {
        touched("apply_waiting_feedback")
    }
    async fn drop_unmatched_feedback(&self, _: DropUnmatchedFeedback) -> Result<u64, StoreError> {
        touched("drop_unmatched_feedback")
    }
}

#[async_trait]
impl EventStore for Untouchable {
    async fn claim_events(
        &self,
        _: u32,
        _: std::time::Duration,
    ) -> Result<Vec<ClaimedEvent>, StoreError> {
        touched("claim_events")
    }
    async fn complete_events(&self, _: &[Published]) -> Result<u64, StoreError> {
        touched("complete_events")
    }
    async fn claim_webhooks(&self, _: u32, _: u32) -> Result<Vec<ClaimedWebhook>, StoreError> {
        touched("claim_webhooks")
    }
    async fn complete_webhooks(&self, _: &[WebhookResult]) -> Result<WebhookReport, StoreError> {
        touched("complete_webhooks")
    }
    async fn any_webhook_endpoint(&self) -> Result<bool, StoreError> {
        touched("any_webhook_endpoint")
    }
    async fn webhook_backlog_age(&self) -> Result<std::time::Duration, StoreError> {
        touched("webhook_backlog_age")
    }
    async fn sweep_dispatch(&self, _: std::time::Duration) -> Result<(u64, u64), StoreError> {
        touched("sweep_dispatch")
    }
    async fn prune_events(&self, _: u32, _: u32) -> Result<(u64, u64), StoreError> {
        touched("prune_events")
    }
    async fn create_webhook(
        &self,
        _: Uuid,
        _: &str,
        _: Option<&[String]>,
        _: &str,
    ) -> Result<Option<WebhookEndpoint>, StoreError> {
        touched("create_webhook")
    }
    async fn list_webhooks(&self, _: Uuid) -> Result<Vec<WebhookEndpoint>, StoreError> {
        touched("list_webhooks")
    }
    async fn delete_webhook(&self, _: Uuid, _: Uuid) -> Result<bool, StoreError> {
        touched("delete_webhook")
    }
    async fn rotate_webhook_secret(
        &self,
        _: Uuid,
        _: Uuid,
        _: &str,
        _: std::time::Duration,
    ) -> Result<Option<WebhookEndpoint>, StoreError> {
        touched("rotate_webhook_secret")
    }
    async fn list_webhook_attempts(
        &self,
        _: Uuid,
        _: Uuid,
        _: u32,
    ) -> Result<Option<Vec<WebhookAttemptView>>, StoreError> {
        touched("list_webhook_attempts")
    }
}

/// The service under test; every answer it gives is checked against the API contract.
struct Checked(Ingest);

impl Checked {
    async fn handle(&self, req: Request) -> lambda_http::Response<Body> {
        contract::checked(req, |req| self.0.handle(req)).await
    }
}

fn ingest() -> Checked {
    ingest_over(Untouchable::default())
}

fn ingest_over(store: Untouchable) -> Checked {
    Checked(Ingest::new(
        Arc::new(store),
        IngestConfig {
            allow_org_header: true,
            ..IngestConfig::default()
        },
    ))
}

const ORG: &str = "0b9d8c1e-0000-4000-8000-000000000001";

fn request(method: &str, path: &str, content_type: Option<&str>, body: &str) -> Request {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("x-organization-id", ORG);
    if let Some(ct) = content_type {
        builder = builder.header("content-type", ct);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}

/// The status, the error code and the `Allow` header of the answer.
async fn refusal(req: Request) -> (StatusCode, String, Option<String>) {
    let response = ingest().handle(req).await;
    let body: serde_json::Value = match response.body() {
        Body::Text(text) => serde_json::from_str(text).unwrap(),
        other => panic!("a JSON text body, got {other:?}"),
    };
    let allow = response
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_owned());
    (
        response.status(),
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        allow,
    )
}

/// Each request is refused 400 with its error code.
async fn all_refused_400(cases: impl IntoIterator<Item = (Request, &str)>) {
    for (req, expected) in cases {
        let what = format!("{} {}", req.method(), req.uri());
        let (status, code, _) = refusal(req).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, expected),
            "{what}"
        );
    }
}

const SMS: &str = r#"{"channel":"sms","to":"+15555550100","message":"hi"}"#;
const JSON: Option<&str> = Some("application/json");

#[tokio::test]
async fn unknown_paths_are_404() {
    for path in [
        "/",
        "/notification",
        "/notifications/a/b/c",
        "/v2/notifications/x/retry",
        "/suppression",
        "/suppressions/a/b",
    ] {
        let (status, code, _) = refusal(request("GET", path, None, "")).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn wrong_methods_are_405_with_allow() {
    let id = Uuid::new_v4();
    for (method, path, allow) in [
        ("DELETE", "/notifications".to_owned(), "GET, POST"),
        ("PUT", format!("/notifications/{id}"), "GET"),
        ("GET", "/notifications/batch".to_owned(), "POST"),
        ("GET", format!("/notifications/{id}/cancel"), "POST"),
        ("DELETE", format!("/notifications/{id}/requeue"), "POST"),
        ("DELETE", "/suppressions".to_owned(), "GET, POST"),
        ("PUT", "/suppressions".to_owned(), "GET, POST"),
        ("GET", "/suppressions/%2B15555550100".to_owned(), "DELETE"),
        (
            "POST",
            "/suppressions/user%40example.com".to_owned(),
            "DELETE",
        ),
    ] {
        let (status, code, allowed) = refusal(request(method, &path, None, "")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(code, "method_not_allowed");
        assert_eq!(allowed.as_deref(), Some(allow), "{method} {path}");
    }
}

#[tokio::test]
async fn a_request_without_an_organization_is_401() {
    let req = http::Request::builder()
        .method("POST")
        .uri("/notifications")
        .header("content-type", "application/json")
        .body(Body::from(SMS))
        .unwrap();
    let (status, code, _) = refusal(req).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let mut req = request("POST", "/notifications", JSON, SMS);
    req.headers_mut()
        .insert("x-organization-id", "not-a-uuid".parse().unwrap());
    assert_eq!(refusal(req).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn bodies_that_are_not_json_are_415() {
    for content_type in [None, Some("text/plain"), Some("application/xml")] {
        let (status, code, _) = refusal(request("POST", "/notifications", content_type, SMS)).await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
        assert_eq!(code, "unsupported_media_type");
    }
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let single = " ".repeat(MAX_BODY_BYTES + 1);
    let batch = " ".repeat(MAX_BATCH_BODY_BYTES + 1);
    for (path, body) in [
        ("/notifications", &single),
        ("/notifications/batch", &batch),
    ] {
        let (status, code, _) = refusal(request("POST", path, JSON, body)).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        );
    }
}

#[tokio::test]
async fn bad_json_bad_fields_bad_ids_and_bad_keys_are_400() {
    let cases = [
        (request("POST", "/notifications", JSON, "{"), "invalid_json"),
        (
            request("POST", "/notifications", JSON, r#"{"channel":"fax"}"#),
            "validation_failed",
        ),
        (
            request(
                "POST",
                "/notifications",
                JSON,
                r#"{"channel":"sms","to":"+15555550100","message":"hi","priority":"urgent"}"#,
            ),
            "validation_failed",
        ),
        (
            request("GET", "/notifications/not-a-uuid", None, ""),
            "invalid_id",
        ),
        (
            request("POST", "/notifications/not-a-uuid/cancel", None, ""),
            "invalid_id",
        ),
        (
            request("GET", "/notifications", None, "").with_query_string_parameters(
                std::collections::HashMap::from([("status".to_owned(), "lost".to_owned())]),
            ),
            "validation_failed",
        ),
    ];
    all_refused_400(cases).await;
    let mut req = request("POST", "/notifications", JSON, SMS);
    req.headers_mut()
        .insert("idempotency-key", "has space".parse().unwrap());
    assert_eq!(refusal(req).await.1, "invalid_idempotency_key");
}

fn with_query(req: Request, pairs: &[(&str, &str)]) -> Request {
    req.with_query_string_parameters(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<std::collections::HashMap<_, _>>(),
    )
}

#[tokio::test]
async fn the_suppression_routes_refuse_bad_requests_before_the_store() {
    let cases = [
        (
            request(
                "POST",
                "/suppressions",
                JSON,
                r#"{"recipient":"15555550100"}"#,
            ),
            "validation_failed",
        ),
        (
            request(
                "POST",
                "/suppressions",
                JSON,
                r#"{"recipient":"a@example.com","reason":"bounce"}"#,
            ),
            "validation_failed",
        ),
        (request("POST", "/suppressions", JSON, "{"), "invalid_json"),
        (
            with_query(request("GET", "/suppressions", None, ""), &[("limit", "0")]),
            "validation_failed",
        ),
        (
            with_query(
                request("GET", "/suppressions", None, ""),
                &[("limit", "501")],
            ),
            "validation_failed",
        ),
        (
            with_query(
                request("GET", "/suppressions", None, ""),
                &[("cursor", "not-a-cursor")],
            ),
            "validation_failed",
        ),
        (
            request("DELETE", "/suppressions/%FF%FE", None, ""),
            "invalid_recipient",
        ),
    ];
    all_refused_400(cases).await;
    let (status, code, _) = refusal(request("POST", "/suppressions", None, "{}")).await;
    assert_eq!(
        (status, code.as_str()),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    let big = format!(
        r#"{{"recipient":"a@example.com","detail":"{}"}}"#,
        "x".repeat(MAX_BODY_BYTES)
    );
    let (status, _, _) = refusal(request("POST", "/suppressions", JSON, &big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn the_suppression_routes_need_an_organization() {
    for (method, path) in [
        ("GET", "/suppressions"),
        ("POST", "/suppressions"),
        ("DELETE", "/suppressions/%2B15555550100"),
    ] {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(r#"{"recipient":"+15555550100"}"#))
            .unwrap();
        let (status, code, _) = refusal(req).await;
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{method} {path}"
        );
    }
}

#[test]
fn a_listing_by_an_unknown_status_names_every_status() {
    let query: lambda_http::aws_lambda_events::query_map::QueryMap =
        std::collections::HashMap::from([("status".to_owned(), "lost".to_owned())]).into();
    let errors = super::listing::ListQuery::parse(&query).unwrap_err();
    for status in notify_core::domain::JobStatus::ALL {
        assert!(
            errors[0].message.contains(status.as_str()),
            "{}",
            errors[0].message
        );
    }
}

#[tokio::test]
async fn a_suppressed_recipient_is_refused_422_and_nothing_is_inserted() {
    let ingest = ingest_over(Untouchable {
        suppression_list: Some(vec!["+15555550100".into(), "user@example.com".into()]),
    });
    let email = r#"{"channel":"email","to":"User@Example.COM","subject":"s","text":"t"}"#;
    for body in [SMS, email] {
        let response = ingest
            .handle(request("POST", "/notifications", JSON, body))
            .await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
        let Body::Text(text) = response.body() else {
            panic!("a JSON text body")
        };
        let answer: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(answer["error"]["code"], "recipient_suppressed");
        assert_eq!(answer["error"]["fields"][0]["field"], "to");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("DELETE /suppressions/"), "{message}");
    }
}

/// The router and the spec name the same operations, in both directions. The router's list
/// comes from the router itself: `route` is asked about every method on every path shape the
/// spec or the router's own route names (the `"METHOD /template"` literals of http.rs) have,
/// and a few it has not; what it serves is compared with the spec's operations.
#[test]
fn the_router_serves_exactly_the_operations_of_the_spec() {
    let spec = contract::contract().operations();
    let source = include_str!("http.rs");
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    let named_in_router: std::collections::BTreeSet<String> = source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|literal| {
            literal
                .split_once(" /")
                .is_some_and(|(method, _)| methods.contains(&method))
        })
        .map(str::to_owned)
        .collect();
    assert!(
        !named_in_router.is_empty(),
        "route names are \"METHOD /template\" literals in http.rs"
    );
    let mut templates: std::collections::BTreeSet<String> = spec
        .iter()
        .chain(&named_in_router)
        .map(|op| op.split_once(' ').unwrap().1.to_owned())
        .collect();
    for shape in [
        "/",
        "/organizations",
        "/notifications/{id}/retry",
        "/notifications/batch/{id}",
        "/notifications/{id}/cancel/{id}",
        "/suppressions/{recipient}/extra",
    ] {
        templates.insert(shape.to_owned());
    }
    let id = Uuid::new_v4().to_string();
    let mut served = std::collections::BTreeSet::new();
    for template in &templates {
        let path = template
            .replace("{id}", &id)
            .replace("{recipient}", "a%40example.com");
        for method in methods {
            if let Ok((_, name)) = super::http::route(&request(method, &path, None, "")) {
                assert_eq!(name, format!("{method} {template}"), "{method} {path}");
                served.insert(name.to_owned());
            }
        }
    }
    assert_eq!(
        served, spec,
        "the router serves (left) what functions/ingest/openapi.yaml declares (right)"
    );
    assert!(
        named_in_router.is_subset(&served),
        "every route name in http.rs is served: {named_in_router:?}"
    );
}
