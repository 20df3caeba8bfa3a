//! Wakes that fail, are lost or hang (invariants 6 and 15): a caller never waits on Lambda,
//! and a wake that never starts a worker costs at most one schedule period, never the job.
//!
//! Ingest (4 processes) wakes the worker through the Invoke API, which answers each round's
//! wake as the round says: 500 `ServiceException`, 429 `TooManyRequestsException` (the SDK
//! tries each again, then gives up), 202 without ever queueing it (lost), no answer at all
//! (hung), then as Lambda does. Each round posts a burst of requests at once; one second
//! after the burst began the schedule invokes the worker. Every request must be answered 202
//! within [`ANSWER_WITHIN`] (ingest waits [`WAKE_WAIT`] at most for Lambda), each burst must
//! send one wake, each refused wake must be counted once as `WakeFailed` in ingest's EMF
//! lines (and each taken one as `WakeSent`), and every job of a round whose wake failed, was
//! lost or hung must be claimed by the scheduled invocation, within two seconds of its
//! acceptance. In the last round Lambda answers again, and the wake's worker claims the burst
//! before the schedule comes.
//!
//! A wake that never started its worker keeps the wake's slot for `JOIN_WITHIN` (10 s), so no
//! other wake is sent meanwhile; each round ends that hold early (its `until` moved back)
//! instead of waiting it out, so that every round's burst tries a wake of its own.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use tokio_postgres::Client;
use uuid::Uuid;

use notify_core::fleet::WAKE_WAIT;

use super::fleet::{
    CLAIM_WITHIN, Posted, first_claims, poll, post, secs_between, wake_metrics, woken_by,
};
use super::{Mutant, Scenario};
use crate::TestDb;
use crate::faults::api::{invoke_scheduled, summary_count};
use crate::faults::endgame::settle;
use crate::faults::process::Function;
use crate::faults::runtime::{InvokeApi, InvokeFault};
use crate::faults::suite::{WORKER_FUNCTION, WORKER_TIMEOUT};
use crate::faults::{Row, Suite, claims};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "wakes that fail, are lost or hang",
    run: |s| Box::pin(run(s)),
};

/// The same, with an ingest that waits for Lambda's answer to its wake however long it takes
/// (tests/mutants/wake-waits-for-lambda.patch): the request whose wake hangs is never
/// answered, and those whose wake is refused wait out the SDK's retries.
pub const WAITS_FOR_LAMBDA: Mutant = Mutant {
    title: "an ingest that waits for Lambda's answer to its wake",
    patch: Some("wake-waits-for-lambda"),
    run: |s| Box::pin(run(s)),
    caught_by: ANSWERED_QUICKLY,
};

/// The answer check's words: an ingest that waits on Lambda must fail it.
const ANSWERED_QUICKLY: &str = "every request answered 202 within 650 ms";
/// [`WAKE_WAIT`] and the request's own work, on a debug build sharing two cores.
const ANSWER_WITHIN: Duration = Duration::from_millis(650);
/// The schedule's period, shortened: the backstop comes this long after a burst began.
const SCHEDULE: Duration = Duration::from_secs(1);
const INGESTS: usize = 4;
const BURST: usize = 8;
const IDLE_MS: u64 = 200;

/// One round: the fault, what its burst got, and the wakes the Invoke API saw.
struct Round {
    fault: InvokeFault,
    posted: Vec<Posted>,
    /// The wakes (leases) that first reached the Invoke API during the round.
    wakes: usize,
    /// The schedule's invocation: the jobs it claimed, or why it failed.
    scheduled: Result<u64, String>,
}

fn name(fault: InvokeFault) -> &'static str {
    match fault {
        InvokeFault::None => "answered",
        InvokeFault::Fail => "500",
        InvokeFault::Throttle => "429",
        InvokeFault::Lose => "lost",
        InvokeFault::Hang => "hung",
    }
}

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let faults = [
        InvokeFault::Fail,
        InvokeFault::Throttle,
        InvokeFault::Lose,
        InvokeFault::Hang,
        InvokeFault::None,
    ];
    let laps = if s.quick { 1 } else { 2 };
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    let recipients = Recipients::new();
    let org = Uuid::new_v4();
    let bodies: Vec<Vec<Value>> = (0..faults.len() * laps)
        .map(|r| {
            (0..BURST)
                .map(|i| s.job_body(&recipients, r * BURST + i))
                .collect()
        })
        .collect();
    let lambda = InvokeApi::start(s.launcher.ledger.clone());
    let mut env = s.worker_env(&db, 16, 4);
    env.push(("WORKER_IDLE_MS", IDLE_MS.to_string()));
    let worker = Function::start(&s.launcher, "worker", env, 2).await;
    lambda.register(WORKER_FUNCTION, &worker, WORKER_TIMEOUT);
    let ingest = s.waking_ingest(&db, INGESTS, &lambda).await;
    row.note(format!(
        "{INGESTS} ingest processes wake the worker through the Invoke API; bursts of {BURST} \
         requests; the schedule {} s after each burst began",
        SCHEDULE.as_secs()
    ));
    let mut rounds = Vec::new();
    for (fault, burst) in faults.iter().cycle().zip(&bodies) {
        let round = one_round(&client, &lambda, &ingest, &worker, *fault, burst, org).await;
        row.runs += round.posted.len() as u64 + 1;
        rounds.push(round);
    }
    let posted: Vec<&Posted> = rounds.iter().flat_map(|r| &r.posted).collect();
    let accepted: Vec<Uuid> = posted.iter().filter_map(|p| p.id).collect();
    row.accepted = accepted.len() as u64;
    check_answers(&rounds, &mut row);
    check_wakes(&rounds, &mut row);
    check_metrics(s, &lambda, &ingest.process_names(), &mut row).await;
    check_claims(&client, s, &rounds, &mut row).await;
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

/// A wake that never started its worker holds the wake's slot for JOIN_WITHIN: its hold
/// ended now instead; how many.
async fn end_lost_wake(client: &Client) -> u64 {
    client
        .execute(
            "UPDATE worker_slots SET until = now(), starting = false
             WHERE starting AND until > now()",
            &[],
        )
        .await
        .expect("end a lost wake's hold")
}

async fn one_round(
    client: &Client,
    lambda: &InvokeApi,
    ingest: &Function,
    worker: &Function,
    fault: InvokeFault,
    burst: &[Value],
    org: Uuid,
) -> Round {
    lambda.set_fault(fault);
    end_lost_wake(client).await;
    let seen = lambda.requests().len();
    let tick = Instant::now() + SCHEDULE;
    let posted: Vec<Posted> = futures::stream::iter(burst)
        .map(|body| post(ingest, body, org, ANSWER_WITHIN * 2))
        .buffer_unordered(INGESTS)
        .collect()
        .await;
    tokio::time::sleep_until(tick.into()).await;
    let scheduled = invoke_scheduled(worker, WORKER_TIMEOUT)
        .await
        .map(|summary| summary_count(&summary, "claimed"));
    // the wakes first seen in this round (the SDK may still be retrying an earlier one)
    let requests = lambda.requests();
    let earlier: HashSet<&String> = requests[..seen]
        .iter()
        .filter_map(|r| r.lease.as_ref())
        .collect();
    let wakes: HashSet<&String> = requests[seen..]
        .iter()
        .filter_map(|r| r.lease.as_ref())
        .filter(|lease| !earlier.contains(lease))
        .collect();
    Round {
        fault,
        posted,
        wakes: wakes.len(),
        scheduled,
    }
}

fn check_answers(rounds: &[Round], row: &mut Row) {
    let all: Vec<&Posted> = rounds.iter().flat_map(|r| &r.posted).collect();
    let quick = all
        .iter()
        .filter(|p| p.status == 202 && p.latency <= ANSWER_WITHIN)
        .count();
    let mut slowest: Vec<String> = Vec::new();
    for round in rounds {
        let worst = round
            .posted
            .iter()
            .map(|p| p.latency)
            .max()
            .unwrap_or_default();
        let statuses: HashSet<u16> = round.posted.iter().map(|p| p.status).collect();
        let mut statuses: Vec<u16> = statuses.into_iter().collect();
        statuses.sort();
        slowest.push(format!(
            "{} {} ms ({statuses:?})",
            name(round.fault),
            worst.as_millis()
        ));
    }
    row.check(
        quick == all.len() && !all.is_empty(),
        format!(
            "{ANSWERED_QUICKLY}, whatever became of its wake (ingest waits {} ms at most for \
             Lambda): {quick} of {}; the slowest per round: {}",
            WAKE_WAIT.as_millis(),
            all.len(),
            slowest.join(", ")
        ),
    );
}

fn check_wakes(rounds: &[Round], row: &mut Row) {
    let one = rounds.iter().filter(|r| r.wakes == 1).count();
    let counts: Vec<String> = rounds
        .iter()
        .map(|r| format!("{} {}", name(r.fault), r.wakes))
        .collect();
    row.check(
        one == rounds.len(),
        format!(
            "each burst sent one wake (the rest found its slot taken): {one} of {} rounds \
             (wakes per round: {})",
            rounds.len(),
            counts.join(", ")
        ),
    );
}

/// Each wake Lambda refused is counted once as `WakeFailed`, each it took (lost or not)
/// once as `WakeSent`, in ingest's EMF lines, with the reason `accepted`.
async fn check_metrics(s: &Suite, lambda: &InvokeApi, ingests: &[String], row: &mut Row) {
    // per wake (lease): the fault it met and how many requests the SDK made for it
    let mut wakes: HashMap<String, (InvokeFault, u64)> = HashMap::new();
    for r in lambda.requests() {
        if let Some(lease) = r.lease {
            wakes.entry(lease).or_insert((r.fault, 0)).1 += 1;
        }
    }
    let count =
        |faults: &[InvokeFault]| wakes.values().filter(|(f, _)| faults.contains(f)).count() as u64;
    let refused = count(&[InvokeFault::Fail, InvokeFault::Throttle]);
    let taken = count(&[InvokeFault::None, InvokeFault::Lose]);
    let hung = count(&[InvokeFault::Hang]);
    let tries: Vec<u64> = wakes
        .values()
        .filter(|(f, _)| matches!(f, InvokeFault::Fail | InvokeFault::Throttle))
        .map(|(_, n)| *n)
        .collect();
    let key = |metric: &str| (metric.to_owned(), "accepted".to_owned());
    // a refused wake is counted once the SDK has given up: wait for that
    let launcher = &s.launcher;
    let counted = poll(
        Duration::from_secs(10),
        Duration::from_millis(200),
        || async move {
            let m = wake_metrics(launcher, ingests);
            let failed = m.get(&key("WakeFailed")).copied().unwrap_or(0);
            (failed >= refused).then_some(m)
        },
    )
    .await
    .unwrap_or_else(|| wake_metrics(&s.launcher, ingests));
    let failed = counted.get(&key("WakeFailed")).copied().unwrap_or(0);
    let sent = counted.get(&key("WakeSent")).copied().unwrap_or(0);
    let others: u64 = counted
        .iter()
        .filter(|((_, reason), _)| reason != "accepted")
        .map(|(_, n)| n)
        .sum();
    row.check(
        refused > 0 && failed == refused && sent == taken && others == 0,
        format!(
            "each wake counted once in ingest's EMF lines: WakeFailed {failed} for {refused} \
             Lambda refused (the SDK tried each {tries:?} times), WakeSent {sent} for {taken} \
             it took (the lost ones too); {hung} hung, counted by neither; other reasons {others}"
        ),
    );
}

/// In the rounds whose wake failed, was lost or hung, the schedule's invocation claimed every
/// job, within a second of its tick; in the rounds Lambda answered, the woken worker did.
async fn check_claims(client: &Client, s: &Suite, rounds: &[Round], row: &mut Row) {
    let ledger = &s.launcher.ledger;
    let spans = ledger.spans();
    let first = first_claims(client).await;
    let bound = (SCHEDULE + Duration::from_secs(1)).as_secs_f64();
    // (jobs, claimed by the expected invocation in time, longest wait)
    let mut backstop = (0, 0, 0.0f64);
    let mut woken = (0, 0, 0.0f64);
    for round in rounds {
        let answered = round.fault == InvokeFault::None;
        for p in &round.posted {
            let Some(id) = p.id else { continue };
            let claim = first.get(&id);
            let wait = claim.map(|c| secs_between(p.answered, c.at));
            let by_wake = claim.and_then(|c| woken_by(ledger, &spans, c)).is_some();
            let tally = if answered { &mut woken } else { &mut backstop };
            tally.0 += 1;
            if let Some(w) = wait {
                tally.2 = tally.2.max(w);
                let limit = if answered {
                    CLAIM_WITHIN.as_secs_f64()
                } else {
                    bound
                };
                tally.1 += u64::from(by_wake == answered && w <= limit);
            }
        }
    }
    let scheduled: Vec<String> = rounds
        .iter()
        .map(|r| match &r.scheduled {
            Ok(n) => format!("{} {n}", name(r.fault)),
            Err(e) => format!("{} failed: {e}", name(r.fault)),
        })
        .collect();
    row.check(
        backstop.0 > 0 && backstop.1 == backstop.0,
        format!(
            "a wake that failed, was lost or hung cost at most one schedule period: jobs of \
             those rounds claimed by the scheduled invocation within {bound:.0} s: {} of {} \
             (longest {:.2} s); claimed per scheduled run: {}",
            backstop.1,
            backstop.0,
            backstop.2,
            scheduled.join(", ")
        ),
    );
    row.check(
        woken.0 > 0 && woken.1 == woken.0,
        format!(
            "with Lambda answering, the woken worker claimed the burst before the schedule, \
             each job within 3 s: {} of {} (longest {:.2} s)",
            woken.1, woken.0, woken.2
        ),
    );
}
