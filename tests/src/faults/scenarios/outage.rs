//! A provider outage: the proxy in front of the stand-in refuses connections for seven worker
//! runs — more than the jobs' budget of 5 — then the provider is back. An outage is not the message's fault (invariant 8):
//! every failed call is recorded and retried with backoff inside its step, and spends none of
//! the job's budget; every job is delivered on the first run after the outage, its history
//! exactly seven held calls and one send, on attempt 1 of its budget of 5.

use std::time::Duration;

use uuid::Uuid;

use super::Scenario;
use crate::TestDb;
use crate::faults::api::invoke_scheduled;
use crate::faults::db::STANDS;
use crate::faults::endgame::{run_once_recovered, settle_all_delivered};
use crate::faults::process::Function;
use crate::faults::{Row, Suite, claims};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "provider outage, then back",
    run: |s| Box::pin(run(s)),
};

/// More runs than the budget: had an outage spent attempts, every job would be dead.
const OUTAGE_RUNS: i32 = 7;
const TIMEOUT: Duration = Duration::from_secs(20);

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let jobs = if s.quick { 20 } else { 60 };
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    let recipients = Recipients::new();
    let accepted = s.accept_jobs(&db, &recipients, jobs, &mut row).await;
    let env = s.worker_env(&db, 100, 32);
    let worker = Function::start(&s.launcher, "worker", env, 1).await;
    s.proxy.set_delay(Duration::ZERO);
    s.proxy.cut();
    row.note("provider down: the proxy in front of the stand-in refuses connections");
    for run in 1..=OUTAGE_RUNS {
        outage_run(&client, &worker, run, &mut row).await;
    }
    s.proxy.restore().await;
    row.note("provider back");
    run_once_recovered(&client, &worker, TIMEOUT, &mut row).await;
    check_histories(&client, &accepted, &mut row).await;
    settle_all_delivered(
        &client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &recipients,
    )
    .await;
    row
}

/// One worker run while the provider is down: every job held once more (no attempt spent,
/// one more call and delivery row), waiting in the queue unclaimed, its next call due within
/// the backoff step. Attempts, tries and due times as the job stands (its queue row's).
async fn outage_run(client: &tokio_postgres::Client, worker: &Function, run: i32, row: &mut Row) {
    if run > 1 {
        let moved = crate::factory::make_retries_due(client).await;
        row.note(format!(
            "run {run}: {moved} retries made due now (instead of waiting the backoff out)"
        ));
    }
    let summary = invoke_scheduled(worker, TIMEOUT).await;
    row.runs += 1;
    row.note(format!("run {run} during the outage: {summary:?}"));
    let tries = claims::try_column("j");
    let bad = crate::count(
        client,
        &format!(
            "SELECT count(*) FROM ({STANDS}) j
             WHERE NOT (j.status = 'failed' AND j.queued AND j.attempts = 0 AND {tries} = {run}
                        AND (SELECT count(*) FROM job_attempt_history d
                             WHERE d.job_id = j.id AND d.outcome = 'held') = {run})"
        ),
    )
    .await;
    row.check(
        bad == 0,
        format!(
            "after run {run}: every job waiting, {run} call(s) held, no attempt spent ({bad} not)"
        ),
    );
    // the backoff by tries: 1, 2, 4, … minutes, capped at 30
    let step = (60.0 * 2f64.powi(run - 1)).min(1800.0);
    let r = client
        .query_one(
            &format!(
                "SELECT min(EXTRACT(EPOCH FROM next_attempt_at - updated_at))::float8,
                        max(EXTRACT(EPOCH FROM next_attempt_at - updated_at))::float8
                 FROM ({STANDS}) j"
            ),
            &[],
        )
        .await
        .expect("backoff");
    let (lo, hi): (f64, f64) = (r.get(0), r.get(1));
    row.check(
        lo >= step / 2.0 - 5.0 && hi <= step + 1.0,
        format!(
            "backoff after call {run}: {lo:.0}–{hi:.0} s (expected within {:.0}–{step:.0} s)",
            step / 2.0
        ),
    );
}

/// Every accepted job: one attempt of its budget spent, outage runs + 1 calls, and its
/// delivery rows in order one held call per outage run and then the send.
async fn check_histories(client: &tokio_postgres::Client, accepted: &[Uuid], row: &mut Row) {
    let expected: Vec<String> = (0..OUTAGE_RUNS)
        .map(|_| "held".to_owned())
        .chain(["sent".to_owned()])
        .collect();
    let tries = claims::try_column("j");
    let r = client
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE j.attempts = 1 AND {tries} = $2
                                         AND h.outcomes = $3),
                        count(*), max(j.attempts), min(j.max_attempts)
                 FROM ({STANDS}) j
                 CROSS JOIN LATERAL (SELECT array_agg(d.outcome ORDER BY d.attempt) AS outcomes
                                     FROM job_attempt_history d WHERE d.job_id = j.id) h
                 WHERE j.id = ANY($1)"
            ),
            &[&accepted, &(OUTAGE_RUNS + 1), &expected],
        )
        .await
        .expect("job histories");
    let (as_expected, all) = (r.get::<_, i64>(0), r.get::<_, i64>(1));
    let (most, budget) = (r.get::<_, Option<i32>>(2), r.get::<_, Option<i32>>(3));
    row.check(
        as_expected == all && all == accepted.len() as i64 && all > 0,
        format!(
            "every job sent on attempt 1 of its budget ({budget:?}) after {OUTAGE_RUNS} held \
             calls, one delivery row each: {as_expected} of {all} (most attempts spent: {most:?})"
        ),
    );
}
