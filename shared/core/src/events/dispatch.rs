//! The worker's second step: after its deliveries, it publishes the recorded events to the
//! bus and posts them to the organizations' webhook endpoints.
//!
//! The bus reads the events in the order of their transactions, after a cursor that one
//! worker at a time holds under a claim token and moves past each batch it published: an
//! event costs the hot path its insert alone. The events the bus refused, and the webhook
//! deliveries, are claimed like jobs: a statement takes due rows with `FOR UPDATE SKIP
//! LOCKED` and stamps a fresh claim token. Each claim commits, and every later write is
//! conditioned on its token; no transaction is open during a call. A worker that dies
//! between the call and the write leaves the cursor to the next claim after
//! [`CURSOR_LEASE`], and its other claims to the sweeper, which makes them due again: an
//! event is published, and posted to each endpoint, at least once.
//!
//! A slow or failing endpoint delays nobody else: at most [`EventsConfig::per_endpoint`] of
//! one endpoint's deliveries are claimed at once, each call has its own time limit, and the
//! calls of a claim run side by side.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use rand::Rng;

use super::{EventBus, EventStore, Published, WebhookRequest, WebhookResult, WebhookSender};
use crate::config::{ConfigError, Vars};
use crate::store::StoreError;

/// The waits after each failed webhook attempt (about: each is stretched by up to a tenth at
/// random). After the last, the next failure is the delivery's end: `dead`.
pub const WEBHOOK_RETRY_SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// Attempts a webhook delivery gets: the first and one per step of the schedule.
pub const WEBHOOK_MAX_ATTEMPTS: i32 = WEBHOOK_RETRY_SCHEDULE.len() as i32 + 1;

/// Events claimed for the bus at once.
pub const BUS_BATCH: u32 = 100;

/// How long a reader may hold the bus's cursor, by default, before the next claim takes it
/// to be lost (a worker killed while publishing): the stream waits at most this long for it.
/// A round of calls takes far less (each call quick, three at most per entry); a reader
/// slower than this has its batch published again by the next (at least once), its
/// completion fenced.
pub const CURSOR_LEASE: Duration = Duration::from_secs(30);

/// Time kept free before the deadline besides the calls: completing and answering Lambda.
const MARGIN: Duration = Duration::from_secs(2);
/// The longest a round of `PutEvents` calls may take (three calls at most per entry, each
/// quick): the bus is not asked again with less time left.
const BUS_ROUND: Duration = Duration::from_secs(3);
/// The least time worth starting a round with, past the margin.
const MIN_CALL: Duration = Duration::from_secs(1);

/// The dispatch settings, from the worker's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// `EVENT_BUS_NAME`: where events are published; unset, none are.
    pub bus_name: Option<String>,
    /// `WEBHOOK_TIMEOUT_MS` (default 10000): one webhook call's time limit.
    pub webhook_timeout: Duration,
    /// `WEBHOOK_CONCURRENCY` (default 16): webhook calls in flight at once, and the
    /// deliveries claimed at once (so a round ends within one call's time limit).
    pub concurrency: usize,
    /// `WEBHOOK_PER_ENDPOINT` (default 4): one endpoint's deliveries claimed at once.
    pub per_endpoint: u32,
    /// `WEBHOOK_ALLOW_PRIVATE_ADDRESSES` (default false): allow `http://` and private,
    /// loopback and link-local addresses. For local use only.
    pub allow_private: bool,
    /// `EVENT_CURSOR_LEASE_SECS` (default 30, [`CURSOR_LEASE`]): how long the bus's stream
    /// waits for a reader that took it and never moved it on.
    pub cursor_lease: Duration,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            bus_name: None,
            webhook_timeout: Duration::from_secs(10),
            concurrency: 16,
            per_endpoint: 4,
            allow_private: false,
            cursor_lease: CURSOR_LEASE,
        }
    }
}

impl EventsConfig {
    /// Reads `EVENT_BUS_NAME`, `EVENT_CURSOR_LEASE_SECS`, `WEBHOOK_TIMEOUT_MS`,
    /// `WEBHOOK_CONCURRENCY`, `WEBHOOK_PER_ENDPOINT` and `WEBHOOK_ALLOW_PRIVATE_ADDRESSES`.
    pub fn from_lookup(vars: &Vars) -> Result<Self, ConfigError> {
        Ok(Self {
            bus_name: vars.optional("EVENT_BUS_NAME"),
            webhook_timeout: Duration::from_millis(vars.parse_or(
                "WEBHOOK_TIMEOUT_MS",
                10_000u64,
                100..=30_000,
            )?),
            concurrency: vars.parse_or("WEBHOOK_CONCURRENCY", 16usize, 1..=256)?,
            per_endpoint: vars.parse_or("WEBHOOK_PER_ENDPOINT", 4u32, 1..=100)?,
            allow_private: vars.flag("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", false)?,
            cursor_lease: Duration::from_secs(vars.parse_or(
                "EVENT_CURSOR_LEASE_SECS",
                CURSOR_LEASE.as_secs(),
                1..=900,
            )?),
        })
    }
}

/// What one dispatch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DispatchSummary {
    /// Events the bus took.
    pub published: u64,
    /// Events the bus refused this time (published again later).
    pub publish_failed: u64,
    pub webhooks_delivered: u64,
    /// Attempts that failed (retried later, or `dead`).
    pub webhooks_failed: u64,
    /// Deliveries that ended `dead` (every attempt failed).
    pub webhooks_dead: u64,
    /// Endpoints disabled after failing for five days.
    pub endpoints_disabled: u64,
    /// Results not recorded: their claim had been swept meanwhile (the next claim re-sends).
    pub fenced: u64,
    /// The oldest due webhook delivery's age when the dispatch ended, in seconds.
    pub webhook_backlog_age_secs: u64,
}

impl EventsConfig {
    /// The time the dispatch keeps for itself at the end of an invocation: with a bus, a
    /// round of bus calls; with webhook endpoints, a round of webhook calls; and a margin
    /// more than each round asks before it starts. Nothing without either: the deliveries
    /// then keep the whole invocation.
    pub fn reserve(&self, webhooks: bool) -> Duration {
        let bus = self.bus_name.is_some();
        if !bus && !webhooks {
            return Duration::ZERO;
        }
        let bus_round = if bus { BUS_ROUND } else { Duration::ZERO };
        let webhook_round = if webhooks {
            self.webhook_timeout
        } else {
            Duration::ZERO
        };
        bus_round + webhook_round + 2 * MARGIN
    }

    /// The deadline the deliveries run to: the invocation's `deadline` less
    /// [`Self::reserve`], but never less than two thirds of the time left, so a short
    /// invocation still delivers (its dispatch then cuts its calls short: [`dispatch`]). So
    /// however busy the queue, the dispatch always gets its turn.
    pub fn delivery_deadline(&self, deadline: Instant, webhooks: bool) -> Instant {
        let remaining = deadline.saturating_duration_since(Instant::now());
        deadline
            .checked_sub(self.reserve(webhooks).min(remaining / 3))
            .unwrap_or_else(Instant::now)
    }
}

impl DispatchSummary {
    /// Adds a later round's counts; the backlog's age is the later round's.
    pub fn add(&mut self, later: DispatchSummary) {
        self.published += later.published;
        self.publish_failed += later.publish_failed;
        self.webhooks_delivered += later.webhooks_delivered;
        self.webhooks_failed += later.webhooks_failed;
        self.webhooks_dead += later.webhooks_dead;
        self.endpoints_disabled += later.endpoints_disabled;
        self.fenced += later.fenced;
        self.webhook_backlog_age_secs = later.webhook_backlog_age_secs;
    }

    /// The invocation's event metrics as one Embedded Metric Format line
    /// ([`crate::telemetry::emf::EVENT_METRICS`]).
    pub fn metric_line(&self, timestamp_ms: i64) -> String {
        crate::telemetry::emf::Emf::new(timestamp_ms)
            .count("EventsPublished", self.published)
            .count("WebhookDelivered", self.webhooks_delivered)
            .count("WebhookFailed", self.webhooks_failed)
            .metric(
                "WebhookBacklogAge",
                crate::telemetry::emf::Unit::Seconds,
                self.webhook_backlog_age_secs as f64,
            )
            .line()
    }
}

/// The wait after a failed webhook attempt `attempt` (1 for the first), or `None` when it
/// was the last.
pub fn webhook_retry_after(attempt: i32, rng: &mut impl Rng) -> Option<Duration> {
    let step = *WEBHOOK_RETRY_SCHEDULE.get(usize::try_from(attempt.max(1) - 1).ok()?)?;
    let millis = step.as_millis() as u64;
    Some(Duration::from_millis(
        rng.random_range(millis..=millis + millis / 10),
    ))
}

/// The wait before the bus is asked again for an event it refused `attempts` times: 5 s,
/// doubling, at most 5 min. The bus has no `dead`: an event is kept, and tried, until the
/// sweeper's retention drops it.
pub fn bus_retry_after(attempts: i32) -> Duration {
    let exponent = attempts.saturating_sub(1).clamp(0, 6) as u32;
    (Duration::from_secs(5) * 2u32.pow(exponent)).min(Duration::from_secs(300))
}

fn at(now: DateTime<Utc>, wait: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX)
}

/// Publishes and posts whatever is due until nothing is, or `deadline` is too near for
/// another round, then prints the metric line. Call failures are recorded, not returned: only
/// a store error stops it.
pub async fn dispatch(
    store: &dyn EventStore,
    bus: Option<&dyn EventBus>,
    hooks: &dyn WebhookSender,
    cfg: &EventsConfig,
    deadline: Instant,
) -> Result<DispatchSummary, StoreError> {
    let summary = dispatch_round(store, bus, hooks, cfg, deadline).await?;
    // on stdout, where CloudWatch reads it
    println!("{}", summary.metric_line(Utc::now().timestamp_millis()));
    Ok(summary)
}

/// [`dispatch`] without the metric line: one of the rounds a worker runs while it delivers
/// (its caller adds them up with [`DispatchSummary::add`] and prints one line).
pub async fn dispatch_round(
    store: &dyn EventStore,
    bus: Option<&dyn EventBus>,
    hooks: &dyn WebhookSender,
    cfg: &EventsConfig,
    deadline: Instant,
) -> Result<DispatchSummary, StoreError> {
    let mut summary = DispatchSummary::default();
    if let Some(bus) = bus {
        publish(store, bus, cfg.cursor_lease, deadline, &mut summary).await?;
    }
    post(store, hooks, cfg, deadline, &mut summary).await?;
    summary.webhook_backlog_age_secs = store.webhook_backlog_age().await?.as_secs();
    Ok(summary)
}

fn time_left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

async fn publish(
    store: &dyn EventStore,
    bus: &dyn EventBus,
    lease: Duration,
    deadline: Instant,
    summary: &mut DispatchSummary,
) -> Result<(), StoreError> {
    while time_left(deadline) > MARGIN + MIN_CALL {
        let claimed = store.claim_events(BUS_BATCH, lease).await?;
        if claimed.is_empty() {
            break;
        }
        let events: Vec<_> = claimed.iter().map(|c| c.event.clone()).collect();
        let results = bus.publish(&events).await;
        let now = Utc::now();
        let done: Vec<Published> = claimed
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let error = results.get(i).cloned().unwrap_or_else(|| {
                    Some(super::PublishError {
                        code: "NoAnswer".into(),
                        message: "the bus adapter answered for fewer events than it was given"
                            .into(),
                    })
                });
                match error {
                    None => c.taken(),
                    Some(err) => Published {
                        event_id: c.event.id,
                        claim_token: c.claim_token,
                        retry_at: Some(at(now, bus_retry_after(c.attempts))),
                        error: Some(format!("{}: {}", err.code, err.message)),
                    },
                }
            })
            .collect();
        let failed = done.iter().filter(|p| p.retry_at.is_some()).count() as u64;
        if failed > 0 {
            tracing::warn!(
                failed,
                error = done.iter().find_map(|p| p.error.as_deref()),
                "the event bus refused events; they are published again later"
            );
        }
        let applied = store.complete_events(&done).await?;
        summary.published += done.len() as u64 - failed;
        summary.publish_failed += failed;
        summary.fenced += done.len() as u64 - applied;
        if failed > 0 {
            // the bus is in trouble: the next invocation tries again
            break;
        }
    }
    Ok(())
}

async fn post(
    store: &dyn EventStore,
    hooks: &dyn WebhookSender,
    cfg: &EventsConfig,
    deadline: Instant,
    summary: &mut DispatchSummary,
) -> Result<(), StoreError> {
    // a round ends within one call's time limit: its calls run side by side, the claim
    // holding as many as run at once
    let batch = u32::try_from(cfg.concurrency).unwrap_or(u32::MAX).max(1);
    while time_left(deadline) > MARGIN + MIN_CALL {
        // each call within its time limit, and within the invocation's time less the margin
        // (cut short, it is a failed attempt, retried later)
        let limit = cfg
            .webhook_timeout
            .min(time_left(deadline).saturating_sub(MARGIN));
        let claimed = store.claim_webhooks(batch, cfg.per_endpoint).await?;
        if claimed.is_empty() {
            break;
        }
        let sends = claimed.iter().map(|c| async move {
            let body = c.event.envelope();
            let started_at = Utc::now();
            let clock = Instant::now();
            let request = WebhookRequest {
                url: &c.url,
                event_id: c.event.id,
                body: &body,
                secrets: &c.secrets,
            };
            let call = hooks.send(&request);
            let response = match tokio::time::timeout(limit, call).await {
                Ok(response) => response,
                Err(_) => super::WebhookResponse {
                    status: None,
                    latency: clock.elapsed(),
                    error: Some(format!(
                        "cut short after {} ms: the invocation's time ran out",
                        limit.as_millis()
                    )),
                },
            };
            (c, started_at, response)
        });
        let answers: Vec<_> = futures::stream::iter(sends)
            .buffer_unordered(cfg.concurrency.max(1))
            .collect()
            .await;
        let now = Utc::now();
        let mut rng = rand::rng();
        let results: Vec<WebhookResult> = answers
            .into_iter()
            .map(|(c, started_at, response)| {
                let (outcome, retry_at) = if response.delivered() {
                    ("delivered", None)
                } else {
                    match webhook_retry_after(c.attempt, &mut rng) {
                        Some(wait) => ("retry", Some(at(now, wait))),
                        None => ("dead", None),
                    }
                };
                let error = match (&response.error, response.status) {
                    (Some(error), _) => Some(error.clone()),
                    (None, Some(status)) if !response.delivered() => Some(format!("HTTP {status}")),
                    _ => None,
                };
                WebhookResult {
                    delivery_id: c.delivery_id,
                    claim_token: c.claim_token,
                    outcome,
                    retry_at,
                    status_code: response.status.map(i32::from),
                    latency_ms: response.latency.as_millis().min(i32::MAX as u128) as i32,
                    error,
                    started_at,
                }
            })
            .collect();
        let delivered = results.iter().filter(|r| r.outcome == "delivered").count() as u64;
        let dead = results.iter().filter(|r| r.outcome == "dead").count() as u64;
        let report = store.complete_webhooks(&results).await?;
        summary.webhooks_delivered += delivered;
        summary.webhooks_failed += results.len() as u64 - delivered;
        summary.webhooks_dead += dead;
        summary.endpoints_disabled += report.disabled;
        summary.fenced += results.len() as u64 - report.applied;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_about_5s_5m_30m_2h_5h_10h_10h_then_dead() {
        let mut rng = rand::rng();
        let expected = [5, 300, 1800, 7200, 18000, 36000, 36000];
        for (i, secs) in expected.iter().enumerate() {
            let wait = webhook_retry_after(i as i32 + 1, &mut rng).unwrap();
            assert!(
                wait >= Duration::from_secs(*secs) && wait <= Duration::from_millis(secs * 1100),
                "attempt {}: {wait:?}",
                i + 1
            );
        }
        assert_eq!(webhook_retry_after(8, &mut rng), None);
        assert_eq!(WEBHOOK_MAX_ATTEMPTS, 8);
    }

    #[test]
    fn the_bus_backs_off_to_five_minutes() {
        assert_eq!(bus_retry_after(1), Duration::from_secs(5));
        assert_eq!(bus_retry_after(2), Duration::from_secs(10));
        assert_eq!(bus_retry_after(40), Duration::from_secs(300));
        assert_eq!(bus_retry_after(-3), Duration::from_secs(5));
    }
}
