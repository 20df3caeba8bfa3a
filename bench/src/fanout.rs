//! 13, continued: the fan-out. A queue of due jobs, one worker woken as ingest wakes it (a
//! `Waker` on a store of its own), and the fan-out left to start the others
//! (`Crew::consider_growing`, through the in-process Lambda of [`crate::lambda`]); every
//! provider call waits 30–80 ms (uniform, seeded: [`crate::wake::Provider`]). Once for each
//! `WORKER_MAX_INVOCATIONS` of the plan, the other settings shipped.
//!
//! The drain is timed on the database's clock, from just before the wake
//! (`clock_timestamp()`) to the last job's end (its outcome row's `updated_at`): the ramp from
//! one worker to N is in it, the last worker's linger is not. The speed-up is each N's jobs/s
//! over N = 1's, both timed so. The database's side over the same window
//! ([`crate::server`]): its transactions per second, its CPU in cores, this process's, and
//! the whole machine's busy share, to tell whether the database (or the machine) binds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use notify_core::fleet::{FleetConfig, Started, Wake, WakeReason, Waker};
use notify_postgres::PgStore;
use serde::Serialize;

use crate::Plan;
use crate::db::Bench;
use crate::lambda::{Lambda, Starts};
use crate::server::{Sampler, ServerSide};
use crate::stats::{rounded, rounded_opt};
use crate::wake::{BATCH, PROVIDER_MS, Provider};

/// The fan-out at each `WORKER_MAX_INVOCATIONS`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FanOut {
    /// Due jobs each run drains.
    pub jobs: i64,
    /// The provider call's wait, uniform between these (ms).
    pub provider_ms: [f64; 2],
    pub runs: Vec<FanOutRun>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct FanOutRun {
    /// `WORKER_MAX_INVOCATIONS`.
    pub max_invocations: u32,
    /// From the wake to the last job's end, on the database's clock.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub drain_secs: f64,
    /// Jobs over the drain.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub jobs_per_sec: f64,
    /// Jobs/s over N = 1's (when measured).
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub speed_up: Option<f64>,
    /// The speed-up over N: 1.0 is linear.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub speed_up_per_invocation: Option<f64>,
    /// The invocations started: the first wake, the fan-out's, the hand-offs at deadlines.
    pub invocations: Starts,
    /// The most invocations running at once, and how long after the wake that was reached.
    pub peak_running: usize,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub peak_after_secs: Option<f64>,
    /// Environments opened because every warm one was busy.
    pub environments_opened: u64,
    /// The database's side (and this process's, and the machine's) over the drain.
    pub server: ServerSide,
}

/// Every N of the plan in turn, then the speed-ups over N = 1.
pub async fn measure(bench: &Bench, plan: &Plan) -> Result<FanOut> {
    let mut runs = Vec::new();
    for &n in &plan.fan_out_max {
        crate::step!(
            "wake: fan-out, {} due jobs, WORKER_MAX_INVOCATIONS {n}, one worker woken",
            plan.fan_out_jobs
        );
        runs.push(run(bench, plan.fan_out_jobs, n).await?);
    }
    speed_ups(&mut runs);
    Ok(FanOut {
        jobs: plan.fan_out_jobs,
        provider_ms: [PROVIDER_MS.0, PROVIDER_MS.1],
        runs,
    })
}

/// Each run's jobs/s over the N = 1 run's, and that over N.
fn speed_ups(runs: &mut [FanOutRun]) {
    let base = runs
        .iter()
        .find(|r| r.max_invocations == 1)
        .map(|r| r.jobs_per_sec);
    for r in runs {
        r.speed_up = base.map(|b| r.jobs_per_sec / b);
        r.speed_up_per_invocation = r.speed_up.map(|s| s / f64::from(r.max_invocations));
    }
}

/// One drain of `jobs` due jobs at `WORKER_MAX_INVOCATIONS` = `n`.
async fn run(bench: &Bench, jobs: i64, n: u32) -> Result<FanOutRun> {
    bench.reset(jobs).await?;
    let provider = Arc::new(Provider::new());
    let fleet = FleetConfig {
        max_invocations: n,
        ..FleetConfig::default()
    };
    // a warm environment per invocation the fleet may run, and one for a successor starting
    // as its predecessor finishes
    let lambda = Lambda::new(bench, n as usize + 1, provider.clone(), BATCH, fleet).await?;
    let waker_store = Arc::new(
        PgStore::connect(bench.config.clone())
            .await
            .context("open the waker's store")?,
    );
    let waker = Waker::new(waker_store, lambda.invoker());
    let sampler = Sampler::start(bench).await?;
    let from = db_epoch(
        bench,
        "SELECT extract(epoch FROM clock_timestamp())::float8",
    )
    .await?;
    let woke_at = Instant::now();
    let wake = waker.wake(WakeReason::Accepted).await;
    ensure!(
        wake == Wake::Started(Started::Accepted),
        "the wake started no worker: {wake:?}"
    );
    lambda.settled(bench).await?;
    let series = sampler.finish(None).await?;
    let to = db_epoch(
        bench,
        "SELECT extract(epoch FROM max(updated_at))::float8 FROM job_outcomes
         WHERE status = 'sent'",
    )
    .await?;
    let counts = bench.counts().await?;
    ensure!(
        counts.sent == jobs && counts.open == 0 && provider.repeats() == 0,
        "fan-out at {n}: {jobs} jobs, {} sent, {} still open, {} reached the provider twice",
        counts.sent,
        counts.open,
        provider.repeats()
    );
    let drain_secs = to - from;
    ensure!(
        drain_secs > 0.0,
        "fan-out at {n}: a drain of {drain_secs} s"
    );
    let (peak_running, peak_at) = lambda.peak();
    Ok(FanOutRun {
        max_invocations: n,
        drain_secs,
        jobs_per_sec: jobs as f64 / drain_secs,
        speed_up: None,
        speed_up_per_invocation: None,
        invocations: Starts::of(&lambda.invocations()),
        peak_running,
        peak_after_secs: peak_at.map(|at| at.saturating_duration_since(woke_at).as_secs_f64()),
        environments_opened: lambda.opened(),
        server: series.between(woke_at, woke_at + Duration::from_secs_f64(drain_secs)),
    })
}

/// A time from the database, in seconds since the epoch.
async fn db_epoch(bench: &Bench, sql: &str) -> Result<f64> {
    let row = bench
        .client
        .query_one(sql, &[])
        .await
        .with_context(|| format!("the database's clock: {sql}"))?;
    row.get::<_, Option<f64>>(0)
        .context("the database's clock read nothing")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u32, jobs_per_sec: f64) -> FanOutRun {
        FanOutRun {
            max_invocations: n,
            jobs_per_sec,
            ..FanOutRun::default()
        }
    }

    #[test]
    fn speed_ups_are_over_the_single_invocations_run() {
        let mut runs = vec![run(1, 250.0), run(2, 480.0), run(8, 1_000.0)];
        speed_ups(&mut runs);
        assert_eq!(runs[0].speed_up, Some(1.0));
        assert_eq!(runs[1].speed_up, Some(1.92));
        assert_eq!(runs[1].speed_up_per_invocation, Some(0.96));
        assert_eq!(runs[2].speed_up_per_invocation, Some(0.5));
        let mut without_one = vec![run(2, 480.0)];
        speed_ups(&mut without_one);
        assert_eq!(without_one[0].speed_up, None);
    }
}
