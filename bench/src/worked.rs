//! 1 and 7: worked jobs/s over the grid of workers × batch sizes, and the worker's CPU per job.
//!
//! Each worker is what one Lambda invocation runs: its own `PgStore` (one connection) and
//! `notify_core::worker::run` with the default `WORKER_CONCURRENCY`, delivering through an instant
//! no-op port. The real claim and complete statements run, every attempt recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use async_trait::async_trait;
use notify_core::delivery::{Deliverer, DeliveryConfig, DeliveryError};
use notify_core::store::{ClaimedJob, JobStore};
use notify_core::worker::{self, WorkerConfig, WorkerSummary};
use notify_postgres::PgStore;
use serde::Serialize;
use uuid::Uuid;

use crate::Plan;
use crate::clock::{self, Sampler, Timed};
use crate::db::Bench;
use crate::stats::{process_cpu, rounded, rounded_all};

/// The delivery port answering at once, as a provider that takes no time. Every port here
/// answers with a random (v4) message id, as SNS and SES do: ids in time order would only
/// ever append to the outcome rows' message id index, a best case no provider gives.
pub struct NoopDeliverer;

/// A provider's message id.
pub fn message_id() -> String {
    Uuid::new_v4().to_string()
}

#[async_trait]
impl Deliverer for NoopDeliverer {
    async fn deliver(&self, _job: &ClaimedJob) -> Result<String, DeliveryError> {
        Ok(message_id())
    }
}

/// A seeded xorshift64* generator: every run draws the same sequence.
pub struct Seeded {
    state: Mutex<u64>,
}

impl Seeded {
    /// Starts at `seed` (any value but 0).
    pub fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(seed.max(1)),
        }
    }

    /// A uniform draw in (0, 1].
    pub fn next(&self) -> f64 {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// The seed every waiting provider here starts from.
pub const SEED: u64 = 0x2545_F491_4F6C_DD1D;

/// A provider that takes time: each call waits a lognormal time whose middle 90% is 30–80 ms
/// (median 49 ms), as an SNS Publish or SES SendEmail call from Lambda does, then answers.
/// graphile-worker's task waits the same way (bench/peer/drain.js, `PEER_TASK=wait`).
pub struct WaitingDeliverer {
    rng: Seeded,
}

impl Default for WaitingDeliverer {
    fn default() -> Self {
        Self {
            rng: Seeded::new(SEED),
        }
    }
}

/// The lognormal's parameters: ln of the median, and sigma (5th–95th percentile 30–80 ms).
pub const WAIT_MU: f64 = 3.8918; // ln 49
pub const WAIT_SIGMA: f64 = 0.298;

impl WaitingDeliverer {
    /// One wait: Box–Muller on two uniforms.
    pub fn wait(&self) -> Duration {
        let (u1, u2) = (self.rng.next(), self.rng.next());
        let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        Duration::from_secs_f64((WAIT_MU + WAIT_SIGMA * normal).exp() / 1000.0)
    }
}

#[async_trait]
impl Deliverer for WaitingDeliverer {
    async fn deliver(&self, _job: &ClaimedJob) -> Result<String, DeliveryError> {
        tokio::time::sleep(self.wait()).await;
        Ok(message_id())
    }
}

/// Waits drawn uniformly between two bounds from a [`Seeded`] generator: the provider calls
/// of the wake and fan-out part ([`crate::wake`]), 30–80 ms.
pub struct UniformWait {
    rng: Seeded,
    /// The bounds, in ms.
    pub low_ms: f64,
    pub high_ms: f64,
}

impl UniformWait {
    pub fn new(low_ms: f64, high_ms: f64) -> Self {
        Self {
            rng: Seeded::new(SEED),
            low_ms,
            high_ms,
        }
    }

    pub fn wait(&self) -> Duration {
        let ms = self.low_ms + (self.high_ms - self.low_ms) * self.rng.next();
        Duration::from_secs_f64(ms / 1000.0)
    }
}

/// A no-op port that notes when each job reached it.
#[derive(Default)]
pub struct RecordingDeliverer {
    pub calls: Mutex<HashMap<Uuid, Instant>>,
}

#[async_trait]
impl Deliverer for RecordingDeliverer {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        let now = Instant::now();
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(job.id)
            .or_insert(now);
        Ok(message_id())
    }
}

/// The worker settings of the benchmark: the defaults, with this batch size.
pub fn worker_config(batch_size: u32) -> WorkerConfig {
    WorkerConfig {
        batch_size,
        ..WorkerConfig::new(DeliveryConfig::new("bench@example.com"))
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cell {
    pub workers: usize,
    pub batch: u32,
    pub jobs: i64,
    /// The database clock's window: between 10% and 90% of the drain ([`crate::clock`]).
    #[serde(rename = "window_secs", serialize_with = "rounded::<3, _>")]
    pub secs: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub jobs_per_sec: f64,
    #[serde(serialize_with = "rounded::<4, _>")]
    pub cpu_ms_per_job: f64,
    /// Every repetition's jobs/s (the figures above are the best one's).
    #[serde(rename = "runs_jobs_per_sec", serialize_with = "rounded_all::<1, _>")]
    pub runs: Vec<f64>,
}

/// 1: the grid of workers × batch sizes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Worked {
    /// Due jobs each run drains.
    pub jobs: i64,
    pub worker_concurrency: usize,
    pub runs_per_cell: usize,
    /// Batch by batch, workers by workers, in the plan's order.
    pub grid: Vec<Cell>,
    pub best: Cell,
}

impl Worked {
    pub fn at(&self, batch: u32, workers: usize) -> Option<&Cell> {
        self.grid
            .iter()
            .find(|c| c.batch == batch && c.workers == workers)
    }

    /// The grid's batch sizes, in order.
    pub fn batches(&self) -> Vec<u32> {
        distinct(self.grid.iter().map(|c| c.batch))
    }

    /// The grid's worker counts, in order.
    pub fn workers(&self) -> Vec<usize> {
        distinct(self.grid.iter().map(|c| c.workers))
    }
}

fn distinct<T: PartialEq>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Every cell of the plan's grid, each the best of `plan.reps` runs.
pub async fn grid(bench: &Bench, plan: &Plan) -> Result<Worked> {
    let mut grid = Vec::new();
    for &batch in &plan.batches {
        for &workers in &plan.workers {
            crate::step!(
                "worked jobs/s: {} jobs, {workers} workers, batch {batch}",
                plan.jobs
            );
            grid.push(best_of(bench, plan, workers, batch).await?);
        }
    }
    let best = grid
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .cloned()
        .context("an empty grid")?;
    Ok(Worked {
        jobs: plan.jobs,
        worker_concurrency: worker_config(100).concurrency,
        runs_per_cell: plan.reps,
        grid,
        best,
    })
}

/// The best of `plan.reps` runs of one cell (like the ceiling and the peer), with every
/// run's jobs/s.
async fn best_of(bench: &Bench, plan: &Plan, workers: usize, batch: u32) -> Result<Cell> {
    let mut best = cell(bench, plan.jobs, workers, batch).await?;
    for _ in 1..plan.reps {
        let again = cell(bench, plan.jobs, workers, batch).await?;
        let mut runs = std::mem::take(&mut best.runs);
        runs.extend(again.runs.iter().copied());
        if again.jobs_per_sec > best.jobs_per_sec {
            best = again;
        }
        best.runs = runs;
    }
    Ok(best)
}

/// Opens `n` stores (one connection each) before any clock starts: a warm Lambda holds its
/// connection.
pub async fn open_stores(bench: &Bench, n: usize) -> Result<Vec<PgStore>> {
    let mut stores = Vec::with_capacity(n);
    for _ in 0..n {
        stores.push(
            PgStore::connect(bench.config.clone())
                .await
                .context("open a worker's store")?,
        );
    }
    Ok(stores)
}

/// [`open_stores`], as the worker's port takes them.
pub async fn worker_stores(bench: &Bench, n: usize) -> Result<Vec<Arc<dyn JobStore>>> {
    Ok(open_stores(bench, n)
        .await?
        .into_iter()
        .map(|s| Arc::new(s) as Arc<dyn JobStore>)
        .collect())
}

/// Runs one worker per store at once, each until nothing is due (or `deadline`).
pub async fn run_workers(
    stores: Vec<Arc<dyn JobStore>>,
    cfg: &WorkerConfig,
    deliverer: Arc<dyn Deliverer>,
    deadline: Instant,
) -> Result<Vec<WorkerSummary>> {
    let tasks: Vec<_> = stores
        .into_iter()
        .map(|store| {
            let deliverer = deliverer.clone();
            let cfg = cfg.clone();
            tokio::spawn(async move { worker::run(&*store, &*deliverer, &cfg, deadline).await })
        })
        .collect();
    let mut summaries = Vec::with_capacity(tasks.len());
    for task in tasks {
        summaries.push(task.await.context("worker task")?.context("worker run")?);
    }
    Ok(summaries)
}

/// Far enough: such a run ends when nothing is due, never on the deadline.
pub fn no_deadline() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// One grid point: `jobs` due jobs drained by `workers` workers claiming `batch` at a time.
pub async fn cell(bench: &Bench, jobs: i64, workers: usize, batch: u32) -> Result<Cell> {
    cell_with(bench, jobs, workers, batch, Arc::new(NoopDeliverer)).await
}

/// The same, delivering through `deliverer`.
pub async fn cell_with(
    bench: &Bench,
    jobs: i64,
    workers: usize,
    batch: u32,
    deliverer: Arc<dyn Deliverer>,
) -> Result<Cell> {
    bench.reset(jobs).await?;
    drain_with(bench, workers, batch, deliverer)
        .await?
        .checked(bench, jobs)
        .await
}

/// A queue drained, its counts not checked yet.
pub struct Drained {
    workers: usize,
    batch: u32,
    /// The database's clock: the rate between 10% and 90% of the drain ([`crate::clock`]).
    timed: Result<Timed>,
    cpu: Duration,
    sent: u64,
}

/// `workers` workers claiming `batch` at a time, until nothing is due, timed by the
/// database's clock ([`crate::clock`], as graphile-worker is); their connections open first.
pub async fn drain(bench: &Bench, workers: usize, batch: u32) -> Result<Drained> {
    drain_with(bench, workers, batch, Arc::new(NoopDeliverer)).await
}

async fn drain_with(
    bench: &Bench,
    workers: usize,
    batch: u32,
    deliverer: Arc<dyn Deliverer>,
) -> Result<Drained> {
    let cfg = worker_config(batch);
    let stores = worker_stores(bench, workers).await?;
    let total = bench.counts().await?.open;
    let clock = Sampler::start(&bench.config, clock::OURS_OPEN).await?;
    let cpu0 = process_cpu();
    let summaries = run_workers(stores, &cfg, deliverer, no_deadline()).await?;
    let cpu = process_cpu().saturating_sub(cpu0);
    let samples = clock.finish().await?;
    Ok(Drained {
        workers,
        batch,
        timed: clock::window_rate(&samples, total),
        cpu,
        sent: summaries.iter().map(|s| s.sent).sum(),
    })
}

impl Drained {
    /// The cell, once every one of the `jobs` queued jobs is sent with its attempt recorded.
    pub async fn checked(self, bench: &Bench, jobs: i64) -> Result<Cell> {
        let Self {
            workers,
            batch,
            timed,
            cpu,
            sent,
        } = self;
        let counts = bench.counts().await?;
        ensure!(
            counts.sent == jobs && counts.deliveries == jobs && sent as i64 == jobs,
            "workers={workers} batch={batch}: {jobs} jobs, but {} sent ({sent} reported), {} attempts recorded, {} still open",
            counts.sent,
            counts.deliveries,
            counts.open
        );
        let timed = timed.with_context(|| format!("workers={workers} batch={batch}"))?;
        Ok(Cell {
            workers,
            batch,
            jobs,
            secs: timed.window_secs,
            jobs_per_sec: timed.jobs_per_sec,
            cpu_ms_per_job: cpu.as_secs_f64() * 1000.0 / jobs as f64,
            runs: vec![timed.jobs_per_sec],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_providers_waits_are_30_to_80_ms_nine_times_in_ten() {
        let d = WaitingDeliverer::default();
        let mut ms: Vec<f64> = (0..20_000)
            .map(|_| d.wait().as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[(q * (ms.len() - 1) as f64) as usize];
        assert!((28.0..32.0).contains(&at(0.05)), "p5 {}", at(0.05));
        assert!((47.0..51.0).contains(&at(0.5)), "p50 {}", at(0.5));
        assert!((76.0..84.0).contains(&at(0.95)), "p95 {}", at(0.95));
    }

    #[test]
    fn uniform_waits_stay_within_their_bounds_and_repeat_from_the_seed() {
        let (a, b) = (UniformWait::new(30.0, 80.0), UniformWait::new(30.0, 80.0));
        let ms: Vec<f64> = (0..20_000)
            .map(|_| a.wait().as_secs_f64() * 1000.0)
            .collect();
        assert!(ms.iter().all(|m| (30.0..=80.0).contains(m)));
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        assert!((54.0..56.0).contains(&mean), "mean {mean}");
        let again: Vec<f64> = (0..20_000)
            .map(|_| b.wait().as_secs_f64() * 1000.0)
            .collect();
        assert_eq!(ms, again, "the same seed, the same waits");
    }
}
