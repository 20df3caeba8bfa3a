//! The worker: claim a batch of due jobs, deliver them concurrently, complete the batch and
//! claim the next one in one transaction (one round trip, one commit), repeat until nothing
//! is due or the invocation's time is nearly up. In the fleet ([`run_in`], what the worker
//! function runs), it lingers while jobs arrive, starts more workers for a backlog and hands
//! over at its deadline ([`crate::fleet`]); [`shift`] runs it beside the status events'
//! dispatch.
//!
//! No transaction is open during delivery: the claim commits first, and every attempt's
//! result is written afterwards, conditioned on its claim token (a job swept and claimed
//! again meanwhile is left alone; the attempt is still recorded).

mod decide;
mod metrics;
mod pipeline;
pub mod shift;

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::Utc;
use futures::FutureExt;
use serde::Serialize;
use tracing::Instrument;

use crate::config::{ConfigError, Vars};
use crate::delivery::{
    Deliverer, DeliveryConfig, DeliveryError, ErrorClass, NotNow, SUPPRESSED, WORKER_PANIC,
    masked_recipient_of,
};
use crate::fleet::Crew;
use crate::store::{
    At, Claim, ClaimedJob, CompleteAndClaim, CompleteReport, Completion, Decision, JobStore,
    QueueDepth, Release, StoreError,
};

pub use crate::telemetry::emf::{JOB_METRICS, METRIC_NAMESPACE, SERVICE, job_metrics};
pub use decide::{BASE_BACKOFF, MAX_BACKOFF, backoff, backoff_step, decide};
pub use metrics::{Latencies, worker_lines};
pub use pipeline::{TICK, window};

/// Time kept free before the deadline besides the provider calls: claiming, completing and
/// answering Lambda.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(3);
/// How often an empty queue is polled while a worker lingers (`WORKER_IDLE_MS`) or polls
/// (`WORKER_POLL_SECS`): a job accepted meanwhile waits half of it on average. The poll is one
/// claim over the lanes' indexes, reading no row when nothing is due.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// The time budget assumed when the invocation carries no deadline (a bare local run).
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(60);

/// The worker's settings, from the environment at cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Jobs claimed at once (`WORKER_BATCH_SIZE`, default 100).
    pub batch_size: u32,
    /// Deliveries in flight at once (`WORKER_CONCURRENCY`, default 32).
    pub concurrency: usize,
    /// Each provider call's time limit (`PROVIDER_TIMEOUT_MS`, default 10000).
    pub provider_timeout: Duration,
    /// With an empty queue, keep polling until this long before the deadline
    /// (`WORKER_POLL_SECS`, default 0: stop at once).
    pub poll: Duration,
    /// Jobs an organization may have claimed per minute (`RATE_LIMIT_PER_ORG_PER_MIN`,
    /// default 0: no limit); overrides per organization in `organization_rate_limits`.
    pub rate_limit_per_org_per_min: u32,
    /// Sender settings for the adapters.
    pub delivery: DeliveryConfig,
}

impl WorkerConfig {
    /// The defaults, with the given sender settings.
    pub fn new(delivery: DeliveryConfig) -> Self {
        Self {
            batch_size: 100,
            concurrency: 32,
            provider_timeout: Duration::from_millis(10_000),
            poll: Duration::ZERO,
            rate_limit_per_org_per_min: 0,
            delivery,
        }
    }

    /// Reads and checks `WORKER_BATCH_SIZE`, `WORKER_CONCURRENCY`, `PROVIDER_TIMEOUT_MS`,
    /// `WORKER_POLL_SECS`, `EMAIL_FROM` (required), `SES_CONFIGURATION_SET`, `SMS_SENDER_ID`.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&Vars::process())
    }

    /// [`WorkerConfig::from_env`] over any lookup.
    pub fn from_lookup(vars: &Vars) -> Result<Self, ConfigError> {
        let delivery = DeliveryConfig::from_lookup(vars)?;
        Ok(Self {
            batch_size: vars.parse_or("WORKER_BATCH_SIZE", 100u32, 1..=1000)?,
            concurrency: vars.parse_or("WORKER_CONCURRENCY", 32usize, 1..=256)?,
            provider_timeout: Duration::from_millis(vars.parse_or(
                "PROVIDER_TIMEOUT_MS",
                10_000u64,
                100..=60_000,
            )?),
            poll: Duration::from_secs(vars.parse_or("WORKER_POLL_SECS", 0u64, 0..=900)?),
            rate_limit_per_org_per_min: vars.parse_or(
                "RATE_LIMIT_PER_ORG_PER_MIN",
                0u32,
                0..=10_000_000,
            )?,
            delivery,
        })
    }
}

/// What one invocation did. `claimed = sent + retried + held + dead + fenced + released`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkerSummary {
    pub claimed: u64,
    pub sent: u64,
    pub retried: u64,
    /// Attempts given back: account or configuration trouble, or an outage; retried later.
    pub held: u64,
    pub dead: u64,
    /// Claimed jobs given back untried when the invocation stopped early.
    pub released: u64,
    /// Attempts whose job had been swept and claimed again: recorded, state left alone.
    pub fenced: u64,
    /// Non-empty batches.
    pub batches: u64,
    pub elapsed_ms: u64,
}

/// The invocation's deadline from Lambda's `context.deadline` (ms since the epoch).
///
/// A value that cannot be a real deadline — 0 (a hand-built context) or long past (`cargo
/// lambda watch` sends a constant 600000, ten minutes after 1970) — means
/// [`DEFAULT_BUDGET`] from now. A deadline just past means no time left.
pub fn deadline_from_epoch_ms(deadline_ms: u64) -> Instant {
    const NOT_A_REAL_DEADLINE: Duration = Duration::from_secs(24 * 3600);
    let now = Instant::now();
    let deadline = UNIX_EPOCH + Duration::from_millis(deadline_ms);
    match deadline.duration_since(SystemTime::now()) {
        Ok(remaining) => now + remaining,
        Err(past) if deadline_ms == 0 || past.duration() > NOT_A_REAL_DEADLINE => {
            tracing::info!(
                deadline_ms,
                budget_secs = DEFAULT_BUDGET.as_secs(),
                "the invocation carries no real deadline; using the default budget"
            );
            now + DEFAULT_BUDGET
        }
        Err(_) => now,
    }
}

/// How many jobs a batch may claim with `remaining` time left, or `None` when no batch may
/// start. A batch of n jobs, c in flight, each call at most T, ends within ⌈n/c⌉·T; so the
/// batch holds at most as many "waves" of `concurrency` calls as fit before the deadline
/// less [`SAFETY_MARGIN`].
pub fn batch_size_for(cfg: &WorkerConfig, remaining: Duration) -> Option<u32> {
    let waves = waves_for(cfg, remaining);
    if waves == 0 {
        return None;
    }
    let fits = waves.saturating_mul(cfg.concurrency.max(1) as u32);
    Some(fits.min(cfg.batch_size).max(1))
}

/// Waves of `concurrency` calls, each at most the provider timeout, that fit in `remaining`
/// less [`SAFETY_MARGIN`].
fn waves_for(cfg: &WorkerConfig, remaining: Duration) -> u32 {
    let Some(usable) = remaining.checked_sub(SAFETY_MARGIN) else {
        return 0;
    };
    let timeout_ms = cfg.provider_timeout.as_millis().max(1);
    (usable.as_millis() / timeout_ms).min(u128::from(u32::MAX)) as u32
}

/// Runs the claim → deliver → complete loop until nothing is due (and, with
/// `WORKER_POLL_SECS`, until that long before `deadline`) or no batch can finish before
/// `deadline`. Delivery failures are recorded, not returned: only a store error fails the
/// invocation (its claimed jobs are then left for the sweeper).
pub async fn run(
    store: &dyn JobStore,
    deliverer: &dyn Deliverer,
    cfg: &WorkerConfig,
    deadline: Instant,
) -> Result<WorkerSummary, StoreError> {
    run_with(store, deliverer, cfg, deadline, None).await
}

/// [`run`] as a member of the fleet ([`Crew`]): it claims only while it holds its slot; with
/// nothing due it lingers for the crew's idle time, then leaves (and stays if a job came as
/// it left); after a full batch it may start more workers; at its deadline, with jobs still
/// due, it hands over. The crew leaves on every way out but a store error, whose invocation
/// fails (its slot is free at its deadline).
pub async fn run_in(
    store: &dyn JobStore,
    deliverer: &dyn Deliverer,
    cfg: &WorkerConfig,
    deadline: Instant,
    crew: &mut Crew<'_>,
) -> Result<WorkerSummary, StoreError> {
    run_with(store, deliverer, cfg, deadline, Some(crew)).await
}

async fn run_with(
    store: &dyn JobStore,
    deliverer: &dyn Deliverer,
    cfg: &WorkerConfig,
    deadline: Instant,
    crew: Option<&mut Crew<'_>>,
) -> Result<WorkerSummary, StoreError> {
    let started = Instant::now();
    let queue = queue_depth(store).await;
    let mut summary = WorkerSummary::default();
    let mut latencies = Latencies::default();
    let result = work(
        store,
        deliverer,
        cfg,
        deadline,
        &mut summary,
        &mut latencies,
        crew,
    )
    .await;
    summary.elapsed_ms = started.elapsed().as_millis() as u64;
    // the Embedded Metric Format lines of the invocation, on stdout where CloudWatch reads
    // them (also when a store error stops the invocation: what it did still counts)
    for line in worker_lines(&summary, &latencies, queue, Utc::now().timestamp_millis()) {
        println!("{line}");
    }
    result.map(|()| summary)
}

/// The queue by state and the oldest due job's age, at most once a minute per instance
/// (`None` when not measured now, or when the store could not say: that never stops the
/// invocation).
async fn queue_depth(store: &dyn JobStore) -> Option<QueueDepth> {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    if !metrics::backlog_due(&LAST, Instant::now()) {
        return None;
    }
    match store.queue_depth(At::SERVER).await {
        Ok(depth) => Some(depth),
        Err(err) => {
            tracing::warn!(error = %crate::error::report(&err), "cannot measure the queue");
            None
        }
    }
}

/// The loop of [`run`], adding what it does to `summary` and `latencies` as it goes: the
/// first claim (and every claim once the pipeline is empty: the poll, the linger, the last
/// claim on leaving) is made here; while jobs flow the [`pipeline::Pipeline`] claims as its
/// slots free up, with its writes.
async fn work(
    store: &dyn JobStore,
    deliverer: &dyn Deliverer,
    cfg: &WorkerConfig,
    deadline: Instant,
    summary: &mut WorkerSummary,
    latencies: &mut Latencies,
    mut crew: Option<&mut Crew<'_>>,
) -> Result<(), StoreError> {
    let poll_until = deadline.checked_sub(cfg.poll).unwrap_or_else(Instant::now);
    let mut pipeline = pipeline::Pipeline::new(store, deliverer, cfg, deadline);
    // when the pipeline last emptied: the linger counts from here. An invocation that found
    // nothing at all does not linger: no traffic woke it (the schedule's, on an idle queue),
    // and waiting would cost its idle time on every tick
    let mut busy_at: Option<Instant> = None;
    // the deadline, not an empty queue, ended the loop: what is due may need a successor
    let mut out_of_time = false;
    // the pipeline holds jobs (claimed here, or by its own claims)
    let mut flowing = false;
    loop {
        // outside the fleet, or in it with a slot: it may claim
        let member = crew.as_ref().is_none_or(|c| c.is_member());
        if !flowing {
            let Some(size) =
                batch_size_for(cfg, deadline.saturating_duration_since(Instant::now()))
            else {
                tracing::info!(
                    remaining_ms = deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis() as u64,
                    "too little time left for another batch; stopping"
                );
                out_of_time = true;
                break;
            };
            if !member {
                break;
            }
            let batch = store
                .claim(Claim {
                    batch_size: size,
                    now: None,
                })
                .await?;
            if batch.is_empty() {
                let now = Instant::now();
                let polling = !cfg.poll.is_zero() && now < poll_until;
                let lingering = crew.as_ref().is_some_and(|c| {
                    busy_at.is_some_and(|at| now.saturating_duration_since(at) < c.idle())
                });
                if polling || lingering {
                    let until = if polling { poll_until } else { deadline };
                    tokio::time::sleep(POLL_INTERVAL.min(until.saturating_duration_since(now)))
                        .await;
                    continue;
                }
                let Some(crew) = crew.as_deref_mut() else {
                    break;
                };
                // leaving: the slot is freed (and committed) before one last claim, so a job
                // accepted meanwhile either is in that claim or found no worker and woke one
                crew.leave().await;
                let last = store
                    .claim(Claim {
                        batch_size: size,
                        now: None,
                    })
                    .await?;
                if last.is_empty() {
                    break;
                }
                tracing::info!(
                    claimed = last.len(),
                    "jobs came as the worker left; it stays"
                );
                // without a slot again, it delivers what it claimed and stops
                crew.stay().await;
                pipeline.push(last);
            } else {
                pipeline.push(batch);
            }
            flowing = true;
        }
        let claim_more = crew.as_ref().is_none_or(|c| c.is_member());
        let step = match pipeline.step(claim_more).await {
            Ok(step) => step,
            Err(err) => {
                let counts = pipeline.take_counts();
                tracing::error!(
                    claimed = counts.claimed,
                    sent = counts.sent,
                    released = counts.released,
                    error = %crate::error::report(&err),
                    "the worker stopped on a store error; jobs in flight are left to the sweeper"
                );
                summary.add(counts, latencies);
                return Err(err);
            }
        };
        grow(&mut crew, &mut pipeline, cfg, deliverer, deadline).await;
        match step {
            pipeline::Step::Claimed => {
                let counts = pipeline.take_counts();
                log_counts(&counts, "claimed as slots freed");
                summary.add(counts, latencies);
                continue;
            }
            pipeline::Step::Idle => {
                flowing = false;
                busy_at = Some(Instant::now());
                let counts = pipeline.take_counts();
                log_counts(&counts, "jobs flowed; the pipeline is empty");
                summary.add(counts, latencies);
            }
        }
        if pipeline.paced_out() {
            // no send slot before the deadline: what is left is for the next invocation,
            // unless this one polls, when it waits a little and claims again
            let now = Instant::now();
            if cfg.poll.is_zero() || now >= poll_until {
                tracing::info!("no send slot left before the deadline; stopping");
                out_of_time = true;
                break;
            }
            tokio::time::sleep(POLL_INTERVAL.min(poll_until - now)).await;
        }
    }
    if let Some(crew) = crew {
        if out_of_time && crew.is_member() {
            crew.hand_off().await;
        } else {
            crew.leave().await;
        }
    }
    Ok(())
}

/// After a claim came back, or the pipeline emptied: may start more workers when a claim since
/// the last time found the queue full, at the rate the calls so far give one worker.
async fn grow(
    crew: &mut Option<&mut Crew<'_>>,
    pipeline: &mut pipeline::Pipeline<'_>,
    cfg: &WorkerConfig,
    deliverer: &dyn Deliverer,
    deadline: Instant,
) {
    let full = pipeline.take_full();
    let Some(crew) = crew.as_deref_mut() else {
        return;
    };
    let latencies = pipeline.latencies();
    let per_worker = latencies
        .mean_ms()
        .map(|ms| cfg.concurrency as f64 * 1000.0 / ms.max(0.001));
    let channels = latencies.channels();
    crew.consider_growing(full, per_worker, (deliverer, &channels), deadline)
        .await;
}

/// The log line of what the pipeline did since the last one.
fn log_counts(counts: &BatchCounts, what: &str) {
    tracing::info!(
        claimed = counts.claimed,
        sent = counts.sent,
        retried = counts.retried,
        dead = counts.dead,
        fenced = counts.fenced,
        released = counts.released,
        "{what}"
    );
}

impl WorkerSummary {
    /// Adds what the pipeline did (and its provider latencies to `latencies`).
    fn add(&mut self, counts: BatchCounts, latencies: &mut Latencies) {
        self.claimed += counts.claimed;
        self.sent += counts.sent;
        self.retried += counts.retried;
        self.held += counts.held;
        self.released += counts.released;
        self.dead += counts.dead;
        self.fenced += counts.fenced;
        self.batches += counts.batches;
        latencies.extend(counts.latencies);
    }
}

/// The function's handler: any JSON event (its content is ignored), the deadline from its
/// Lambda context, then [`run`].
pub async fn handle(
    event: lambda_runtime::LambdaEvent<serde_json::Value>,
    store: &dyn JobStore,
    deliverer: &dyn Deliverer,
    cfg: &WorkerConfig,
) -> Result<WorkerSummary, StoreError> {
    run(
        store,
        deliverer,
        cfg,
        deadline_from_epoch_ms(event.context.deadline),
    )
    .await
}

/// One attempt's result and when it ran.
struct Attempt {
    started_at: chrono::DateTime<Utc>,
    finished_at: chrono::DateTime<Utc>,
    /// How long the provider call took; `None` when no call was made.
    provider_ms: Option<f64>,
    result: Result<String, DeliveryError>,
    /// The provider pushed back (a throttle): held until then, no attempt spent.
    throttled_until: Option<chrono::DateTime<Utc>>,
}

/// What became of one claimed job in a batch.
enum Outcome {
    /// Handed to the provider (or ended without it: a suppressed recipient).
    Tried(Attempt),
    /// Never handed over ([`Deliverer::admit`]): given back untried.
    NotSent(NotNow),
}

/// The span of one delivery: its lines carry the job id and the trace it was created under.
fn delivery_span(job: &ClaimedJob) -> tracing::Span {
    tracing::info_span!(
        "delivery",
        job_id = %job.id,
        trace_id = job.trace_header.as_deref()
    )
}

/// Delivers one job within the provider timeout, once the deliverer admits it (its turn at
/// the provider's pace, which may wait, but never past the time the call needs before
/// `deadline`); a panic becomes a transient error.
async fn attempt(
    deliverer: &dyn Deliverer,
    job: ClaimedJob,
    timeout: Duration,
    deadline: Instant,
    handed: std::sync::Arc<AtomicBool>,
) -> (ClaimedJob, Outcome) {
    if !job.suppressed {
        let max_wait = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(timeout + SAFETY_MARGIN);
        if let Err(not_now) = deliverer.admit(&job, max_wait).await {
            return (job, Outcome::NotSent(not_now));
        }
    }
    let started_at = Utc::now();
    if job.suppressed {
        // never handed to the provider: the recipient bounced or complained meanwhile
        // last_error is the code alone: `suppressed`
        let result = Err(DeliveryError::code_only(SUPPRESSED));
        let finished_at = started_at;
        return (
            job,
            Outcome::Tried(Attempt {
                started_at,
                finished_at,
                provider_ms: None,
                result,
                throttled_until: None,
            }),
        );
    }
    handed.store(true, Ordering::SeqCst);
    let clock = Instant::now();
    let call =
        AssertUnwindSafe(deliverer.deliver(&job).instrument(delivery_span(&job))).catch_unwind();
    let result = match tokio::time::timeout(timeout, call).await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(DeliveryError::new(
                WORKER_PANIC,
                format!("the delivery panicked: {what}"),
            ))
        }
        Err(_) => Err(DeliveryError::timeout(timeout)),
    };
    let provider_ms = Some((clock.elapsed().as_secs_f64() * 1e6).round() / 1e3);
    let throttled_until = match &result {
        Err(err) => deliverer.throttled(&job, err).await,
        Ok(_) => None,
    };
    let attempt = Attempt {
        started_at,
        finished_at: Utc::now(),
        // microsecond precision: the log line and the metric need no more
        provider_ms,
        result,
        throttled_until,
    };
    (job, Outcome::Tried(attempt))
}

/// What the pipeline did since its counts were last taken.
#[derive(Default)]
struct BatchCounts {
    /// Provider calls' latencies (calls never handed to a provider are not in it).
    latencies: Latencies,
    claimed: u64,
    /// Claims that found jobs.
    batches: u64,
    sent: u64,
    retried: u64,
    held: u64,
    released: u64,
    dead: u64,
    fenced: u64,
}

/// Gives back jobs never handed to a provider, untried, grouped by when they are due again
/// (a job without a send slot, or whose call could not finish before the deadline, at once;
/// one of a held channel when the hold ends); how many went back. A failure is logged: the
/// sweeper gives them back later.
async fn give_back(store: &dyn JobStore, jobs: &[pipeline::GiveBack]) -> u64 {
    let mut released = 0;
    let mut groups: std::collections::BTreeMap<Option<chrono::DateTime<Utc>>, Vec<_>> =
        Default::default();
    for (id, token, due) in jobs {
        groups.entry(*due).or_default().push((*id, *token));
    }
    for (due, claims) in groups {
        match store
            .release(Release {
                claims: &claims,
                due,
                now: None,
            })
            .await
        {
            Ok(ids) => released += ids.len() as u64,
            Err(err) => tracing::error!(
                error = %crate::error::report(&err),
                jobs = claims.len(),
                "cannot give back untried jobs; the sweeper will"
            ),
        }
    }
    if released > 0 {
        tracing::info!(
            released,
            "jobs not handed to the provider given back untried"
        );
    }
    released
}

/// Records results (and claims the next batch when `next_size` > 0). A failure is tried once
/// more, on a fresh connection if the old one closed, before the worker gives up.
///
/// The failed call may have committed in part or whole (its answer lost on the way, or the
/// claim failing after the completions committed): the second call records the same results,
/// which applies what did not commit and finds the rest recorded already (the store records
/// an attempt once). It claims nothing: a claim that may have committed is not taken twice,
/// and the loop claims afresh.
async fn record(
    store: &dyn JobStore,
    completions: &[Completion],
    next_size: u32,
) -> Result<(CompleteReport, Vec<ClaimedJob>), StoreError> {
    match store
        .complete_and_claim(CompleteAndClaim {
            completions,
            next_batch: next_size,
            now: None,
        })
        .await
    {
        Ok(done) => Ok(done),
        Err(first) => {
            tracing::warn!(
                error = %crate::error::report(&first),
                "recording results failed; trying once more"
            );
            store
                .complete_and_claim(CompleteAndClaim {
                    completions,
                    next_batch: 0,
                    now: None,
                })
                .await
        }
    }
}

impl BatchCounts {
    /// Adds what one completion statement applied (and fenced) to the counts.
    fn add(&mut self, completions: &[Completion], report: &CompleteReport) {
        self.fenced += report.fenced.len() as u64;
        let applied: std::collections::HashSet<_> = report.applied.iter().collect();
        for c in completions.iter().filter(|c| applied.contains(&c.job_id)) {
            match c.decision {
                Decision::Sent => self.sent += 1,
                Decision::Retry { .. } => self.retried += 1,
                Decision::Hold { .. } => self.held += 1,
                Decision::Dead => self.dead += 1,
            }
        }
        for id in &report.fenced {
            tracing::warn!(job_id = %id, "job was swept and claimed again during delivery; attempt recorded, state left alone");
        }
    }
}

/// Decides one attempt and logs it when a person may need to see it (never a message body;
/// recipients masked).
fn completion(
    job: &ClaimedJob,
    attempt: Attempt,
    now: chrono::DateTime<Utc>,
    rng: &mut impl rand::Rng,
) -> Completion {
    let decision = match attempt.throttled_until {
        // the provider pushed back: not the message's fault, no attempt spent
        Some(at) => Decision::Hold { at },
        None => decide(
            job.attempt,
            job.call,
            job.max_attempts,
            &attempt.result,
            now,
            rng,
        ),
    };
    let (provider_message_id, error_code, error_message) = match &attempt.result {
        Ok(id) => (Some(id.clone()), None, None),
        Err(err) => (None, Some(err.code.clone()), err.row_message()),
    };
    let _span = delivery_span(job).entered();
    match &attempt.result {
        Ok(id) => tracing::info!(
            channel = job.channel.as_str(),
            attempt = job.attempt,
            provider_message_id = id.as_str(),
            latency_ms = attempt.provider_ms,
            "delivered to the provider"
        ),
        Err(err) => log_failure(job, err, decision, attempt.provider_ms),
    }
    Completion {
        job_id: job.id,
        claim_token: job.claim_token,
        call: job.call,
        channel: job.channel,
        decision,
        provider_message_id,
        error_code,
        error_message,
        started_at: attempt.started_at,
        finished_at: attempt.finished_at,
        job_created_at: job.created_at,
    }
}

/// Logs a failed attempt (inside its [`delivery_span`]: job id and trace on the line).
fn log_failure(job: &ClaimedJob, err: &DeliveryError, decision: Decision, latency_ms: Option<f64>) {
    let to = masked_recipient_of(job);
    let class = err.class();
    if class == ErrorClass::Account {
        tracing::error!(
            channel = job.channel.as_str(),
            to,
            attempt = job.attempt,
            latency_ms,
            code = err.code,
            decision = decision.as_str(),
            "the provider refused the account or its configuration; a person must act \
             (jobs are kept and retried every 30 minutes)"
        );
    } else if decision == Decision::Dead {
        tracing::warn!(
            channel = job.channel.as_str(),
            to,
            attempt = job.attempt,
            latency_ms,
            max_attempts = job.max_attempts,
            code = err.code,
            ?class,
            "delivery failed; job is dead"
        );
    } else {
        tracing::info!(
            channel = job.channel.as_str(),
            to,
            attempt = job.attempt,
            latency_ms,
            code = err.code,
            decision = decision.as_str(),
            "delivery failed; will retry"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(batch: u32, concurrency: usize, timeout_ms: u64) -> WorkerConfig {
        WorkerConfig {
            batch_size: batch,
            concurrency,
            provider_timeout: Duration::from_millis(timeout_ms),
            ..WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
        }
    }

    /// Callers spawn the loop (tests run several at once): its future must be Send.
    #[allow(dead_code)]
    fn run_is_send(store: &dyn JobStore, deliverer: &dyn Deliverer, cfg: &WorkerConfig) {
        fn send<T: Send>(_: T) {}
        send(run(store, deliverer, cfg, Instant::now()));
    }

    #[test]
    fn batches_only_start_when_they_can_finish() {
        let c = cfg(100, 16, 10_000);
        let secs = Duration::from_secs;
        assert_eq!(batch_size_for(&c, secs(900)), Some(100));
        assert_eq!(batch_size_for(&c, secs(3 + 70)), Some(100), "7 waves of 16");
        assert_eq!(batch_size_for(&c, secs(3 + 69)), Some(96), "6 waves of 16");
        assert_eq!(batch_size_for(&c, secs(3 + 10)), Some(16));
        assert_eq!(batch_size_for(&c, secs(3 + 9)), None);
        assert_eq!(batch_size_for(&c, secs(2)), None);
        assert_eq!(batch_size_for(&c, Duration::ZERO), None);
        assert_eq!(batch_size_for(&cfg(5, 16, 10_000), secs(60)), Some(5));
    }

    #[test]
    fn deadline_from_the_lambda_context() {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let in_a_minute = deadline_from_epoch_ms(now_ms + 60_000);
        let left = in_a_minute.saturating_duration_since(Instant::now());
        assert!(left > Duration::from_secs(58) && left <= Duration::from_secs(60));
        let past = deadline_from_epoch_ms(now_ms - 1_000);
        assert!(past <= Instant::now());
        for bogus in [0, 600_000] {
            let budget = deadline_from_epoch_ms(bogus).saturating_duration_since(Instant::now());
            assert!(budget > Duration::from_secs(58), "{bogus}: {budget:?}");
        }
    }

    #[test]
    fn config_from_lookup() {
        let read = |pairs: &[(&str, &str)]| {
            let lookup = crate::config::pairs(pairs);
            WorkerConfig::from_lookup(&Vars::new(&lookup))
        };
        let err = read(&[]).unwrap_err().to_string();
        assert!(err.starts_with("EMAIL_FROM is required"), "{err}");

        let email = ("EMAIL_FROM", "noreply@example.com");
        assert_eq!(
            read(&[email]).unwrap(),
            WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
        );

        let c = read(&[
            email,
            ("WORKER_BATCH_SIZE", "25"),
            ("WORKER_CONCURRENCY", "4"),
            ("PROVIDER_TIMEOUT_MS", "2500"),
            ("WORKER_POLL_SECS", "10"),
            ("SMS_SENDER_ID", "Acme"),
            ("SES_CONFIGURATION_SET", "transactional"),
        ])
        .unwrap();
        assert_eq!(c.batch_size, 25);
        assert_eq!(c.concurrency, 4);
        assert_eq!(c.provider_timeout, Duration::from_millis(2500));
        assert_eq!(c.poll, Duration::from_secs(10));
        assert_eq!(c.delivery.sms_sender_id.as_deref(), Some("Acme"));
        assert_eq!(
            c.delivery.ses_configuration_set.as_deref(),
            Some("transactional")
        );

        let err = read(&[email, ("WORKER_CONCURRENCY", "0")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("WORKER_CONCURRENCY"), "{err}");
        assert!(
            read(&[email, ("SMS_SENDER_ID", "not a sender id")])
                .unwrap_err()
                .to_string()
                .contains("SMS_SENDER_ID")
        );
        assert!(
            read(&[("EMAIL_FROM", "noreply")])
                .unwrap_err()
                .to_string()
                .starts_with("EMAIL_FROM=\"noreply\" is invalid")
        );
    }
}
