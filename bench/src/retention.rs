//! 10: retention of one day of finished jobs, the way the sweeper does it (time and WAL).
//!
//! A job's history (its request, its outcome row, its other attempts) lives in the partitions
//! of the day it was accepted, and its idempotency key in `idempotency_keys`, one table for
//! every day (a key must stay unique from one day to the next). The sweeper's
//! `JobStore::drop_history_days` (drop_history_days.sql, `history_drop_days`) drops a day once
//! every job of it ended longer ago than `SweeperConfig::history_kept` (RETENTION_DAYS, and at
//! least the feedback window) and none is open: in one call it deletes the day's idempotency
//! keys, row by row, and drops its three partitions whole. The partitions owe no VACUUM (their
//! files are gone); the keys' deletes leave dead rows that one does, measured here too.
//!
//! The day is filled with `plan.retention_jobs` finished jobs, each with its outcome row
//! (holding its last attempt) and an idempotency key, accepted and ended on the day whose last
//! end is just past the sweeper's default retention. The measured call is the sweeper's, on
//! the database's clock (nothing is aged by hand), after a CHECKPOINT, with autovacuum off for
//! the part: its runs are not in the figures, and none holds a lock on the day's partitions
//! when the call asks for them (it gives up on a day after 100 ms, for a later run). The
//! `idempotency_keys` this VACUUM reads holds that day's keys only; with more days kept
//! beside it (in production, RETENTION_DAYS of them) its passes over the two indexes read
//! theirs too.

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use notify_core::store::{DropHistoryDays, JobStore};
use notify_core::sweeper::SweeperConfig;
use serde::Serialize;

use crate::Plan;
use crate::claim::{Finished, fill_finished};
use crate::db::Bench;
use crate::stats::rounded;
use crate::worked::open_stores;

/// The history's tables partitioned by day (`history_add_days` names a day's partitions
/// `<table>_YYYYMMDD`).
const DAY_TABLES: [&str; 3] = ["job_requests", "job_outcomes", "job_attempts"];

#[derive(Debug, Clone, Default, Serialize)]
pub struct Retention {
    /// Finished jobs of the day, each with its outcome row (holding its last attempt) and its
    /// idempotency key.
    pub jobs: i64,
    /// How long the sweeper keeps a day after its last job ended, in days
    /// (`SweeperConfig::history_kept` at the defaults: RETENTION_DAYS, at least the feedback
    /// window).
    pub kept_days: u64,
    /// The day dropped (its last job ended that day, `kept_days` + 1 days before the run).
    pub day: String,
    /// Its partitions' size on disk before the drop (tables, indexes, TOAST).
    pub partition_bytes: i64,
    /// `idempotency_keys`' size on disk before the drop (the day's keys alone).
    pub keys_bytes: i64,
    /// Days the call dropped: the filled one.
    pub days_dropped: u32,
    /// The sweeper's call: the day's keys deleted, its partitions dropped, committed.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub secs: f64,
    pub wal_bytes: i64,
    /// Idempotency keys the call deleted row by row (the day's: one per job).
    pub keys_deleted: i64,
    /// VACUUM of `idempotency_keys` afterwards: what autovacuum would owe for those deletes
    /// (the dropped partitions owe nothing).
    #[serde(serialize_with = "rounded::<3, _>")]
    pub vacuum_secs: f64,
    pub vacuum_wal_bytes: i64,
}

/// How long the sweeper keeps a day's history after its last job ended, at its defaults.
pub fn kept() -> Result<std::time::Duration> {
    let config = SweeperConfig::new(
        SweeperConfig::DEFAULT_STUCK_AFTER_SECS,
        SweeperConfig::DEFAULT_WORKER_TIMEOUT_SECS,
        SweeperConfig::DEFAULT_BATCH_SIZE,
    )
    .context("the sweeper's default settings")?;
    Ok(config.history_kept())
}

pub async fn measure(bench: &Bench, plan: &Plan) -> Result<Retention> {
    let kept = kept()?;
    let kept_days = kept.as_secs().div_ceil(86_400);
    crate::step!(
        "retention: {} finished jobs of one day (and their idempotency keys), dropped {kept_days} days after it",
        plan.retention_jobs
    );
    bench.truncate().await?;
    // the day before the first the sweeper keeps: its last end plus a day is at most
    // today − kept_days (midnight, UTC), which is before now − kept. Its jobs from its first
    // second to its last (rounded up: never past the day)
    let row = bench
        .client
        .query_one(
            "SELECT d::text,
                    ceil(extract(epoch FROM now() - ((d + 1)::timestamp AT TIME ZONE 'UTC'
                                                     - interval '1 second')))::bigint
             FROM (SELECT (now() AT TIME ZONE 'UTC')::date - $1::int AS d) AS day",
            &[&(kept_days as i32 + 1)],
        )
        .await
        .context("the day")?;
    let (day, ago_secs): (String, i64) = (row.get(0), row.get(1));
    let when = Finished {
        ago_secs,
        spread_secs: 86_398,
        keyed: true,
    };
    fill_finished(bench, plan.retention_jobs, when).await?;
    let filled = day_rows(bench, &day).await?;
    ensure!(
        filled == [plan.retention_jobs; 3],
        "the day {day} holds {filled:?} requests, outcomes and keys, not {} of each",
        plan.retention_jobs
    );
    let (partition_bytes, keys_bytes) = sizes(bench, &day).await?;
    let mut retention = Retention {
        jobs: plan.retention_jobs,
        kept_days,
        day,
        partition_bytes,
        keys_bytes,
        ..Retention::default()
    };
    // autovacuum off for the part (on again whatever happens), the day's partitions among the
    // tables: ALTER TABLE waits for (or cancels) any autovacuum run on them
    bench.autovacuum(false).await?;
    let measured = drop_the_day(bench, kept, &mut retention).await;
    let restored = bench.autovacuum(true).await;
    measured?;
    restored?;
    Ok(retention)
}

/// The sweeper's call, timed and checked, then the VACUUM of `idempotency_keys`, timed.
async fn drop_the_day(bench: &Bench, kept: std::time::Duration, r: &mut Retention) -> Result<()> {
    let day = r.day.as_str();
    let store = open_stores(bench, 1).await?.pop().context("a store")?;
    // the pages the call changes are written whole at their first change after a checkpoint,
    // as a day a month old would be in production
    let _ = bench.client.batch_execute("CHECKPOINT").await;
    let keys_before = count(bench, "SELECT count(*) FROM idempotency_keys").await?;
    let (wal0, started) = (bench.wal().await?, Instant::now());
    let report = store
        .drop_history_days(DropHistoryDays {
            keep: kept,
            now: None,
        })
        .await?;
    r.secs = started.elapsed().as_secs_f64();
    let wal1 = bench.wal().await?;
    r.wal_bytes = wal1 - wal0;
    r.days_dropped = report.dropped;
    ensure!(
        report.dropped == 1 && report.dropped_days == day,
        "the sweeper's call dropped {report:?}, not the day {day} alone"
    );
    let left = day_rows(bench, day).await?;
    let partitions_left = bench
        .client
        .query_one(
            "SELECT count(*) FROM unnest($1::text[]) AS t
             WHERE to_regclass(t || '_' || replace($2::text, '-', '')) IS NOT NULL",
            &[&DAY_TABLES.to_vec(), &day],
        )
        .await
        .context("the day's partitions")?
        .get::<_, i64>(0);
    ensure!(
        left == [0; 3] && partitions_left == 0,
        "after the drop the day {day} still holds {left:?} requests, outcomes and keys, \
         and {partitions_left} partitions"
    );
    r.keys_deleted = keys_before - count(bench, "SELECT count(*) FROM idempotency_keys").await?;
    let started = Instant::now();
    bench
        .client
        .batch_execute("VACUUM idempotency_keys")
        .await
        .context("vacuum")?;
    r.vacuum_secs = started.elapsed().as_secs_f64();
    r.vacuum_wal_bytes = bench.wal().await? - wal1;
    Ok(())
}

/// The day's requests, outcome rows and idempotency keys.
async fn day_rows(bench: &Bench, day: &str) -> Result<[i64; 3]> {
    let row = bench
        .client
        .query_one(
            "WITH d AS (SELECT $1::text::date::timestamp AT TIME ZONE 'UTC' AS lo,
                               ($1::text::date + 1)::timestamp AT TIME ZONE 'UTC' AS hi)
             SELECT (SELECT count(*) FROM job_requests, d
                     WHERE created_at >= d.lo AND created_at < d.hi),
                    (SELECT count(*) FROM job_outcomes, d
                     WHERE created_at >= d.lo AND created_at < d.hi),
                    (SELECT count(*) FROM idempotency_keys, d
                     WHERE job_created_at >= d.lo AND job_created_at < d.hi)",
            &[&day],
        )
        .await
        .context("count the day's rows")?;
    Ok([row.get(0), row.get(1), row.get(2)])
}

/// The day's partitions' size on disk, and `idempotency_keys`'.
async fn sizes(bench: &Bench, day: &str) -> Result<(i64, i64)> {
    let row = bench
        .client
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(
                                 to_regclass(t || '_' || replace($2::text, '-', '')))), 0)::bigint,
                    pg_total_relation_size('idempotency_keys')
             FROM unnest($1::text[]) AS t",
            &[&DAY_TABLES.to_vec(), &day],
        )
        .await
        .context("the day's size")?;
    Ok((row.get(0), row.get(1)))
}

async fn count(bench: &Bench, sql: &str) -> Result<i64> {
    Ok(bench
        .client
        .query_one(sql, &[])
        .await
        .with_context(|| sql.to_owned())?
        .get(0))
}
