//! Fan-out racing the sweeper (invariants 1 and 2, and the fleet's bound): a backlog big
//! enough that a worker starts more, up to `WORKER_MAX_INVOCATIONS` (4), while the sweeper
//! runs every half second, the schedule invokes the worker every second, and workers the
//! backlog started are SIGKILLed mid-delivery.
//!
//! The backlog is accepted first; the schedule's first invocation finds it, and after its
//! first full batch (8 jobs, 4 calls in flight, each call held 150 ms each way by the proxy)
//! counts the fleet and starts workers through the Invoke API. The killed workers keep their
//! slots to their deadlines and their jobs until the sweeper takes them back (7 s after the
//! claim), due again at once, for the rest of the fleet to claim while it still fans out. The
//! scenario samples `worker_slots` every 50 ms: the slots held at once must never exceed
//! the bound — the schedule's invocations that find every slot held claim nothing — and the
//! fleet must have grown past one. Then sweeps and healthy runs until every job is final:
//! nothing lost, no job claimed while another invocation held it.

use std::cell::Cell;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tokio_postgres::Client;

use super::fleet::{holding, poll, slots_held};
use super::{Mutant, Scenario};
use crate::TestDb;
use crate::faults::api::{invoke_scheduled, summary_count};
use crate::faults::endgame::{drain, settle};
use crate::faults::process::Function;
use crate::faults::runtime::{InvokeApi, Ledger, Span};
use crate::faults::suite::{WORKER_FUNCTION, WORKER_TIMEOUT, wake_env};
use crate::faults::{Row, Suite, claims, db};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "fan-out racing the sweeper, workers killed",
    run: |s| Box::pin(run(s, true)),
};

/// The fan-out (without the kills, which it does not need), with workers that join the fleet
/// without the bound (tests/mutants/join-past-the-max.patch: `join_fleet.sql` takes any free
/// slot): the schedule's invocations that find every slot held take a fifth, and the slot
/// count must say so.
pub const JOIN_PAST_THE_MAX: Mutant = Mutant {
    title: "a worker that joins the fleet past WORKER_MAX_INVOCATIONS",
    patch: Some("join-past-the-max"),
    run: |s| Box::pin(run(s, false)),
    caught_by: WITHIN_MAX,
};

/// The bound check's words: a fleet that outgrows its bound must fail it.
const WITHIN_MAX: &str = "worker slots held at once never exceeded WORKER_MAX_INVOCATIONS";

const MAX: u32 = 4;
/// Processes polling the worker's emulator: the fleet and two for the schedule.
const PROCESSES: usize = MAX as usize + 2;
const PROVIDER_DELAY: Duration = Duration::from_millis(150);
const BATCH: u32 = 8;
const CONCURRENCY: u32 = 4;
/// With the 6 s timeout and its 3 s safety margin, full batches for the first 1.8 s, and
/// batches at all for 2.4 s.
const PROVIDER_TIMEOUT_MS: u64 = 600;
const IDLE_MS: u64 = 500;
const SCHEDULE_EVERY: Duration = Duration::from_secs(1);
const SWEEP_EVERY: Duration = Duration::from_millis(500);
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// The slots held, as sampled.
#[derive(Default)]
struct Slots {
    samples: u64,
    most: u64,
    highest: i32,
    /// When the most were held first.
    at: Option<DateTime<Utc>>,
}

/// What the schedule's invocations did.
#[derive(Default)]
struct Scheduled {
    runs: u64,
    failed: u64,
    claimed: u64,
    /// Found every slot held: joined nothing, claimed nothing.
    full: u64,
}

/// The scenario; without `kill`, no worker is killed (and nothing is left to sweep).
async fn run(s: &mut Suite, kill: bool) -> Row {
    let mut row = Row::default();
    let jobs = if s.quick { 300 } else { 800 };
    let kills = match (kill, s.quick) {
        (false, _) => 0,
        (true, true) => 2,
        (true, false) => 4,
    };
    let limit = Duration::from_secs(if s.quick { 40 } else { 90 });
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    let recipients = Recipients::new();
    let accepted = s.accept_jobs(&db, &recipients, jobs, &mut row).await;
    let lambda = InvokeApi::start(s.launcher.ledger.clone());
    let mut env = s.worker_env(&db, BATCH, CONCURRENCY);
    env.retain(|(k, _)| *k != "PROVIDER_TIMEOUT_MS");
    env.push(("PROVIDER_TIMEOUT_MS", PROVIDER_TIMEOUT_MS.to_string()));
    env.push(("WORKER_IDLE_MS", IDLE_MS.to_string()));
    env.push(("WORKER_MAX_INVOCATIONS", MAX.to_string()));
    env.extend(wake_env(&lambda));
    let workers = Function::start(&s.launcher, "worker", env, PROCESSES).await;
    lambda.register(WORKER_FUNCTION, &workers, WORKER_TIMEOUT);
    let sweeper = s.sweeper(&db).await;
    let sampler = db.client().await;
    s.proxy.set_delay(PROVIDER_DELAY);
    row.note(format!(
        "{jobs} jobs waiting; workers: WORKER_MAX_INVOCATIONS {MAX}, batch {BATCH}, \
         {CONCURRENCY} in flight, provider calls delayed {} ms each way, timeout {} s; the \
         schedule every {} s, the sweeper every {} ms",
        PROVIDER_DELAY.as_millis(),
        WORKER_TIMEOUT.as_secs(),
        SCHEDULE_EVERY.as_secs(),
        SWEEP_EVERY.as_millis()
    ));
    let done = Cell::new(false);
    let ledger = &s.launcher.ledger;
    let (scheduled, (sweeps, swept), slots, killed) = tokio::join!(
        schedule(&workers, &done),
        sweep(&sweeper, &done),
        sample(&sampler, &done),
        control(&client, ledger, &workers, kills, limit, &done),
    );
    s.proxy.set_delay(Duration::from_millis(5));
    row.runs += scheduled.runs + sweeps + killed.len() as u64;
    let settled = lambda.settled(WORKER_TIMEOUT * 2).await;
    row.check(
        settled,
        "every invocation the fleet started ended (answered, or killed)",
    );
    check_slots(&slots, &mut row);
    check_growth(&lambda, &scheduled, &slots, &mut row);
    if kill {
        check_kills(&client, ledger, &killed, kills, &mut row).await;
        row.check(
            sweeps > 0 && swept > 0,
            format!(
                "the sweeper took back the killed workers' jobs while the fleet worked: \
                 {swept} in {sweeps} sweeps"
            ),
        );
    }
    let healthy = s.worker(&db, 1).await;
    drain(&client, &healthy, &sweeper, &mut row).await;
    settle(
        &client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &recipients,
    )
    .await;
    row
}

/// The schedule: an invocation every [`SCHEDULE_EVERY`], each on its own, until `done`.
async fn schedule(workers: &Function, done: &Cell<bool>) -> Scheduled {
    let mut out = Scheduled::default();
    let mut calls = FuturesUnordered::new();
    let mut tick = tokio::time::interval(SCHEDULE_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick(), if !done.get() => {
                if !done.get() {
                    calls.push(invoke_scheduled(workers, WORKER_TIMEOUT));
                    out.runs += 1;
                }
            }
            Some(result) = calls.next() => tally(&mut out, result),
            else => break,
        }
    }
    out
}

fn tally(out: &mut Scheduled, result: Result<Value, String>) {
    match result {
        Ok(summary) => {
            out.claimed += summary_count(&summary, "claimed");
            let slot = summary
                .get("fleet")
                .and_then(|f| f.get("slot"))
                .and_then(Value::as_i64)
                .unwrap_or(-1);
            out.full += u64::from(slot == 0);
        }
        Err(_) => out.failed += 1,
    }
}

/// The sweeper every [`SWEEP_EVERY`] until `done`: (runs, jobs it took back).
async fn sweep(sweeper: &Function, done: &Cell<bool>) -> (u64, u64) {
    let (mut runs, mut swept) = (0, 0);
    while !done.get() {
        if let Ok(summary) = invoke_scheduled(sweeper, Duration::from_secs(30)).await {
            swept += summary_count(&summary, "requeued") + summary_count(&summary, "dead");
        }
        runs += 1;
        tokio::time::sleep(SWEEP_EVERY).await;
    }
    (runs, swept)
}

/// `worker_slots` every [`SAMPLE_EVERY`] until `done`. More slots held than the bound end
/// the run: the check has failed, and the drain sends what is left.
async fn sample(client: &Client, done: &Cell<bool>) -> Slots {
    let mut slots = Slots::default();
    while !done.get() {
        let (held, highest) = slots_held(client).await;
        slots.samples += 1;
        if held > slots.most {
            slots.most = held;
            slots.at = Some(Utc::now());
        }
        slots.highest = slots.highest.max(highest);
        if held > u64::from(MAX) {
            done.set(true);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    slots
}

/// A running invocation the backlog started that holds claimed jobs now.
async fn delivering(client: &Client, ledger: &Ledger, workers: &Function) -> Option<Span> {
    let names = workers.process_names();
    let running: Vec<Span> = ledger
        .spans()
        .into_iter()
        .filter(|s| {
            s.ended.is_none()
                && names.contains(&s.process)
                && ledger.wake_reason(&s.invocation).as_deref() == Some("backlog")
        })
        .collect();
    for span in running {
        if holding(client, &span.process, span.picked).await.open > 0 {
            return Some(span);
        }
    }
    None
}

/// Kills `kills` workers the backlog started, mid-delivery, a second apart (a fresh process
/// takes each one's place, as Lambda starts another environment); then waits until every
/// job is finished (or the run is `done` already), up to `limit` from the start, and says the
/// run is `done`.
async fn control(
    client: &Client,
    ledger: &Ledger,
    workers: &Function,
    kills: usize,
    limit: Duration,
    done: &Cell<bool>,
) -> Vec<Span> {
    let started = Instant::now();
    let mut killed = Vec::new();
    for _ in 0..kills {
        let found = poll(Duration::from_secs(15), Duration::from_millis(50), || {
            delivering(client, ledger, workers)
        })
        .await;
        let Some(span) = found else { break };
        workers.kill(&span.process).await;
        workers.add_process();
        killed.push(span);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let left = limit.saturating_sub(started.elapsed());
    poll(left, Duration::from_millis(200), || async move {
        (done.get() || db::queue(client).await.open == 0).then_some(())
    })
    .await;
    done.set(true);
    killed
}

fn check_slots(slots: &Slots, row: &mut Row) {
    row.check(
        slots.samples > 0 && slots.most <= u64::from(MAX),
        format!(
            "{WITHIN_MAX} ({MAX}): the most held {} (the highest slot {}) in {} samples{}",
            slots.most,
            slots.highest,
            slots.samples,
            slots
                .at
                .map(|at| format!(", first at {}", at.format("%T%.3f")))
                .unwrap_or_default()
        ),
    );
}

fn check_growth(lambda: &InvokeApi, scheduled: &Scheduled, slots: &Slots, row: &mut Row) {
    let requests = lambda.requests();
    let started = |reason: &str| {
        requests
            .iter()
            .filter(|r| r.reason.as_deref() == Some(reason) && r.status == Some(202))
            .count()
    };
    let backlog = started("backlog");
    row.check(
        backlog >= 2 && slots.most >= 3,
        format!(
            "the backlog started more workers: {backlog} backlog wakes, {} hand-offs; up to \
             {} slots held at once (at least 3 expected)",
            started("hand_off"),
            slots.most
        ),
    );
    row.note(format!(
        "the schedule's {} invocations claimed {} jobs; {} found every slot held and claimed \
         nothing; {} failed",
        scheduled.runs, scheduled.claimed, scheduled.full, scheduled.failed
    ));
}

async fn check_kills(
    client: &Client,
    ledger: &Ledger,
    killed: &[Span],
    kills: usize,
    row: &mut Row,
) {
    let held = claims::held_at_kills(&claims::load(client).await, &ledger.spans());
    let landed = killed
        .iter()
        .filter(|k| held.get(&k.process).is_some_and(|jobs| !jobs.is_empty()))
        .count();
    let jobs: usize = killed
        .iter()
        .filter_map(|k| held.get(&k.process))
        .map(Vec::len)
        .sum();
    row.check(
        killed.len() == kills && landed == kills,
        format!(
            "every kill landed in a worker the backlog started, mid-delivery: {landed} of \
             {kills} ({jobs} jobs held at the kills)"
        ),
    );
}
