//! What the worker fleet's scenarios ([`super::linger`], [`super::lost_wakes`],
//! [`super::fan_out`]) share: requests timed one by one, each job's first claim and the
//! invocation that made it, the slots held, and the wake metrics in the logs.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::apigw::{ApiRequest, Version};
use crate::faults::api;
use crate::faults::process::{Function, Launcher};
use crate::faults::runtime::{Ledger, Span};

/// How soon a job due now must be claimed when a worker runs or a wake can start one: the
/// shipped defaults promise about a second (invariant 15); this allows for a debug build on
/// two busy cores, an invocation's cold path and the emulator.
pub const CLAIM_WITHIN: Duration = Duration::from_secs(3);

/// One request through ingest, as its caller saw it.
#[derive(Debug, Clone)]
pub struct Posted {
    /// The accepted job's id (202 only).
    pub id: Option<Uuid>,
    pub status: u16,
    pub latency: Duration,
    /// When the answer arrived: the job was committed by then.
    pub answered: DateTime<Utc>,
}

/// Posts `body` for `org` through `ingest`, waiting at most `wait` for the answer.
pub async fn post(ingest: &Function, body: &Value, org: Uuid, wait: Duration) -> Posted {
    let event = ApiRequest::post(Version::V2, body).org(org).event();
    let answer = api::send_event_within(ingest, &event, wait).await;
    Posted {
        id: (answer.status == 202).then(|| answer.id()).flatten(),
        status: answer.status,
        latency: answer.latency,
        answered: Utc::now(),
    }
}

/// A job's first claim: when, and by which process.
#[derive(Debug, Clone)]
pub struct FirstClaim {
    pub at: DateTime<Utc>,
    pub holder: String,
}

/// Every job's first claim, from the claim log ([`crate::faults::claims::install`]).
pub async fn first_claims(client: &Client) -> HashMap<Uuid, FirstClaim> {
    client
        .query(
            "SELECT DISTINCT ON (job_id) job_id, claimed_at, holder
             FROM faults_claims ORDER BY job_id, claimed_at",
            &[],
        )
        .await
        .expect("read the first claims")
        .iter()
        .map(|r| {
            let claim = FirstClaim {
                at: r.get(1),
                holder: r.get(2),
            };
            (r.get(0), claim)
        })
        .collect()
}

/// `job`'s first claim, once there is one.
pub async fn first_claim(client: &Client, job: Uuid) -> Option<FirstClaim> {
    client
        .query_opt(
            "SELECT claimed_at, holder FROM faults_claims WHERE job_id = $1
             ORDER BY claimed_at LIMIT 1",
            &[&job],
        )
        .await
        .expect("read a first claim")
        .map(|r| FirstClaim {
            at: r.get(0),
            holder: r.get(1),
        })
}

/// Jobs of `ids` not claimed yet.
pub async fn unclaimed(client: &Client, ids: &[Uuid]) -> u64 {
    client
        .query_one(
            "SELECT count(*) FROM unnest($1::uuid[]) AS a(id)
             WHERE NOT EXISTS (SELECT 1 FROM faults_claims c WHERE c.job_id = a.id)",
            &[&ids],
        )
        .await
        .expect("count the unclaimed jobs")
        .get::<_, i64>(0) as u64
}

/// The invocation of `process` that was running at `at`.
pub fn invocation_at<'a>(spans: &'a [Span], process: &str, at: DateTime<Utc>) -> Option<&'a Span> {
    spans.iter().find(|s| {
        s.process == process && s.picked <= at && s.ended.is_none_or(|(end, _)| at <= end)
    })
}

/// Why the invocation that made `claim` was started: a wake's reason, `None` when the suite
/// invoked it itself (the schedule) or no invocation of its process ran then.
pub fn woken_by(ledger: &Ledger, spans: &[Span], claim: &FirstClaim) -> Option<String> {
    invocation_at(spans, &claim.holder, claim.at).and_then(|s| ledger.wake_reason(&s.invocation))
}

/// Seconds from `from` to `to` (negative when `to` came first).
pub fn secs_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds() as f64 / 1000.0
}

/// Polls `probe` every `every` until it answers, up to `wait`.
pub async fn poll<T, F, Fut>(wait: Duration, every: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(found) = probe().await {
            return Some(found);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// The worker slots held now (`until` ahead) and the highest of them (0: none).
pub async fn slots_held(client: &Client) -> (u64, i32) {
    let r = client
        .query_one(
            "SELECT count(*) FILTER (WHERE until > clock_timestamp()),
                    coalesce(max(slot) FILTER (WHERE until > clock_timestamp()), 0)
             FROM worker_slots",
            &[],
        )
        .await
        .expect("count the slots held");
    (r.get::<_, i64>(0) as u64, r.get(1))
}

/// Jobs due now that no worker holds.
pub async fn due_unclaimed(client: &Client) -> u64 {
    crate::count(
        client,
        "SELECT count(*) FROM job_queue
         WHERE claim_token IS NULL AND next_attempt_at <= now()",
    )
    .await as u64
}

/// Each process's open claims (claimed by it, not ended) and the jobs it completed itself
/// since `since`, with the last completion's time.
#[derive(Debug, Default, Clone)]
pub struct Holding {
    pub open: u64,
    pub completed: u64,
    pub last_completed: Option<DateTime<Utc>>,
}

/// What `process` holds and has completed since `since`, from the claim log.
pub async fn holding(client: &Client, process: &str, since: DateTime<Utc>) -> Holding {
    let r = client
        .query_one(
            "SELECT count(*) FILTER (WHERE ended_at IS NULL),
                    count(*) FILTER (WHERE ended_by = holder),
                    max(ended_at) FILTER (WHERE ended_by = holder)
             FROM faults_claims WHERE holder = $1 AND claimed_at >= $2",
            &[&process, &since],
        )
        .await
        .expect("what a process holds");
    Holding {
        open: r.get::<_, i64>(0) as u64,
        completed: r.get::<_, i64>(1) as u64,
        last_completed: r.get(2),
    }
}

/// The fleet's metrics (`WakeSent`, `WakeFailed`) in the EMF lines the processes `names`
/// logged, by metric and `Reason`.
pub fn wake_metrics(launcher: &Launcher, names: &[String]) -> HashMap<(String, String), u64> {
    let mut counts = HashMap::new();
    for name in names {
        let log = std::fs::read_to_string(launcher.log_path(name)).unwrap_or_default();
        for line in log.lines() {
            let Some(published) = notify_core::telemetry::emf::published(line) else {
                continue;
            };
            let document: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            let reason = document
                .get("Reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            for (metric, _) in published {
                if notify_core::fleet::FLEET_METRICS.contains(&metric.as_str()) {
                    *counts.entry((metric, reason.clone())).or_insert(0) += 1;
                }
            }
        }
    }
    counts
}

/// A uniformly random duration in `[from, to)`.
pub fn random_between(from: Duration, to: Duration) -> Duration {
    let span = to.saturating_sub(from).as_millis().max(1) as u64;
    from + Duration::from_millis((Uuid::new_v4().as_u128() >> 64) as u64 % span)
}
