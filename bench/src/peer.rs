//! 5: the peer, graphile-worker (bench/peer), draining the same number of no-op jobs on the
//! same server, with the batching options of its own performance test (bench/peer/drain.js).
//! Its jobs are queued with its own `add_jobs` in one statement, as its performance test does.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use serde_json::Value;
use tokio::process::Command;

use crate::Plan;
use crate::db::Bench;
use crate::stats::{median, rounded, rounded_all, rounded_opt};
use crate::worked::{self, Cell};
use crate::writes::Side;

/// The settings of graphile-worker's own performance test, as drain.js sets them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Settings {
    pub concurrent_jobs: u32,
    pub max_pool_size: u32,
    pub local_queue_size: u32,
    pub refetch_delay_ms: u32,
    pub complete_job_batch_delay: u32,
    pub fail_job_batch_delay: u32,
}

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

/// 5: the peer's runs, or why there are none.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Peer {
    /// What ran (graphile-worker and Node.js versions), or why it did not.
    pub status: String,
    pub settings: Settings,
    /// The best run of each process count.
    pub runs: Vec<PeerRun>,
    pub best: Option<PeerRun>,
    /// Our best cell's jobs/s ÷ the peer's best.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub ours_best_over_peer_best: Option<f64>,
    /// Both sides' best settings again, taking turns (none in quick mode).
    pub head_to_head: Option<HeadToHead>,
}

/// Our best cell and the peer's best process count, run again in turns (ours, theirs,
/// theirs, ours, ours, theirs, ...): the grids run minutes apart, so whatever the machine does
/// in between falls on the best ÷ best ratio; here it falls on both sides alike.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HeadToHead {
    /// Our best cell's setting and the peer's.
    pub ours: String,
    pub theirs: String,
    /// Each round's jobs/s, in the order run.
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub ours_jobs_per_sec: Vec<f64>,
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub theirs_jobs_per_sec: Vec<f64>,
    /// The median of ours ÷ the median of theirs.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub ratio_of_medians: f64,
    /// Each round's ours ÷ theirs.
    #[serde(serialize_with = "rounded_all::<3, _>")]
    pub round_ratios: Vec<f64>,
}

impl HeadToHead {
    pub fn of(ours: String, theirs: String, rounds: Vec<(f64, f64)>) -> Self {
        let (o, t): (Vec<f64>, Vec<f64>) = rounds.iter().copied().unzip();
        Self {
            ours,
            theirs,
            ratio_of_medians: median(&o) / median(&t),
            round_ratios: rounds.iter().map(|(o, t)| o / t).collect(),
            ours_jobs_per_sec: o,
            theirs_jobs_per_sec: t,
        }
    }
}

/// The peer over `plan.peer_processes`, when the plan has it, then its write budget at its
/// best process count ([`crate::writes`]), then that count and our best cell (`ours`) in
/// turns; it never fails the benchmark (the status says what went wrong, and the runs before
/// it are kept). The best ÷ best ratio is left for the caller.
pub async fn measure(bench: &Bench, plan: &Plan, ours: &Cell) -> (Peer, Side) {
    let mut runs = Vec::new();
    let mut head_to_head = None;
    let mut writes = Side::not_measured("not measured (quick mode; --peer runs it)");
    let status = if !plan.peer {
        "skipped (quick mode; --peer runs it)".to_owned()
    } else {
        writes = Side::not_measured("not measured: graphile-worker did not run");
        match install().await {
            Ok(what) => {
                crate::step!("peer: {what}");
                match drain(bench, plan, ours, &mut runs, &mut writes, &mut head_to_head).await {
                    Ok(()) => what,
                    Err(e) => format!("{what}: failed: {e:#}"),
                }
            }
            // the fallback, pg-boss, is not wired in: it would come from the same
            // npm registry, so it mostly fails for the same reason
            Err(why) => format!(
                "graphile-worker cannot be installed: {why}; no peer this run (the pg-boss fallback is not implemented)"
            ),
        }
    };
    let best = runs
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .cloned();
    let peer = Peer {
        status,
        settings: SETTINGS,
        runs,
        best,
        ours_best_over_peer_best: None,
        head_to_head,
    };
    (peer, writes)
}

/// Pushes the best of `plan.reps` runs of each process count onto `runs`, then measures the
/// write budget at the best of them into `writes`, then runs that count and our best cell
/// in turns (`plan.head_rounds` rounds each) into `head_to_head`.
async fn drain(
    bench: &Bench,
    plan: &Plan,
    ours: &Cell,
    runs: &mut Vec<PeerRun>,
    writes: &mut Side,
    head_to_head: &mut Option<HeadToHead>,
) -> Result<()> {
    let client = setup(bench).await?;
    let startup = startup(bench).await?;
    for &p in &plan.peer_processes {
        crate::step!(
            "peer: {} jobs, {p} processes × {}",
            plan.jobs,
            SETTINGS.concurrent_jobs
        );
        let mut best: Option<PeerRun> = None;
        for _ in 0..plan.reps {
            let r = run(bench, &client, plan.jobs, p, startup).await?;
            if best
                .as_ref()
                .is_none_or(|b| r.jobs_per_sec > b.jobs_per_sec)
            {
                best = Some(r);
            }
        }
        runs.extend(best);
    }
    if let Some(best) = runs
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
    {
        *writes = crate::writes::peer(bench, &client, plan.jobs, best.processes, startup).await;
        let theirs = best.processes;
        let mut rounds = Vec::with_capacity(plan.head_rounds);
        for round in 0..plan.head_rounds {
            crate::step!(
                "head to head: round {} of {}, {} workers batch {} and {theirs} processes",
                round + 1,
                plan.head_rounds,
                ours.workers,
                ours.batch
            );
            let mine = || worked::cell(bench, plan.jobs, ours.workers, ours.batch);
            let them = || run(bench, &client, plan.jobs, theirs, startup);
            // ours first in even rounds, theirs first in odd ones
            let (o, t) = if round % 2 == 0 {
                let o = mine().await?;
                (o, them().await?)
            } else {
                let t = them().await?;
                (mine().await?, t)
            };
            rounds.push((o.jobs_per_sec, t.jobs_per_sec));
        }
        if !rounds.is_empty() {
            *head_to_head = Some(HeadToHead::of(
                format!("{} workers, batch {}", ours.workers, ours.batch),
                format!("{theirs} processes × {}", SETTINGS.concurrent_jobs),
                rounds,
            ));
        }
    }
    Ok(())
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

async fn node(bench: &Bench, mode: &str) -> Result<String> {
    let out = Command::new("node")
        .arg("drain.js")
        .arg(mode)
        .current_dir(dir())
        .env("PEER_DATABASE_URL", &bench.peer_url)
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
    node(bench, "setup").await?;
    let db = notify_postgres::db::DbConfig::new(&bench.peer_url, None)?;
    Ok(db.connect().await?)
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PeerRun {
    pub processes: usize,
    pub concurrent_jobs_per_process: u32,
    pub jobs: i64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub secs: f64,
    #[serde(rename = "startup_secs_subtracted", serialize_with = "rounded::<3, _>")]
    pub startup_secs: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub jobs_per_sec: f64,
}

/// How long one `runOnce` takes on an empty queue (connect, check the schema, find nothing):
/// subtracted from the timed runs, as graphile-worker's performance test does.
pub async fn startup(bench: &Bench) -> Result<f64> {
    let started = Instant::now();
    node(bench, "work").await?;
    Ok(started.elapsed().as_secs_f64())
}

/// `processes` graphile-worker processes draining `jobs` no-op jobs.
pub async fn run(
    bench: &Bench,
    client: &tokio_postgres::Client,
    jobs: i64,
    processes: usize,
    startup_secs: f64,
) -> Result<PeerRun> {
    queue(client, jobs).await?;
    let secs = work(bench, processes, startup_secs).await?;
    check(client, jobs).await?;
    Ok(PeerRun {
        processes,
        concurrent_jobs_per_process: SETTINGS.concurrent_jobs,
        jobs,
        secs,
        startup_secs,
        jobs_per_sec: jobs as f64 / secs,
    })
}

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

/// `processes` processes each running `runOnce` at once: the seconds they took, start-up
/// subtracted.
pub async fn work(bench: &Bench, processes: usize, startup_secs: f64) -> Result<f64> {
    let started = Instant::now();
    let runs: Vec<_> = (0..processes).map(|_| node(bench, "work")).collect();
    let outputs = futures::future::try_join_all(runs).await?;
    let wall = started.elapsed().as_secs_f64();
    for out in &outputs {
        let _: Value = serde_json::from_str(out.trim()).context("the peer's timing line")?;
    }
    let secs = wall - startup_secs;
    ensure!(
        secs > 0.0,
        "the peer's run ({wall:.3} s) was shorter than its start-up ({startup_secs:.3} s)"
    );
    Ok(secs)
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
