//! Batch ingest: many notifications in one request and one statement, partial acceptance
//! item by item, idempotency per item key.

use std::sync::Arc;

use integration_tests::TestDb;
use integration_tests::apigw::{ApiRequest, Version, new_org, parts};
use lambda_http::http::StatusCode;
use serde_json::{Value, json};
// every answer checked against the API contract (functions/ingest/openapi.yaml)
use integration_tests::contract::Ingest;
use notify_api::IngestConfig;

async fn service(db: &TestDb) -> Ingest {
    Ingest::new(Arc::new(db.store().await), IngestConfig::default())
}

fn item(n: usize) -> Value {
    if n.is_multiple_of(2) {
        json!({"channel": "sms", "to": format!("+1555{n:07}"), "message": format!("code {n}")})
    } else {
        json!({"channel": "email", "to": format!("user{n}@example.com"), "subject": "Hi", "text": "Hello"})
    }
}

fn batch(items: Vec<Value>) -> ApiRequest {
    ApiRequest::new(Version::V2, "POST", "/notifications/batch")
        .body(json!({"notifications": items}).to_string())
}

async fn rows(db: &TestDb) -> (i64, i64) {
    let row = db
        .client()
        .await
        .query_one(
            "SELECT count(*), count(DISTINCT xmin::text) FROM job_requests",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn five_hundred_items_are_inserted_by_one_statement() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let items: Vec<Value> = (0..500).map(item).collect();
    let (status, body) = parts(&ingest.handle(batch(items).org(new_org()).build()).await);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["accepted"], 500);
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 500);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i);
        assert_eq!(r["status"], "accepted");
        assert!(r["id"].is_string());
    }
    // one transaction wrote every row: they share one xmin
    assert_eq!(rows(&db).await, (500, 1));
}

#[tokio::test]
async fn three_invalid_items_are_named_and_the_other_497_accepted() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let mut items: Vec<Value> = (0..500).map(item).collect();
    items[7] = json!({"channel": "sms", "to": "12345", "message": "x"});
    items[250] = json!({"channel": "email", "to": "a@example.com", "subject": "s"});
    items[499] = json!({"channel": "fax"});
    let (status, body) = parts(&ingest.handle(batch(items).org(new_org()).build()).await);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["accepted"].as_u64(), body["invalid"].as_u64()),
        (Some(497), Some(3))
    );
    let invalid: Vec<(u64, String)> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "invalid")
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["errors"][0]["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        invalid,
        [
            (7, "to".to_owned()),
            (250, "text".to_owned()),
            (499, "channel".to_owned())
        ]
    );
    assert_eq!(rows(&db).await.0, 497);
}

#[tokio::test]
async fn item_keys_make_repeats_idempotent_and_conflicts_explicit() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let keyed = |n: usize, key: &str| {
        let mut v = item(n);
        v["idempotency_key"] = json!(key);
        v
    };
    let first = vec![
        keyed(0, "a"),
        keyed(1, "b"),
        keyed(0, "a"),
        keyed(2, "b"),
        item(3),
    ];
    let (status, body) = parts(&ingest.handle(batch(first.clone()).org(org).build()).await);
    assert_eq!(status, StatusCode::OK, "{body}");
    let r = body["results"].as_array().unwrap();
    let statuses: Vec<&str> = r.iter().map(|x| x["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["accepted", "accepted", "existing", "conflict", "accepted"]
    );
    assert_eq!(
        r[2]["id"], r[0]["id"],
        "a repeat within the batch names the first job"
    );
    assert_eq!(rows(&db).await.0, 3);

    // the same batch again: the keyed items are repeats, the unkeyed one is new
    let (_, again) = parts(&ingest.handle(batch(first).org(org).build()).await);
    let statuses: Vec<&str> = again["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["existing", "existing", "existing", "conflict", "accepted"]
    );
    assert_eq!(again["results"][0]["id"], r[0]["id"]);
    assert_eq!(rows(&db).await.0, 4);

    // a bad key is that item's error
    let (_, bad) = parts(
        &ingest
            .handle(batch(vec![keyed(0, "has space")]).org(org).build())
            .await,
    );
    assert_eq!(bad["results"][0]["errors"][0]["field"], "idempotency_key");
}

#[tokio::test]
async fn each_item_keeps_its_own_priority_and_a_bad_one_is_that_items_error() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let with = |n: usize, priority: Option<&str>| {
        let mut v = item(n);
        if let Some(priority) = priority {
            v["priority"] = json!(priority);
        }
        v
    };
    let items = vec![
        with(0, Some("high")),
        with(1, Some("low")),
        with(2, None),
        with(3, Some("normal")),
        with(4, Some("urgent")),
    ];
    let (status, body) = parts(&ingest.handle(batch(items).org(org).build()).await);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["accepted"].as_u64(), body["invalid"].as_u64()),
        (Some(4), Some(1))
    );
    let results = body["results"].as_array().unwrap();
    assert_eq!(results[4]["status"], "invalid");
    assert_eq!(results[4]["errors"][0]["field"], "priority");
    for (i, expected) in ["high", "low", "normal", "normal"].into_iter().enumerate() {
        let id = results[i]["id"].as_str().unwrap();
        assert_eq!(
            crate::ingest_api::stored_priority(&db, id).await,
            (expected.to_owned(), expected.to_owned()),
            "item {i}"
        );
        let (_, job) = parts(
            &ingest
                .handle(ApiRequest::get(Version::V2, id).org(org).build())
                .await,
        );
        assert_eq!(job["priority"], expected, "item {i}");
    }
    assert_eq!(rows(&db).await.0, 4, "the invalid item wrote nothing");
}

#[tokio::test]
async fn a_bad_envelope_is_refused_whole() {
    let db = TestDb::new().await;
    let ingest = service(&db).await;
    let org = new_org();
    let too_many: Vec<Value> = (0..501).map(item).collect();
    for (name, request) in [
        ("501 items", batch(too_many)),
        ("no items", batch(vec![])),
        (
            "not an array",
            ApiRequest::new(Version::V1, "POST", "/notifications/batch")
                .body(r#"{"notifications": {}}"#),
        ),
        (
            "unknown field",
            ApiRequest::new(Version::V2, "POST", "/notifications/batch")
                .body(r#"{"notifications": [], "x": 1}"#),
        ),
    ] {
        let (status, body) = parts(&ingest.handle(request.org(org).build()).await);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        assert_eq!(body["error"]["code"], "validation_failed", "{name}");
    }
    let response = ingest
        .handle(
            ApiRequest::new(Version::V2, "GET", "/notifications/batch")
                .org(org)
                .build(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(rows(&db).await.0, 0);
}
