//! kill -9 of a worker process mid-delivery, at random moments, with the sweeper running
//! every 10 kills; then sweeps and healthy runs until every job is final.
//!
//! Each round cold-starts a worker (batches of 16, 4 provider calls in flight, each chunk
//! held [`PROVIDER_DELAY`] each way by the proxy), invokes it and SIGKILLs it 30–930 ms in.
//! The worker writes results as they arrive (every 50 ms) and starts a call only while fewer
//! than 2 × 4 messages are handed over and not yet recorded, so a kill re-sends at most the
//! messages whose results were not yet written: at most 2 × 4 per kill, and never more than
//! the jobs it held. The suite gives
//! every duplicate to a kill whose invocation held its job (or to that job's own call that
//! timed out, whose fate is unknown too) and holds each kill to its own bound.

use std::time::Duration;

use super::{Mutant, Scenario};
use crate::TestDb;
use crate::faults::api::{SCHEDULED_EVENT, invoke_scheduled};
use crate::faults::endgame::{drain, settle};
use crate::faults::process::Function;
use crate::faults::runtime::Ledger;
use crate::faults::suite::WORKER_TIMEOUT;
use crate::faults::{Row, Suite, claims, db, sends};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "worker kill -9 mid-delivery",
    run: |s| Box::pin(run(s)),
};

/// The same, with workers that record a batch's results only once all of them are in, claim
/// no more meanwhile and keep no window (tests/mutants/record-at-batch-end.patch): a kill
/// then re-sends every message its batch had sent so far, more than it had in flight, and
/// the per-kill bound must say so.
pub const RECORD_AT_BATCH_END: Mutant = Mutant {
    title: "a worker that records results only at the end of its batch",
    patch: Some("record-at-batch-end"),
    run: |s| Box::pin(run(s)),
    caught_by: RESENT_PER_KILL,
};

/// The per-kill bound's words.
const RESENT_PER_KILL: &str = "each kill re-sent at most what it had in flight";

const PROVIDER_DELAY: Duration = Duration::from_millis(80);
/// Provider calls a worker has in flight at once (`WORKER_CONCURRENCY`).
const IN_FLIGHT: u64 = 4;
/// Jobs claimed at once: more than a kill may re-send, so the bound says something.
const BATCH: u64 = 16;
/// Short enough that a batch of 16 (4 waves) fits the 3 s of work a 6 s timeout leaves.
const PROVIDER_TIMEOUT_MS: u64 = 600;

/// One kill: which process, and whether it had taken its invocation by then.
struct Kill {
    process: String,
    picked: bool,
}

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let kills = if s.quick { 15 } else { 50 };
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    let recipients = Recipients::new();
    // more jobs than the kills can take, so every round finds work
    let accepted = s.accept_jobs(&db, &recipients, kills * 12, &mut row).await;
    s.proxy.set_delay(PROVIDER_DELAY);
    row.note(format!(
        "provider calls delayed {} ms each way by the proxy; batch {BATCH}, {IN_FLIGHT} in flight",
        PROVIDER_DELAY.as_millis()
    ));
    let sweeper = s.sweeper(&db).await;
    let done = kill_rounds(s, &db, &sweeper, kills, &mut row).await;
    s.proxy.set_delay(Duration::from_millis(5));
    let worker = s.worker(&db, 1).await;
    drain(&client, &worker, &sweeper, &mut row).await;
    let verdict = settle(
        &client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &recipients,
    )
    .await;
    if verdict.after_kill > 0 {
        row.note(format!(
            "{} claims committed just after their process was killed (held by no one)",
            verdict.after_kill
        ));
    }
    check_kills(&client, &s.launcher.ledger, &mut row, &done, &recipients).await;
    row
}

/// `kills` rounds of cold start, invoke, SIGKILL at a random moment; a sweep every 10.
async fn kill_rounds(
    s: &Suite,
    db: &TestDb,
    sweeper: &Function,
    kills: usize,
    row: &mut Row,
) -> Vec<Kill> {
    let mut done = Vec::new();
    for round in 0..kills {
        let mut worker = kill_worker(s, db).await; // a cold start, as after a crash
        let process = worker.process_names()[0].clone();
        let inv = worker
            .emulator
            .invoke(SCHEDULED_EVENT.as_bytes(), WORKER_TIMEOUT);
        let picked = matches!(
            tokio::time::timeout(Duration::from_secs(10), inv.picked).await,
            Ok(Ok(()))
        );
        let moment = Duration::from_millis(30 + super::random_u64() % 900);
        tokio::time::sleep(moment).await;
        worker.kill_all().await;
        worker.emulator.forget(&inv.id);
        row.runs += 1;
        done.push(Kill { process, picked });
        if (round + 1) % 10 == 0 {
            if let Err(e) = invoke_scheduled(sweeper, Duration::from_secs(30)).await {
                row.note(format!("sweeper run failed: {e}"));
            }
            row.runs += 1;
        }
    }
    done
}

async fn kill_worker(s: &Suite, db: &TestDb) -> Function {
    let mut env = s.worker_env(db, BATCH as u32, IN_FLIGHT as u32);
    env.retain(|(k, _)| *k != "PROVIDER_TIMEOUT_MS");
    env.push(("PROVIDER_TIMEOUT_MS", PROVIDER_TIMEOUT_MS.to_string()));
    Function::start(&s.launcher, "worker", env, 1).await
}

/// The kills landed inside deliveries, left attempts for the sweeper, and each re-sent no more
/// than it had in flight: every duplicate send is given to a kill whose invocation held its
/// job (or to that job's own call that timed out), and each kill's share is bounded by what
/// that kill had in flight, so slack from one kill cannot hide a breach in another.
async fn check_kills(
    client: &tokio_postgres::Client,
    ledger: &Ledger,
    row: &mut Row,
    kills: &[Kill],
    recipients: &Recipients,
) {
    let picked = kills.iter().filter(|k| k.picked).count();
    row.check(
        picked == kills.len(),
        format!(
            "every kill landed in a running invocation: {picked} of {} picked up before the kill",
            kills.len()
        ),
    );
    let held_at = claims::held_at_kills(&claims::load(client).await, &ledger.spans());
    let held: Vec<u64> = kills
        .iter()
        .map(|k| held_at.get(&k.process).map_or(0, |jobs| jobs.len() as u64))
        .collect();
    let landed = held.iter().filter(|n| **n > 0).count();
    row.check(
        landed * 2 >= kills.len(),
        format!(
            "kills that landed mid-delivery (the killed invocation held jobs it had claimed): \
             {landed} of {} (at least half); {} jobs held at the kills",
            kills.len(),
            held.iter().sum::<u64>()
        ),
    );
    let lost_rows = db::lost_attempts(client).await;
    row.check(
        lost_rows > 0,
        format!("attempts the sweeper recorded as lost: {lost_rows}"),
    );
    let received = sends::received(|to| recipients.owns(to)).await;
    let (duplicates, unanswered) = sends::duplicates_by_job(client, &received).await;
    let shares = claims::attribute(&duplicates, &unanswered, &held_at);
    row.check(
        shares.unexplained.is_empty(),
        format!(
            "duplicate sends, each given to a kill that held its job or to its own unanswered \
             call: {} to kills, {} to unanswered calls, {} to nothing{}",
            shares.per_kill.values().sum::<u64>(),
            shares.by_unanswered,
            shares.unexplained.iter().map(|(_, n)| n).sum::<u64>(),
            shares
                .unexplained
                .first()
                .map(|(job, n)| format!(" (first: job {job}, {n})"))
                .unwrap_or_default()
        ),
    );
    // (the kill's share, its bound, the process), the one furthest over its bound first
    let mut per_kill: Vec<(u64, u64, &str)> = kills
        .iter()
        .map(|k| {
            let share = shares.per_kill.get(&k.process).copied().unwrap_or(0);
            let held = held_at.get(&k.process).map_or(0, |jobs| jobs.len() as u64);
            (share, held.min(2 * IN_FLIGHT), k.process.as_str())
        })
        .collect();
    per_kill
        .sort_by_key(|(share, bound, _)| std::cmp::Reverse((share.saturating_sub(*bound), *share)));
    let over = per_kill
        .iter()
        .filter(|(share, bound, _)| share > bound)
        .count();
    let worst = per_kill.first().copied().unwrap_or((0, 0, ""));
    row.check(
        over == 0,
        format!(
            "{RESENT_PER_KILL} (its held jobs, at most 2 × {IN_FLIGHT}): kills over their \
             bound: {over}; the largest share {} of a bound {} ({})",
            worst.0, worst.1, worst.2
        ),
    );
}
