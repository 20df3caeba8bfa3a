//! The sweeper beside slow, healthy workers (invariant 4): three warm workers deliver back
//! to back through a slow provider, holding claimed jobs for seconds, while the sweeper runs
//! every half second with its window just past the workers' timeout. A healthy worker's job
//! is never swept: the sweeper finds nothing, no attempt is lost or fenced, no job is claimed
//! while an earlier holder still holds it, no message goes out twice. The holds are checked
//! to last longer than the shortest window the sweeper accepts (2 s), so a window shorter
//! than the workers' holds would be caught here.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::{Mutant, Scenario};
use crate::TestDb;
use crate::faults::api::{invoke_scheduled, summary_count};
use crate::faults::endgame::{CLAIMED_TWICE, ENDED_BY_ANOTHER, drain, settle};
use crate::faults::process::Function;
use crate::faults::{Row, Suite, claims, db};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "sweeper beside slow workers",
    run: |s| Box::pin(run(s, STUCK_AFTER_SECS, TIMEOUT.as_secs())),
};

/// The same, with a sweep window shorter than the workers hold their jobs: the sweeper is
/// told the shortest window it accepts (a `WORKER_TIMEOUT_SECS` of 1 where the workers' is
/// 12). It takes jobs live workers still deliver, and the claimed-twice check must say so.
pub const SHORT_WINDOW: Mutant = Mutant {
    title: "a sweep window shorter than the workers' holds",
    patch: None,
    run: |s| Box::pin(run(s, SHORTEST_WINDOW.as_secs(), 1)),
    caught_by: CLAIMED_TWICE,
};

/// The same short window, with workers whose completion ignores the claim token
/// (tests/mutants/unfenced-completion.patch): a worker whose job was swept and claimed again
/// completes it anyway, under the new holder's claim. With the fence, such a completion is
/// recorded as fenced and changes nothing; SHORT_WINDOW's row shows that check passing.
pub const UNFENCED: Mutant = Mutant {
    title: "a completion without its claim fence",
    patch: Some("unfenced-completion"),
    run: |s| Box::pin(run(s, SHORTEST_WINDOW.as_secs(), 1)),
    caught_by: ENDED_BY_ANOTHER,
};

const WORKERS: usize = 3;
/// Each chunk held this long each way: a provider call takes the better part of a second.
const CALL_DELAY: Duration = Duration::from_millis(300);
/// This scenario's worker timeout: 9 s of work after the 3 s safety margin.
const TIMEOUT: Duration = Duration::from_secs(12);
/// Four waves of calls fit in the 9 s, so a batch is 4 × 4 jobs held for 4 calls' time.
const PROVIDER_TIMEOUT_MS: u64 = 2000;
const BATCH: u32 = 16;
const CONCURRENCY: u32 = 4;
/// The window, just past the timeout, as the sweeper demands.
const STUCK_AFTER_SECS: u64 = 13;
const SWEEP_EVERY: Duration = Duration::from_millis(500);
/// The shortest sweep window the sweeper accepts (`WORKER_TIMEOUT_SECS` 1, window 2).
const SHORTEST_WINDOW: Duration = Duration::from_secs(2);

/// What the workers' invocations reported.
#[derive(Default)]
struct Work {
    runs: u64,
    failed: u64,
    claimed: u64,
    fenced: u64,
}

/// The scenario with the sweeper told `stuck_after` and `worker_timeout` (seconds).
async fn run(s: &mut Suite, stuck_after: u64, worker_timeout: u64) -> Row {
    let mut row = Row::default();
    let jobs = if s.quick { 60 } else { 150 };
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    let recipients = Recipients::new();
    let accepted = s.accept_jobs(&db, &recipients, jobs, &mut row).await;
    let env = vec![
        ("DATABASE_URL", s.url(&db)),
        ("WORKER_BATCH_SIZE", BATCH.to_string()),
        ("WORKER_CONCURRENCY", CONCURRENCY.to_string()),
        ("PROVIDER_TIMEOUT_MS", PROVIDER_TIMEOUT_MS.to_string()),
    ];
    let workers = Function::start(&s.launcher, "worker", env, WORKERS).await;
    let sweeper = s.sweeper_with(&db, stuck_after, worker_timeout).await;
    s.proxy.set_delay(CALL_DELAY);
    row.note(format!(
        "{WORKERS} workers (timeout {} s, batch {BATCH}, {CONCURRENCY} in flight, provider calls \
         delayed {} ms each way); the sweeper (window {stuck_after} s) every {} ms",
        TIMEOUT.as_secs(),
        CALL_DELAY.as_millis(),
        SWEEP_EVERY.as_millis()
    ));
    let done = Cell::new(false);
    let (done_work, (sweeps, swept)) = tokio::join!(work(&workers, &done), sweep(&sweeper, &done));
    s.proxy.set_delay(Duration::from_millis(5));
    row.runs += done_work.runs + sweeps;
    check_work(&client, &mut row, &done_work, sweeps, swept).await;
    let sweeper = s.sweeper(&db).await;
    drain(&client, &workers, &sweeper, &mut row).await;
    let verdict = settle(
        &client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &recipients,
    )
    .await;
    row.check(
        verdict.longest_hold >= SHORTEST_WINDOW,
        format!(
            "the longest a healthy worker held a job: {:.1} s (a sweep window shorter than \
             that would take a live worker's job; the shortest the sweeper accepts is {} s)",
            verdict.longest_hold.as_secs_f64(),
            SHORTEST_WINDOW.as_secs()
        ),
    );
    row.check(
        row.duplicate_sends == Some(0),
        format!(
            "messages sent twice (no worker was lost): {}",
            row.duplicate_sends.unwrap_or(0)
        ),
    );
    row
}

/// Each worker invoked back to back until an invocation finds nothing to claim.
async fn work(workers: &Function, done: &Cell<bool>) -> Work {
    let started = Instant::now();
    let one = || async move {
        let mut w = Work::default();
        while started.elapsed() < Duration::from_secs(120) {
            w.runs += 1;
            match invoke_scheduled(workers, TIMEOUT).await {
                Ok(summary) => {
                    let claimed = summary_count(&summary, "claimed");
                    w.claimed += claimed;
                    w.fenced += summary_count(&summary, "fenced");
                    if claimed == 0 {
                        break;
                    }
                }
                Err(_) => w.failed += 1,
            }
        }
        w
    };
    let all = futures::future::join_all((0..WORKERS).map(|_| one())).await;
    done.set(true);
    all.into_iter().fold(Work::default(), |a, w| Work {
        runs: a.runs + w.runs,
        failed: a.failed + w.failed,
        claimed: a.claimed + w.claimed,
        fenced: a.fenced + w.fenced,
    })
}

/// The sweeper every [`SWEEP_EVERY`] until the work is done: (runs, jobs it took).
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

async fn check_work(
    client: &tokio_postgres::Client,
    row: &mut Row,
    work: &Work,
    sweeps: u64,
    swept: u64,
) {
    row.note(format!(
        "{} worker invocations claimed {} jobs; {sweeps} sweeps meanwhile",
        work.runs, work.claimed
    ));
    row.check(
        work.failed == 0,
        format!("worker invocations that failed: {}", work.failed),
    );
    row.check(
        sweeps > 0 && swept == 0,
        format!("jobs the sweeper took from the live workers: {swept} in {sweeps} sweeps"),
    );
    row.check(
        work.fenced == 0,
        format!(
            "attempts fenced (their job swept or claimed again meanwhile): {}",
            work.fenced
        ),
    );
    let lost = db::lost_attempts(client).await;
    row.check(lost == 0, format!("attempts recorded as lost: {lost}"));
}
