//! Tenants kept apart, then the logs: tenant B reusing tenant A's idempotency key gets its
//! own job, never A's; reading another tenant's job is 404; the authorizer's organization
//! wins over the local-only `X-Organization-Id` header, which is no identity at all with
//! `ALLOW_ORG_HEADER=false`. Last, every line every binary logged during the whole suite is
//! searched for each message body and full recipient sent: none may appear.

use serde_json::Value;
use uuid::Uuid;

use super::Scenario;
use crate::TestDb;
use crate::apigw::{ApiRequest, Version};
use crate::faults::api::{self, Answer};
use crate::faults::process::Function;
use crate::faults::{Row, Suite, db, logs};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "tenants and logs",
    run: |s| Box::pin(run(s)),
};

const KEY: &str = "order-42";

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let db = TestDb::new().await;
    let client = db.client().await;
    let api = s.ingest(&db, 1, true).await;
    let strict = s.ingest(&db, 1, false).await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    if let (Some(id_a), Some(id_b)) = idempotency(s, &api, (a, b), &mut row).await {
        reads(&api, &strict, (a, b), (id_a, id_b), &mut row).await;
    }
    let rows = db::jobs(&client).await;
    let queued = db::queue(&client).await.open;
    row.check(
        rows == 2 && queued == 2,
        format!("rows: {rows}, queue rows: {queued} (one each per tenant)"),
    );
    logs::check(s, &mut row);
    row
}

/// A and B use one key: each gets a job of its own; a repeat gets the first, another body
/// 409. Both job ids.
async fn idempotency(
    s: &mut Suite,
    api: &Function,
    (a, b): (Uuid, Uuid),
    row: &mut Row,
) -> (Option<Uuid>, Option<Uuid>) {
    let recipients = Recipients::new();
    let body_x = s.job_body(&recipients, 0);
    let body_y = s.job_body(&recipients, 1);
    let post = |org: Uuid, body: &Value| {
        ApiRequest::post(Version::V2, body)
            .org(org)
            .header("idempotency-key", KEY)
    };
    let a1 = api::send(api, &post(a, &body_x)).await;
    let b1 = api::send(api, &post(b, &body_x)).await;
    let a2 = api::send(api, &post(a, &body_x)).await;
    let b2 = api::send(api, &post(b, &body_y)).await;
    let a3 = api::send(api, &post(a, &body_y)).await;
    let (id_a, id_b) = (a1.id(), b1.id());
    row.check(
        a1.status == 202 && id_a.is_some(),
        format!("A posts with key {KEY}: {}", a1.status),
    );
    row.check(
        b1.status == 202 && id_b.is_some() && id_b != id_a,
        format!("B, same key and body: {} with its own job", b1.status),
    );
    row.check(
        a2.status == 200 && a2.id() == id_a,
        format!("A repeats: {} with A's first job", a2.status),
    );
    row.check(
        b2.status == 409,
        format!("B, same key, other body: {}", b2.status),
    );
    row.check(
        a3.status == 409,
        format!("A, same key, other body: {}", a3.status),
    );
    row.accepted = [&a1, &b1].iter().filter(|x| x.status == 202).count() as u64;
    row.runs += 5;
    (id_a, id_b)
}

/// Each tenant reads its own job and not the other's, whatever header it adds.
async fn reads(
    api: &Function,
    strict: &Function,
    (a, b): (Uuid, Uuid),
    (id_a, id_b): (Uuid, Uuid),
    row: &mut Row,
) {
    let get = |org: Uuid, id: Uuid| ApiRequest::get(Version::V2, &id.to_string()).org(org);
    for (who, org, id, want) in [
        ("A reads A's job", a, id_a, 200),
        ("B reads A's job", b, id_a, 404),
        ("A reads B's job", a, id_b, 404),
        ("B reads B's job", b, id_b, 200),
    ] {
        let r = api::send(api, &get(org, id)).await;
        row.runs += 1;
        row.check(
            r.status == want,
            format!("{who}: {} (want {want})", r.status),
        );
        if want == 404 {
            let echoed = r.body.to_string().contains(&id.to_string());
            row.check(!echoed, format!("{who}: the answer does not echo the job"));
        }
    }
    // the authorizer's organization wins over the local-only header
    let spoofed = get(b, id_a).header("x-organization-id", &a.to_string());
    let r: Answer = api::send(api, &spoofed).await;
    row.check(
        r.status == 404,
        format!(
            "B's token with X-Organization-Id of A reads A's job: {}",
            r.status
        ),
    );
    // with ALLOW_ORG_HEADER off (production), the header is not an identity
    let header_only =
        ApiRequest::get(Version::V2, &id_a.to_string()).header("x-organization-id", &a.to_string());
    let r = api::send(strict, &header_only).await;
    row.check(
        r.status == 401,
        format!(
            "X-Organization-Id alone, ALLOW_ORG_HEADER=false: {}",
            r.status
        ),
    );
    row.runs += 2;
}
