//! 5: the peer, graphile-worker (bench/peer), draining the same number of no-op jobs on the
//! same server, with the batching options of its own performance test (bench/peer/drain.js).
//! Its jobs are queued with its own `add_jobs` in one statement, as its performance test does.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use serde_json::Value;
use tokio::process::Command;

use crate::db::Bench;
use crate::stats::{rounded, rounded_opt};
use crate::writes::Side;
use crate::Plan;

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
}

/// The peer over `plan.peer_processes`, when the plan has it, then its write budget at its
/// best process count ([`crate::writes`]); it never fails the benchmark (the status says
/// what went wrong, and the runs before it are kept). The ratio to our best is left for the
/// caller.
pub async fn measure(bench: &Bench, plan: &Plan) -> (Peer, Side) {
    let mut runs = Vec::new();
    let mut writes = Side::not_measured("not measured (quick mode; --peer runs it)");
    let status = if !plan.peer {
        "skipped (quick mode; --peer runs it)".to_owned()
    } else {
        writes = Side::not_measured("not measured: graphile-worker did not run");
        match install().await {
            Ok(what) => {
                crate::step!("peer: {what}");
                match drain(bench, plan, &mut runs, &mut writes).await {
                    Ok(()) => what,
                    Err(e) => format!("{what}: failed: {e:#}"),
                }
            }
            // the fallback, pg-boss, is not wired in: it would come from the same
            // npm registry, so it mostly fails for the same reason
            Err(why) => format!("graphile-worker cannot be installed: {why}; no peer this run (the pg-boss fallback is not implemented)"),
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
    };
    (peer, writes)
}

/// Pushes the best of `plan.reps` runs of each process count onto `runs`, then measures the
/// write budget at the best of them into `writes`.
async fn drain(
    bench: &Bench,
    plan: &Plan,
    runs: &mut Vec<PeerRun>,
    writes: &mut Side,
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
            ))
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
    let db = shared::db::DbConfig::new(&bench.peer_url, None)?;
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
