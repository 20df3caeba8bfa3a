//! The ingest handler, called with API Gateway v2 and v1 events, against a real PostgreSQL.

use std::sync::Arc;

use integration_tests::TestDb;
use integration_tests::apigw::{ApiRequest, Version, header, new_org, parts};
use integration_tests::proxy::Proxy;
use lambda_http::http::StatusCode;
use serde_json::{Value, json};
// every answer checked against the API contract (functions/ingest/openapi.yaml)
use integration_tests::contract::Ingest;
use notify_api::IngestConfig;
use notify_postgres::PgStore;

async fn service(db: &TestDb, allow_org_header: bool) -> Ingest {
    Ingest::new(
        Arc::new(db.store().await),
        IngestConfig {
            allow_org_header,
            ..IngestConfig::default()
        },
    )
}

async fn job_count(db: &TestDb) -> i64 {
    integration_tests::count(&db.client().await, "SELECT count(*) FROM job_requests").await
}

fn sms() -> Value {
    json!({"channel": "sms", "to": "+15555550100", "message": "Your invoice is paid"})
}

fn email() -> Value {
    json!({"channel": "email", "to": "ann@example.com", "subject": "Receipt",
           "text": "Thanks", "html": "<p>Thanks</p>", "reply_to": "billing@example.com"})
}

#[tokio::test]
async fn accepted_requests_answer_202_with_location_and_are_persisted() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    for version in [Version::V2, Version::V1] {
        for body in [sms(), email()] {
            let org = new_org();
            let response = ingest
                .handle(ApiRequest::post(version, &body).org(org).build())
                .await;
            let (status, json) = parts(&response);
            assert_eq!(status, StatusCode::ACCEPTED, "{version:?} {json}");
            assert_eq!(json["status"], "pending");
            let id = json["id"].as_str().unwrap().to_owned();
            assert!(json["next_attempt_at"].is_string());
            assert_eq!(
                header(&response, "location"),
                Some(format!("/notifications/{id}").as_str())
            );
            assert!(header(&response, "x-request-id").is_some_and(|v| !v.is_empty()));

            let row = db
                .client()
                .await
                .query_one(
                    "SELECT organization_id, channel, payload, 'pending', max_attempts
                     FROM job_requests WHERE id = $1::text::uuid",
                    &[&id],
                )
                .await
                .unwrap();
            assert_eq!(row.get::<_, uuid::Uuid>(0), org);
            assert_eq!(row.get::<_, &str>(1), body["channel"].as_str().unwrap());
            let payload: Value = row.get(2);
            assert_eq!(payload["to"], body["to"]);
            assert!(
                payload.get("channel").is_none(),
                "payload holds what delivery needs"
            );
            assert_eq!(row.get::<_, &str>(3), "pending");
            assert_eq!(row.get::<_, i32>(4), 5);
        }
    }
    assert_eq!(job_count(&db).await, 4);
}

#[tokio::test]
async fn get_returns_the_job_with_its_attempts_to_its_organization_only() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    let (a, b) = (new_org(), new_org());
    let created = ingest
        .handle(ApiRequest::post(Version::V2, &email()).org(a).build())
        .await;
    let id = parts(&created).1["id"].as_str().unwrap().to_owned();
    // one recorded attempt, to see it listed
    db.client()
        .await
        .execute(
            "INSERT INTO job_attempts (job_id, job_created_at, attempt, provider, error_code, outcome,
                                       started_at, finished_at)
             SELECT id, created_at, 1, 'ses', 'Throttling', 'retry', now(), now()
             FROM job_requests WHERE id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap();

    for version in [Version::V2, Version::V1] {
        let response = ingest
            .handle(ApiRequest::get(version, &id).org(a).build())
            .await;
        let (status, job) = parts(&response);
        assert_eq!(status, StatusCode::OK, "{version:?} {job}");
        assert_eq!(job["id"], id.as_str());
        assert_eq!(job["channel"], "email");
        assert_eq!(job["to"], "ann@example.com");
        assert_eq!(job["status"], "pending");
        assert_eq!(job["attempts"], 0);
        assert_eq!(job["max_attempts"], 5);
        for key in ["next_attempt_at", "created_at", "updated_at", "last_error"] {
            assert!(job.get(key).is_some(), "{key} in {job}");
        }
        assert_eq!(job["deliveries"][0]["attempt"], 1);
        assert_eq!(job["deliveries"][0]["error_code"], "Throttling");

        // another organization's job is not found, like an unknown id
        let (status, err) = parts(
            &ingest
                .handle(ApiRequest::get(version, &id).org(b).build())
                .await,
        );
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(err["error"]["code"], "not_found");
        let unknown = uuid::Uuid::new_v4().to_string();
        let (status, _) = parts(
            &ingest
                .handle(ApiRequest::get(version, &unknown).org(a).build())
                .await,
        );
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, err) = parts(
            &ingest
                .handle(ApiRequest::get(version, "not-a-uuid").org(a).build())
                .await,
        );
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(err["error"]["code"], "invalid_id");
    }
}

/// Every refusal: the right status and code, the common error shape, and nothing written.
#[tokio::test]
async fn refusals_have_the_common_shape_and_write_nothing() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    let org = new_org();
    let big = json!({"channel": "sms", "to": "+15555550100", "message": "x".repeat(70_000)});
    let cases: Vec<(&str, ApiRequest, StatusCode, &str)> = vec![
        ("invalid JSON", ApiRequest::new(Version::V2, "POST", "/notifications").body("{\"channel\":").org(org), StatusCode::BAD_REQUEST, "invalid_json"),
        ("invalid fields", ApiRequest::post(Version::V2, &json!({"channel": "sms", "to": "12", "message": ""})).org(org), StatusCode::BAD_REQUEST, "validation_failed"),
        ("unknown field", ApiRequest::post(Version::V1, &json!({"channel": "sms", "to": "+15555550100", "message": "x", "mesage": "typo"})).org(org), StatusCode::BAD_REQUEST, "validation_failed"),
        ("body names an organization", ApiRequest::post(Version::V2, &json!({"channel": "sms", "to": "+15555550100", "message": "x", "organization_id": new_org()})).org(org), StatusCode::BAD_REQUEST, "validation_failed"),
        ("too large", ApiRequest::post(Version::V2, &big).org(org), StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        ("form content type", ApiRequest::post(Version::V2, &sms()).header("content-type", "application/x-www-form-urlencoded").org(org), StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
        ("no content type", ApiRequest::post(Version::V1, &sms()).without_header("content-type").org(org), StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
        ("no organization", ApiRequest::post(Version::V2, &sms()), StatusCode::UNAUTHORIZED, "unauthorized"),
        ("no organization v1", ApiRequest::post(Version::V1, &sms()), StatusCode::UNAUTHORIZED, "unauthorized"),
        ("organization not a UUID", ApiRequest::post(Version::V2, &sms()).org("acme"), StatusCode::UNAUTHORIZED, "unauthorized"),
        ("header not honoured by default", ApiRequest::post(Version::V2, &sms()).header("x-organization-id", &org.to_string()), StatusCode::UNAUTHORIZED, "unauthorized"),
        ("bad idempotency key", ApiRequest::post(Version::V2, &sms()).header("idempotency-key", "has space").org(org), StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
        ("overlong idempotency key", ApiRequest::post(Version::V2, &sms()).header("idempotency-key", &"k".repeat(256)).org(org), StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
        ("other path", ApiRequest::new(Version::V2, "GET", "/users").org(org), StatusCode::NOT_FOUND, "not_found"),
        ("deeper path", ApiRequest::new(Version::V1, "GET", "/notifications/a/b").org(org), StatusCode::NOT_FOUND, "not_found"),
        ("other method", ApiRequest::new(Version::V2, "DELETE", "/notifications").org(org), StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        ("other method on a job", ApiRequest::new(Version::V1, "PUT", "/notifications/0b9d8c1e-0000-4000-8000-000000000001").org(org), StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
    ];
    for (name, request, status, code) in cases {
        let response = ingest.handle(request.build()).await;
        let (got, body) = parts(&response);
        assert_eq!(got, status, "{name}: {body}");
        assert_eq!(body["error"]["code"], code, "{name}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{name}"
        );
        assert!(body["error"]["fields"].is_array(), "{name}");
        assert!(header(&response, "x-request-id").is_some(), "{name}");
        assert_eq!(
            header(&response, "content-type"),
            Some("application/json"),
            "{name}"
        );
    }
    assert_eq!(job_count(&db).await, 0, "no refusal wrote a row");
}

#[tokio::test]
async fn every_invalid_field_is_named_in_the_answer() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    let body =
        json!({"channel": "email", "to": "nope", "subject": "", "max_attempts": 99, "extra": 1});
    let (status, err) = parts(
        &ingest
            .handle(ApiRequest::post(Version::V2, &body).org(new_org()).build())
            .await,
    );
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let mut fields: Vec<&str> = err["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    fields.sort();
    assert_eq!(fields, ["extra", "max_attempts", "subject", "text", "to"]);
}

#[tokio::test]
async fn the_org_header_is_honoured_only_when_allowed_and_never_over_the_authorizer() {
    let db = TestDb::new().await;
    let local = service(&db, true).await;
    let (header_org, authorizer_org) = (new_org(), new_org());
    let (status, created) = parts(
        &local
            .handle(
                ApiRequest::post(Version::V2, &sms())
                    .header("x-organization-id", &header_org.to_string())
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = created["id"].as_str().unwrap();
    let (status, _) = parts(
        &local
            .handle(
                ApiRequest::get(Version::V2, id)
                    .header("x-organization-id", &header_org.to_string())
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::OK);
    // with an authorizer present, the header cannot choose another organization
    let (status, created) = parts(
        &local
            .handle(
                ApiRequest::post(Version::V2, &sms())
                    .org(authorizer_org)
                    .header("x-organization-id", &header_org.to_string())
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::ACCEPTED);
    let owner: uuid::Uuid = db
        .client()
        .await
        .query_one(
            "SELECT organization_id FROM job_requests WHERE id = $1::text::uuid",
            &[&created["id"].as_str().unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(owner, authorizer_org);
}

#[tokio::test]
async fn a_repeated_key_returns_the_first_job_and_another_body_conflicts() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    let org = new_org();
    let first = ingest
        .handle(
            ApiRequest::post(Version::V2, &sms())
                .org(org)
                .header("idempotency-key", "invoice-42")
                .build(),
        )
        .await;
    let (status, first) = parts(&first);
    assert_eq!(status, StatusCode::ACCEPTED);

    // same body, other spelling (field order, whitespace): 200 with the original job
    let respelled =
        r#"{ "message": "Your invoice is paid", "to": "+15555550100", "channel": "sms" }"#;
    let again = ingest
        .handle(
            ApiRequest::new(Version::V1, "POST", "/notifications")
                .body(respelled)
                .org(org)
                .header("idempotency-key", "invoice-42")
                .build(),
        )
        .await;
    let (status, again) = parts(&again);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["id"], first["id"]);

    let mut other = sms();
    other["message"] = json!("Another text");
    let (status, err) = parts(
        &ingest
            .handle(
                ApiRequest::post(Version::V2, &other)
                    .org(org)
                    .header("idempotency-key", "invoice-42")
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(err["error"]["code"], "idempotency_key_reused");
    assert_eq!(job_count(&db).await, 1);

    // keys belong to their organization: another tenant's same key is a new job
    let (status, theirs) = parts(
        &ingest
            .handle(
                ApiRequest::post(Version::V2, &other)
                    .org(new_org())
                    .header("idempotency-key", "invoice-42")
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_ne!(theirs["id"], first["id"]);
    assert_eq!(job_count(&db).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_repeats_of_one_key_make_one_job() {
    let db = TestDb::new().await;
    let org = new_org();
    let mut calls = Vec::new();
    for _ in 0..20 {
        // each caller on its own connection, as separate Lambda instances would be
        let ingest = Arc::new(service(&db, false).await);
        let request = ApiRequest::post(Version::V2, &email())
            .org(org)
            .header("idempotency-key", "welcome-7");
        calls.push(tokio::spawn(async move {
            parts(&ingest.handle(request.build()).await)
        }));
    }
    let mut ids = std::collections::HashSet::new();
    let mut accepted = 0;
    for call in calls {
        let (status, body) = call.await.unwrap();
        assert!(
            status == StatusCode::ACCEPTED || status == StatusCode::OK,
            "{status} {body}"
        );
        accepted += usize::from(status == StatusCode::ACCEPTED);
        ids.insert(body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 1, "every answer names the same job");
    assert_eq!(accepted, 1, "exactly one 202, the others 200");
    assert_eq!(job_count(&db).await, 1);
}

/// The race the key's plain insert leaves (insert_jobs.sql): a repeat whose statement
/// starts while the first holds the key uncommitted waits for it, fails on the key, and is
/// run again by the store, which then answers the first's job (200). Forced here: the first's
/// queue row takes 500 ms to insert, after its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repeat_racing_an_uncommitted_key_answers_the_first_job() {
    let db = TestDb::new().await;
    let org = new_org();
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE FUNCTION slow_queue_insert() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$;
             CREATE TRIGGER slow_queue_insert AFTER INSERT ON job_queue
                 FOR EACH STATEMENT EXECUTE FUNCTION slow_queue_insert();",
        )
        .await
        .unwrap();
    let request = || {
        ApiRequest::post(Version::V2, &email())
            .org(org)
            .header("idempotency-key", "welcome-8")
            .build()
    };
    let (first, repeat) = (
        Arc::new(service(&db, false).await),
        Arc::new(service(&db, false).await),
    );
    let first = tokio::spawn({
        let request = request();
        async move { parts(&first.handle(request).await) }
    });
    // the repeat starts once the first holds its key, uncommitted
    integration_tests::until_a_statement_sleeps(&client).await;
    let (status, again) = parts(&repeat.handle(request()).await);
    let (first_status, first) = first.await.unwrap();
    assert_eq!(first_status, StatusCode::ACCEPTED, "{first}");
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], first["id"]);
    assert_eq!(job_count(&db).await, 1);
}

/// The priority a request asked for, as stored: the request's and its queue row's.
/// A job's priority as its request and its queue row hold it.
pub(crate) async fn stored_priority(db: &TestDb, id: &str) -> (String, String) {
    let row = db
        .client()
        .await
        .query_one(
            "SELECT r.priority::text, q.priority::text
             FROM job_requests AS r JOIN job_queue AS q USING (id)
             WHERE r.id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn a_priority_is_stored_and_read_back_by_get_and_the_listing_and_defaults_to_normal() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    let org = new_org();
    let mut high = sms();
    high["priority"] = json!("high");
    let mut low = email();
    low["priority"] = json!("low");
    let mut ids = Vec::new();
    for (body, expected) in [(high, "high"), (email(), "normal"), (low, "low")] {
        let (status, created) = parts(
            &ingest
                .handle(ApiRequest::post(Version::V2, &body).org(org).build())
                .await,
        );
        assert_eq!(status, StatusCode::ACCEPTED, "{created}");
        let id = created["id"].as_str().unwrap().to_owned();
        assert_eq!(
            stored_priority(&db, &id).await,
            (expected.to_owned(), expected.to_owned()),
            "the request and its queue row (which the claim reads)"
        );
        for version in [Version::V2, Version::V1] {
            let (status, job) = parts(
                &ingest
                    .handle(ApiRequest::get(version, &id).org(org).build())
                    .await,
            );
            assert_eq!(status, StatusCode::OK, "{job}");
            assert_eq!(job["priority"], expected, "{version:?}");
        }
        ids.push((id, expected));
    }
    let (status, page) = parts(
        &ingest
            .handle(
                ApiRequest::new(Version::V2, "GET", "/notifications")
                    .org(org)
                    .build(),
            )
            .await,
    );
    assert_eq!(status, StatusCode::OK, "{page}");
    let listed: Vec<(String, &str)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| {
            (
                job["id"].as_str().unwrap().to_owned(),
                job["priority"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, ids, "oldest first, each with its priority");
    // filtered pages are read otherwise (the queue's rows): the same priorities
    let (_, pending) = parts(
        &ingest
            .handle(
                ApiRequest::new(Version::V1, "GET", "/notifications?status=pending")
                    .org(org)
                    .build(),
            )
            .await,
    );
    assert_eq!(pending["items"][0]["priority"], "high", "{pending}");
}

#[tokio::test]
async fn an_invalid_priority_is_a_400_naming_the_field_and_writes_nothing() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    for (version, bad) in [
        (Version::V2, json!("urgent")),
        (Version::V1, json!("HIGH")),
        (Version::V2, json!("")),
        (Version::V2, json!(1)),
        (Version::V1, json!(null)),
        (Version::V2, json!(["high"])),
    ] {
        let mut body = sms();
        body["priority"] = bad.clone();
        let (status, err) = parts(
            &ingest
                .handle(ApiRequest::post(version, &body).org(new_org()).build())
                .await,
        );
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {err}");
        assert_eq!(err["error"]["code"], "validation_failed", "{bad}");
        assert_eq!(
            err["error"]["fields"],
            json!([{"field": "priority", "message": "must be \"high\", \"normal\" or \"low\""}]),
            "{bad}"
        );
    }
    assert_eq!(job_count(&db).await, 0, "no refusal wrote a row");
}

#[tokio::test]
async fn a_repeated_key_with_another_priority_conflicts_and_normal_is_no_priority() {
    let db = TestDb::new().await;
    let ingest = service(&db, false).await;
    let org = new_org();
    let send = |body: Value| {
        let ingest = &ingest;
        async move {
            parts(
                &ingest
                    .handle(
                        ApiRequest::post(Version::V2, &body)
                            .org(org)
                            .header("idempotency-key", "login-7")
                            .build(),
                    )
                    .await,
            )
        }
    };
    let (status, first) = send(sms()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let mut normal = sms();
    normal["priority"] = json!("normal");
    let (status, again) = send(normal).await;
    assert_eq!(
        (status, &again["id"]),
        (StatusCode::OK, &first["id"]),
        "the default spelled out is the same request"
    );
    let mut high = sms();
    high["priority"] = json!("high");
    let (status, err) = send(high).await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"]["code"], "idempotency_key_reused");
    assert_eq!(job_count(&db).await, 1);
}

#[tokio::test]
async fn a_database_outage_answers_503_and_the_warm_handler_recovers() {
    let db = TestDb::new().await;
    let upstream = db_socket();
    let mut proxy = Proxy::start(upstream).await;
    let via_proxy = db.config.with_host_port("127.0.0.1", proxy.port);
    let ingest = Ingest::new(Arc::new(PgStore::new(via_proxy)), IngestConfig::default());
    let org = new_org();
    let (status, _) = parts(
        &ingest
            .handle(ApiRequest::post(Version::V2, &sms()).org(org).build())
            .await,
    );
    assert_eq!(status, StatusCode::ACCEPTED);

    proxy.cut();
    for request in [
        ApiRequest::post(Version::V2, &sms()).org(org),
        ApiRequest::get(Version::V1, &uuid::Uuid::new_v4().to_string()).org(org),
    ] {
        let response = ingest.handle(request.build()).await;
        let (status, err) = parts(&response);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{err}");
        assert_eq!(err["error"]["code"], "unavailable");
        assert_eq!(header(&response, "retry-after"), Some("5"));
    }

    proxy.restore().await;
    let (status, _) = parts(
        &ingest
            .handle(ApiRequest::post(Version::V2, &sms()).org(org).build())
            .await,
    );
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "the same handler serves again"
    );
    assert_eq!(
        job_count(&db).await,
        2,
        "only the accepted requests wrote rows"
    );
}

/// Where the code under test reaches the server: the pooler when there is one, else
/// DATABASE_URL's server.
fn db_socket() -> std::net::SocketAddr {
    let (host, port) = integration_tests::pooler()
        .unwrap_or_else(|| integration_tests::admin_config().host_port());
    format!("{host}:{port}")
        .parse()
        .expect("DATABASE_URL names an IP host")
}
