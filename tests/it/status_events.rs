//! Status events against a real PostgreSQL: every status change writes its event in its own
//! transaction (the triggers of migrations/0004_status_events.sql), and the worker's dispatch
//! posts them to the organizations' webhooks with the real HTTP sender: signed, retried
//! under the same id, fenced, kept apart per organization, never held up by a slow endpoint.

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::factory::Job;
use integration_tests::receiver::Receiver;
use integration_tests::{TestDb, completion};
use notify_core::domain::JobStatus;
use notify_core::events::{self, EventStore, EventsConfig};
use notify_core::store::{Claim, Complete, Decision, Expire, FeedbackStore, JobStore};
use notify_core::webhooks;
use notify_postgres::PgStore;
use notify_webhooks::HttpSender;
use serde_json::Value;
use tokio_postgres::Client;
use uuid::Uuid;

/// `(type, data)` of every event of `job`, in sequence order (`data` as the envelope has it,
/// with its `sequence`).
async fn events_of(client: &Client, job: Uuid) -> Vec<(String, Value)> {
    client
        .query(
            "SELECT type, status_event_body(e) || jsonb_build_object('sequence', sequence)
             FROM status_events AS e WHERE job_id = $1 ORDER BY sequence",
            &[&job],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

fn types(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(t, _)| t.as_str()).collect()
}

fn local() -> EventsConfig {
    EventsConfig {
        allow_private: true,
        webhook_timeout: Duration::from_secs(2),
        ..EventsConfig::default()
    }
}

async fn dispatch(store: &PgStore, cfg: &EventsConfig) -> events::DispatchSummary {
    let hooks = HttpSender::new(cfg.webhook_timeout, cfg.allow_private).unwrap();
    events::dispatch(
        store,
        None,
        &hooks,
        cfg,
        Instant::now() + Duration::from_secs(60),
    )
    .await
    .unwrap()
}

/// Every webhook delivery of the database due now (skip the retry's wait).
async fn make_webhooks_due(client: &Client) {
    client
        .execute(
            "UPDATE webhook_deliveries SET next_attempt_at = now() WHERE claim_token IS NULL",
            &[],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn every_status_change_writes_its_event_with_the_change() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let org = Uuid::new_v4();
    let ids = Job::new().org(org).insert_many(&client, 3).await;
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let by_id = |id: Uuid| claimed.iter().find(|j| j.id == id).unwrap();
    let mut dead = completion(by_id(ids[1]), Decision::Dead, None);
    dead.error_code = Some("InvalidParameter".into());
    dead.error_message = Some("Invalid parameter: PhoneNumber +15550000001 is not valid".into());
    let retry = completion(
        by_id(ids[2]),
        Decision::Retry {
            at: chrono::Utc::now() + chrono::Duration::minutes(1),
        },
        None,
    );
    let report = store
        .complete(Complete {
            completions: &[
                completion(by_id(ids[0]), Decision::Sent, Some("msg-sent-0")),
                dead,
                retry,
            ],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(report.fenced.len(), 0);

    let sent = events_of(&client, ids[0]).await;
    assert_eq!(types(&sent), ["notification.sent"]);
    let data = &sent[0].1;
    assert_eq!(data["id"], ids[0].to_string());
    assert_eq!(data["organization_id"], org.to_string());
    assert_eq!(data["channel"], "sms");
    assert_eq!(data["status"], "sent");
    assert_eq!(data["previous_status"], "processing");
    assert_eq!(data["attempt"], 1);
    assert_eq!(data["provider_message_id"], "msg-sent-0");
    assert!(data["error"].is_null(), "{data}");
    assert!(data["sequence"].as_i64().is_some_and(|s| s > 0), "{data}");

    let dead = events_of(&client, ids[1]).await;
    assert_eq!(types(&dead), ["notification.dead"]);
    assert_eq!(dead[0].1["error"]["code"], "InvalidParameter");
    let message = dead[0].1["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("+15550000001") && message.contains("[redacted]"),
        "an event never carries a recipient: {message}"
    );
    // a retry is no status a caller hears of
    assert!(events_of(&client, ids[2]).await.is_empty());

    // requeue the dead one: requeued, pending, from dead
    store.requeue(org, ids[1]).await.unwrap();
    let requeued = events_of(&client, ids[1]).await;
    assert_eq!(
        types(&requeued),
        ["notification.dead", "notification.requeued"]
    );
    assert_eq!(requeued[1].1["status"], "pending");
    assert_eq!(requeued[1].1["previous_status"], "dead");
    assert!(
        requeued[1].1["sequence"].as_i64() > requeued[0].1["sequence"].as_i64(),
        "a notification's sequence increases: {requeued:?}"
    );

    // cancel it, and expire another
    store.cancel(org, ids[1]).await.unwrap();
    let expiring = Job::new().org(org).expires_in(-1.0).insert(&client).await;
    store
        .expire(Expire {
            limit: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(
        types(&events_of(&client, ids[1]).await),
        [
            "notification.dead",
            "notification.requeued",
            "notification.cancelled"
        ]
    );
    let expired = events_of(&client, expiring).await;
    assert_eq!(types(&expired), ["notification.expired"]);
    assert_eq!(expired[0].1["previous_status"], "pending");
    assert_eq!(expired[0].1["channel"], "sms");

    // provider feedback: delivered, a complaint (no status change, but an event), bounced
    client
        .execute(
            "UPDATE job_outcomes SET status = 'delivered' WHERE job_id = $1",
            &[&ids[0]],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO delivery_feedback (provider_message_id, channel, event_key, kind,
                                            subtype, suppresses, occurred_at, received_at, raw)
             VALUES ('msg-sent-0', 'sms', 'k1', 'complaint', 'abuse', true, now(), now(), '{}')",
            &[],
        )
        .await
        .unwrap();
    store
        .apply_waiting_feedback(notify_core::store::At::SERVER)
        .await
        .unwrap();
    client
        .execute(
            "UPDATE job_outcomes SET status = 'bounced' WHERE job_id = $1",
            &[&ids[0]],
        )
        .await
        .unwrap();
    let life = events_of(&client, ids[0]).await;
    assert_eq!(
        types(&life),
        [
            "notification.sent",
            "notification.delivered",
            "notification.complained",
            "notification.bounced"
        ]
    );
    assert_eq!(life[1].1["previous_status"], "sent");
    assert_eq!(life[2].1["error"]["code"], "complaint");
    assert_eq!(life[3].1["previous_status"], "delivered");
    let sequences: Vec<i64> = life
        .iter()
        .map(|(_, d)| d["sequence"].as_i64().unwrap())
        .collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");

    // no event carries a recipient or a body
    let all: Vec<String> = client
        .query("SELECT e::text FROM status_events AS e", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    for data in &all {
        assert!(
            !data.contains("+1555") && !data.contains("\"hi\""),
            "an event carries a recipient or a body: {data}"
        );
    }
}

#[tokio::test]
async fn a_change_that_does_not_commit_has_no_event() {
    let db = TestDb::new().await;
    let mut client = db.client().await;
    let org = Uuid::new_v4();
    let id = Job::new().org(org).due_in(3600.0).insert(&client).await;
    let tx = client.transaction().await.unwrap();
    let cancelled = tx
        .query(notify_postgres::sql::CANCEL.sql, &[&id, &org])
        .await
        .unwrap();
    assert_eq!(cancelled.len(), 1, "cancelled inside the transaction");
    let inside: i64 = tx
        .query_one("SELECT count(*) FROM status_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(inside, 1, "the event is written with the change");
    tx.rollback().await.unwrap();
    assert!(events_of(&client, id).await.is_empty());
    assert_eq!(
        integration_tests::count(&client, "SELECT count(*) FROM webhook_deliveries").await,
        0
    );
}

/// Registers an endpoint of `org` for `types` (all: `None`); its id and secret.
async fn endpoint(store: &PgStore, org: Uuid, url: &str, types: Option<&[&str]>) -> (Uuid, String) {
    let secret = webhooks::new_secret();
    let types: Option<Vec<String>> = types.map(|t| t.iter().map(|s| (*s).to_owned()).collect());
    let created = store
        .create_webhook(org, url, types.as_deref(), &secret)
        .await
        .unwrap()
        .expect("under the cap");
    (created.id, secret)
}

/// Ends `n` new jobs of `org` as sent: their ids.
async fn sent_jobs(store: &PgStore, client: &Client, org: Uuid, n: i64) -> Vec<Uuid> {
    let ids = Job::new().org(org).insert_many(client, n).await;
    let claimed = store
        .claim(Claim {
            batch_size: n as u32,
            now: None,
        })
        .await
        .unwrap();
    let done: Vec<_> = claimed
        .iter()
        .map(|job| completion(job, Decision::Sent, Some(&format!("m-{}", job.id))))
        .collect();
    store
        .complete(Complete {
            completions: &done,
            now: None,
        })
        .await
        .unwrap();
    ids
}

#[tokio::test]
async fn webhooks_are_signed_retried_under_one_id_and_kept_per_organization() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let flaky = Receiver::failing_first(1).await;
    let steady = Receiver::ok().await;
    let (a_endpoint, a_secret) = endpoint(&store, a, &flaky.url("a"), None).await;
    let (_, b_secret) = endpoint(&store, b, &steady.url("b"), Some(&["notification.sent"])).await;
    let a_jobs = sent_jobs(&store, &client, a, 3).await;
    let b_jobs = sent_jobs(&store, &client, b, 2).await;
    // a cancellation of b's: b's endpoint did not ask for it
    let b_later = Job::new().org(b).due_in(3600.0).insert(&client).await;
    store.cancel(b, b_later).await.unwrap();

    let first = dispatch(&store, &local()).await;
    assert_eq!(first.webhooks_delivered, 2, "{first:?}");
    assert_eq!(first.webhooks_failed, 3, "{first:?}");
    make_webhooks_due(&client).await;
    let second = dispatch(&store, &local()).await;
    assert_eq!(second.webhooks_delivered, 3, "{second:?}");

    // each organization's events reached its own endpoint only
    let job_of = |r: &integration_tests::receiver::Received| {
        r.json()["data"]["id"]
            .as_str()
            .unwrap()
            .parse::<Uuid>()
            .unwrap()
    };
    let to_a = flaky.received();
    let to_b = steady.received();
    assert!(to_a.iter().all(|r| a_jobs.contains(&job_of(r))), "{to_a:?}");
    assert_eq!(to_b.len(), 2);
    assert!(to_b.iter().all(|r| b_jobs.contains(&job_of(r))), "{to_b:?}");
    assert!(to_b.iter().all(|r| r.json()["type"] == "notification.sent"));

    // each event twice to a (500, then 204) under the same webhook-id, each signature good
    assert_eq!(to_a.len(), 6);
    for id in &a_jobs {
        let deliveries: Vec<_> = to_a.iter().filter(|r| job_of(r) == *id).collect();
        assert_eq!(deliveries.len(), 2);
        assert_eq!(
            deliveries[0].header("webhook-id"),
            deliveries[1].header("webhook-id")
        );
        assert_eq!(
            deliveries[0].header("webhook-id"),
            deliveries[0].json()["id"]
        );
    }
    for (received, secret) in to_a
        .iter()
        .map(|r| (r, &a_secret))
        .chain(to_b.iter().map(|r| (r, &b_secret)))
    {
        let ts: i64 = received.header("webhook-timestamp").parse().unwrap();
        let expected =
            webhooks::sign(secret, received.header("webhook-id"), ts, &received.body).unwrap();
        assert_eq!(received.header("webhook-signature"), expected);
        assert!((chrono::Utc::now().timestamp() - ts).abs() < 60);
    }

    // the deliveries list: each event's retry (500) and delivery (204)
    let attempts = store
        .list_webhook_attempts(a, a_endpoint, 50)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(attempts.len(), 6);
    assert_eq!(attempts.iter().filter(|t| t.outcome == "retry").count(), 3);
    assert!(
        attempts
            .iter()
            .filter(|t| t.outcome == "retry")
            .all(|t| t.status_code == Some(500) && t.next_attempt_at.is_some())
    );
    assert!(
        attempts
            .iter()
            .filter(|t| t.outcome == "delivered")
            .all(|t| t.status_code == Some(204) && t.attempt == 2)
    );
    // another organization sees none of it
    assert!(
        store
            .list_webhook_attempts(b, a_endpoint, 50)
            .await
            .unwrap()
            .is_none()
    );

    // a rotated secret: both sign for a day
    store
        .rotate_webhook_secret(
            a,
            a_endpoint,
            &webhooks::new_secret(),
            Duration::from_secs(86_400),
        )
        .await
        .unwrap()
        .unwrap();
    sent_jobs(&store, &client, a, 1).await;
    dispatch(&store, &local()).await;
    let rotated = flaky.received().pop().unwrap();
    let signatures: Vec<&str> = rotated.header("webhook-signature").split(' ').collect();
    assert_eq!(signatures.len(), 2, "{signatures:?}");
    let ts: i64 = rotated.header("webhook-timestamp").parse().unwrap();
    assert!(
        signatures.contains(
            &webhooks::sign(&a_secret, rotated.header("webhook-id"), ts, &rotated.body)
                .unwrap()
                .as_str()
        )
    );
}

#[tokio::test]
async fn a_slow_endpoint_holds_up_no_other_and_a_swept_claim_is_fenced() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let (slow_org, quick_org) = (Uuid::new_v4(), Uuid::new_v4());
    let slow = Receiver::start(Arc::new(|_, _| (204, Duration::from_secs(30)))).await;
    let quick = Receiver::ok().await;
    endpoint(&store, slow_org, &slow.url("slow"), None).await;
    endpoint(&store, quick_org, &quick.url("quick"), None).await;
    sent_jobs(&store, &client, slow_org, 8).await;
    sent_jobs(&store, &client, quick_org, 2).await;

    let started = Instant::now();
    let cfg = local();
    let summary = dispatch(&store, &cfg).await;
    // the slow endpoint's calls time out (2 s here); the quick one's were answered at once
    let quick_got = quick.received();
    assert_eq!(quick_got.len(), 2, "{summary:?}");
    assert!(
        quick_got
            .iter()
            .all(|r| r.at.duration_since(started) < Duration::from_secs(1)),
        "the quick endpoint waited for the slow one"
    );
    // at most WEBHOOK_PER_ENDPOINT of the slow one's deliveries in one round
    assert!(slow.received().len() <= 2 * cfg.per_endpoint as usize + 4);
    assert_eq!(summary.webhooks_delivered, 2);
    assert!(summary.webhooks_failed >= 1);

    // a claim whose worker was lost: swept, and its late result changes nothing
    make_webhooks_due(&client).await;
    let claimed = store.claim_webhooks(10, 10).await.unwrap();
    assert!(!claimed.is_empty());
    let (events, deliveries) = store.sweep_dispatch(Duration::ZERO).await.unwrap();
    assert_eq!((events, deliveries as usize), (0, claimed.len()));
    let late: Vec<_> = claimed
        .iter()
        .map(|c| notify_core::events::WebhookResult {
            delivery_id: c.delivery_id,
            claim_token: c.claim_token,
            outcome: "delivered",
            retry_at: None,
            status_code: Some(204),
            latency_ms: 1,
            error: None,
            started_at: chrono::Utc::now(),
        })
        .collect();
    let report = store.complete_webhooks(&late).await.unwrap();
    assert_eq!(report.applied, 0, "a swept claim's result is fenced");
    assert_eq!(
        integration_tests::count(&client, "SELECT count(*) FROM webhook_deliveries").await,
        8,
        "the slow endpoint's deliveries all wait again"
    );
}

#[tokio::test]
async fn an_endpoint_failing_for_five_days_is_disabled() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let org = Uuid::new_v4();
    let down = Receiver::start(Arc::new(|_, _| (503, Duration::ZERO))).await;
    let (id, _) = endpoint(&store, org, &down.url("down"), None).await;
    sent_jobs(&store, &client, org, 1).await;
    let summary = dispatch(&store, &local()).await;
    assert_eq!(summary.webhooks_failed, 1);
    let listed = store.list_webhooks(org).await.unwrap();
    assert!(listed[0].failing_since.is_some() && !listed[0].disabled);

    // five days later, still failing
    client
        .execute(
            "UPDATE webhook_endpoints SET failing_since = now() - interval '5 days 1 minute'",
            &[],
        )
        .await
        .unwrap();
    make_webhooks_due(&client).await;
    let summary = dispatch(&store, &local()).await;
    assert_eq!(summary.endpoints_disabled, 1, "{summary:?}");
    let listed = store.list_webhooks(org).await.unwrap();
    assert!(listed[0].disabled, "{listed:?}");
    assert!(listed[0].disabled_reason.is_some());
    // nothing more is sent to it, and new events make no deliveries for it
    sent_jobs(&store, &client, org, 1).await;
    make_webhooks_due(&client).await;
    let before = down.received().len();
    let summary = dispatch(&store, &local()).await;
    assert_eq!(summary.webhooks_failed + summary.webhooks_delivered, 0);
    assert_eq!(down.received().len(), before);
    assert!(store.delete_webhook(org, id).await.unwrap());
}

#[tokio::test]
async fn the_last_failure_is_dead_and_listed() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let org = Uuid::new_v4();
    let down = Receiver::start(Arc::new(|_, _| (500, Duration::ZERO))).await;
    let (id, _) = endpoint(&store, org, &down.url("down"), None).await;
    sent_jobs(&store, &client, org, 1).await;
    for _ in 0..events::dispatch::WEBHOOK_MAX_ATTEMPTS {
        make_webhooks_due(&client).await;
        dispatch(&store, &local()).await;
    }
    let attempts = store
        .list_webhook_attempts(org, id, 50)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(attempts.len(), 8);
    assert_eq!(attempts[0].outcome, "dead");
    assert_eq!(attempts[0].attempt, 8);
    assert!(attempts[1..].iter().all(|t| t.outcome == "retry"));
    assert_eq!(
        integration_tests::count(&client, "SELECT count(*) FROM webhook_deliveries").await,
        0
    );
}

#[tokio::test]
async fn jobs_inserted_in_any_status_keep_their_statuses() {
    // the factory inserts outcome rows straight: their events are written too
    let db = TestDb::new().await;
    let client = db.client().await;
    let id = Job::new()
        .status(JobStatus::Sent)
        .attempts(1)
        .insert(&client)
        .await;
    assert_eq!(types(&events_of(&client, id).await), ["notification.sent"]);
}

#[tokio::test]
async fn retention_drops_old_events_attempts_and_their_waiting_deliveries() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let org = Uuid::new_v4();
    let down = Receiver::start(Arc::new(|_, _| (500, Duration::ZERO))).await;
    endpoint(&store, org, &down.url("down"), None).await;
    sent_jobs(&store, &client, org, 3).await;
    dispatch(&store, &local()).await;
    // two of the events (and every attempt) are 31 days old: made then, so their ids
    // (UUIDv7) carry that time; one delivery of an old event still waits (its endpoint, say,
    // disabled)
    client
        .batch_execute(
            "CREATE TEMP TABLE aged AS
                 SELECT id AS was,
                        encode(overlay(uuid_send(id)
                                       PLACING substring(int8send(floor(extract(epoch FROM
                                           now() - interval '31 days') * 1000)::bigint) FROM 3)
                                       FROM 1 FOR 6), 'hex')::uuid AS id
                 FROM status_events ORDER BY sequence LIMIT 2;
             UPDATE webhook_deliveries AS d SET event_id = a.id FROM aged AS a
             WHERE d.event_id = a.was;
             UPDATE status_events AS e SET id = a.id, created_at = now() - interval '31 days'
             FROM aged AS a WHERE e.id = a.was;
             UPDATE webhook_attempts SET started_at = now() - interval '31 days';",
        )
        .await
        .unwrap();
    let (events, attempts) = store.prune_events(30, 1000).await.unwrap();
    assert_eq!((events, attempts), (2, 3));
    let count = |sql| integration_tests::count(&client, sql);
    assert_eq!(count("SELECT count(*) FROM status_events").await, 1);
    assert_eq!(count("SELECT count(*) FROM webhook_attempts").await, 0);
    assert_eq!(
        count("SELECT count(*) FROM webhook_deliveries").await,
        1,
        "the young event's delivery stays, the old ones' went with them"
    );
    // nothing older left: a second run drops nothing
    assert_eq!(store.prune_events(30, 1000).await.unwrap(), (0, 0));
}

/// Event ids are UUIDv7 (migration 0009): their first 48 bits the time they were made, so
/// the primary key takes each new event at its right edge (decision 0015), and two events
/// made a millisecond or more apart sort in that order.
#[tokio::test]
async fn event_ids_are_in_the_order_of_their_making() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let client = db.client().await;
    let org = Uuid::new_v4();
    sent_jobs(&store, &client, org, 3).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    sent_jobs(&store, &client, org, 3).await;
    let rows = client
        .query(
            "SELECT id, created_at, clock_timestamp() FROM status_events ORDER BY sequence",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 6, "one `sent` event per job");
    let mut ids: Vec<Uuid> = Vec::new();
    for row in &rows {
        let id: Uuid = row.get(0);
        let created: chrono::DateTime<chrono::Utc> = row.get(1);
        let now: chrono::DateTime<chrono::Utc> = row.get(2);
        assert_eq!(id.get_version_num(), 7, "{id} is a UUIDv7");
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122, "{id}");
        let (secs, nanos) = id.get_timestamp().expect("a v7 id has a time").to_unix();
        let made = chrono::DateTime::from_timestamp(secs as i64, nanos).unwrap();
        assert!(
            made >= created - chrono::Duration::milliseconds(1) && made <= now,
            "{id} was made at {made}, its event at {created}"
        );
        ids.push(id);
    }
    assert!(
        ids[..3].iter().all(|a| ids[3..].iter().all(|b| a < b)),
        "the second completion's events sort after the first's: {ids:?}"
    );
}
