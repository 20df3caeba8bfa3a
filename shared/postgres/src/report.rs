//! The queue as an operator reads it (`make queue`): the open jobs by state and by
//! organization, the oldest due job, the dead jobs of a recent window by error code, and the
//! suppression lists. Read-only; every figure from the store's own statements.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use notify_core::store::{At, JobStore, Now, QueueDepth, StoreError};
use uuid::Uuid;

use crate::sql;
use crate::store::PgStore;

/// One organization's open jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct OrganizationQueue {
    pub organization_id: Uuid,
    pub due: u64,
    pub processing: u64,
    pub held: u64,
    pub scheduled: u64,
    pub oldest_due: Option<DateTime<Utc>>,
}

/// The jobs one error code ended in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadByError {
    pub error_code: String,
    pub jobs: u64,
    pub last_died: DateTime<Utc>,
}

/// What `make queue` prints.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueReport {
    pub at: DateTime<Utc>,
    pub depth: QueueDepth,
    /// The busiest organizations, most open jobs first.
    pub organizations: Vec<OrganizationQueue>,
    pub dead_since: DateTime<Utc>,
    pub dead: Vec<DeadByError>,
    /// Suppression entries by reason (bounce, complaint, sms_failure, manual).
    pub suppressions: Vec<(String, u64)>,
}

fn count(n: i64) -> u64 {
    n.max(0) as u64
}

impl PgStore {
    /// The report at `now` (`None`: the database's clock): at most `top` organizations and
    /// error codes, the dead jobs of the last `dead_window`.
    pub async fn queue_report(
        &self,
        now: Now,
        dead_window: Duration,
        top: u32,
    ) -> Result<QueueReport, StoreError> {
        let at = now.unwrap_or_else(Utc::now);
        let depth = self.queue_depth(At { now }).await?;
        let organizations = self
            .query(&sql::QUEUE_BY_ORGANIZATION, &[&now, &i64::from(top)])
            .await?
            .into_iter()
            .map(|row| OrganizationQueue {
                organization_id: row.organization_id,
                due: count(row.due),
                processing: count(row.processing),
                held: count(row.held),
                scheduled: count(row.scheduled),
                oldest_due: row.oldest_due,
            })
            .collect();
        let dead_since =
            at - chrono::TimeDelta::from_std(dead_window).unwrap_or(chrono::TimeDelta::days(1));
        let dead = self
            .query(&sql::DEAD_BY_ERROR, &[&dead_since, &i64::from(top)])
            .await?
            .into_iter()
            .map(|row| DeadByError {
                error_code: row.error_code,
                jobs: count(row.jobs),
                last_died: row.last_died,
            })
            .collect();
        let suppressions = self
            .query(&sql::SUPPRESSION_COUNTS, &[])
            .await?
            .into_iter()
            .map(|row| (row.reason, count(row.entries)))
            .collect();
        Ok(QueueReport {
            at,
            depth,
            organizations,
            dead_since,
            dead,
            suppressions,
        })
    }
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl fmt::Display for QueueReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.depth;
        writeln!(f, "queue at {}", time(self.at))?;
        writeln!(
            f,
            "  due {}  processing {}  held {}  scheduled {}  oldest due waited {:.0} s",
            d.due, d.processing, d.held, d.scheduled, d.backlog_age_secs
        )?;
        writeln!(f, "\nby organization (most open jobs first)")?;
        if self.organizations.is_empty() {
            writeln!(f, "  (no open jobs)")?;
        } else {
            writeln!(
                f,
                "  {:<36} {:>8} {:>10} {:>8} {:>9}  oldest due",
                "organization", "due", "processing", "held", "scheduled"
            )?;
        }
        for o in &self.organizations {
            writeln!(
                f,
                "  {:<36} {:>8} {:>10} {:>8} {:>9}  {}",
                o.organization_id,
                o.due,
                o.processing,
                o.held,
                o.scheduled,
                o.oldest_due.map_or_else(|| "-".to_owned(), time)
            )?;
        }
        writeln!(f, "\ndead since {} by error code", time(self.dead_since))?;
        if self.dead.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for d in &self.dead {
            writeln!(
                f,
                "  {:<40} {:>8}  last {}",
                if d.error_code.is_empty() {
                    "(no code)"
                } else {
                    &d.error_code
                },
                d.jobs,
                time(d.last_died)
            )?;
        }
        writeln!(f, "\nsuppressed recipients by reason")?;
        if self.suppressions.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for (reason, entries) in &self.suppressions {
            writeln!(f, "  {reason:<40} {entries:>8}")?;
        }
        Ok(())
    }
}
