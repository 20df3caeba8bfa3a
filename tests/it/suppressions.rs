//! The suppression list through the ingest handler, against a real PostgreSQL: refusals of
//! suppressed recipients (single and batch), and `GET`/`POST /suppressions` and
//! `DELETE /suppressions/{recipient}`, each organization seeing only its own list.

use std::sync::Arc;

use integration_tests::apigw::{ApiRequest, Version, new_org, parts};
use integration_tests::{TestDb, count};
use lambda_http::Body;
use lambda_http::http::StatusCode;
use serde_json::{Value, json};
// every answer checked against the API contract (functions/ingest/openapi.yaml)
use integration_tests::contract::Ingest;
use notify_api::IngestConfig;
use notify_core::store::SuppressionStore;
use uuid::Uuid;

async fn service(db: &TestDb) -> Ingest {
    Ingest::new(Arc::new(db.store().await), IngestConfig::default())
}

fn sms(to: &str) -> Value {
    json!({"channel": "sms", "to": to, "message": "Your code is 1234"})
}

fn email(to: &str) -> Value {
    json!({"channel": "email", "to": to, "subject": "Hi", "text": "Hello"})
}

/// `POST /notifications` by `org`: the status and the body.
async fn send(ingest: &Ingest, org: Uuid, body: &Value) -> (StatusCode, Value) {
    parts(
        &ingest
            .handle(ApiRequest::post(Version::V2, body).org(org).build())
            .await,
    )
}

/// `POST /suppressions` by `org`.
async fn suppress(ingest: &Ingest, org: Uuid, body: &Value) -> (StatusCode, Value) {
    let request = ApiRequest::new(Version::V2, "POST", "/suppressions")
        .body(body.to_string())
        .org(org);
    parts(&ingest.handle(request.build()).await)
}

/// `DELETE /suppressions/{segment}` by `org`: the status and the body (none for 204).
async fn lift(ingest: &Ingest, version: Version, org: Uuid, segment: &str) -> (StatusCode, Value) {
    let request = ApiRequest::new(version, "DELETE", &format!("/suppressions/{segment}")).org(org);
    let response = ingest.handle(request.build()).await;
    if response.status() == StatusCode::NO_CONTENT {
        assert!(matches!(response.body(), Body::Empty), "204 has no body");
        assert!(response.headers().get("content-type").is_none());
    }
    parts(&response)
}

async fn jobs(db: &TestDb) -> i64 {
    count(&db.client().await, "SELECT count(*) FROM job_requests").await
}

fn assert_suppressed(status: StatusCode, body: &Value) {
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "recipient_suppressed", "{body}");
    assert_eq!(body["error"]["fields"][0]["field"], "to", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("suppression list"), "{message}");
    assert!(message.contains("DELETE /suppressions/"), "{message}");
}

#[tokio::test]
async fn a_suppressed_recipient_is_refused_for_its_organization_only_and_nothing_is_written() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let (org, other) = (new_org(), new_org());
    // one entry by the route, one as the feedback function would make it, through the port
    let (status, _) = suppress(&ingest, org, &json!({"recipient": "+15555550100"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let store = db.store().await;
    store
        .add_suppression(org, "bounced@example.com", Some("bounced"))
        .await
        .unwrap();

    for body in [sms("+15555550100"), email("bounced@example.com")] {
        let (status, answer) = send(&ingest, org, &body).await;
        assert_suppressed(status, &answer);
    }
    assert_eq!(jobs(&db).await, 0, "a refusal writes nothing");

    // the same recipients are not suppressed for another organization
    for body in [sms("+15555550100"), email("bounced@example.com")] {
        let (status, answer) = send(&ingest, other, &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    assert_eq!(jobs(&db).await, 2);
}

#[tokio::test]
async fn email_is_compared_in_lower_case() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let (status, entry) = suppress(&ingest, org, &json!({"recipient": "User@Example.com"})).await;
    assert_eq!(status, StatusCode::CREATED, "{entry}");
    assert_eq!(entry["recipient"], "user@example.com");
    let (status, answer) = send(&ingest, org, &email("user@example.COM")).await;
    assert_suppressed(status, &answer);
    assert_eq!(jobs(&db).await, 0);
}

#[tokio::test]
async fn a_batch_refuses_only_its_suppressed_items() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let (status, _) = suppress(&ingest, org, &json!({"recipient": "Gone@Example.com"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let items = [
        sms("+15555550100"),
        email("gone@example.COM"),
        email("here@example.com"),
        json!({"channel": "fax"}),
    ];
    let request = ApiRequest::new(Version::V2, "POST", "/notifications/batch")
        .body(json!({"notifications": items}).to_string())
        .org(org);
    let (status, body) = parts(&ingest.handle(request.build()).await);
    assert_eq!(status, StatusCode::OK, "{body}");
    let statuses: Vec<&str> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["accepted", "suppressed", "accepted", "invalid"]);
    let refused = &body["results"][1];
    assert_eq!(refused["index"], 1);
    assert!(refused.get("id").is_none(), "{refused}");
    assert_eq!(refused["errors"][0]["field"], "to");
    assert_eq!(
        (
            &body["accepted"],
            &body["suppressed"],
            &body["invalid"],
            &body["existing"]
        ),
        (&json!(2), &json!(1), &json!(1), &json!(0))
    );
    assert_eq!(jobs(&db).await, 2, "the suppressed item was not stored");
}

#[tokio::test]
async fn the_list_pages_in_recipient_order_and_shows_only_the_organizations_own() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let store = db.store().await;
    let (org, other) = (new_org(), new_org());
    let mut expected: Vec<String> = (0..120).map(|n| format!("+1555{n:07}")).collect();
    // inserted out of order: the listing sorts
    for recipient in expected.iter().rev() {
        store.add_suppression(org, recipient, None).await.unwrap();
    }
    for n in 0..5 {
        let recipient = format!("+1555{n:07}9");
        store
            .add_suppression(other, &recipient, None)
            .await
            .unwrap();
    }
    expected.sort();

    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        assert!(page < 5, "the listing does not end");
        let query = match &cursor {
            Some(c) => format!("/suppressions?limit=50&cursor={c}"),
            None => "/suppressions?limit=50".to_owned(),
        };
        // both API Gateway payload versions carry the query
        let version = if page % 2 == 0 {
            Version::V2
        } else {
            Version::V1
        };
        let request = ApiRequest::new(version, "GET", &query).org(org);
        let (status, body) = parts(&ingest.handle(request.build()).await);
        assert_eq!(status, StatusCode::OK, "{body}");
        let items = body["items"].as_array().unwrap();
        sizes.push(items.len());
        for item in items {
            assert_eq!(item["reason"], "manual");
            assert!(item["created_at"].is_string());
            seen.push(item["recipient"].as_str().unwrap().to_owned());
        }
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(sizes, [50, 50, 20]);
    assert_eq!(
        seen, expected,
        "each entry once, in recipient order, none of another's"
    );

    // the default page size is 50, and a cursor is checked
    let request = ApiRequest::new(Version::V2, "GET", "/suppressions").org(org);
    let (_, body) = parts(&ingest.handle(request.build()).await);
    assert_eq!(body["items"].as_array().unwrap().len(), 50);
    let request = ApiRequest::new(Version::V2, "GET", "/suppressions?cursor=bm9wZQ").org(org);
    let (status, body) = parts(&ingest.handle(request.build()).await);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["fields"][0]["field"], "cursor");
}

#[tokio::test]
async fn delete_takes_the_recipient_url_encoded_and_lifts_the_suppression() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let (org, other) = (new_org(), new_org());
    for recipient in ["+15555550123", "User@Example.com"] {
        let (status, _) = suppress(&ingest, org, &json!({"recipient": recipient})).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    // another organization cannot lift it
    let (status, body) = lift(&ingest, Version::V2, other, "%2B15555550123").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = send(&ingest, org, &sms("+15555550123")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    let (status, body) = lift(&ingest, Version::V2, org, "%2B15555550123").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = lift(&ingest, Version::V1, org, "%2B15555550123").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a second DELETE: {body}");
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = send(&ingest, org, &sms("+15555550123")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // an email address, encoded and in another case
    let (status, _) = lift(&ingest, Version::V1, org, "user%40EXAMPLE.com").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = send(&ingest, org, &email("user@example.com")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(jobs(&db).await, 2);
}

#[tokio::test]
async fn adding_twice_creates_once_and_answers_the_existing_entry() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let (status, first) = suppress(
        &ingest,
        org,
        &json!({"recipient": "+15555550100", "detail": "asked to stop"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["recipient"], "+15555550100");
    assert_eq!(first["reason"], "manual");
    assert_eq!(first["detail"], "asked to stop");
    let (status, second) = suppress(
        &ingest,
        org,
        &json!({"recipient": "+15555550100", "detail": "again"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second, first, "the existing entry, unchanged");
    let entries = count(
        &db.client().await,
        "SELECT count(*) FROM suppressions WHERE recipient = '+15555550100'",
    )
    .await;
    assert_eq!(entries, 1);

    let (status, body) = suppress(&ingest, org, &json!({"recipient": "5555550100"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["fields"][0]["field"], "recipient");
}

/// The suppression check comes before the insert, so the replay of a request accepted before
/// its recipient was suppressed is refused too; the job it made ends `dead` (`suppressed`)
/// at its claim, never sent.
#[tokio::test]
async fn a_replay_after_the_recipient_was_suppressed_is_refused_and_writes_nothing() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let request = ApiRequest::post(Version::V2, &sms("+15555550100"))
        .header("idempotency-key", "order-42")
        .org(org);
    let (status, _) = parts(&ingest.handle(request.build()).await);
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _) = suppress(&ingest, org, &json!({"recipient": "+15555550100"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = parts(&ingest.handle(request.build()).await);
    assert_suppressed(status, &body);
    assert_eq!(jobs(&db).await, 1);
}

/// A control character in a path recipient or a cursor is the caller's mistake: 400, never a
/// 500 from the database (PostgreSQL cannot store NUL), and nothing is written or lifted.
#[tokio::test]
async fn a_control_character_in_a_path_recipient_or_a_cursor_is_a_400() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let (status, _) = suppress(&ingest, org, &json!({"recipient": "+15555550100"})).await;
    assert_eq!(status, StatusCode::CREATED);
    for segment in ["%00", "%2B15555550100%00", "user%0A%40example.com", "%7F"] {
        for version in [Version::V1, Version::V2] {
            let (status, body) = lift(&ingest, version, org, segment).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{segment}: {body}");
            assert_eq!(body["error"]["code"], "invalid_recipient", "{body}");
            assert_eq!(body["error"]["fields"][0]["field"], "recipient", "{body}");
        }
    }
    // a cursor holding one: the tag this API puts in its cursors, then a NUL
    use base64::Engine as _;
    for recipient in ["\0", "+1555\0", "a\u{1b}b"] {
        let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("suppression:{recipient}"));
        let request = ApiRequest::new(
            Version::V2,
            "GET",
            &format!("/suppressions?cursor={cursor}"),
        )
        .org(org);
        let (status, body) = parts(&ingest.handle(request.build()).await);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{recipient:?}: {body}");
        assert_eq!(body["error"]["fields"][0]["field"], "cursor", "{body}");
    }
    let entries = count(&db.client().await, "SELECT count(*) FROM suppressions").await;
    assert_eq!(entries, 1, "nothing lifted");
}

/// A recipient is normalised once, by ingest, and compared as stored everywhere else. Email
/// addresses outside 7-bit ASCII (which SES does not send to) are refused with a clear error
/// wherever a recipient comes in, so no two readers can fold one differently: Rust's and
/// PostgreSQL's lower case differ on `Σ` (a final `ς`) and `İ`, and the database's locale
/// changes PostgreSQL's.
#[tokio::test]
async fn non_ascii_addresses_are_refused_and_ascii_ones_stored_as_the_list_keys_them() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    for address in [
        "ΟΔΟΣ@example.com",
        "οδος@example.com",
        "İnfo@example.com",
        "info@exämple.com",
    ] {
        let (status, body) = send(&ingest, org, &email(address)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{address}: {body}");
        assert_eq!(body["error"]["fields"][0]["field"], "to", "{body}");
        let why = body["error"]["fields"][0]["message"].as_str().unwrap();
        assert!(
            why.contains("7-bit ASCII") && why.contains("Punycode"),
            "{why}"
        );
        let (status, body) = suppress(&ingest, org, &json!({"recipient": address})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{address}: {body}");
        let why = body["error"]["fields"][0]["message"].as_str().unwrap();
        assert!(why.contains("7-bit ASCII"), "{why}");
    }
    assert_eq!(jobs(&db).await, 0);
    // Punycode is the way to write such a domain
    let (status, body) = send(&ingest, org, &email("info@xn--exmple-cua.com")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // an ASCII address in any case is stored as the list keys it; a suppression added after
    // the job was accepted stops it at its claim, compared as stored
    let (status, body) = send(&ingest, org, &email("Late.Suppressed@Example.COM")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id: Uuid = body["id"].as_str().unwrap().parse().unwrap();
    let to: String = db
        .client()
        .await
        .query_one(
            "SELECT payload ->> 'to' FROM job_requests WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(to, "late.suppressed@example.com");
    let (status, _) = suppress(
        &ingest,
        org,
        &json!({"recipient": "LATE.suppressed@example.com"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let store = db.store().await;
    let claimed = notify_core::store::JobStore::claim(
        &store,
        notify_core::store::Claim {
            batch_size: 10,
            now: None,
        },
    )
    .await
    .unwrap();
    let job = claimed.iter().find(|j| j.id == id).expect("claimed");
    assert!(job.suppressed, "the claim finds the recipient on the list");
}
