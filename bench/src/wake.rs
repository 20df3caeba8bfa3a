//! 13: the wake, the burst and the fan-out, at the shipped defaults: polling off, wake on,
//! `WORKER_IDLE_MS` 2000, `WORKER_MAX_INVOCATIONS` 4 (unless a row says otherwise), batch
//! 100, `WORKER_CONCURRENCY` 32, each invocation's deadline the worker's timeout (120 s).
//!
//! Requests go through `Ingest::handle` with a `Waker` whose invoker starts worker
//! invocations in-process as Lambda would ([`crate::lambda`]); every provider call waits
//! 30–80 ms, drawn uniformly from a seeded generator, and notes when each job reached it
//! ([`Provider`]). Accept → provider is measured as part 4 measures it: from the moment
//! ingest's 202 is in hand to the provider call.
//!
//! - **Steady**: [`STEADY_RATE`] requests/s through [`STEADY_INGESTS`] ingest instances
//!   taking turns (one alone falls behind 100/s when the machine is busy); accept → provider
//!   p50 and p99, and the invocations it started.
//! - **After idle**: one request with no worker running (the previous one left), a warm
//!   environment started in-process: accept → provider, round after round. The cold figure
//!   is derived, not measured end to end: this warm figure plus the worker binary's cold
//!   start as part 8 measures it ([`crate::cold_start`]; as deployed when measured).
//! - **Burst**: 1,000 requests spread over one second through [`BURST_INGESTS`] ingest
//!   instances at once: the invocations started (wakes, fan-out, hand-offs), counted at the
//!   invoker until the fleet is idle again. How long the requests really took is reported
//!   beside it: a busy machine may not send them within the second.
//! - **Fan-out**: [`crate::fanout`].
//! - **Idle**: a scheduled invocation on an empty queue: the invocations it starts (none),
//!   and how long it lingers.
//!
//! Not modelled: Lambda's own `Invoke` call and queueing (tens of ms in AWS: ingest waits
//! for it, up to `WAKE_WAIT`, before its 202), a cold environment (derived, above), the
//! status events' dispatch beside the deliveries, and the providers' pace (no send-rate
//! limit).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use async_trait::async_trait;
use notify_api::{Ingest, IngestConfig};
use notify_core::delivery::{Deliverer, DeliveryError};
use notify_core::fleet::{FleetConfig, Waker};
use notify_core::store::ClaimedJob;
use notify_postgres::PgStore;
use serde::Serialize;
use uuid::Uuid;

use crate::Plan;
use crate::cold_start::{ColdStart, Setting};
use crate::db::Bench;
use crate::ingest::{Requests, accepted_id};
use crate::lambda::{Lambda, Starts, WORKER_TIMEOUT};
use crate::latency::latencies;
use crate::stats::{Latency, Samples, rounded, rounded_opt};
use crate::worked::{UniformWait, message_id};

/// Requests per second of the steady run.
pub const STEADY_RATE: u32 = 100;
/// Jobs a worker claims at once (`WORKER_BATCH_SIZE`, the default).
pub const BATCH: u32 = 100;
/// The provider call's wait, drawn uniformly between these (ms).
pub const PROVIDER_MS: (f64, f64) = (30.0, 80.0);
/// Ingest instances sending the steady run, and the burst, at once (as concurrent Lambda
/// environments of ingest).
pub const STEADY_INGESTS: usize = 4;
pub const BURST_INGESTS: usize = 16;

/// 13: everything this part measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WakeRuns {
    pub settings: Settings,
    pub steady: Steady,
    pub after_idle: AfterIdle,
    pub burst: Burst,
    pub fan_out: crate::fanout::FanOut,
    pub idle: Idle,
    /// How long this part took.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub secs: f64,
}

/// The settings every row runs at, unless it says otherwise.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Settings {
    pub polling: &'static str,
    pub wake: &'static str,
    pub worker_idle_ms: u64,
    pub worker_max_invocations: u32,
    pub batch: u32,
    pub concurrency: usize,
    pub worker_timeout_secs: u64,
    /// The provider call's wait, uniform between these (ms), from a seeded generator.
    pub provider_ms: [f64; 2],
    /// How invocations are started, and what is not modelled.
    pub model: String,
}

impl Settings {
    /// The shipped defaults this part runs at.
    pub fn shipped() -> Self {
        let fleet = FleetConfig::default();
        Self {
            polling: "off",
            wake: "on",
            worker_idle_ms: fleet.idle.as_millis() as u64,
            worker_max_invocations: fleet.max_invocations,
            batch: BATCH,
            concurrency: crate::worked::worker_config(BATCH).concurrency,
            worker_timeout_secs: WORKER_TIMEOUT.as_secs(),
            provider_ms: [PROVIDER_MS.0, PROVIDER_MS.1],
            model: "each invoke starts an in-process invocation on a warm environment (its own \
                    connection), joining with the wake's event and running run_in to the 120 s \
                    timeout; Lambda's own Invoke time and queueing are not modelled, nor the \
                    status events' dispatch, nor a provider send-rate limit"
                .into(),
        }
    }
}

/// Accept → provider at a steady rate.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Steady {
    pub rate_per_sec: u32,
    pub ingest_instances: usize,
    /// From the first request's planned send to the last 202.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub secs: f64,
    /// The requests sent over `secs`: below the rate when ingest could not keep up.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub achieved_per_sec: f64,
    pub accept_to_provider: Latency,
    /// How long ingest took to answer, the wake included.
    pub ingest_answer: Latency,
    /// The invocations started meanwhile (one wake, when the worker stays throughout).
    pub invocations: Starts,
    /// Environments opened because every warm one was busy (0: every start was warm).
    pub environments_opened: u64,
}

/// A single request with no worker running.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AfterIdle {
    pub rounds: usize,
    /// Accept → provider, a warm environment started in-process.
    pub warm: Latency,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub warm_max_ms: f64,
    /// The invocations the rounds started (one each).
    pub invocations: Starts,
    pub cold: ColdDerived,
}

/// The after-idle figure with a cold worker: derived, not measured end to end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ColdDerived {
    /// How the figure is made, and from what.
    pub derived: String,
    /// The worker binary's cold start (spawn to its first poll for an event), part 8.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub worker_init_median_ms: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub worker_init_max_ms: Option<f64>,
    /// The warm median + the init's median.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub p50_ms: Option<f64>,
    /// The warm maximum + the init's maximum.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub max_ms: Option<f64>,
}

/// Many requests within a second.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Burst {
    pub requests: u64,
    pub ingest_instances: usize,
    /// From the first request's planned send to the last 202.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub secs: f64,
    /// Every invocation started until the fleet was idle again: the target's figure.
    pub invocations: Starts,
    /// The most invocations running at once.
    pub peak_running: usize,
    pub accept_to_provider: Latency,
    pub environments_opened: u64,
}

/// Nothing posted: a scheduled invocation on an empty queue.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Idle {
    /// The schedule's invocations run (not counted as starts).
    pub scheduled: u64,
    /// The invocations started beyond the schedule's: the target's figure (0).
    pub invocations: Starts,
    pub claimed: u64,
    /// How long the scheduled invocation ran: its linger (`WORKER_IDLE_MS`) and its claims.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub ran_ms: f64,
}

/// The provider of this part: waits 30–80 ms (uniform, seeded) and notes when each job
/// first reached it, and any job that reached it again.
pub struct Provider {
    waits: UniformWait,
    calls: Mutex<HashMap<Uuid, Instant>>,
    repeats: AtomicU64,
}

impl Provider {
    pub fn new() -> Self {
        Self {
            waits: UniformWait::new(PROVIDER_MS.0, PROVIDER_MS.1),
            calls: Mutex::new(HashMap::new()),
            repeats: AtomicU64::new(0),
        }
    }

    /// When each job first reached it.
    pub fn calls(&self) -> HashMap<Uuid, Instant> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Calls for a job that had reached it already.
    pub fn repeats(&self) -> u64 {
        self.repeats.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Deliverer for Provider {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        let now = Instant::now();
        let first = {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            calls.insert(job.id, now).is_none()
        };
        if !first {
            self.repeats.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(self.waits.wait()).await;
        Ok(message_id())
    }
}

/// Requests sent through ingest instances at a set pace, as they were answered.
struct Sent {
    /// Each job, and when ingest's 202 was in hand.
    accepted: HashMap<Uuid, Instant>,
    /// How long each request took to be answered (`Ingest::handle`, the wake included).
    answered: Samples,
    /// From the first request's planned send to the last 202, in seconds.
    secs: f64,
    /// The instances, to send more through.
    ingests: Vec<Ingest>,
}

/// `requests` requests spread evenly over `over`, request k at k × over / requests from the
/// start, on instance k mod the instances' count (each instance sends its own in order, so
/// one that falls behind sends the rest as soon as it can); every request is built before
/// the clock starts, and ids never repeat a previous call's (`first`).
async fn send_paced(
    ingests: Vec<Ingest>,
    first: u64,
    requests: u64,
    over: Duration,
) -> Result<Sent> {
    let build = Requests::new()?;
    let instances = ingests.len().max(1);
    let gap = over.as_secs_f64() / requests.max(1) as f64;
    let mut planned = Vec::with_capacity(instances);
    for j in 0..instances as u64 {
        let mine: Vec<(u64, lambda_http::Request)> = (j..requests)
            .step_by(instances)
            .map(|k| Ok((k, build.send(first + k)?)))
            .collect::<Result<_>>()?;
        planned.push(mine);
    }
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let mut tasks = Vec::with_capacity(instances);
    for (ingest, mine) in ingests.into_iter().zip(planned) {
        tasks.push(tokio::spawn(async move {
            let mut accepted = Vec::with_capacity(mine.len());
            let mut answered = Samples::new();
            for (k, req) in mine {
                tokio::time::sleep_until(start + Duration::from_secs_f64(gap * k as f64)).await;
                let sent = Instant::now();
                let resp = ingest.handle(req).await;
                let at = Instant::now();
                answered.push(at - sent);
                accepted.push((accepted_id(resp.status(), resp.body())?, at));
            }
            anyhow::Ok((ingest, accepted, answered))
        }));
    }
    let mut sent = Sent {
        accepted: HashMap::new(),
        answered: Samples::new(),
        secs: 0.0,
        ingests: Vec::with_capacity(instances),
    };
    for task in tasks {
        let (ingest, accepted, answered) = task.await.context("an ingest task")??;
        sent.ingests.push(ingest);
        sent.accepted.extend(accepted);
        sent.answered.extend(answered);
    }
    let last = sent.accepted.values().max().copied();
    sent.secs = last.map_or(0.0, |l| {
        l.saturating_duration_since(start.into_std()).as_secs_f64()
    });
    Ok(sent)
}

/// Accept → provider of every accepted job (each must have reached the provider).
fn to_provider(accepted: &HashMap<Uuid, Instant>, provider: &Provider) -> Result<Latency> {
    let pairs = latencies(accepted, &provider.calls())?;
    Ok(Samples::from_ms(
        pairs
            .iter()
            .map(|(a, c)| c.saturating_duration_since(*a).as_secs_f64() * 1000.0)
            .collect(),
    )
    .latency())
}

/// `n` ingest instances waking through `lambda`.
async fn waking_ingests(bench: &Bench, lambda: &Arc<Lambda>, n: usize) -> Result<Vec<Ingest>> {
    let mut ingests = Vec::with_capacity(n);
    for _ in 0..n {
        ingests.push(waking_ingest(bench, lambda).await?);
    }
    Ok(ingests)
}

/// An ingest instance as the function builds it with `WORKER_FUNCTION_NAME` set: its own
/// store (one connection), waking through `lambda`.
pub async fn waking_ingest(bench: &Bench, lambda: &Arc<Lambda>) -> Result<Ingest> {
    let store = Arc::new(
        PgStore::connect(bench.config.clone())
            .await
            .context("open ingest's store")?,
    );
    Ok(Ingest::new(store.clone(), IngestConfig::default())
        .with_waker(Waker::new(store, lambda.invoker())))
}

/// The part: steady, after idle, burst, fan-out, idle. `cold` is part 8's, for the derived
/// cold figure.
pub async fn measure(bench: &Bench, plan: &Plan, cold: &ColdStart) -> Result<WakeRuns> {
    let started = Instant::now();
    crate::step!(
        "wake: {STEADY_RATE} requests/s for {:?}, then {} requests after idle",
        plan.wake_span,
        plan.wake_idle_rounds
    );
    let (steady, mut after_idle) = steady_and_after_idle(bench, plan).await?;
    after_idle.cold = derive_cold(&after_idle, cold);
    crate::step!(
        "wake: a burst of {} requests within a second through {BURST_INGESTS} ingest instances",
        plan.burst_requests
    );
    let burst = burst(bench, plan.burst_requests).await?;
    let fan_out = crate::fanout::measure(bench, plan).await?;
    crate::step!("wake: a scheduled invocation on an empty queue");
    let idle = idle(bench).await?;
    Ok(WakeRuns {
        settings: Settings::shipped(),
        steady,
        after_idle,
        burst,
        fan_out,
        idle,
        secs: started.elapsed().as_secs_f64(),
    })
}

/// The shipped fleet settings, and a Lambda with a warm environment for each invocation
/// the fleet may run and one more (a worker finishing as its successor starts).
async fn shipped_lambda(bench: &Bench, provider: Arc<Provider>) -> Result<Arc<Lambda>> {
    let fleet = FleetConfig::default();
    let warm = fleet.max_invocations as usize + 1;
    Lambda::new(bench, warm, provider, BATCH, fleet).await
}

/// The steady run, then the rounds after idle on the same (warm) ingest and environments.
async fn steady_and_after_idle(bench: &Bench, plan: &Plan) -> Result<(Steady, AfterIdle)> {
    bench.truncate().await?;
    let provider = Arc::new(Provider::new());
    let lambda = shipped_lambda(bench, provider.clone()).await?;
    let ingests = waking_ingests(bench, &lambda, STEADY_INGESTS).await?;
    let requests = (plan.wake_span.as_secs_f64() * f64::from(STEADY_RATE)).round() as u64;
    let sent = send_paced(ingests, 0, requests, plan.wake_span).await?;
    lambda.settled(bench).await?;
    let steady_starts = Starts::of(&lambda.invocations());
    let steady = Steady {
        rate_per_sec: STEADY_RATE,
        ingest_instances: STEADY_INGESTS,
        secs: sent.secs,
        achieved_per_sec: requests as f64 / sent.secs,
        accept_to_provider: to_provider(&sent.accepted, &provider)?,
        ingest_answer: sent.answered.latency(),
        invocations: steady_starts,
        environments_opened: lambda.opened(),
    };

    // after idle: the fleet settled (every worker left, no slot held) before each request
    let ingest = sent.ingests.first().context("an ingest instance")?;
    let build = Requests::new()?;
    let mut warm = Samples::new();
    for round in 0..plan.wake_idle_rounds {
        let req = build.send(requests + round as u64)?;
        let resp = ingest.handle(req).await;
        let accepted = Instant::now();
        let id = accepted_id(resp.status(), resp.body())?;
        lambda.settled(bench).await?;
        let called = *provider
            .calls()
            .get(&id)
            .context("a request after idle never reached the provider")?;
        warm.push(called.saturating_duration_since(accepted));
    }
    let all = Starts::of(&lambda.invocations());
    ensure!(
        provider.repeats() == 0,
        "{} jobs reached the provider twice",
        provider.repeats()
    );
    let after_idle = AfterIdle {
        rounds: plan.wake_idle_rounds,
        warm: warm.latency(),
        warm_max_ms: warm.quantile(1.0),
        invocations: Starts {
            total: all.total - steady_starts.total,
            wake: all.wake - steady_starts.wake,
            backlog: all.backlog - steady_starts.backlog,
            hand_off: all.hand_off - steady_starts.hand_off,
        },
        cold: ColdDerived::default(),
    };
    Ok((steady, after_idle))
}

/// The after-idle figure with a cold worker: the warm figure plus the worker binary's cold
/// start from part 8 (as deployed when measured, else with migrations off).
fn derive_cold(after_idle: &AfterIdle, cold: &ColdStart) -> ColdDerived {
    let worker = |setting| {
        cold.inits
            .iter()
            .find(|i| i.function == "worker" && i.setting == setting && i.init.runs > 0)
    };
    let (init, which) = match worker(Setting::AsDeployed) {
        Some(i) => (Some(i), "as deployed (secret, TLS)"),
        None => (worker(Setting::MigrationsOff), "migrations off"),
    };
    let Some(init) = init else {
        return ColdDerived {
            derived: "not measured: part 8 measured no worker cold start in this run".into(),
            ..ColdDerived::default()
        };
    };
    ColdDerived {
        derived: format!(
            "derived, not measured end to end: the warm figure + the worker binary's cold start \
             (spawn to its first poll for an event, part 8, {which}, {} runs, {} build)",
            init.init.runs, cold.profile
        ),
        worker_init_median_ms: Some(init.init.median_ms),
        worker_init_max_ms: Some(init.init.max_ms),
        p50_ms: Some(after_idle.warm.p50_ms + init.init.median_ms),
        max_ms: Some(after_idle.warm_max_ms + init.init.max_ms),
    }
}

/// `requests` requests spread evenly over one second, through [`BURST_INGESTS`] instances
/// at once.
async fn burst(bench: &Bench, requests: u64) -> Result<Burst> {
    bench.truncate().await?;
    let provider = Arc::new(Provider::new());
    let lambda = shipped_lambda(bench, provider.clone()).await?;
    let ingests = waking_ingests(bench, &lambda, BURST_INGESTS).await?;
    let sent = send_paced(ingests, 0, requests, Duration::from_secs(1)).await?;
    lambda.settled(bench).await?;
    let counts = bench.counts().await?;
    ensure!(
        counts.sent == requests as i64 && provider.repeats() == 0,
        "burst: {requests} requests, {} sent, {} reached the provider twice",
        counts.sent,
        provider.repeats()
    );
    Ok(Burst {
        requests,
        ingest_instances: BURST_INGESTS,
        secs: sent.secs,
        invocations: Starts::of(&lambda.invocations()),
        peak_running: lambda.peak().0,
        accept_to_provider: to_provider(&sent.accepted, &provider)?,
        environments_opened: lambda.opened(),
    })
}

/// One scheduled invocation on an empty queue, to its end.
async fn idle(bench: &Bench) -> Result<Idle> {
    bench.truncate().await?;
    let lambda = shipped_lambda(bench, Arc::new(Provider::new())).await?;
    lambda.schedule();
    lambda.settled(bench).await?;
    let all = lambda.invocations();
    let scheduled = all
        .iter()
        .find(|i| i.cause == crate::lambda::Cause::Schedule)
        .context("the scheduled invocation")?;
    let (ended, work, _) = scheduled
        .ended
        .context("the scheduled invocation did not end")?;
    Ok(Idle {
        scheduled: 1,
        invocations: Starts::of(&all),
        claimed: work.claimed,
        ran_ms: ended.duration_since(scheduled.started_at).as_secs_f64() * 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cold_start::{Init, Spread};

    fn after_idle(p50_ms: f64, max_ms: f64) -> AfterIdle {
        AfterIdle {
            rounds: 3,
            warm: Latency {
                n: 3,
                p50_ms,
                p99_ms: max_ms,
            },
            warm_max_ms: max_ms,
            ..AfterIdle::default()
        }
    }

    fn init(setting: Setting, median_ms: f64, max_ms: f64) -> Init {
        Init {
            function: "worker",
            setting,
            migrate_on_start: false,
            init: Spread {
                runs: 5,
                median_ms,
                max_ms,
            },
            connected_at_init: 5,
        }
    }

    #[test]
    fn the_cold_figure_adds_the_workers_cold_start_as_deployed_when_measured() {
        let cold = ColdStart {
            inits: vec![
                init(Setting::MigrationsOff, 40.0, 60.0),
                init(Setting::AsDeployed, 120.0, 200.0),
            ],
            ..ColdStart::default()
        };
        let d = derive_cold(&after_idle(90.0, 150.0), &cold);
        assert_eq!((d.p50_ms, d.max_ms), (Some(210.0), Some(350.0)));
        assert!(d.derived.starts_with("derived"), "{}", d.derived);
        assert!(d.derived.contains("as deployed"), "{}", d.derived);
        let off_only = ColdStart {
            inits: vec![init(Setting::MigrationsOff, 40.0, 60.0)],
            ..ColdStart::default()
        };
        let d = derive_cold(&after_idle(90.0, 150.0), &off_only);
        assert_eq!(d.p50_ms, Some(130.0));
        assert!(d.derived.contains("migrations off"), "{}", d.derived);
    }

    #[test]
    fn without_a_cold_start_the_cold_figure_says_it_was_not_measured() {
        let d = derive_cold(&after_idle(90.0, 150.0), &ColdStart::default());
        assert_eq!((d.p50_ms, d.max_ms), (None, None));
        assert!(d.derived.starts_with("not measured"), "{}", d.derived);
    }
}
