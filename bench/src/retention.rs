//! 10: retention of one day of finished jobs, as the sweeper does it: `JobStore::prune`
//! (prune.sql, batches of `SWEEP_BATCH_SIZE`'s default) until nothing is left past
//! `RETENTION_DAYS`, then the VACUUM the deletes leave owing. Time and WAL of each.
//! Issue 17's "after" (dropping a day's partition) is not in the product yet; the storage
//! study (`bench/storage/README.md`) measured it beside this.

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
    /// Finished jobs of one day past retention, each with its delivery row.
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
    let (wal0, started) = (wal(bench).await?, Instant::now());
    let (mut deleted, mut statements) = (0, 0);
    loop {
        let n = store.prune(RETENTION_DAYS, batch, None).await?;
        statements += 1;
        deleted += n;
        if n == 0 {
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let wal1 = wal(bench).await?;
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
    let wal2 = wal(bench).await?;
    Ok(Retention {
        jobs: plan.retention_jobs,
        batch,
        statements,
        secs,
        wal_bytes: wal1 - wal0,
        vacuum_secs,
        vacuum_wal_bytes: wal2 - wal1,
    })
}

/// The server's WAL position, in bytes.
async fn wal(bench: &Bench) -> Result<i64> {
    let row = bench
        .client
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
            &[],
        )
        .await
        .context("pg_current_wal_lsn")?;
    Ok(row.get(0))
}
