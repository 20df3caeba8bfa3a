//! 4: accept → provider-call latency: from ingest's 202 to the moment the delivery port is
//! called, with requests arriving at a steady rate.
//!
//! - Polling on: one worker runs `notify_core::worker::run` with `WORKER_POLL_SECS` set, so it
//!   keeps claiming (every `POLL_INTERVAL` when the queue is empty) while requests arrive.
//! - Polling off: the worker runs only when the schedule fires (EventBridge, every minute in
//!   template.yaml) and stops once nothing is due. A minute per tick would make the run long,
//!   so the schedule is scaled down to `period` and measured; each job's latency is split into
//!   the wait for the next tick and the work after it, and the 1-minute figure is the wait
//!   scaled by 60 s / `period` plus the work as measured. Invocation overhead and cold starts
//!   are not modelled.
//!
//! With the wake on (the shipped default), accept → provider is part 13's
//! ([`crate::wake`]), measured from the same instant to the same call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use notify_core::store::JobStore;
use serde::Serialize;
use uuid::Uuid;

use crate::Plan;
use crate::db::Bench;
use crate::ingest::{Requests, accepted_id, new_ingest};
use crate::stats::{Latency, Samples, rounded};
use crate::worked::{RecordingDeliverer, open_stores, run_workers, worker_config, worker_stores};

pub const SCHEDULE: Duration = Duration::from_secs(60);

/// 4: accept → provider call, polling on and off.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AcceptToProvider {
    /// Requests per second through ingest.
    pub rate_per_sec: u32,
    pub polling_on: Latency,
    pub polling_off: Scheduled,
}

/// The plan's rate with polling on for `plan.poll_span`, then off with a tick every
/// `plan.period`.
pub async fn measure(bench: &Bench, plan: &Plan) -> Result<AcceptToProvider> {
    crate::step!(
        "accept → provider: polling on, {} requests/s for {:?}",
        plan.rate,
        plan.poll_span
    );
    let polling_on = polling_on(bench, plan.rate, plan.poll_span).await?;
    crate::step!(
        "accept → provider: polling off, a tick every {:?}",
        plan.period
    );
    let polling_off = polling_off(bench, plan.rate, plan.period, plan.ticks).await?;
    Ok(AcceptToProvider {
        rate_per_sec: plan.rate,
        polling_on: polling_on.latency(),
        polling_off,
    })
}

/// Sends requests through ingest at `rate` per second for `span`; returns accept times.
async fn produce(bench: &Bench, rate: u32, span: Duration) -> Result<HashMap<Uuid, Instant>> {
    let ingest = new_ingest(bench).await?;
    let requests = Requests::new()?;
    let mut accepted = HashMap::new();
    let start = tokio::time::Instant::now();
    let gap = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let mut n = 0u64;
    while start.elapsed() < span {
        tokio::time::sleep_until(start + gap * n as u32).await;
        let req = requests.send(n)?;
        let resp = ingest.handle(req).await;
        let at = Instant::now();
        accepted.insert(accepted_id(resp.status(), resp.body())?, at);
        n += 1;
    }
    Ok(accepted)
}

/// Each accepted job's (accepted, provider called) instants; an error unless every accepted
/// job reached the provider.
pub fn latencies(
    accepted: &HashMap<Uuid, Instant>,
    called: &HashMap<Uuid, Instant>,
) -> Result<Vec<(Instant, Instant)>> {
    let pairs: Vec<_> = accepted
        .iter()
        .filter_map(|(id, a)| called.get(id).map(|c| (*a, *c)))
        .collect();
    ensure!(
        pairs.len() == accepted.len(),
        "{} accepted, {} reached the provider",
        accepted.len(),
        pairs.len()
    );
    Ok(pairs)
}

/// Polling on: one worker polling while requests arrive for `span`.
async fn polling_on(bench: &Bench, rate: u32, span: Duration) -> Result<Samples> {
    bench.truncate().await?;
    let deliverer = Arc::new(RecordingDeliverer::default());
    let stores = worker_stores(bench, 1).await?;
    // WORKER_POLL_SECS = 20 with 20 s (+ the span, + 2 s to drain) left: the worker polls
    // through the whole span, as an invocation whose timeout outlasts the schedule would
    let mut cfg = worker_config(100);
    cfg.poll = Duration::from_secs(20);
    let deadline = Instant::now() + span + Duration::from_secs(2) + cfg.poll;
    let worker = {
        let deliverer = deliverer.clone();
        tokio::spawn(async move { run_workers(stores, &cfg, deliverer, deadline).await })
    };
    let accepted = produce(bench, rate, span).await?;
    worker.await.context("worker task")??;
    let called = deliverer.calls.lock().unwrap_or_else(|e| e.into_inner());
    let pairs = latencies(&accepted, &called)?;
    Ok(Samples::from_ms(
        pairs
            .iter()
            .map(|(a, c)| c.saturating_duration_since(*a).as_secs_f64() * 1000.0)
            .collect(),
    ))
}

/// Polling off: measured at the scaled-down schedule, and projected to the real one.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scheduled {
    /// How the projection is made.
    pub model: String,
    pub scaled_period_secs: f64,
    pub measured_at_scaled_period: Latency,
    pub work_after_tick: Latency,
    pub projected_1min_schedule: Projected,
}

/// The projected 1-minute schedule's median and 99th percentile (ms).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Projected {
    #[serde(serialize_with = "rounded::<1, _>")]
    pub p50_ms: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub p99_ms: f64,
}

/// Polling off: an invocation every `period` (stopping once nothing is due), `ticks` of them
/// (at least 2), while requests arrive during the first `ticks - 1` periods; the last tick
/// delivers what arrived just before the one before it.
async fn polling_off(bench: &Bench, rate: u32, period: Duration, ticks: u32) -> Result<Scheduled> {
    bench.truncate().await?;
    let deliverer = Arc::new(RecordingDeliverer::default());
    let store: Arc<dyn JobStore> = Arc::new(open_stores(bench, 1).await?.pop().context("a store")?);
    let cfg = worker_config(100);
    let first = Instant::now() + period;
    let schedule = {
        let deliverer = deliverer.clone();
        tokio::spawn(async move {
            let mut starts = Vec::new();
            for k in 0..ticks {
                let at = first + period * k;
                tokio::time::sleep_until(at.into()).await;
                starts.push(Instant::now());
                // the Lambda's deadline: the worker's timeout (template default 120 s)
                run_workers(
                    vec![store.clone()],
                    &cfg,
                    deliverer.clone(),
                    Instant::now() + Duration::from_secs(120),
                )
                .await?;
            }
            Ok::<_, anyhow::Error>(starts)
        })
    };
    let accepted = produce(bench, rate, period * ticks.saturating_sub(1).max(1)).await?;
    let starts = schedule.await.context("schedule task")??;
    let called = deliverer.calls.lock().unwrap_or_else(|e| e.into_inner());
    let pairs = latencies(&accepted, &called)?;
    let scale = SCHEDULE.as_secs_f64() / period.as_secs_f64();
    let (mut measured, mut projected, mut work) = (Vec::new(), Vec::new(), Vec::new());
    for (a, c) in pairs {
        // the invocation that delivered it: the last tick at or before the call
        let tick = starts.iter().rev().find(|s| **s <= c).copied().unwrap_or(a);
        let wait = tick.saturating_duration_since(a).as_secs_f64() * 1000.0;
        let after = c.saturating_duration_since(tick.max(a)).as_secs_f64() * 1000.0;
        measured.push(c.saturating_duration_since(a).as_secs_f64() * 1000.0);
        projected.push(wait * scale + after);
        work.push(after);
    }
    let projected = Samples::from_ms(projected);
    Ok(Scheduled {
        model: format!(
            "schedule scaled down to {} s and measured; per job, the wait for the next tick × {} s/{} s + the work after the tick as measured",
            period.as_secs_f64(),
            SCHEDULE.as_secs(),
            period.as_secs_f64()
        ),
        scaled_period_secs: period.as_secs_f64(),
        measured_at_scaled_period: Samples::from_ms(measured).latency(),
        work_after_tick: Samples::from_ms(work).latency(),
        projected_1min_schedule: Projected {
            p50_ms: projected.p50(),
            p99_ms: projected.p99(),
        },
    })
}
