//! kill -9 of a worker process while it posts status events to webhooks, at random moments;
//! then sweeps and healthy runs until no delivery waits. Every committed change's event must
//! have reached its endpoint at least once, and each organization's only its own.
//!
//! The events are real ones: jobs of two organizations end `sent` (each end writes its event,
//! and its deliveries to the organization's endpoint, in its own transaction). Endpoint A
//! answers each call after [`ANSWER_DELAY`], so a kill lands while calls are in flight and
//! their results unwritten, and answers the first call of each event 500, so each is retried;
//! endpoint B answers at once. An event counts as delivered when its endpoint answered it
//! 2xx. Nothing is due for delivery, so each invocation goes straight to its dispatch.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{Mutant, Scenario};
use crate::factory::Job;
use crate::faults::api::{SCHEDULED_EVENT, invoke_scheduled};
use crate::faults::process::Function;
use crate::faults::suite::WORKER_TIMEOUT;
use crate::faults::{Row, Suite};
use crate::receiver::Receiver;
use crate::{TestDb, count};
use notify_core::domain::JobStatus;

pub const SCENARIO: Scenario = Scenario {
    title: "worker kill -9 mid-dispatch (webhooks)",
    run: |s| Box::pin(run(s)),
};

/// The same, with workers that record each claimed delivery as delivered before they send it
/// (tests/mutants/record-before-send.patch): a kill between the two loses the event.
pub const RECORD_BEFORE_SEND: Mutant = Mutant {
    title: "a worker that records webhook deliveries before it sends them",
    patch: Some("record-before-send"),
    run: |s| Box::pin(run(s)),
    caught_by: EVERY_EVENT_DELIVERED,
};

/// The at-least-once check's words.
const EVERY_EVENT_DELIVERED: &str = "every event delivered at least once";

/// How long endpoint A takes to answer each delivery.
const ANSWER_DELAY: Duration = Duration::from_millis(150);

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let kills = if s.quick { 10 } else { 30 };
    let db = TestDb::new().await;
    let client = db.client().await;
    let slow = Receiver::start(Arc::new(|_, before| {
        (if before == 0 { 500 } else { 204 }, ANSWER_DELAY)
    }))
    .await;
    let quick = Receiver::ok().await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    for (org, url) in [(a, slow.url("a")), (b, quick.url("b"))] {
        client
            .execute(
                "INSERT INTO webhook_endpoints (id, organization_id, url, secret)
                 VALUES ($1, $2, $3, $4)",
                &[
                    &Uuid::now_v7(),
                    &org,
                    &url,
                    &notify_core::webhooks::new_secret(),
                ],
            )
            .await
            .expect("register the endpoints");
    }
    let events_a = kills as i64 * 8;
    Job::new()
        .org(a)
        .status(JobStatus::Sent)
        .attempts(1)
        .insert_many(&client, events_a)
        .await;
    Job::new()
        .org(b)
        .status(JobStatus::Sent)
        .attempts(1)
        .insert_many(&client, 20)
        .await;
    row.accepted = events_a as u64 + 20;
    row.note(format!(
        "{} events of 2 organizations; endpoint A answers after {} ms, B at once",
        row.accepted,
        ANSWER_DELAY.as_millis()
    ));

    let sweeper = s.sweeper(&db).await;
    for round in 0..kills {
        let mut worker = Function::start(&s.launcher, "worker", worker_env(s, &db), 1).await;
        let inv = worker
            .emulator
            .invoke(SCHEDULED_EVENT.as_bytes(), WORKER_TIMEOUT);
        let _ = tokio::time::timeout(Duration::from_secs(10), inv.picked).await;
        let moment = Duration::from_millis(100 + super::random_u64() % 600);
        tokio::time::sleep(moment).await;
        worker.kill_all().await;
        worker.emulator.forget(&inv.id);
        row.runs += 1;
        if (round + 1) % 10 == 0 {
            let _ = invoke_scheduled(&sweeper, Duration::from_secs(30)).await;
            row.runs += 1;
        }
    }
    let killed_claims = count(
        &client,
        "SELECT count(*) FROM webhook_deliveries WHERE claim_token IS NOT NULL",
    )
    .await;
    row.note(format!(
        "{kills} kills left {killed_claims} deliveries claimed by a dead worker"
    ));
    row.check(
        killed_claims > 0 || kills < 5,
        "the kills landed while deliveries were claimed",
    );

    // healthy runs and sweeps until nothing waits (the sweep frees a lost claim after the
    // window). A killed attempt counts, as a job's does, so a delivery's next failure may wait
    // minutes by the schedule: between runs its retry is made due at once instead.
    let worker = Function::start(&s.launcher, "worker", worker_env(s, &db), 1).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let _ = invoke_scheduled(&sweeper, Duration::from_secs(30)).await;
        client
            .execute(
                "UPDATE webhook_deliveries SET next_attempt_at = now()
                 WHERE claim_token IS NULL AND next_attempt_at > now()",
                &[],
            )
            .await
            .expect("make the retries due");
        let _ = invoke_scheduled(&worker, WORKER_TIMEOUT + Duration::from_secs(5)).await;
        row.runs += 2;
        let waiting = count(&client, "SELECT count(*) FROM webhook_deliveries").await;
        if waiting == 0 || Instant::now() > deadline {
            row.check(
                waiting == 0,
                format!("no delivery left waiting ({waiting})"),
            );
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // every committed change has one event, and every event reached its endpoint
    let sent_jobs = count(
        &client,
        "SELECT count(*) FROM job_outcomes WHERE status = 'sent'",
    )
    .await;
    let events: Vec<(Uuid, Uuid)> = client
        .query("SELECT id, organization_id FROM status_events", &[])
        .await
        .expect("the events")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    row.check(
        events.len() as i64 == sent_jobs,
        format!(
            "one event per committed change ({} events, {sent_jobs} sent jobs)",
            events.len()
        ),
    );
    // what each endpoint received (every request), and what it acknowledged (a 2xx)
    let ids = |r: &Receiver, acknowledged: bool| -> Vec<String> {
        r.received()
            .iter()
            .filter(|d| !acknowledged || (200..300).contains(&d.answered))
            .map(|d| d.header("webhook-id").to_owned())
            .collect()
    };
    let received: HashMap<&str, Vec<String>> =
        HashMap::from([("a", ids(&slow, false)), ("b", ids(&quick, false))]);
    let acknowledged: HashMap<&str, Vec<String>> =
        HashMap::from([("a", ids(&slow, true)), ("b", ids(&quick, true))]);
    let mut missing = 0;
    let mut elsewhere = 0;
    for (id, org) in &events {
        let (own, other) = if *org == a { ("a", "b") } else { ("b", "a") };
        let id = id.to_string();
        if !acknowledged[own].contains(&id) {
            missing += 1;
        }
        if received[other].contains(&id) {
            elsewhere += 1;
        }
    }
    row.check(
        missing == 0,
        format!("{EVERY_EVENT_DELIVERED} ({missing} never answered 2xx)"),
    );
    row.check(
        elsewhere == 0,
        format!("each organization's events only at its endpoint ({elsewhere} elsewhere)"),
    );
    // an event acknowledged more than once: its 2xx was lost with a killed worker, and sent
    // again (the at-least-once window)
    let distinct: HashSet<&String> = acknowledged["a"].iter().collect();
    let repeats = acknowledged["a"].len() - distinct.len();
    row.delivered = Some((events.len() - missing) as u64);
    row.duplicate_sends = Some(repeats as u64);
    row.note(format!(
        "endpoint A got {} deliveries of {} events (each event's first answered 500); {repeats} \
         acknowledged twice after kills",
        received["a"].len(),
        received["a"].iter().collect::<HashSet<_>>().len(),
    ));
    row
}

fn worker_env(s: &Suite, db: &TestDb) -> Vec<(&'static str, String)> {
    let mut env = s.worker_env(db, 8, 4);
    env.extend([
        ("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true".to_owned()),
        ("WEBHOOK_TIMEOUT_MS", "1000".to_owned()),
        ("WEBHOOK_CONCURRENCY", "4".to_owned()),
    ]);
    env
}
