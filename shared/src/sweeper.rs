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
use crate::store::{HistoryDays, Now, Pruned, Store, StoreError, SweepReport};

/// The sweeper's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweeperConfig {
    pub stuck_after: Duration,
    pub worker_timeout: Duration,
    /// Rows per statement; the sweep loops until a statement finds fewer.
    pub batch_size: u32,
    /// Finished jobs (sent, dead) older than this many days are deleted; 0 keeps them all.
    pub retention_days: u32,
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

    /// Reads `STUCK_AFTER_SECS`, `WORKER_TIMEOUT_SECS`, `SWEEP_BATCH_SIZE`, `RETENTION_DAYS`
    /// and `FEEDBACK_MATCH_WINDOW_SECS`.
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
            feedback_match_window: Duration::from_secs(Self::DEFAULT_FEEDBACK_MATCH_WINDOW_SECS),
        })
    }
}

/// What one sweep did, as the function returns it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    pub requeued: u64,
    pub dead: u64,
    /// Waiting jobs past their expiry, now `expired`.
    pub expired: u64,
    /// Finished jobs accepted before the history's cut, deleted by row retention.
    pub pruned: u64,
    /// Provider events deleted by retention.
    pub feedback_pruned: u64,
    /// The history's day partitions created ahead, and the days dropped by retention.
    pub history: HistoryDays,
    /// Provider events that had waited for their attempt and were applied now.
    pub feedback_applied: u64,
    /// Provider events dropped after waiting FEEDBACK_MATCH_WINDOW_SECS for an attempt.
    pub feedback_dropped: u64,
    pub elapsed_ms: u64,
}

/// Sweeps every stuck job, expires waiting jobs past their expiry, then prunes finished jobs
/// past retention, in bounded
/// statements, until none is left. `now`: the current time (`None`: the database's clock).
pub async fn run_once(
    store: &dyn Store,
    config: &SweeperConfig,
    now: Now,
) -> Result<SweepSummary, StoreError> {
    let started = Instant::now();
    let mut total = SweepReport::default();
    loop {
        let report = store
            .sweep(config.stuck_after, config.batch_size, now)
            .await?;
        total.requeued += report.requeued;
        total.dead += report.dead;
        if report.requeued + report.dead < u64::from(config.batch_size) {
            break;
        }
    }
    let mut expired = 0;
    loop {
        let done = store.expire(config.batch_size, now).await?;
        expired += done;
        if done < u64::from(config.batch_size) {
            break;
        }
    }
    store.prune_rate_windows(now).await?;
    let (feedback_applied, feedback_dropped) = settle_feedback(store, config, now).await?;
    // the days ahead exist before anyone inserts into them; a day past retention goes whole
    let history = store.history_days(config.retention_days, now).await?;
    let mut pruned = Pruned::default();
    if config.retention_days > 0 {
        loop {
            let deleted = store
                .prune(config.retention_days, config.batch_size, now)
                .await?;
            pruned.jobs += deleted.jobs;
            pruned.feedback += deleted.feedback;
            if deleted.jobs.max(deleted.feedback) < u64::from(config.batch_size) {
                break;
            }
        }
    }
    let summary = SweepSummary {
        requeued: total.requeued,
        dead: total.dead,
        expired,
        pruned: pruned.jobs,
        feedback_pruned: pruned.feedback,
        history,
        feedback_applied,
        feedback_dropped,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    // one Embedded Metric Format line per invocation: the Dead and Expired alarms
    println!(
        "{}",
        crate::worker::job_metrics(
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
            pruned = summary.pruned,
            days_dropped = %summary.history.dropped_days,
            elapsed_ms = summary.elapsed_ms,
            "sweep found nothing stuck"
        );
    }
    Ok(summary)
}

/// Applies provider events whose attempt was recorded after they arrived, then drops those
/// that waited past the window: (applied, dropped).
async fn settle_feedback(
    store: &dyn Store,
    config: &SweeperConfig,
    now: Now,
) -> Result<(u64, u64), StoreError> {
    let applied = store.apply_waiting_feedback(now).await?.applied;
    let window = config
        .feedback_match_window
        .as_secs()
        .min(u64::from(u32::MAX)) as u32;
    let mut dropped = 0;
    loop {
        let done = store
            .drop_unmatched_feedback(window, config.batch_size, now)
            .await?;
        dropped += done;
        if done < u64::from(config.batch_size) {
            break;
        }
    }
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "provider feedback for unknown message ids dropped after the match window"
        );
    }
    Ok((applied, dropped))
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
