//! 5: the peer, graphile-worker (bench/peer), draining the same number of no-op jobs on the
//! same server, with the batching options of its own performance test (bench/peer/drain.js).
//! Its jobs are queued with its own `add_jobs` in one statement, as its performance test does.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use tokio::process::Command;

use crate::db::Bench;
use crate::stats::round;

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

#[derive(Debug, Clone)]
pub struct PeerRun {
    pub processes: usize,
    pub jobs: i64,
    pub secs: f64,
    pub startup_secs: f64,
    pub jobs_per_sec: f64,
}

impl PeerRun {
    pub fn json(&self) -> Value {
        json!({
            "processes": self.processes,
            "concurrent_jobs_per_process": 24,
            "jobs": self.jobs,
            "secs": round(self.secs, 3),
            "startup_secs_subtracted": round(self.startup_secs, 3),
            "jobs_per_sec": round(self.jobs_per_sec, 1),
        })
    }
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
    let started = Instant::now();
    let runs: Vec<_> = (0..processes).map(|_| node(bench, "work")).collect();
    let outputs = futures::future::try_join_all(runs).await?;
    let wall = started.elapsed().as_secs_f64();
    for out in &outputs {
        let _: Value = serde_json::from_str(out.trim()).context("the peer's timing line")?;
    }
    let left: i64 = client
        .query_one("SELECT count(*) FROM graphile_worker.jobs", &[])
        .await?
        .get(0);
    ensure!(left == 0, "graphile-worker left {left} of {jobs} jobs");
    let secs = wall - startup_secs;
    ensure!(
        secs > 0.0,
        "the peer's run ({wall:.3} s) was shorter than its start-up ({startup_secs:.3} s)"
    );
    Ok(PeerRun {
        processes,
        jobs,
        secs,
        startup_secs,
        jobs_per_sec: jobs as f64 / secs,
    })
}
