//! 5: the peer, graphile-worker (bench/peer), beside ours on the same server, the same no-op
//! jobs, and one clock: the database's ([`crate::clock`]), so neither side's start-up or tail
//! is timed and both are timed alike. Its jobs are queued with its own `add_jobs` in one
//! statement, as its performance test does.
//!
//! - **The headline, at the shipped defaults**: ours as the template deploys it (one worker
//!   invocation, `WorkerBatchSize` 100, `WorkerConcurrency` 32) against graphile-worker at the
//!   configuration its own performance test documents ([`SETTINGS`]: one process), run in
//!   turns ABBA (ours, theirs, theirs, ours, ...) for `plan.peer_rounds` rounds: the median of
//!   each side, the median of the rounds' ratios and its bootstrap 95% interval.
//! - **Both sides' best over grids of the same size**: ours over workers × batch size (the
//!   grid of part 1), theirs over `concurrentJobs` × local queue size × processes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use serde_json::Value;
use tokio::process::Command;

use crate::Plan;
use crate::clock::{self, Sampler, Timed};
use crate::db::Bench;
use crate::stats::{median, rounded, rounded_all, rounded_opt};
use crate::worked::{self, Cell};
use crate::writes::Side;

/// graphile-worker's settings for one process, as drain.js passes them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Settings {
    pub concurrent_jobs: u32,
    pub max_pool_size: u32,
    pub local_queue_size: u32,
    pub refetch_delay_ms: u32,
    pub complete_job_batch_delay: u32,
    pub fail_job_batch_delay: u32,
}

/// The settings of graphile-worker's own performance test (perfTest/graphile.config.js).
pub const SETTINGS: Settings = Settings {
    concurrent_jobs: 24,
    max_pool_size: 25,
    local_queue_size: 500,
    refetch_delay_ms: 10,
    complete_job_batch_delay: 0,
    fail_job_batch_delay: 0,
};

impl Default for Settings {
    fn default() -> Self {
        SETTINGS
    }
}

impl Settings {
    /// The documented settings with another concurrency (its pool one larger, as there) and
    /// local queue size.
    pub fn with(concurrent_jobs: u32, local_queue_size: u32) -> Self {
        Self {
            concurrent_jobs,
            max_pool_size: concurrent_jobs + 1,
            local_queue_size,
            ..SETTINGS
        }
    }
}

/// Ours at the template's defaults: one worker invocation at a time, batch 100 (and the
/// default `WORKER_CONCURRENCY`, 32).
pub const OURS_DEFAULT: (usize, u32) = (1, 100);
/// Theirs at its documented configuration: one process with [`SETTINGS`].
pub const THEIRS_DEFAULT_PROCESSES: usize = 1;

/// 5: the comparison, or why there is none.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Peer {
    /// What ran (graphile-worker and Node.js versions), or why it did not.
    pub status: String,
    /// How both sides were timed.
    pub clock: String,
    pub settings: Settings,
    /// The headline: both at their shipped or documented defaults, in turns.
    pub default: Option<Headline>,
    /// ABBA rounds of the headline.
    pub rounds: usize,
    /// The median of the rounds' ratios (ours ÷ theirs).
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub ratio_median: Option<f64>,
    /// Its bootstrap 95% interval (the rounds resampled 10,000 times).
    pub ratio_ci95: Option<[f64; 2]>,
    /// Theirs over its grid, the best of `plan.reps` runs per setting.
    pub grid: Vec<PeerRun>,
    pub best: Option<PeerRun>,
    /// Our grid's best jobs/s ÷ theirs.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub ours_best_over_peer_best: Option<f64>,
    /// The defaults again with a provider's pace (none with `--no-peer`); the results move
    /// it to their top level (`provider_shaped`).
    #[serde(skip)]
    pub provider_shaped: Option<ProviderShaped>,
}

/// Both sides at their defaults, each round's figures and their medians.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Headline {
    pub ours: String,
    pub theirs: String,
    /// The median of each side's rounds.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub ours_jobs_per_sec: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub theirs_jobs_per_sec: f64,
    /// ours ÷ theirs, of the medians.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub ratio: f64,
    /// Each round's jobs/s, in the order run (A first in even rounds, B first in odd ones).
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub ours_rounds: Vec<f64>,
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub theirs_rounds: Vec<f64>,
    #[serde(serialize_with = "rounded_all::<3, _>")]
    pub round_ratios: Vec<f64>,
}

impl Headline {
    pub fn of(ours: String, theirs: String, rounds: &[(f64, f64)]) -> Self {
        let (o, t): (Vec<f64>, Vec<f64>) = rounds.iter().copied().unzip();
        let (mo, mt) = (median(&o), median(&t));
        Self {
            ours,
            theirs,
            ours_jobs_per_sec: mo,
            theirs_jobs_per_sec: mt,
            ratio: mo / mt,
            round_ratios: rounds.iter().map(|(o, t)| o / t).collect(),
            ours_rounds: o,
            theirs_rounds: t,
        }
    }
}

/// Rounds of two sides taken in turns: the median of the rounds' ratios (`a` ÷ `b`, round by
/// round) and its bootstrap 95% interval.
pub fn ratio_of_rounds(a: &[f64], b: &[f64]) -> (f64, Option<[f64; 2]>) {
    let ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| a / b.max(f64::MIN_POSITIVE))
        .collect();
    (median(&ratios), bootstrap_ci95(&ratios, 10_000))
}

/// The median's bootstrap 95% interval: `values` resampled with replacement `resamples`
/// times (a fixed seed, so a run's interval is reproducible from its rounds), the 2.5th and
/// 97.5th percentiles of the resamples' medians.
pub fn bootstrap_ci95(values: &[f64], resamples: usize) -> Option<[f64; 2]> {
    if values.len() < 2 {
        return None;
    }
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut medians: Vec<f64> = (0..resamples)
        .map(|_| {
            let sample: Vec<f64> = (0..values.len())
                .map(|_| values[(next() % values.len() as u64) as usize])
                .collect();
            median(&sample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| medians[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Some([at(0.025), at(0.975)])
}

/// The comparison, when the plan has it, then graphile-worker's write budget at its best
/// setting ([`crate::writes`]). `ours` is our grid's best cell. `Err` when the peer was asked
/// for and cannot run: a comparison that silently did not happen would read as none needed.
pub async fn measure(bench: &Bench, plan: &Plan, ours: &Cell) -> Result<(Peer, Side)> {
    let mut peer = Peer {
        clock: format!(
            "the database's: open jobs counted every {} ms, the rate between 10% and 90% of the \
             drain, for both sides",
            clock::SAMPLE_EVERY.as_millis()
        ),
        ..Peer::default()
    };
    if !plan.peer {
        peer.status = "skipped (--no-peer)".into();
        return Ok((peer, Side::not_measured("not measured (--no-peer)")));
    }
    let what = install()
        .await
        .map_err(|why| anyhow::anyhow!("graphile-worker cannot run: {why} (--no-peer skips it)"))?;
    crate::step!("peer: {what}");
    let client = setup(bench).await?;
    peer.status = what;
    peer.rounds = plan.peer_rounds;
    let rounds = headline(bench, plan, &client).await?;
    let ratios: Vec<f64> = rounds.iter().map(|(o, t)| o / t).collect();
    peer.ratio_median = Some(median(&ratios));
    peer.ratio_ci95 = bootstrap_ci95(&ratios, 10_000);
    peer.default = Some(Headline::of(
        format!(
            "{} worker, batch {}, WORKER_CONCURRENCY {} (the template's defaults)",
            OURS_DEFAULT.0,
            OURS_DEFAULT.1,
            worked::worker_config(OURS_DEFAULT.1).concurrency
        ),
        format!(
            "{THEIRS_DEFAULT_PROCESSES} process, concurrentJobs {}, localQueue {} (its performance test's)",
            SETTINGS.concurrent_jobs, SETTINGS.local_queue_size
        ),
        &rounds,
    ));
    for &processes in &plan.peer_processes {
        for &concurrent in &plan.peer_concurrency {
            for &local_queue in &plan.peer_local_queue {
                let settings = Settings::with(concurrent, local_queue);
                crate::step!(
                    "peer grid: {} jobs, {processes} processes × concurrentJobs {concurrent}, localQueue {local_queue}",
                    plan.peer_jobs
                );
                let mut best: Option<PeerRun> = None;
                for _ in 0..plan.reps {
                    let r = run(bench, &client, plan.peer_jobs, processes, settings).await?;
                    if best
                        .as_ref()
                        .is_none_or(|b| r.jobs_per_sec > b.jobs_per_sec)
                    {
                        best = Some(r);
                    }
                }
                peer.grid.extend(best);
            }
        }
    }
    peer.best = peer
        .grid
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .cloned();
    peer.ours_best_over_peer_best = peer
        .best
        .as_ref()
        .map(|b| ours.jobs_per_sec / b.jobs_per_sec);
    peer.provider_shaped = Some(provider_shaped(bench, plan, &client).await?);
    let writes = match &peer.best {
        Some(best) => {
            crate::writes::peer(
                bench,
                &client,
                plan.peer_jobs,
                best.processes,
                best.settings,
            )
            .await
        }
        None => Side::not_measured("not measured: no peer run"),
    };
    Ok((peer, writes))
}

/// Both defaults again, each job waiting as a provider call would (30–80 ms), in ABBA turns:
/// what a worker slot does when the provider, not the database, sets the pace, and what
/// Lambda bills for it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProviderShaped {
    pub jobs: i64,
    pub rounds: usize,
    /// The median of each side's rounds.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub ours_jobs_per_sec: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub theirs_jobs_per_sec: f64,
    /// ours ÷ theirs, of the medians.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub ratio: f64,
    /// Calls in flight at once: our `WORKER_CONCURRENCY`, their `concurrentJobs`.
    pub ours_slots: usize,
    pub theirs_slots: u32,
    #[serde(serialize_with = "rounded::<2, _>")]
    pub ours_jobs_per_sec_per_slot: f64,
    #[serde(serialize_with = "rounded::<2, _>")]
    pub theirs_jobs_per_sec_per_slot: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub per_slot_ratio: f64,
    /// Our Lambda duration for 1M notifications at 512 MB arm64 (one invocation's rate), in
    /// US dollars at [`LAMBDA_USD_PER_GB_SECOND`]; the database's time is not in it.
    #[serde(serialize_with = "rounded::<4, _>")]
    pub ours_lambda_usd_per_million: f64,
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub ours_rounds: Vec<f64>,
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub theirs_rounds: Vec<f64>,
}

/// Lambda's arm64 price per GB-second (us-east-1, the first tier).
pub const LAMBDA_USD_PER_GB_SECOND: f64 = 0.000_013_333_4;
/// The worker's memory in the template.
pub const WORKER_GB: f64 = 0.5;

pub async fn provider_shaped(
    bench: &Bench,
    plan: &Plan,
    client: &tokio_postgres::Client,
) -> Result<ProviderShaped> {
    let (workers, batch) = OURS_DEFAULT;
    let jobs = plan.provider_jobs;
    let mut rounds = Vec::with_capacity(plan.provider_rounds);
    for round in 0..plan.provider_rounds {
        crate::step!(
            "provider-shaped (30–80 ms a call), the defaults in turns: round {} of {}, {jobs} jobs",
            round + 1,
            plan.provider_rounds
        );
        let deliverer = std::sync::Arc::new(worked::WaitingDeliverer::default());
        let mine = || worked::cell_with(bench, jobs, workers, batch, deliverer.clone());
        let them = || {
            run_task(
                bench,
                client,
                jobs,
                THEIRS_DEFAULT_PROCESSES,
                SETTINGS,
                Task::Wait,
            )
        };
        let (o, t) = if round % 2 == 0 {
            let o = mine().await?;
            (o, them().await?)
        } else {
            let t = them().await?;
            (mine().await?, t)
        };
        rounds.push((o.jobs_per_sec, t.jobs_per_sec));
    }
    let h = Headline::of(String::new(), String::new(), &rounds);
    let ours_slots = worked::worker_config(batch).concurrency;
    let theirs_slots = SETTINGS.concurrent_jobs;
    let (ours_per_slot, theirs_per_slot) = (
        h.ours_jobs_per_sec / ours_slots as f64,
        h.theirs_jobs_per_sec / f64::from(theirs_slots),
    );
    Ok(ProviderShaped {
        jobs,
        rounds: rounds.len(),
        ours_jobs_per_sec: h.ours_jobs_per_sec,
        theirs_jobs_per_sec: h.theirs_jobs_per_sec,
        ratio: h.ratio,
        ours_slots,
        theirs_slots,
        ours_jobs_per_sec_per_slot: ours_per_slot,
        theirs_jobs_per_sec_per_slot: theirs_per_slot,
        per_slot_ratio: ours_per_slot / theirs_per_slot,
        ours_lambda_usd_per_million: lambda_usd_per_million(h.ours_jobs_per_sec),
        ours_rounds: h.ours_rounds,
        theirs_rounds: h.theirs_rounds,
    })
}

/// What Lambda bills for 1M notifications worked by one invocation at `jobs_per_sec`.
pub fn lambda_usd_per_million(jobs_per_sec: f64) -> f64 {
    1e6 / jobs_per_sec * WORKER_GB * LAMBDA_USD_PER_GB_SECOND
}

/// `plan.peer_rounds` rounds of both defaults in turns, ABBA: (ours, theirs) jobs/s each.
async fn headline(
    bench: &Bench,
    plan: &Plan,
    client: &tokio_postgres::Client,
) -> Result<Vec<(f64, f64)>> {
    let (workers, batch) = OURS_DEFAULT;
    let mut rounds = Vec::with_capacity(plan.peer_rounds);
    for round in 0..plan.peer_rounds {
        crate::step!(
            "peer, the defaults in turns: round {} of {} ({} first), {} jobs",
            round + 1,
            plan.peer_rounds,
            if round % 2 == 0 { "ours" } else { "theirs" },
            plan.peer_jobs
        );
        let mine = || worked::cell(bench, plan.peer_jobs, workers, batch);
        let them = || {
            run(
                bench,
                client,
                plan.peer_jobs,
                THEIRS_DEFAULT_PROCESSES,
                SETTINGS,
            )
        };
        let (o, t) = if round % 2 == 0 {
            let o = mine().await?;
            (o, them().await?)
        } else {
            let t = them().await?;
            (mine().await?, t)
        };
        rounds.push((o.jobs_per_sec, t.jobs_per_sec));
    }
    Ok(rounds)
}

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peer")
}

/// Installs the peer with `npm ci` unless it is installed; `Err` says exactly why it cannot.
pub async fn install() -> std::result::Result<String, String> {
    let node = Command::new("node").arg("--version").output().await;
    let node = match node {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        Ok(o) => {
            return Err(format!(
                "`node --version` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Err(e) => return Err(format!("Node.js is not installed (`node`: {e})")),
    };
    let dir = dir();
    let installed = dir.join("node_modules/graphile-worker/package.json");
    if !installed.is_file() {
        crate::step!("peer: npm ci in {}", dir.display());
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .await
            .map_err(|e| format!("npm is not installed (`npm`: {e})"))?;
        if !out.status.success() {
            return Err(format!(
                "`npm ci` in bench/peer failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let version = std::fs::read_to_string(&installed)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    Ok(format!("graphile-worker {version} on Node.js {node}"))
}

/// What graphile-worker's task does with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Nothing, at once.
    Noop,
    /// Waits as a provider call would ([`crate::worked::WaitingDeliverer`]'s times).
    Wait,
}

async fn node(bench: &Bench, mode: &str, settings: Settings, task: Task) -> Result<String> {
    let out = Command::new("node")
        .arg("drain.js")
        .arg(mode)
        .current_dir(dir())
        .env("PEER_DATABASE_URL", &bench.peer_url)
        .env("PEER_CONCURRENCY", settings.concurrent_jobs.to_string())
        .env("PEER_LOCAL_QUEUE", settings.local_queue_size.to_string())
        .env(
            "PEER_TASK",
            match task {
                Task::Noop => "noop",
                Task::Wait => "wait",
            },
        )
        .output()
        .await
        .context("run node")?;
    ensure!(
        out.status.success(),
        "node drain.js {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub async fn setup(bench: &Bench) -> Result<tokio_postgres::Client> {
    node(bench, "setup", SETTINGS, Task::Noop).await?;
    let db = notify_postgres::db::DbConfig::new(&bench.peer_url, None)?;
    Ok(db.connect().await?)
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerRun {
    pub processes: usize,
    pub settings: Settings,
    pub jobs: i64,
    /// The database clock's window: between 10% and 90% of the drain.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub window_secs: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub jobs_per_sec: f64,
}

/// `processes` graphile-worker processes with `settings` draining `jobs` no-op jobs.
pub async fn run(
    bench: &Bench,
    client: &tokio_postgres::Client,
    jobs: i64,
    processes: usize,
    settings: Settings,
) -> Result<PeerRun> {
    run_task(bench, client, jobs, processes, settings, Task::Noop).await
}

/// The same, each job doing `task`.
pub async fn run_task(
    bench: &Bench,
    client: &tokio_postgres::Client,
    jobs: i64,
    processes: usize,
    settings: Settings,
    task: Task,
) -> Result<PeerRun> {
    queue(client, jobs).await?;
    let timed = work(bench, processes, settings, task, jobs).await?;
    check(client, jobs).await?;
    Ok(PeerRun {
        processes,
        settings,
        jobs,
        window_secs: timed.window_secs,
        jobs_per_sec: timed.jobs_per_sec,
    })
}

/// graphile-worker's `add_jobs` over a JSON array of job specs (`identifier`, `payload`,
/// `job_key`, …) given as text: one statement per batch, as a caller queues a batch.
pub const ADD_JOBS: &str = "SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
     SELECT json_populate_record(NULL::graphile_worker.job_spec, j)
     FROM json_array_elements($1::text::json) AS j))";

/// Queues `jobs` no-op jobs with graphile-worker's `add_jobs`, then settles as our runs do
/// (VACUUM ANALYZE, CHECKPOINT).
pub async fn queue(client: &tokio_postgres::Client, jobs: i64) -> Result<()> {
    client
        .execute(
            "SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
                 SELECT json_populate_record(NULL::graphile_worker.job_spec,
                        json_build_object('identifier', 'noop', 'payload', json_build_object('n', g)))
                 FROM generate_series(1, $1::bigint) AS g))",
            &[&jobs],
        )
        .await
        .context("queue the peer's jobs")?;
    client.batch_execute("VACUUM ANALYZE").await?;
    let _ = client.batch_execute("CHECKPOINT").await;
    Ok(())
}

/// `processes` processes each running `runOnce` with `settings` at once, timed by the
/// database's clock ([`crate::clock`]) over the `total` queued jobs.
pub async fn work(
    bench: &Bench,
    processes: usize,
    settings: Settings,
    task: Task,
    total: i64,
) -> Result<Timed> {
    let target = notify_postgres::db::DbConfig::new(&bench.peer_url, None)?;
    let clock = Sampler::start(&target, clock::THEIRS_OPEN).await?;
    let ran = run_processes(bench, processes, settings, task).await;
    let samples = clock.finish().await?;
    ran?;
    clock::window_rate(&samples, total)
}

/// The same, untimed: for a run measured by what it writes, not by its rate.
pub async fn run_processes(
    bench: &Bench,
    processes: usize,
    settings: Settings,
    task: Task,
) -> Result<()> {
    let runs: Vec<_> = (0..processes)
        .map(|_| node(bench, "work", settings, task))
        .collect();
    for out in futures::future::try_join_all(runs).await? {
        let _: Value = serde_json::from_str(out.trim()).context("the peer's timing line")?;
    }
    Ok(())
}

/// Every one of the `jobs` jobs worked (graphile-worker deletes a job it completes).
pub async fn check(client: &tokio_postgres::Client, jobs: i64) -> Result<()> {
    let left: i64 = client
        .query_one("SELECT count(*) FROM graphile_worker.jobs", &[])
        .await?
        .get(0);
    ensure!(left == 0, "graphile-worker left {left} of {jobs} jobs");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headline_is_the_ratio_of_each_sides_median() {
        let h = Headline::of(
            "o".into(),
            "t".into(),
            &[(12.0, 10.0), (9.0, 10.0), (11.0, 12.0)],
        );
        assert_eq!((h.ours_jobs_per_sec, h.theirs_jobs_per_sec), (11.0, 10.0));
        assert!((h.ratio - 1.1).abs() < 1e-12);
        assert_eq!(h.round_ratios[1], 0.9);
    }

    #[test]
    fn lambda_bills_a_million_jobs_at_one_invocations_rate() {
        // 1,000 jobs/s: 1,000 s of a 0.5 GB function
        let usd = lambda_usd_per_million(1000.0);
        assert!((usd - 1000.0 * 0.5 * LAMBDA_USD_PER_GB_SECOND).abs() < 1e-12);
    }

    #[test]
    fn the_bootstrap_interval_holds_the_median_and_is_reproducible() {
        let ratios = [0.95, 1.02, 1.05, 1.08, 1.1, 1.12, 1.15, 1.2, 0.99, 1.04];
        let [lo, hi] = bootstrap_ci95(&ratios, 10_000).unwrap();
        let m = median(&ratios);
        assert!(lo <= m && m <= hi && lo < hi, "{lo} {m} {hi}");
        assert!(lo >= 0.95 && hi <= 1.2);
        assert_eq!(bootstrap_ci95(&ratios, 10_000), Some([lo, hi]));
        assert_eq!(bootstrap_ci95(&[1.0, 1.0, 1.0], 100), Some([1.0, 1.0]));
        assert_eq!(bootstrap_ci95(&[1.0], 100), None);
    }
}
