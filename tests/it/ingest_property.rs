//! Property test: whatever a client sends, the handler answers without panicking, never
//! with a 5xx, and rows exist only for the requests it accepted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use integration_tests::TestDb;
use integration_tests::apigw::{ApiRequest, Version, parts};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
// every answer checked against the API contract (functions/ingest/openapi.yaml)
use integration_tests::contract::Ingest;
use notify_api::IngestConfig;

const FIELDS: &[&str] = &[
    "channel",
    "to",
    "message",
    "subject",
    "text",
    "html",
    "reply_to",
    "send_at",
    "max_attempts",
    "priority",
    "organization_id",
    "id",
    "status",
];
const ORGS: &[&str] = &[
    "0b9d8c1e-0000-4000-8000-00000000000a",
    "0b9d8c1e-0000-4000-8000-00000000000b",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z]{1,12}",
        "\\PC{0,40}", // any unicode, no control chars
        ".{0,20}",    // incl. NUL and controls
        Just("\u{0}".to_owned()),
        Just("'; DROP TABLE notification_jobs; --".to_owned()),
        Just("\u{202e}\u{fffd}\u{10ffff}😀\u{200b}".to_owned()),
        (0usize..3000).prop_map(|n| "x".repeat(n)),
        Just("+15555550100".to_owned()),
        Just("+0123".to_owned()),
        Just("a@example.com".to_owned()),
        Just("sms".to_owned()),
        Just("email".to_owned()),
        Just("2030-01-01T00:00:00Z".to_owned()),
        Just("9999-12-31T23:59:59Z".to_owned()),
        Just("high".to_owned()),
        Just("low".to_owned()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-3i64..25).prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    prop::sample::select(FIELDS).prop_map(str::to_owned),
                    "[a-z_]{1,10}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid request with some fields replaced, dropped or added.
fn mutated() -> impl Strategy<Value = Value> {
    let base = prop_oneof![
        Just(json!({"channel": "sms", "to": "+15555550100", "message": "hello"})),
        Just(json!({"channel": "email", "to": "a@example.com", "subject": "s", "text": "t"})),
        Just(
            json!({"channel": "email", "to": "a@example.com", "subject": "s", "html": "<b>h</b>",
                    "reply_to": "r@example.com", "max_attempts": 3, "send_at": "2020-01-01T00:00:00Z"})
        ),
    ];
    (
        base,
        prop::collection::vec(
            (prop::sample::select(FIELDS), prop::option::of(json_value())),
            0..3,
        ),
    )
        .prop_map(|(mut body, edits)| {
            let obj: &mut Map<String, Value> = body.as_object_mut().unwrap();
            for (field, value) in edits {
                match value {
                    Some(v) => obj.insert(field.to_owned(), v),
                    None => obj.remove(field),
                };
            }
            body
        })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => mutated().prop_map(|v| v.to_string().into_bytes()),
        2 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..200),       // bad UTF-8 and garbage
        1 => (60_000usize..70_000).prop_map(|n| format!("{{\"channel\":\"sms\",\"to\":\"+15555550100\",\"message\":\"{}\"}}", "y".repeat(n)).into_bytes()),
        1 => (1usize..3000).prop_map(|depth| format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()),
    ]
}

fn header_value() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        "[!-~]{1,20}",
        "[ -~]{0,300}",
        "\\PC{1,10}",
        Just("k1".to_owned()),
        Just("k2".to_owned()),
    ])
}

#[derive(Debug, Clone)]
struct Case {
    version: Version,
    method: &'static str,
    path: &'static str,
    body: Vec<u8>,
    content_type: Option<String>,
    key: Option<String>,
    org: Option<String>,
    org_header: Option<String>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(Version::V2), Just(Version::V1)],
        prop_oneof![8 => Just("POST"), 1 => Just("GET"), 1 => Just("PUT"), 1 => Just("DELETE")],
        prop_oneof![8 => Just("/notifications"), 1 => Just("/notifications/x"), 1 => Just("/"), 1 => Just("/notifications/0b9d8c1e-0000-4000-8000-000000000001")],
        body(),
        prop_oneof![
            6 => Just(Some("application/json".to_owned())),
            1 => Just(Some("application/json; charset=utf-8".to_owned())),
            1 => Just(None),
            1 => header_value(),
        ],
        prop_oneof![3 => Just(None), 1 => header_value()],
        prop_oneof![
            6 => prop::sample::select(ORGS).prop_map(|o| Some(o.to_owned())),
            1 => Just(None),
            1 => text().prop_map(Some),
        ],
        header_value(),
    )
        .prop_map(|(version, method, path, body, content_type, key, org, org_header)| Case {
            version, method, path, body, content_type, key, org, org_header,
        })
}

#[test]
fn ten_thousand_generated_requests_never_panic_never_5xx_and_write_only_when_accepted() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(TestDb::new());
    let store = rt.block_on(db.store());
    let ingest = Ingest::new(
        Arc::new(store),
        IngestConfig {
            allow_org_header: true,
            ..IngestConfig::default()
        },
    );
    let accepted = AtomicUsize::new(0);
    let answered = AtomicUsize::new(0);

    let config = ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(case in case())| {
        let mut request = ApiRequest::new(case.version, case.method, case.path)
            .body(case.body.clone())
            .without_header("content-type");
        if let Some(ct) = &case.content_type { request = request.header("content-type", ct); }
        if let Some(key) = &case.key { request = request.header("idempotency-key", key); }
        if let Some(org) = &case.org { request = request.org(org); }
        if let Some(org) = &case.org_header { request = request.header("x-organization-id", org); }
        // only events lambda_http can parse reach the handler (API Gateway sends valid ones)
        let event = request.event().to_string();
        let Ok(built) = lambda_http::request::from_str(&event) else { return Ok(()); };
        let response = rt.block_on(ingest.handle(built));
        let (status, body) = parts(&response);
        answered.fetch_add(1, Ordering::Relaxed);
        prop_assert!(status.as_u16() < 500, "{} for {:?}: {}", status, case, body);
        if status.as_u16() == 202 {
            accepted.fetch_add(1, Ordering::Relaxed);
        } else if status.is_client_error() {
            prop_assert!(body["error"]["code"].is_string(), "error shape: {}", body);
        }
    });

    let rows: i64 = rt.block_on(async {
        integration_tests::count(&db.client().await, "SELECT count(*) FROM job_requests").await
    });
    let accepted = accepted.load(Ordering::Relaxed);
    assert!(
        answered.load(Ordering::Relaxed) >= 9_000,
        "most cases reached the handler"
    );
    assert!(
        accepted > 100,
        "the generator produces valid requests too: {accepted}"
    );
    assert_eq!(
        rows as usize, accepted,
        "a row for each 202 and for nothing else"
    );
}
