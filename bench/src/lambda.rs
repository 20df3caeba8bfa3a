//! Worker invocations started in-process, as Lambda starts them, for the wake and fan-out
//! part ([`crate::wake`]).
//!
//! [`Lambda::invoker`] is the `Invoker` ingest's `Waker` and the workers' fan-out and
//! hand-off call: each invoke records the start and spawns one invocation, which takes a warm
//! environment (a store with its connection open, as a warm Lambda environment holds it;
//! one is opened, and counted, when every environment is busy), joins the fleet with the
//! wake's event, runs `notify_core::worker::run_in` to the template's worker timeout
//! ([`WORKER_TIMEOUT`]), and leaves. What is not modelled: Lambda's own `Invoke` call and
//! queueing (tens of ms in AWS), and a cold environment's start (part 8 measures the real
//! binary's, [`crate::cold_start`]). The worker function also dispatches status events
//! beside its deliveries (`Shift`); here the invocation runs the deliveries alone.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use notify_core::delivery::Deliverer;
use notify_core::fleet::{
    self, Crew, CrewSummary, FleetConfig, InvokeError, Invoker, WakeEvent, WakeReason,
};
use notify_core::worker::{self, WorkerConfig, WorkerSummary};
use notify_postgres::PgStore;
use notify_postgres::db::DbConfig;
use tokio::task::JoinHandle;

use crate::db::Bench;

/// The worker function's timeout (template.yaml `WorkerTimeoutSeconds`, default 120): each
/// invocation's deadline.
pub const WORKER_TIMEOUT: Duration = Duration::from_secs(120);

/// What started an invocation: a start through the invoker (its wake's reason), or the
/// schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Invoked(WakeReason),
    Schedule,
}

/// One invocation, as far as it got.
#[derive(Debug, Clone, Copy)]
pub struct Invocation {
    pub cause: Cause,
    /// When it was started (the invoke, or the schedule's tick).
    pub started_at: Instant,
    /// When it ended, and what it did (`None` while it runs, or when it failed).
    pub ended: Option<(Instant, WorkerSummary, CrewSummary)>,
}

/// The in-process Lambda of the worker function.
pub struct Lambda {
    config: DbConfig,
    /// Environments not running an invocation, each with its store (connection) open.
    warm: Mutex<Vec<Arc<PgStore>>>,
    deliverer: Arc<dyn Deliverer>,
    worker: WorkerConfig,
    fleet: FleetConfig,
    invocations: Mutex<Vec<Invocation>>,
    tasks: Mutex<Vec<JoinHandle<Result<()>>>>,
    /// Told on every start, so [`Lambda::settled`] sees a start it has not awaited yet.
    started: tokio::sync::Notify,
    /// Environments opened because every warm one was busy.
    opened: AtomicU64,
    running: AtomicUsize,
    /// The most invocations running at once, and when that was first reached.
    peak: Mutex<(usize, Option<Instant>)>,
}

/// The invoker handed to ingest's waker and to each invocation's crew.
#[derive(Clone)]
pub struct InProcess(Arc<Lambda>);

impl Lambda {
    /// A Lambda with `warm` environments (their connections open before any clock starts),
    /// delivering through `deliverer`, with the benchmark's worker settings at `batch` and
    /// the fleet's `fleet`.
    pub async fn new(
        bench: &Bench,
        warm: usize,
        deliverer: Arc<dyn Deliverer>,
        batch: u32,
        fleet: FleetConfig,
    ) -> Result<Arc<Self>> {
        let stores = crate::worked::open_stores(bench, warm).await?;
        Ok(Arc::new(Self {
            config: bench.config.clone(),
            warm: Mutex::new(stores.into_iter().map(Arc::new).collect()),
            deliverer,
            worker: crate::worked::worker_config(batch),
            fleet,
            invocations: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            started: tokio::sync::Notify::new(),
            opened: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            peak: Mutex::new((0, None)),
        }))
    }

    pub fn invoker(self: &Arc<Self>) -> Arc<dyn Invoker> {
        Arc::new(InProcess(self.clone()))
    }

    /// Starts an invocation as the schedule does (EventBridge's event: no wake in it).
    pub fn schedule(self: &Arc<Self>) {
        let payload = serde_json::json!({
            "version": "0", "detail-type": "Scheduled Event", "source": "aws.events",
            "detail": {}
        });
        self.spawn(Cause::Schedule, payload);
    }

    fn spawn(self: &Arc<Self>, cause: Cause, payload: serde_json::Value) {
        let index = {
            let mut all = lock(&self.invocations);
            all.push(Invocation {
                cause,
                started_at: Instant::now(),
                ended: None,
            });
            all.len() - 1
        };
        let lambda = self.clone();
        let task = tokio::spawn(async move { lambda.run(index, payload).await });
        lock(&self.tasks).push(task);
        self.started.notify_one();
    }

    /// One invocation: a warm environment (or a new one), the fleet joined with `payload`,
    /// the deliveries to the deadline, the fleet left; the environment is warm again after.
    async fn run(self: Arc<Self>, index: usize, payload: serde_json::Value) -> Result<()> {
        let store = self.environment().await?;
        let deadline = Instant::now() + WORKER_TIMEOUT;
        self.enter();
        let invoker = self.invoker();
        let ran = async {
            let crew = Crew::join(&*store, Some(invoker), &self.fleet, &payload, deadline)
                .await
                .context("join the fleet")?;
            let Some(mut crew) = crew else {
                return anyhow::Ok((WorkerSummary::default(), CrewSummary::default()));
            };
            let work =
                worker::run_in(&*store, &*self.deliverer, &self.worker, deadline, &mut crew).await;
            let fleet = crew.finish().await;
            Ok((work.context("the worker's run")?, fleet))
        }
        .await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        lock(&self.warm).push(store);
        let (work, fleet) = ran?;
        lock(&self.invocations)[index].ended = Some((Instant::now(), work, fleet));
        Ok(())
    }

    async fn environment(&self) -> Result<Arc<PgStore>> {
        let warm = lock(&self.warm).pop();
        match warm {
            Some(store) => Ok(store),
            None => {
                self.opened.fetch_add(1, Ordering::SeqCst);
                Ok(Arc::new(
                    PgStore::connect(self.config.clone())
                        .await
                        .context("open a new environment's store")?,
                ))
            }
        }
    }

    fn enter(&self) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        let mut peak = lock(&self.peak);
        if now > peak.0 {
            *peak = (now, Some(Instant::now()));
        }
    }

    /// Returns once every invocation started so far, and any they started, has ended and no
    /// worker slot is held (none running, none starting): the fleet is idle again. A start
    /// that never came (a slot taken, no invocation within `JOIN_WITHIN`) is an error.
    pub async fn settled(&self, bench: &Bench) -> Result<()> {
        loop {
            let tasks = std::mem::take(&mut *lock(&self.tasks));
            if tasks.is_empty() {
                if slots_held(bench).await? == 0 {
                    return Ok(());
                }
                // a start under way: its task comes with the notification
                let waited =
                    tokio::time::timeout(fleet::JOIN_WITHIN, self.started.notified()).await;
                if waited.is_err() && lock(&self.tasks).is_empty() {
                    bail!("a worker slot is held, and no invocation started to hold it");
                }
                continue;
            }
            for task in tasks {
                task.await.context("an invocation's task")??;
            }
        }
    }

    /// Every invocation so far.
    pub fn invocations(&self) -> Vec<Invocation> {
        lock(&self.invocations).clone()
    }

    /// Environments opened because every warm one was busy.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::SeqCst)
    }

    /// The most invocations that ran at once, and when that was first reached.
    pub fn peak(&self) -> (usize, Option<Instant>) {
        *lock(&self.peak)
    }
}

/// The starts through the invoker, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Starts {
    /// Every invocation started through the invoker (not the schedule's).
    pub total: u64,
    /// By ingest's wake (a job accepted due now).
    pub wake: u64,
    /// By a worker's fan-out (the backlog).
    pub backlog: u64,
    /// By a worker stopping at its deadline with jobs due.
    pub hand_off: u64,
}

impl Starts {
    pub fn of(invocations: &[Invocation]) -> Self {
        let mut s = Self::default();
        for i in invocations {
            let Cause::Invoked(reason) = i.cause else {
                continue;
            };
            s.total += 1;
            match reason {
                WakeReason::Accepted | WakeReason::Requeued => s.wake += 1,
                WakeReason::Backlog => s.backlog += 1,
                WakeReason::HandOff => s.hand_off += 1,
            }
        }
        s
    }
}

#[async_trait]
impl Invoker for InProcess {
    /// Accepted at once, as Lambda's 202 (its own latency not modelled); the invocation runs
    /// in its task.
    async fn invoke(&self, event: &WakeEvent) -> Result<(), InvokeError> {
        self.0.spawn(Cause::Invoked(event.reason), event.payload());
        Ok(())
    }
}

/// Worker slots held now: invocations running or starting.
pub async fn slots_held(bench: &Bench) -> Result<i64> {
    Ok(bench
        .client
        .query_one("SELECT count(*) FROM worker_slots WHERE until > now()", &[])
        .await
        .context("count the worker slots held")?
        .get(0))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(cause: Cause) -> Invocation {
        Invocation {
            cause,
            started_at: Instant::now(),
            ended: None,
        }
    }

    #[test]
    fn starts_are_counted_by_reason_and_the_schedule_is_not_a_start() {
        let all = [
            started(Cause::Schedule),
            started(Cause::Invoked(WakeReason::Accepted)),
            started(Cause::Invoked(WakeReason::Backlog)),
            started(Cause::Invoked(WakeReason::Backlog)),
            started(Cause::Invoked(WakeReason::HandOff)),
        ];
        assert_eq!(
            Starts::of(&all),
            Starts {
                total: 4,
                wake: 1,
                backlog: 2,
                hand_off: 1
            }
        );
    }
}
