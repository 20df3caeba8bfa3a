//! 10: retention of one day of finished jobs, both ways the sweeper does it (time and WAL):
//!  * before: jobs accepted before the history's cut (0015_history_by_day.sql), in the
//!    partition that predates it: `JobStore::prune` (prune.sql, batches of
//!    `SWEEP_BATCH_SIZE`'s default) until nothing is left past `RETENTION_DAYS`, then the
//!    VACUUM the deletes leave owing;
//!  * after: jobs accepted after it, in their day's partitions: `JobStore::history_days`,
//!    which drops the day whole (and owes no VACUUM).

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde::Serialize;
use shared::store::JobStore;

use crate::claim::{fill_finished, Finished};
use crate::db::Bench;
use crate::stats::rounded;
use crate::worked::open_stores;
use crate::Plan;

/// The sweeper's default `RETENTION_DAYS`.
const RETENTION_DAYS: u32 = shared::sweeper::SweeperConfig::DEFAULT_RETENTION_DAYS;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Retention {
    /// Finished jobs of one day past retention, each with its outcome row (holding its last attempt).
    pub jobs: i64,
    /// Jobs per prune statement (the sweeper's default batch).
    pub batch: u32,
    pub statements: u64,
    #[serde(serialize_with = "rounded::<2, _>")]
    pub secs: f64,
    pub wal_bytes: i64,
    /// VACUUM of the job tables afterwards (what autovacuum would owe).
    #[serde(serialize_with = "rounded::<2, _>")]
    pub vacuum_secs: f64,
    pub vacuum_wal_bytes: i64,
    /// The same number of jobs in one day's partitions, dropped.
    pub dropped: Dropped,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Dropped {
    pub jobs: i64,
    /// The days dropped by the call (the filled day, and the empty days before it).
    pub days: u32,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub secs: f64,
    pub wal_bytes: i64,
}

pub async fn measure(bench: &Bench, plan: &Plan) -> Result<Retention> {
    crate::step!(
        "retention: {} finished jobs of one day past {RETENTION_DAYS} days, pruned",
        plan.retention_jobs
    );
    bench.truncate().await?;
    let day_past = Finished {
        ago_secs: i64::from(RETENTION_DAYS + 1) * 86_400,
        spread_secs: 86_400,
    };
    fill_finished(bench, plan.retention_jobs, day_past).await?;
    let store = open_stores(bench, 1).await?.pop().context("a store")?;
    let batch = shared::sweeper::SweeperConfig::DEFAULT_BATCH_SIZE;
    let (wal0, started) = (bench.wal().await?, Instant::now());
    let (mut deleted, mut statements) = (0, 0);
    loop {
        let n = store.prune(RETENTION_DAYS, batch, None).await?.jobs;
        statements += 1;
        deleted += n;
        if n == 0 {
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let wal1 = bench.wal().await?;
    ensure!(
        deleted as i64 == plan.retention_jobs,
        "pruned {deleted} of {} jobs",
        plan.retention_jobs
    );
    let started = Instant::now();
    for table in crate::db::JOB_TABLES {
        bench
            .client
            .batch_execute(&format!("VACUUM {table}"))
            .await
            .context("vacuum")?;
    }
    let vacuum_secs = started.elapsed().as_secs_f64();
    let wal2 = bench.wal().await?;
    let dropped = drop_a_day(bench, plan, &store).await?;
    Ok(Retention {
        jobs: plan.retention_jobs,
        batch,
        statements,
        secs,
        wal_bytes: wal1 - wal0,
        vacuum_secs,
        vacuum_wal_bytes: wal2 - wal1,
        dropped,
    })
}

/// The same number of finished jobs, accepted on the third day from now (its partitions are
/// created ahead), dropped by the sweeper's call at a time when that day is past retention.
/// Then the days from yesterday on are created again for the sections after this one.
async fn drop_a_day(bench: &Bench, plan: &Plan, store: &dyn JobStore) -> Result<Dropped> {
    bench.truncate().await?;
    // from the last second of that day back to its first
    let row = bench
        .client
        .query_one(
            "SELECT extract(epoch FROM now() - (date_trunc('day', now(), 'UTC')
                                                 + interval '3 days' - interval '1 second'))::bigint,
                    date_trunc('day', now(), 'UTC') + interval '3 days'",
            &[],
        )
        .await
        .context("the day")?;
    let (ago_secs, day_end): (i64, chrono::DateTime<chrono::Utc>) = (row.get(0), row.get(1));
    let day = Finished {
        ago_secs,
        spread_secs: 86_399,
    };
    fill_finished(bench, plan.retention_jobs, day).await?;
    let before_cut = bench
        .client
        .query_one("SELECT count(*) FROM notification_jobs", &[])
        .await
        .context("count")?
        .get::<_, i64>(0);
    ensure!(
        before_cut == 0,
        "the day's jobs are in its partitions, not before the cut"
    );
    let when = Some(day_end + chrono::Duration::days(i64::from(RETENTION_DAYS)));
    // the days ahead of that time first, so the measured call only drops
    store.history_days(0, when).await?;
    let (wal0, started) = (bench.wal().await?, Instant::now());
    let report = store.history_days(RETENTION_DAYS, when).await?;
    let secs = started.elapsed().as_secs_f64();
    let wal1 = bench.wal().await?;
    let left = bench
        .client
        .query_one("SELECT count(*) FROM job_requests", &[])
        .await
        .context("count")?
        .get::<_, i64>(0);
    ensure!(
        left == 0 && report.dropped >= 1,
        "dropped {report:?}, {left} jobs left"
    );
    store.history_days(0, None).await?;
    Ok(Dropped {
        jobs: plan.retention_jobs,
        days: report.dropped,
        secs,
        wal_bytes: wal1 - wal0,
    })
}
