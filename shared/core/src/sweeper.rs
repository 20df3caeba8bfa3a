//! The sweeper: rescues jobs left in `processing` by a worker that crashed or timed out.
//!
//! A job is stuck when it has been processing for longer than `STUCK_AFTER_SECS`. That
//! window must exceed the worker function's timeout (`WORKER_TIMEOUT_SECS`): Lambda stops
//! an invocation at its timeout, so a job claimed longer ago than that cannot still be in
//! delivery, and a healthy worker's job is never swept. The sweep clears the claim token,
//! so the lost worker's late completion is fenced.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{self, ConfigError};
use crate::store::{
    At, DropHistoryDays, DropUnmatchedFeedback, Expire, Now, PruneFeedback, Store, StoreError,
    Sweep,
};

/// The sweeper's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweeperConfig {
    pub stuck_after: Duration,
    pub worker_timeout: Duration,
    /// Rows per statement; the sweep loops until a statement finds fewer.
    pub batch_size: u32,
    /// A job's history is kept this many days after the job ended (its day's partitions are
    /// dropped when every job of the day ended that long ago); 0 keeps every day.
    pub retention_days: u32,
    /// How late provider feedback can arrive after a provider call (SNS SMS status logs can
    /// take 72 hours): a job's history is kept at least that long after it ended, however
    /// short the retention.
    pub feedback_window: Duration,
    /// How long provider feedback for an unknown message id waits for its attempt before
    /// it is dropped (and counted).
    pub feedback_match_window: Duration,
}

impl SweeperConfig {
    pub const DEFAULT_STUCK_AFTER_SECS: u64 = 600;
    pub const DEFAULT_WORKER_TIMEOUT_SECS: u64 = 120;
    pub const DEFAULT_BATCH_SIZE: u32 = 1_000;
    pub const DEFAULT_RETENTION_DAYS: u32 = 30;
    pub const DEFAULT_FEEDBACK_MATCH_WINDOW_SECS: u64 = 3_600;
    pub const DEFAULT_FEEDBACK_WINDOW_HOURS: u64 = 72;

    /// Reads `STUCK_AFTER_SECS`, `WORKER_TIMEOUT_SECS`, `SWEEP_BATCH_SIZE`, `RETENTION_DAYS`,
    /// `FEEDBACK_WINDOW_HOURS` and `FEEDBACK_MATCH_WINDOW_SECS`.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&config::Vars::process())
    }

    /// [`SweeperConfig::from_env`] over any lookup.
    pub fn from_lookup(vars: &config::Vars) -> Result<Self, ConfigError> {
        let config = Self::new(
            vars.parse_or(
                "STUCK_AFTER_SECS",
                Self::DEFAULT_STUCK_AFTER_SECS,
                1..=86_400,
            )?,
            vars.parse_or(
                "WORKER_TIMEOUT_SECS",
                Self::DEFAULT_WORKER_TIMEOUT_SECS,
                1..=900,
            )?,
            vars.parse_or("SWEEP_BATCH_SIZE", Self::DEFAULT_BATCH_SIZE, 1..=10_000)?,
        )?;
        Ok(Self {
            retention_days: vars.parse_or(
                "RETENTION_DAYS",
                Self::DEFAULT_RETENTION_DAYS,
                0..=3_650,
            )?,
            feedback_window: Duration::from_secs(
                3_600
                    * vars.parse_or(
                        "FEEDBACK_WINDOW_HOURS",
                        Self::DEFAULT_FEEDBACK_WINDOW_HOURS,
                        1..=720,
                    )?,
            ),
            feedback_match_window: Duration::from_secs(vars.parse_or(
                "FEEDBACK_MATCH_WINDOW_SECS",
                Self::DEFAULT_FEEDBACK_MATCH_WINDOW_SECS,
                60..=604_800,
            )?),
            ..config
        })
    }

    /// Refuses a window that a healthy worker could still be inside.
    pub fn new(
        stuck_after_secs: u64,
        worker_timeout_secs: u64,
        batch_size: u32,
    ) -> Result<Self, ConfigError> {
        if stuck_after_secs <= worker_timeout_secs {
            return Err(ConfigError::Conflict(format!(
                "STUCK_AFTER_SECS={stuck_after_secs} must be greater than \
                 WORKER_TIMEOUT_SECS={worker_timeout_secs} (the worker function's timeout): \
                 otherwise a job a healthy worker is still delivering could be swept"
            )));
        }
        Ok(Self {
            stuck_after: Duration::from_secs(stuck_after_secs),
            worker_timeout: Duration::from_secs(worker_timeout_secs),
            batch_size,
            retention_days: Self::DEFAULT_RETENTION_DAYS,
            feedback_window: Duration::from_secs(3_600 * Self::DEFAULT_FEEDBACK_WINDOW_HOURS),
            feedback_match_window: Duration::from_secs(Self::DEFAULT_FEEDBACK_MATCH_WINDOW_SECS),
        })
    }

    /// How long after a job ended its history is kept: RETENTION_DAYS, and at least the
    /// feedback window.
    pub fn history_kept(&self) -> Duration {
        Duration::from_secs(86_400 * u64::from(self.retention_days)).max(self.feedback_window)
    }
}

/// What one sweep did, as the function returns it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    pub requeued: u64,
    pub dead: u64,
    /// Waiting jobs past their expiry, now `expired`.
    pub expired: u64,
    /// Provider events deleted by retention.
    pub feedback_pruned: u64,
    /// The history's day partitions created ahead, and the days dropped by retention.
    pub history: HistoryDays,
    /// Provider events that had waited for their attempt and were applied now.
    pub feedback_applied: u64,
    /// Provider events dropped after waiting FEEDBACK_MATCH_WINDOW_SECS for an attempt.
    pub feedback_dropped: u64,
    /// Bus publications and webhook deliveries a lost worker had claimed, due again.
    pub dispatch_swept: u64,
    /// Status events and webhook attempts deleted by retention.
    pub events_pruned: u64,
    pub elapsed_ms: u64,
}

/// What the sweep did to the history's days.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HistoryDays {
    /// Partitions created (three per day: requests, outcomes, attempts).
    pub added: u32,
    /// Days dropped by retention, and which (`2026-11-01,2026-11-02`).
    pub dropped: u32,
    pub dropped_days: String,
}

/// A sweep some of whose steps failed: what it did all the same, and each failure.
#[derive(Debug, thiserror::Error)]
#[error("{} of the sweeper's steps failed: {}", .failures.len(), describe(.failures))]
pub struct SweepFailed {
    pub summary: SweepSummary,
    pub failures: Vec<(&'static str, StoreError)>,
}

fn describe(failures: &[(&'static str, StoreError)]) -> String {
    failures
        .iter()
        .map(|(step, err)| format!("{step} ({}: {})", err.kind(), crate::error::report(err)))
        .collect::<Vec<_>>()
        .join("; ")
}

impl SweepFailed {
    /// The class a failed invocation reports to Lambda: `Unavailable` when every failure
    /// was the database being out of reach, else the first other failure's.
    pub fn kind(&self) -> &'static str {
        self.failures
            .iter()
            .map(|(_, err)| err.kind())
            .find(|kind| *kind != "Unavailable")
            .unwrap_or("Unavailable")
    }
}

/// A failed sweep fails the invocation (the next schedule tries again, and the errors alarm
/// sees it), after every step has had its turn.
impl From<SweepFailed> for lambda_runtime::Diagnostic {
    fn from(err: SweepFailed) -> Self {
        crate::error::failed_invocation(err.kind(), &err)
    }
}

/// One sweep: each step in its turn, each whatever the steps before it did. `now`: the
/// current time (`None`: the database's clock).
///  1. the history's days ahead are made (ingest needs today's: this comes first, so no
///     other step's trouble can stop it);
///  2. jobs stuck in processing are requeued or buried, status events and webhook
///     deliveries a lost worker had claimed made due again, and waiting jobs past their
///     expiry expired, in bounded statements until none is left;
///  3. old rate-limit windows go, and provider events waiting for their attempt are applied
///     or, past the match window, dropped;
///  4. retention: the days whose jobs all ended longer ago than RETENTION_DAYS (and the
///     feedback window) are dropped whole, and old provider events, status events and
///     webhook attempts deleted.
///
/// A failing step is recorded and the next one runs; the result is an error when any failed.
pub async fn run_once(
    store: &dyn Store,
    config: &SweeperConfig,
    At { now }: At,
) -> Result<SweepSummary, SweepFailed> {
    let started = Instant::now();
    let mut summary = SweepSummary::default();
    let mut failures = Vec::new();
    let mut step = |name: &'static str, result: Result<(), StoreError>| {
        if let Err(err) = result {
            tracing::error!(step = name, error = %crate::error::report(&err), "sweeper step failed; the others go on");
            failures.push((name, err));
        }
    };

    step(
        "add_history_days",
        store
            .add_history_days(At { now })
            .await
            .map(|added| summary.history.added = added),
    );
    step("sweep", sweep(store, config, now, &mut summary).await);
    step(
        "sweep_dispatch",
        store
            .sweep_dispatch(config.stuck_after)
            .await
            .map(|(events, deliveries)| summary.dispatch_swept = events + deliveries),
    );
    step(
        "expire",
        until_done(config.batch_size, &mut summary.expired, || {
            store.expire(Expire {
                limit: config.batch_size,
                now,
            })
        })
        .await,
    );
    step(
        "prune_rate_windows",
        store.prune_rate_windows(At { now }).await.map(drop),
    );
    step(
        "settle_feedback",
        settle_feedback(store, config, now, &mut summary).await,
    );
    if config.retention_days > 0 {
        step(
            "drop_history_days",
            store
                .drop_history_days(DropHistoryDays {
                    keep: config.history_kept(),
                    now,
                })
                .await
                .map(|dropped| {
                    summary.history.dropped = dropped.dropped;
                    summary.history.dropped_days = dropped.dropped_days;
                }),
        );
        step(
            "prune_feedback",
            until_done(config.batch_size, &mut summary.feedback_pruned, || {
                store.prune_feedback(PruneFeedback {
                    older_than_days: config.retention_days,
                    limit: config.batch_size,
                    now,
                })
            })
            .await,
        );
        step(
            "prune_events",
            until_done(config.batch_size, &mut summary.events_pruned, || async {
                // both counted; a statement that filled its batch of either kind has a
                // sum at least the batch, so the loop goes on while either may have more
                let (events, attempts) = store
                    .prune_events(config.retention_days, config.batch_size)
                    .await?;
                Ok(events + attempts)
            })
            .await,
        );
    }
    summary.elapsed_ms = started.elapsed().as_millis() as u64;
    // one Embedded Metric Format line per invocation: the Dead and Expired alarms
    println!(
        "{}",
        crate::telemetry::emf::job_metrics(
            &[
                ("Dead", summary.dead),
                ("Expired", summary.expired),
                ("FeedbackDropped", summary.feedback_dropped),
            ],
            chrono::Utc::now().timestamp_millis()
        )
    );
    if summary.expired > 0 {
        tracing::warn!(
            expired = summary.expired,
            "jobs expired before they could be delivered"
        );
    }
    if summary.requeued + summary.dead > 0 {
        tracing::warn!(
            requeued = summary.requeued,
            dead = summary.dead,
            "swept jobs lost by a worker"
        );
    } else {
        tracing::info!(
            days_dropped = %summary.history.dropped_days,
            elapsed_ms = summary.elapsed_ms,
            "sweep found nothing stuck"
        );
    }
    if failures.is_empty() {
        Ok(summary)
    } else {
        Err(SweepFailed { summary, failures })
    }
}

/// Runs `statement` (which handles at most `batch` rows) until it handles fewer, adding each
/// count to `total`.
async fn until_done<F, Fut>(batch: u32, total: &mut u64, mut statement: F) -> Result<(), StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    loop {
        let done = statement().await?;
        *total += done;
        if done < u64::from(batch) {
            return Ok(());
        }
    }
}

/// Requeues or buries every stuck job, in statements of `batch_size`.
async fn sweep(
    store: &dyn Store,
    config: &SweeperConfig,
    now: Now,
    summary: &mut SweepSummary,
) -> Result<(), StoreError> {
    loop {
        let report = store
            .sweep(Sweep {
                stuck_after: config.stuck_after,
                limit: config.batch_size,
                now,
            })
            .await?;
        summary.requeued += report.requeued;
        summary.dead += report.dead;
        if report.requeued + report.dead < u64::from(config.batch_size) {
            return Ok(());
        }
    }
}

/// Applies provider events whose attempt was recorded after they arrived, then drops those
/// that waited past the window.
async fn settle_feedback(
    store: &dyn Store,
    config: &SweeperConfig,
    now: Now,
    summary: &mut SweepSummary,
) -> Result<(), StoreError> {
    summary.feedback_applied += store.apply_waiting_feedback(At { now }).await?.applied;
    let window = config
        .feedback_match_window
        .as_secs()
        .min(u64::from(u32::MAX)) as u32;
    let before = summary.feedback_dropped;
    until_done(config.batch_size, &mut summary.feedback_dropped, || {
        store.drop_unmatched_feedback(DropUnmatchedFeedback {
            older_than_secs: window,
            limit: config.batch_size,
            now,
        })
    })
    .await?;
    let dropped = summary.feedback_dropped - before;
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "provider feedback for unknown message ids dropped after the match window"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_must_exceed_the_worker_timeout() {
        assert!(SweeperConfig::new(600, 120, 1000).is_ok());
        for (stuck, timeout) in [(120, 120), (60, 120)] {
            let err = SweeperConfig::new(stuck, timeout, 1000)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("STUCK_AFTER_SECS={stuck}")), "{err}");
            assert!(
                err.contains(&format!("WORKER_TIMEOUT_SECS={timeout}")),
                "{err}"
            );
        }
    }
}
