//! kill -9 of a worker process while it publishes status events to the bus, at random
//! moments; then healthy runs until the stream is read to its end. Every committed change's
//! event must have reached the bus at least once.
//!
//! The events are real ones: jobs end `sent` (each end writes its event in its own
//! transaction). The bus is the stand-in's, with a rule sending every event to an SQS queue,
//! read at the end. The suite's proxy in front of the stand-in holds each chunk
//! [`CALL_DELAY`], so `PutEvents` calls are in flight when a kill lands. A killed reader holds
//! the stream's cursor until its lease has passed (`EVENT_CURSOR_LEASE_SECS`, [`LEASE_SECS`]
//! here: each round waits it out, so each kill finds the stream free to read).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;

use super::{Mutant, Scenario};
use crate::factory::Job;
use crate::faults::api::{SCHEDULED_EVENT, invoke_scheduled};
use crate::faults::process::Function;
use crate::faults::suite::WORKER_TIMEOUT;
use crate::faults::{Row, Suite};
use crate::{TestDb, count, stand_in};
use notify_core::domain::JobStatus;
use notify_core::events::EVENT_SOURCE;

pub const SCENARIO: Scenario = Scenario {
    title: "worker kill -9 mid-publish (bus)",
    run: |s| Box::pin(run(s)),
};

/// The same, with workers that move the stream's cursor past a batch before they publish it
/// (tests/mutants/cursor-before-publish.patch): a kill between the two loses the batch.
pub const CURSOR_BEFORE_PUBLISH: Mutant = Mutant {
    title: "a worker that moves the bus's cursor before it publishes",
    patch: Some("cursor-before-publish"),
    run: |s| Box::pin(run(s)),
    caught_by: EVERY_EVENT_ON_THE_BUS,
};

/// The at-least-once check's words.
const EVERY_EVENT_ON_THE_BUS: &str = "every event on the bus at least once";

/// How long the proxy holds each chunk of a call, each way.
const CALL_DELAY: Duration = Duration::from_millis(40);

/// The cursor's lease the workers run with.
const LEASE_SECS: u64 = 2;

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let kills = if s.quick { 5 } else { 15 };
    let db = TestDb::new().await;
    let client = db.client().await;
    let sdk = stand_in::sdk().await;
    let bus = format!("notify-faults-{}", Uuid::new_v4().simple());
    let queue = stand_in::rule_to_queue(&sdk, &bus, json!({"source": [EVENT_SOURCE]})).await;
    let org = Uuid::new_v4();
    let jobs = kills as i64 * 150;
    Job::new()
        .org(org)
        .status(JobStatus::Sent)
        .attempts(1)
        .insert_many(&client, jobs)
        .await;
    row.accepted = jobs as u64;
    row.note(format!(
        "{jobs} events; each bus call held {} ms each way; cursor lease {LEASE_SECS} s",
        CALL_DELAY.as_millis()
    ));

    s.proxy.set_delay(CALL_DELAY);
    let mut held_after_kill = Vec::new();
    for _ in 0..kills {
        let mut worker = Function::start(&s.launcher, "worker", worker_env(s, &db, &bus), 1).await;
        let inv = worker
            .emulator
            .invoke(SCHEDULED_EVENT.as_bytes(), WORKER_TIMEOUT);
        let _ = tokio::time::timeout(Duration::from_secs(10), inv.picked).await;
        let moment = Duration::from_millis(100 + super::random_u64() % 900);
        tokio::time::sleep(moment).await;
        worker.kill_all().await;
        worker.emulator.forget(&inv.id);
        row.runs += 1;
        let held = count(
            &client,
            "SELECT count(*) FROM event_cursors WHERE claim_token IS NOT NULL",
        )
        .await;
        held_after_kill.push(held);
        // the lease runs out: the next worker takes the stream from the dead one
        tokio::time::sleep(Duration::from_secs(LEASE_SECS) + Duration::from_millis(200)).await;
    }
    s.proxy.set_delay(Duration::ZERO);
    let held = held_after_kill.iter().filter(|h| **h > 0).count();
    row.note(format!(
        "{held} of {kills} kills left the cursor held by a dead worker"
    ));
    row.check(held > 0, "the kills landed while a worker held the stream");

    // healthy runs until the stream is read to its end (and nothing waits for a retry)
    let worker = Function::start(&s.launcher, "worker", worker_env(s, &db, &bus), 1).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let unread = "SELECT count(*) FROM status_events AS e, event_cursors AS c
                  WHERE c.consumer = 'bus'
                    AND (e.published_at IS NULL
                         OR (e.tx IS NOT NULL
                             AND (e.tx, e.sequence) > (c.last_tx, c.last_sequence)))";
    loop {
        let _ = invoke_scheduled(&worker, WORKER_TIMEOUT + Duration::from_secs(5)).await;
        row.runs += 1;
        let waiting = count(&client, unread).await;
        if waiting == 0 || Instant::now() > deadline {
            row.check(
                waiting == 0,
                format!("the stream read to its end ({waiting} unread)"),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // every event reached the queue through the rule, once or more
    let events: HashSet<String> = client
        .query("SELECT id::text FROM status_events", &[])
        .await
        .expect("the events")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let received = event_ids_in(&sdk, &queue).await;
    let distinct: HashSet<&String> = received.iter().collect();
    let missing = events.iter().filter(|id| !distinct.contains(id)).count();
    row.check(
        events.len() as i64 == jobs,
        format!("one event per committed change ({} events)", events.len()),
    );
    row.check(
        missing == 0,
        format!("{EVERY_EVENT_ON_THE_BUS} ({missing} never arrived)"),
    );
    let repeats = received.len() - distinct.len();
    row.delivered = Some((events.len() - missing) as u64);
    row.duplicate_sends = Some(repeats as u64);
    row.note(format!(
        "the queue got {} entries of {} events: {repeats} again after kills (at least once)",
        received.len(),
        distinct.len()
    ));
    row
}

fn worker_env(s: &Suite, db: &TestDb, bus: &str) -> Vec<(&'static str, String)> {
    let mut env = s.worker_env(db, 8, 4);
    env.extend([
        ("EVENT_BUS_NAME", bus.to_owned()),
        ("EVENT_CURSOR_LEASE_SECS", LEASE_SECS.to_string()),
    ]);
    env
}

/// The event ids of every message of the queue, read until it answers none (the stand-in
/// sends a rule's matches to its queue within the `PutEvents` call: all are there by now),
/// or for 120 s at most.
async fn event_ids_in(sdk: &aws_config::SdkConfig, queue: &str) -> Vec<String> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        // each message received stays out of sight for 15 minutes, longer than this read
        // can last: none is read twice, however slowly the stand-in answers
        let received = sqs
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages(10)
            .visibility_timeout(900)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive from the queue");
        if received.messages().is_empty() {
            break;
        }
        for message in received.messages() {
            let body: serde_json::Value =
                serde_json::from_str(message.body().unwrap_or("{}")).unwrap_or_default();
            ids.extend(body["detail"]["id"].as_str().map(str::to_owned));
        }
    }
    ids
}
