//! The worker fleet: which worker invocations work the queue, coordinated through the store
//! alone (`worker_slots`, migrations/0008_worker_fleet.sql). The one-minute schedule is the
//! backstop, not the pace:
//!
//! - **Wake on accept.** After a commit that makes a job due now (ingest's accept, a
//!   requeue), [`Waker::wake`] takes the wake's slot when no worker holds one, and starts a
//!   worker through the [`Invoker`] (Lambda `Invoke`, `InvocationType=Event`) in a task of its
//!   own, waiting for Lambda's answer at most [`WAKE_WAIT`]: a request never fails on a wake,
//!   and never waits longer than that. While a worker runs or is starting, no wake is sent: a
//!   burst of requests starts one worker.
//! - **Linger.** A worker keeps claiming while jobs arrive and leaves after `WORKER_IDLE_MS`
//!   without one ([`Crew`]); one that found nothing at all (the schedule's, on an idle queue)
//!   leaves at once. Leaving frees its slot first and then claims once more, which
//!   closes the race with a job accepted as it left: that job's wake either saw the slot and
//!   committed before the last claim, or saw none and woke a worker.
//! - **Fan out.** When the due backlog is more than the running workers can send within
//!   [`FAN_OUT_HORIZON`], a second (or before their deadlines, if sooner), one of them starts more
//!   ([`wanted`]): never more than `WORKER_MAX_INVOCATIONS`, nor more than the providers'
//!   shared send rate keeps busy. One worker decides at a time, fleet-wide.
//! - **Hand-off.** A worker that stops at its deadline with jobs still due and no other worker
//!   running starts its successor.
//!
//! A lost wake (Lambda refused it, or the started invocation never joined) holds the wake's
//! slot for [`JOIN_WITHIN`] at most; the schedule's next invocation claims what is due
//! meanwhile, so a lost wake costs at most one schedule period, never the job.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::{ConfigError, Vars};
use crate::delivery::Deliverer;
use crate::domain::Channel;
use crate::store::{Now, StoreError};
use crate::telemetry::emf::Emf;

/// How long a started invocation has to join ([`FleetStore::join`]) before its slot is free
/// again: a Lambda async invoke normally starts within a second; this bounds how long a lost
/// one keeps the next wake from being sent.
pub const JOIN_WITHIN: Duration = Duration::from_secs(10);
/// The longest a caller waits for Lambda's answer to a wake (202 from Lambda within a few
/// tens of milliseconds). Past it the wake goes on in its task: `cargo lambda watch` answers
/// an event invocation only once the function returns, and a request must not wait for that.
pub const WAKE_WAIT: Duration = Duration::from_millis(250);
/// The backlog the running workers should be able to send within this long; more starts
/// more workers. A second, so that a burst goes out about as fast as a lone request: 1,000
/// jobs at one worker's ~250/s would take 4 s, and start 3 more workers instead (with the
/// default max of 4). What a worker costs is its time, which the backlog's work is whoever
/// does it, plus a start and its linger (2 s): a few cents a month at a burst a minute.
pub const FAN_OUT_HORIZON: Duration = Duration::from_secs(1);
/// At most one fan-out decision in this interval, fleet-wide (and per worker).
pub const DECIDE_EVERY: Duration = Duration::from_secs(1);
/// The default `WORKER_IDLE_MS`.
pub const DEFAULT_IDLE: Duration = Duration::from_millis(2_000);
/// The default `WORKER_MAX_INVOCATIONS`.
pub const DEFAULT_MAX_INVOCATIONS: u32 = 4;
/// The most `WORKER_MAX_INVOCATIONS` may be: the slots the schema holds.
pub const MAX_SLOTS: u32 = 100;

/// The fleet's settings, from the environment at cold start (ingest reads the first only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConfig {
    /// `WORKER_FUNCTION_NAME`: the function to start (a name or ARN). Unset: no wake, no
    /// fan-out; the schedule alone starts workers.
    pub function_name: Option<String>,
    /// `WORKER_IDLE_MS` (default 2000): a worker leaves after this long without a job.
    pub idle: Duration,
    /// `WORKER_MAX_INVOCATIONS` (default 4, at most 100): the most worker invocations at
    /// once, hence the worker's database connections. The template's reserved concurrency
    /// follows it.
    pub max_invocations: u32,
    /// The backlog the running workers should be able to send within this long
    /// ([`FAN_OUT_HORIZON`]; not a setting: tests shorten it to see a fan-out quickly).
    pub horizon: Duration,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            function_name: None,
            idle: DEFAULT_IDLE,
            max_invocations: DEFAULT_MAX_INVOCATIONS,
            horizon: FAN_OUT_HORIZON,
        }
    }
}

impl FleetConfig {
    /// Reads `WORKER_FUNCTION_NAME`, `WORKER_IDLE_MS` and `WORKER_MAX_INVOCATIONS`.
    pub fn from_lookup(vars: &Vars) -> Result<Self, ConfigError> {
        Ok(Self {
            function_name: vars.optional("WORKER_FUNCTION_NAME"),
            idle: Duration::from_millis(vars.parse_or(
                "WORKER_IDLE_MS",
                DEFAULT_IDLE.as_millis() as u64,
                0..=600_000,
            )?),
            max_invocations: vars.parse_or(
                "WORKER_MAX_INVOCATIONS",
                DEFAULT_MAX_INVOCATIONS,
                1..=MAX_SLOTS,
            )?,
            horizon: FAN_OUT_HORIZON,
        })
    }
}

/// Why a worker is started (in its event, and in the logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeReason {
    /// Ingest accepted a job due now.
    Accepted,
    /// A requeue made a job due now.
    Requeued,
    /// The backlog needs more workers (fan-out).
    Backlog,
    /// A worker stopped at its deadline with jobs due and no other worker running.
    HandOff,
}

impl WakeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WakeReason::Accepted => "accepted",
            WakeReason::Requeued => "requeued",
            WakeReason::Backlog => "backlog",
            WakeReason::HandOff => "hand_off",
        }
    }
}

/// What a started worker invocation receives: `{"wake": {"lease": …, "reason": …}}`, the
/// lease of the slot taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeEvent {
    pub lease: Uuid,
    pub reason: WakeReason,
}

impl WakeEvent {
    /// The invocation's event.
    pub fn payload(&self) -> serde_json::Value {
        serde_json::json!({ "wake": self })
    }

    /// The wake in an invocation's event; `None` for any other event (the schedule's).
    pub fn from_payload(payload: &serde_json::Value) -> Option<Self> {
        serde_json::from_value(payload.get("wake")?.clone()).ok()
    }
}

/// [`FleetStore::wake`]: take the wake's slot, when no worker holds a slot.
#[derive(Debug, Clone, Copy)]
pub struct TakeWake {
    /// How long the started invocation has to join.
    pub join_within: Duration,
    /// Only when a job is due and unclaimed (a worker handing over at its deadline).
    pub only_if_due: bool,
    pub now: Now,
}

/// [`FleetStore::join`]: a worker invocation takes a slot.
#[derive(Debug, Clone, Copy)]
pub struct Join {
    /// The lease its wake took for it (`None`: started by the schedule, or joining again).
    pub lease: Option<Uuid>,
    /// It stops claiming by then.
    pub until: DateTime<Utc>,
    /// `WORKER_MAX_INVOCATIONS`: only the first this many slots are used.
    pub max: u32,
    pub now: Now,
}

/// A worker invocation's place in the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub slot: i32,
    pub lease: Uuid,
}

/// [`FleetStore::leave`]: free a slot (held under its lease).
#[derive(Debug, Clone, Copy)]
pub struct Leave {
    pub member: Member,
    pub now: Now,
}

/// [`FleetStore::census`]: the fleet's size and backlog, for whoever has the turn.
#[derive(Debug, Clone, Copy)]
pub struct TakeCensus {
    /// One census fleet-wide in this interval.
    pub every: Duration,
    /// Count the due jobs up to this many.
    pub count_up_to: u64,
    pub now: Now,
}

/// The fleet's size and backlog, as counted on a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Census {
    /// Slots held: workers running or starting.
    pub held: u64,
    /// Jobs due and unclaimed (up to the count asked for).
    pub due: u64,
}

/// [`FleetStore::grow`]: take free slots for workers about to be started.
#[derive(Debug, Clone, Copy)]
pub struct Grow {
    pub count: u32,
    pub max: u32,
    pub join_within: Duration,
    pub now: Now,
}

/// The fleet's port: `worker_slots` in PostgreSQL (`notify_postgres`).
#[async_trait]
pub trait FleetStore: Send + Sync {
    /// Takes the wake's slot when no slot is held; the lease to start a worker with, or
    /// `None` when a worker runs or is starting (no wake is needed). Called after the commit
    /// that made the job due, never inside it.
    async fn wake(&self, p: TakeWake) -> Result<Option<Uuid>, StoreError>;

    /// Takes over the slot taken for this invocation, or the lowest free one; `None` when
    /// `max` workers run already.
    async fn join(&self, p: Join) -> Result<Option<Member>, StoreError>;

    /// Frees the member's slot (left alone if it passed to another holder).
    async fn leave(&self, p: Leave) -> Result<(), StoreError>;

    /// The census, when it is the caller's turn (at most one per `every`, fleet-wide);
    /// `None` when it is not.
    async fn census(&self, p: TakeCensus) -> Result<Option<Census>, StoreError>;

    /// Takes up to `count` free slots of the first `max`; one lease per slot taken.
    async fn grow(&self, p: Grow) -> Result<Vec<Uuid>, StoreError>;
}

/// A worker invocation could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start a worker invocation ({code})")]
pub struct InvokeError {
    /// The service's error code (`TooManyRequestsException`, …), or what failed
    /// (`dispatch`, `timeout`).
    pub code: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Starts worker invocations: `notify_lambda` (Lambda `Invoke`, `InvocationType=Event`).
#[async_trait]
pub trait Invoker: Send + Sync {
    /// Starts one invocation of the worker function with `event`'s payload; returns once the
    /// start was accepted (Lambda queues it), not when the worker is done.
    async fn invoke(&self, event: &WakeEvent) -> Result<(), InvokeError>;
}

/// What became of a start, as far as its caller waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Started {
    /// Lambda accepted it.
    Accepted,
    /// No answer yet within the wait; the start goes on in its own task, which logs and
    /// counts its end.
    Pending,
    /// It failed (logged and counted): the slot stays taken until [`JOIN_WITHIN`] is over,
    /// and the schedule is the backstop.
    Failed,
}

/// The metrics of starting workers, one EMF line per start: `WakeSent` (Lambda accepted the
/// start) or `WakeFailed` (it did not, or the store could not say whether one was needed),
/// each by `Service` alone (what the alarm reads) and by `Service` and `Reason` (a
/// [`WakeReason`]: `accepted`, `requeued`, `backlog`, `hand_off`).
pub const FLEET_METRICS: [&str; 2] = ["WakeSent", "WakeFailed"];

fn wake_line(metric: &'static str, reason: WakeReason) -> String {
    use crate::telemetry::emf::Unit;
    Emf::new(Utc::now().timestamp_millis())
        .dimension("Reason", reason.as_str())
        .metric(metric, Unit::Count, 1.0)
        .metric_by(&["Reason"], metric, Unit::Count, 1.0)
        .line()
}

/// A start in its own task: ends with Lambda's answer (logged, and counted on stdout),
/// whether or not the caller still waits for it.
pub fn start(invoker: Arc<dyn Invoker>, event: WakeEvent) -> tokio::task::JoinHandle<Started> {
    tokio::spawn(async move {
        let clock = Instant::now();
        match invoker.invoke(&event).await {
            Ok(()) => {
                tracing::info!(
                    reason = event.reason.as_str(),
                    lease = %event.lease,
                    latency_ms = clock.elapsed().as_secs_f64() * 1000.0,
                    "worker started"
                );
                println!("{}", wake_line("WakeSent", event.reason));
                Started::Accepted
            }
            Err(err) => {
                tracing::warn!(
                    reason = event.reason.as_str(),
                    lease = %event.lease,
                    code = err.code,
                    error = %crate::error::report(&err),
                    "cannot start a worker; the schedule's next invocation will claim what \
                     is due"
                );
                println!("{}", wake_line("WakeFailed", event.reason));
                Started::Failed
            }
        }
    })
}

/// Waits for a start at most `wait`; past it the start goes on alone.
pub async fn wait_for(start: tokio::task::JoinHandle<Started>, wait: Duration) -> Started {
    match tokio::time::timeout(wait, start).await {
        Ok(Ok(started)) => started,
        // the task panicked or was cancelled: treat as failed (it counted nothing)
        Ok(Err(_)) => Started::Failed,
        Err(_) => Started::Pending,
    }
}

/// What a wake did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Wake {
    /// A worker runs or is starting: none was needed.
    Running,
    /// A worker was started (or is being: see [`Started`]).
    Started(Started),
    /// The store could not say whether a worker runs (logged and counted): the schedule
    /// is the backstop.
    Unknown,
}

/// Starts a worker when a commit made a job due and none runs: ingest's and requeue's side.
pub struct Waker {
    store: Arc<dyn FleetStore>,
    invoker: Arc<dyn Invoker>,
    wait: Duration,
}

impl Waker {
    pub fn new(store: Arc<dyn FleetStore>, invoker: Arc<dyn Invoker>) -> Self {
        Self {
            store,
            invoker,
            wait: WAKE_WAIT,
        }
    }

    /// How long [`Waker::wake`] waits for Lambda's answer (default [`WAKE_WAIT`]).
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// After the commit that made a job due now: starts a worker unless one runs or is
    /// starting. Never fails, and waits at most the wake wait for Lambda.
    pub async fn wake(&self, reason: WakeReason) -> Wake {
        let taken = self
            .store
            .wake(TakeWake {
                join_within: JOIN_WITHIN,
                only_if_due: false,
                now: None,
            })
            .await;
        match taken {
            Ok(None) => Wake::Running,
            Ok(Some(lease)) => {
                let task = start(self.invoker.clone(), WakeEvent { lease, reason });
                Wake::Started(wait_for(task, self.wait).await)
            }
            Err(err) => {
                tracing::warn!(
                    reason = reason.as_str(),
                    error = %crate::error::report(&err),
                    "cannot tell whether a worker runs; the schedule's next invocation will \
                     claim what is due"
                );
                println!("{}", wake_line("WakeFailed", reason));
                Wake::Unknown
            }
        }
    }
}

/// What [`wanted`] decides from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// Slots held now: workers running or starting.
    pub held: u64,
    /// Jobs due and unclaimed.
    pub due: u64,
    /// `WORKER_MAX_INVOCATIONS`.
    pub max: u32,
    /// Jobs per second one worker sends when the providers do not hold it back: its calls in
    /// flight over their mean latency.
    pub per_worker: f64,
    /// The providers' shared send rate (messages per second, every worker together), `None`
    /// for no limit.
    pub send_rate: Option<f64>,
    /// The backlog should be sent within this long.
    pub horizon: Duration,
}

/// How many workers the backlog can use: enough to send it within the horizon, no more than
/// the shared send rate keeps busy (more would only wait for send slots), at most `max`,
/// and never fewer than are held already (a decision only ever starts workers; idle ones
/// leave on their own).
pub fn wanted(g: Growth) -> u64 {
    let max = u64::from(g.max.max(1));
    if !(g.per_worker.is_finite() && g.per_worker > 0.0) {
        return g.held.min(max);
    }
    let per_horizon = g.per_worker * g.horizon.as_secs_f64().max(0.001);
    let by_backlog = (g.due as f64 / per_horizon).ceil();
    let by_pace = g
        .send_rate
        .map_or(f64::INFINITY, |rate| (rate / g.per_worker).ceil().max(1.0));
    let wanted = by_backlog.min(by_pace).min(max as f64).max(1.0) as u64;
    wanted.max(g.held.min(max))
}

/// How far the census counts the backlog: the most [`wanted`] can use.
pub fn count_up_to(max: u32, per_worker: f64, horizon: Duration) -> u64 {
    let most = f64::from(max.max(1)) * per_worker.max(0.0) * horizon.as_secs_f64() + 1.0;
    if most.is_finite() {
        most.min(10_000_000.0) as u64
    } else {
        10_000_000
    }
}

/// What one worker invocation did in the fleet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CrewSummary {
    /// Its slot (0: it had none: the fleet was full).
    pub slot: i32,
    /// It was started by a wake (not the schedule).
    pub woken: bool,
    /// Workers it started for the backlog.
    pub started: u64,
    /// It started its successor at its deadline.
    pub handed_off: bool,
    /// Starts that failed.
    pub starts_failed: u64,
    /// Times a job arrived as it was leaving, and it stayed.
    pub stayed: u64,
}

/// A boxed start in flight, awaited (at most briefly) when the invocation ends.
type Pending = Pin<Box<dyn Future<Output = Started> + Send>>;

/// One worker invocation's membership of the fleet: its slot, its linger, its decisions to
/// start more. The worker's loop ([`crate::worker::run_in`]) drives it.
pub struct Crew<'a> {
    store: &'a dyn FleetStore,
    invoker: Option<Arc<dyn Invoker>>,
    config: &'a FleetConfig,
    member: Option<Member>,
    /// It claims nothing after this (its slot is held until then).
    until: DateTime<Utc>,
    last_decision: Option<Instant>,
    pending: Vec<Pending>,
    pub summary: CrewSummary,
}

impl<'a> Crew<'a> {
    /// Joins the fleet for an invocation whose event is `payload` (a wake's, or the
    /// schedule's) and which claims nothing after `until`. `Ok(None)`: the fleet is full, and
    /// this invocation must not claim. `invoker` `None`: it starts no other worker.
    pub async fn join(
        store: &'a dyn FleetStore,
        invoker: Option<Arc<dyn Invoker>>,
        config: &'a FleetConfig,
        payload: &serde_json::Value,
        until: Instant,
    ) -> Result<Option<Crew<'a>>, StoreError> {
        let wake = WakeEvent::from_payload(payload);
        let until = wall_clock(until);
        let member = store
            .join(Join {
                lease: wake.map(|w| w.lease),
                until,
                max: config.max_invocations,
                now: None,
            })
            .await?;
        let Some(member) = member else {
            tracing::info!(
                max_invocations = config.max_invocations,
                "every worker slot is held; this invocation claims nothing"
            );
            return Ok(None);
        };
        tracing::info!(
            slot = member.slot,
            reason = wake.map(|w| w.reason.as_str()).unwrap_or("schedule"),
            "joined the worker fleet"
        );
        Ok(Some(Crew {
            store,
            invoker,
            config,
            member: Some(member),
            until,
            last_decision: None,
            pending: Vec::new(),
            summary: CrewSummary {
                slot: member.slot,
                woken: wake.is_some(),
                ..CrewSummary::default()
            },
        }))
    }

    /// How long it lingers without a job.
    pub fn idle(&self) -> Duration {
        self.config.idle
    }

    /// It holds a slot: it may claim.
    pub fn is_member(&self) -> bool {
        self.member.is_some()
    }

    /// Frees its slot. A failure is logged: the slot is then free at its deadline anyway.
    pub async fn leave(&mut self) {
        let Some(member) = self.member.take() else {
            return;
        };
        if let Err(err) = self.store.leave(Leave { member, now: None }).await {
            tracing::warn!(
                slot = member.slot,
                error = %crate::error::report(&err),
                "cannot free the worker's slot; it is free at the invocation's deadline"
            );
        }
    }

    /// After leaving, a job came: takes a slot again, if one is free (`false`: this
    /// invocation delivers what it claimed and then stops).
    pub async fn stay(&mut self) -> bool {
        self.summary.stayed += 1;
        let joined = self
            .store
            .join(Join {
                lease: None,
                until: self.until,
                max: self.config.max_invocations,
                now: None,
            })
            .await;
        match joined {
            Ok(Some(member)) => {
                self.member = Some(member);
                true
            }
            Ok(None) => false,
            Err(err) => {
                tracing::warn!(
                    error = %crate::error::report(&err),
                    "cannot take a worker slot again; this invocation stops after its batch"
                );
                false
            }
        }
    }

    /// After a batch that found the queue full (`full`): at most once per [`DECIDE_EVERY`],
    /// and only on the fleet's turn, starts the workers the backlog can use ([`wanted`]).
    /// `per_worker` is this invocation's rate unhindered (jobs/s); the deliverer tells the
    /// shared rates of the channels the batch sent; `deadline` is when this invocation stops
    /// claiming.
    pub async fn consider_growing(
        &mut self,
        full: bool,
        per_worker: Option<f64>,
        (deliverer, channels): (&dyn Deliverer, &[Channel]),
        deadline: Instant,
    ) {
        let (Some(invoker), Some(per_worker)) = (self.invoker.clone(), per_worker) else {
            return;
        };
        if !full || self.member.is_none() || self.config.max_invocations <= 1 {
            return;
        }
        if self
            .last_decision
            .is_some_and(|at| at.elapsed() < DECIDE_EVERY)
        {
            return;
        }
        self.last_decision = Some(Instant::now());
        let horizon = self
            .config
            .horizon
            .min(deadline.saturating_duration_since(Instant::now()));
        let census = self
            .store
            .census(TakeCensus {
                every: DECIDE_EVERY,
                count_up_to: count_up_to(self.config.max_invocations, per_worker, horizon),
                now: None,
            })
            .await;
        let census = match census {
            Ok(Some(census)) => census,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(error = %crate::error::report(&err), "cannot count the fleet");
                return;
            }
        };
        let wanted = wanted(Growth {
            held: census.held,
            due: census.due,
            max: self.config.max_invocations,
            per_worker,
            send_rate: shared_rate(deliverer, channels).await,
            horizon,
        });
        let more = wanted.saturating_sub(census.held);
        if more == 0 {
            return;
        }
        let leases = match self
            .store
            .grow(Grow {
                count: u32::try_from(more).unwrap_or(u32::MAX),
                max: self.config.max_invocations,
                join_within: JOIN_WITHIN,
                now: None,
            })
            .await
        {
            Ok(leases) => leases,
            Err(err) => {
                tracing::warn!(error = %crate::error::report(&err), "cannot take slots to fan out");
                return;
            }
        };
        tracing::info!(
            held = census.held,
            due = census.due,
            per_worker,
            starting = leases.len(),
            "the backlog needs more workers"
        );
        for lease in leases {
            self.summary.started += 1;
            let task = start(
                invoker.clone(),
                WakeEvent {
                    lease,
                    reason: WakeReason::Backlog,
                },
            );
            self.pending.push(Box::pin(
                async move { task.await.unwrap_or(Started::Failed) },
            ));
        }
    }

    /// At its deadline, with jobs still due: leaves, then starts a successor unless another
    /// worker runs (it will claim them).
    pub async fn hand_off(&mut self) {
        self.leave().await;
        let Some(invoker) = self.invoker.clone() else {
            return;
        };
        let taken = self
            .store
            .wake(TakeWake {
                join_within: JOIN_WITHIN,
                only_if_due: true,
                now: None,
            })
            .await;
        match taken {
            Ok(Some(lease)) => {
                self.summary.handed_off = true;
                let task = start(
                    invoker,
                    WakeEvent {
                        lease,
                        reason: WakeReason::HandOff,
                    },
                );
                self.pending.push(Box::pin(
                    async move { task.await.unwrap_or(Started::Failed) },
                ));
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(
                error = %crate::error::report(&err),
                "cannot hand over at the deadline; the schedule's next invocation will claim \
                 what is due"
            ),
        }
    }

    /// Leaves (if it has not) and waits at most [`WAKE_WAIT`] for the starts still in
    /// flight, counting those that failed.
    pub async fn finish(mut self) -> CrewSummary {
        self.leave().await;
        let pending = std::mem::take(&mut self.pending);
        let all = futures::future::join_all(pending);
        if let Ok(results) = tokio::time::timeout(WAKE_WAIT, all).await {
            self.summary.starts_failed +=
                results.iter().filter(|s| **s == Started::Failed).count() as u64;
        }
        self.summary
    }
}

/// The shared rate of the channels a batch sent, added up; `None` (no limit) when one of them
/// has none, or none was sent.
async fn shared_rate(deliverer: &dyn Deliverer, channels: &[Channel]) -> Option<f64> {
    let mut total = 0.0;
    for channel in channels {
        total += deliverer.send_rate(*channel).await?;
    }
    (!channels.is_empty()).then_some(total)
}

/// The wall-clock time of an `Instant` ahead (now if past).
fn wall_clock(at: Instant) -> DateTime<Utc> {
    let ahead = at.saturating_duration_since(Instant::now());
    Utc::now() + chrono::Duration::from_std(ahead).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten seconds: the numbers read more easily.
    fn growth(held: u64, due: u64) -> Growth {
        Growth {
            held,
            due,
            max: 8,
            // 16 calls in flight at 55 ms
            per_worker: 16.0 / 0.055,
            send_rate: None,
            horizon: Duration::from_secs(10),
        }
    }

    #[test]
    fn at_the_default_horizon_a_burst_of_a_thousand_wants_four() {
        let burst = Growth {
            max: 4,
            horizon: FAN_OUT_HORIZON,
            ..growth(1, 1_000)
        };
        assert_eq!(wanted(burst), 4);
        assert_eq!(wanted(Growth { due: 290, ..burst }), 1);
        assert_eq!(wanted(Growth { due: 600, ..burst }), 3);
    }

    #[test]
    fn a_backlog_one_worker_sends_within_the_horizon_starts_no_other() {
        assert_eq!(wanted(growth(1, 0)), 1);
        assert_eq!(wanted(growth(1, 2_000)), 1);
        assert_eq!(wanted(growth(1, 2_909)), 1, "290.9/s for 10 s");
    }

    #[test]
    fn a_larger_backlog_wants_as_many_as_send_it_within_the_horizon_up_to_the_max() {
        assert_eq!(wanted(growth(1, 2_910)), 2);
        assert_eq!(wanted(growth(1, 10_000)), 4);
        assert_eq!(
            wanted(growth(1, 100_000)),
            8,
            "at most WORKER_MAX_INVOCATIONS"
        );
        assert_eq!(
            wanted(Growth {
                max: 1,
                ..growth(1, 100_000)
            }),
            1
        );
    }

    #[test]
    fn the_shared_send_rate_caps_the_fleet() {
        // SES at 14/s: one worker keeps it busy
        let paced = Growth {
            send_rate: Some(14.0),
            ..growth(1, 100_000)
        };
        assert_eq!(wanted(paced), 1);
        // 1,000/s needs four workers of 291/s
        assert_eq!(
            wanted(Growth {
                send_rate: Some(1_000.0),
                ..paced
            }),
            4
        );
    }

    #[test]
    fn a_decision_never_asks_for_fewer_than_are_held() {
        assert_eq!(wanted(growth(6, 0)), 6);
        assert_eq!(wanted(growth(12, 0)), 8, "but never more than the max");
    }

    #[test]
    fn a_short_horizon_near_the_deadline_wants_more() {
        let near = Growth {
            horizon: Duration::from_secs(2),
            ..growth(1, 2_000)
        };
        assert_eq!(wanted(near), 4);
    }

    #[test]
    fn no_rate_known_changes_nothing() {
        for per_worker in [0.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                wanted(Growth {
                    per_worker,
                    ..growth(3, 100_000)
                }),
                3
            );
        }
    }

    #[test]
    fn the_census_counts_no_further_than_the_decision_can_use() {
        assert_eq!(count_up_to(8, 100.0, Duration::from_secs(10)), 8_001);
        assert_eq!(count_up_to(8, f64::INFINITY, FAN_OUT_HORIZON), 10_000_000);
    }

    #[test]
    fn the_wake_event_round_trips_and_the_schedule_has_none() {
        let event = WakeEvent {
            lease: Uuid::nil(),
            reason: WakeReason::Accepted,
        };
        let payload = event.payload();
        assert_eq!(
            payload.to_string(),
            r#"{"wake":{"lease":"00000000-0000-0000-0000-000000000000","reason":"accepted"}}"#
        );
        assert_eq!(WakeEvent::from_payload(&payload), Some(event));
        let scheduled = serde_json::json!({
            "version": "0", "detail-type": "Scheduled Event", "source": "aws.events",
            "detail": {}
        });
        assert_eq!(WakeEvent::from_payload(&scheduled), None);
        assert_eq!(
            WakeEvent::from_payload(&serde_json::json!({"wake": 3})),
            None
        );
    }

    #[test]
    fn config_from_lookup() {
        let read = |pairs: &[(&str, &str)]| {
            let lookup = crate::config::pairs(pairs);
            FleetConfig::from_lookup(&Vars::new(&lookup))
        };
        assert_eq!(read(&[]).unwrap(), FleetConfig::default());
        let c = read(&[
            ("WORKER_FUNCTION_NAME", "notifications-worker"),
            ("WORKER_IDLE_MS", "500"),
            ("WORKER_MAX_INVOCATIONS", "8"),
        ])
        .unwrap();
        assert_eq!(c.function_name.as_deref(), Some("notifications-worker"));
        assert_eq!(c.idle, Duration::from_millis(500));
        assert_eq!(c.max_invocations, 8);
        for bad in [
            ("WORKER_MAX_INVOCATIONS", "0"),
            ("WORKER_MAX_INVOCATIONS", "101"),
        ] {
            let err = read(&[bad]).unwrap_err().to_string();
            assert!(err.contains("WORKER_MAX_INVOCATIONS"), "{err}");
        }
    }

    #[test]
    fn a_wake_line_is_counted_by_reason() {
        let line = wake_line("WakeFailed", WakeReason::Backlog);
        let published = crate::telemetry::emf::published(&line).unwrap();
        assert_eq!(
            published,
            vec![(
                "WakeFailed".to_owned(),
                vec![
                    vec!["Service".to_owned()],
                    vec!["Service".to_owned(), "Reason".to_owned()]
                ]
            )]
        );
    }
}
