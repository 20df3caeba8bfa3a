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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use notify_core::store::{At, DropHistoryDays, JobStore};
use notify_core::sweeper::SweeperConfig;
use serde::Serialize;

use crate::Plan;
use crate::claim::{Finished, fill_finished};
use crate::db::Bench;
use crate::ingest::{Requests, accepted_id, new_ingest};
use crate::stats::{Latency, Samples, rounded};
use crate::worked::{RecordingDeliverer, open_stores, run_workers, worker_config, worker_stores};

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

/// 10, continued: the same drop as the sweeper really makes it, while ingest and a worker run.
///
/// The day holds what a day of real traffic leaves: `plan.retention_jobs` finished jobs with
/// their requests, outcome rows and idempotency keys (as above), the earlier attempts of the
/// dead ones (1 in 10 jobs, 4 attempt rows each: its retries) and a provider's delivery event
/// for each sent one (`delivery_feedback`, which retention deletes row by row). Autovacuum is at
/// its defaults. Ingest sends one request at a time at `plan.rate` per second through
/// `Ingest::handle` (as part 3), a polling worker delivers them (as part 4), and a third of the
/// way in the sweeper's whole pass runs (`sweeper::run_once`, the function's own code): it
/// drops the day, its keys, and the day's provider events. Ingest's latency is split by when
/// each request started: before the pass, during it, after it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UnderLoad {
    pub jobs: i64,
    /// The day's earlier attempts and provider events.
    pub attempt_rows: i64,
    pub feedback_rows: i64,
    pub rate_per_sec: u32,
    /// The sweeper's pass (every step, the drop among them).
    #[serde(serialize_with = "rounded::<3, _>")]
    pub sweep_secs: f64,
    pub days_dropped: u32,
    pub feedback_pruned: u64,
    pub ingest_before: Latency,
    pub ingest_during: Latency,
    pub ingest_after: Latency,
    /// Requests ingest answered, every one of them delivered by the worker.
    pub ingested: usize,
}

pub async fn under_load(bench: &Bench, plan: &Plan) -> Result<UnderLoad> {
    let config = SweeperConfig::new(
        SweeperConfig::DEFAULT_STUCK_AFTER_SECS,
        SweeperConfig::DEFAULT_WORKER_TIMEOUT_SECS,
        SweeperConfig::DEFAULT_BATCH_SIZE,
    )
    .context("the sweeper's default settings")?;
    let kept_days = config.history_kept().as_secs().div_ceil(86_400);
    crate::step!(
        "retention under load: {} finished jobs of one day with retries and provider events, dropped by the sweeper while ingest sends {} requests/s",
        plan.retention_jobs,
        plan.rate
    );
    bench.truncate().await?;
    bench
        .client
        .batch_execute("TRUNCATE delivery_feedback")
        .await
        .context("truncate delivery_feedback")?;
    let ago_secs: i64 = bench
        .client
        .query_one(
            "SELECT ceil(extract(epoch FROM now() - (((now() AT TIME ZONE 'UTC')::date - $1::int + 1)::timestamp
                                                     AT TIME ZONE 'UTC' - interval '1 second')))::bigint",
            &[&(kept_days as i32 + 1)],
        )
        .await
        .context("the day")?
        .get(0);
    let when = Finished {
        ago_secs,
        spread_secs: 86_398,
        keyed: true,
    };
    fill_finished(bench, plan.retention_jobs, when).await?;
    let row = bench
        .client
        .query_one(
            "WITH attempts AS (
                 INSERT INTO job_attempts (job_id, job_created_at, attempt, provider,
                                           provider_message_id, error_code, error_message,
                                           outcome, started_at, finished_at)
                 SELECT o.job_id, o.created_at, a, 'sns', gen_random_uuid()::text,
                        'Throttling', 'Rate exceeded', 'retry', o.created_at, o.created_at
                 FROM job_outcomes AS o, generate_series(1, 4) AS a
                 WHERE o.status = 'dead' AND a < o.tries
                 RETURNING 1
             ),
             events AS (
                 INSERT INTO delivery_feedback (provider_message_id, channel, event_key, kind,
                                                suppresses, occurred_at, received_at, raw,
                                                job_id, attempt, applied_at)
                 SELECT o.provider_message_id, 'sms', 'delivery', 'delivery', false,
                        o.updated_at, o.updated_at,
                        '{\"notificationType\": \"Delivery\", \"status\": \"SUCCESS\"}'::jsonb,
                        o.job_id, o.tries, o.updated_at
                 FROM job_outcomes AS o
                 WHERE o.status = 'sent'
                 RETURNING 1
             )
             SELECT (SELECT count(*) FROM attempts), (SELECT count(*) FROM events)",
            &[],
        )
        .await
        .context("the day's retries and provider events")?;
    let (attempt_rows, feedback_rows): (i64, i64) = (row.get(0), row.get(1));
    bench.settle().await?;

    let span = plan.poll_span;
    let ingest = new_ingest(bench).await?;
    let requests = Requests::new()?;
    let deliverer = Arc::new(RecordingDeliverer::default());
    let stores = worker_stores(bench, 1).await?;
    // the worker invoked again and again until ingest stops, then once more for what is
    // left: each invocation has 30 s and polls an empty queue for its first 5 (the rest is
    // the margin a batch needs before the deadline)
    let mut cfg = worker_config(100);
    cfg.poll = Duration::from_secs(25);
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (deliverer, stop) = (deliverer.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let last = stop.load(Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(30);
                run_workers(stores.clone(), &cfg, deliverer.clone(), deadline).await?;
                if last {
                    return anyhow::Ok(());
                }
            }
        })
    };
    let sweeper_store = open_stores(bench, 1).await?.pop().context("a store")?;
    let start = tokio::time::Instant::now();
    let sweep = tokio::spawn(async move {
        tokio::time::sleep(span / 3).await;
        let began = Instant::now();
        let summary = notify_core::sweeper::run_once(&sweeper_store, &config, At::SERVER).await;
        (began, Instant::now(), summary)
    });
    let gap = Duration::from_secs_f64(1.0 / f64::from(plan.rate.max(1)));
    let mut sent: Vec<(Instant, f64)> = Vec::new();
    let mut accepted = Vec::new();
    let mut n = 0u32;
    // for the span at least, and a third of it past the end of the sweeper's pass
    let mut until = start + span;
    let mut after_set = false;
    loop {
        let now = tokio::time::Instant::now();
        if !after_set && sweep.is_finished() {
            until = until.max(now + span / 3);
            after_set = true;
        }
        if after_set && now >= until {
            break;
        }
        tokio::time::sleep_until(start + gap * n).await;
        let req = requests.send(u64::from(n))?;
        let t0 = Instant::now();
        let resp = ingest.handle(req).await;
        sent.push((t0, t0.elapsed().as_secs_f64() * 1000.0));
        accepted.push(accepted_id(resp.status(), resp.body())?);
        n += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let (began, ended, summary) = sweep.await.context("the sweeper task")?;
    let summary = summary.map_err(|e| anyhow::anyhow!("the sweeper's pass failed: {e:?}"))?;
    worker.await.context("worker task")??;
    let called = deliverer.calls.lock().unwrap_or_else(|e| e.into_inner());
    let missing = accepted
        .iter()
        .filter(|id| !called.contains_key(id))
        .count();
    ensure!(
        missing == 0,
        "{missing} of {} requests accepted during the drop never reached the provider",
        accepted.len()
    );
    ensure!(
        summary.history.dropped >= 1 && summary.feedback_pruned as i64 >= feedback_rows,
        "the sweeper dropped {:?} and pruned {} provider events, not the filled day's {feedback_rows}",
        summary.history,
        summary.feedback_pruned
    );
    let window = |keep: &dyn Fn(Instant) -> bool| {
        Samples::from_ms(
            sent.iter()
                .filter(|(t, _)| keep(*t))
                .map(|(_, ms)| *ms)
                .collect(),
        )
        .latency()
    };
    Ok(UnderLoad {
        jobs: plan.retention_jobs,
        attempt_rows,
        feedback_rows,
        rate_per_sec: plan.rate,
        sweep_secs: ended.duration_since(began).as_secs_f64(),
        days_dropped: summary.history.dropped,
        feedback_pruned: summary.feedback_pruned,
        ingest_before: window(&|t| t < began),
        ingest_during: window(&|t| t >= began && t <= ended),
        ingest_after: window(&|t| t > ended),
        ingested: accepted.len(),
    })
}
