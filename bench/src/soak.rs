//! 12: the soak. Both systems side by side for `plan.soak_secs`, each under the same steady
//! ingest, each working its queue as it runs in production, autovacuum at the server's
//! defaults, and in the middle third a REPEATABLE READ transaction held open on each
//! database (a report or a `pg_dump` does that): vacuum can then remove none of the rows
//! the queues churn through, and a claim has to step over them.
//!
//! The two run at the same time on the same server, so both meet the same machine; each has
//! its own database (a transaction holds back vacuum in its own database only, so each gets
//! its own held transaction).
//! - **Ingest**: [`TICK`] after tick, `rate / 10` SMS jobs per tick in one statement: ours
//!   through `JobStore::insert_many`, theirs through `graphile_worker.add_jobs`.
//! - **Work**: ours, one connection claiming at the shipped batch (100) and completing what it
//!   claimed, polling every 250 ms when nothing is due (as the worker does with
//!   `WORKER_POLL_SECS`); theirs, one `graphile-worker` process at its performance test's
//!   settings (`run`, woken by its LISTEN/NOTIFY).
//! - **Claim latency**: the claim statement's round trip, measured by each side's client the
//!   same way (ours around `JobStore::claim`, theirs around its SKIP LOCKED `getJobs` query,
//!   in bench/peer/drain.js), over the claims that returned a job.
//! - **The tables**: every bucket, each queue table's dead and live tuples
//!   (`pg_stat_user_tables`) and its indexes' and heap's size.
//!
//! The series go to `soak.csv` and, where Python with matplotlib is at hand
//! (`BENCH_PYTHON`, set by tests/scripts/bench.sh), to `soak.png` beside it (bench/plot_soak.py).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use notify_core::store::{Claim, Complete, JobStore, NewJob};
use notify_postgres::PgStore;
use notify_postgres::db::DbConfig;
use serde::Serialize;
use serde_json::json;
use tokio::process::Command;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::Plan;
use crate::db::{Bench, ORG};
use crate::peer::{self, SETTINGS};
use crate::stats::{Latency, Samples, rounded, rounded_opt};

/// Ingest's pace: a statement every tick.
pub const TICK: Duration = Duration::from_millis(100);
/// Our worker's wait when nothing is due (the worker's polling interval).
const POLL: Duration = Duration::from_millis(250);
/// The batch our worker claims (the template's `WorkerBatchSize`).
const BATCH: u32 = 100;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Soak {
    pub status: String,
    pub secs: u64,
    /// Jobs ingested per second, on each side.
    pub rate_per_sec: u32,
    /// When the REPEATABLE READ transactions were open, in seconds from the start.
    pub held_from_secs: u64,
    pub held_to_secs: u64,
    pub bucket_secs: u64,
    pub ours: SoakSide,
    pub theirs: SoakSide,
    /// Ours ÷ theirs: the claim's p99 and p50 over the whole soak, and its p99 while the
    /// transactions were held.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub claim_p99_ratio: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub claim_p50_ratio: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub held_claim_p99_ratio: Option<f64>,
    /// Where the series were written, and the plot (or why not).
    pub csv: String,
    pub png: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakSide {
    /// The queue table watched.
    pub table: String,
    pub jobs: i64,
    /// Claims that returned a job: over the whole soak, before, while and after the held
    /// transactions.
    pub claims: Latency,
    pub before: Latency,
    pub held: Latency,
    pub after: Latency,
    pub max_dead_tuples: i64,
    pub max_index_bytes: i64,
    pub end_index_bytes: i64,
    pub buckets: Vec<Bucket>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Bucket {
    /// The bucket's end, in seconds from the start.
    pub at_secs: u64,
    pub claims: usize,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub p50_ms: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub p99_ms: f64,
    pub dead_tuples: i64,
    pub live_tuples: i64,
    pub index_bytes: i64,
    pub table_bytes: i64,
}

/// One claim: when it answered (seconds from the start), how long it took, and whether it
/// returned a job.
#[derive(Debug, Clone, Copy)]
struct ClaimSample {
    at: f64,
    ms: f64,
    rows: u64,
}

/// The queue tables' state at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct TableSample {
    at: f64,
    dead: i64,
    live: i64,
    index_bytes: i64,
    table_bytes: i64,
}

const OURS_TABLE: &str = "public.job_queue";
const THEIRS_TABLE: &str = "graphile_worker._private_jobs";

pub async fn measure(bench: &Bench, plan: &Plan) -> Result<Soak> {
    let secs = plan.soak_secs;
    let (from, to) = (secs / 3, 2 * secs / 3);
    let mut soak = Soak {
        secs,
        rate_per_sec: plan.soak_rate,
        held_from_secs: from,
        held_to_secs: to,
        bucket_secs: plan.soak_bucket_secs,
        ..Soak::default()
    };
    if !plan.peer {
        soak.status = "not measured (--no-peer)".into();
        return Ok(soak);
    }
    crate::step!(
        "soak: {secs} s of {} jobs/s into each side at once, REPEATABLE READ held from {from} s to {to} s",
        plan.soak_rate
    );
    let peer_client = peer::setup(bench).await?;
    bench.truncate().await?;
    bench.settle().await?;
    peer::check(&peer_client, 0).await?;
    peer_client.batch_execute("VACUUM ANALYZE").await?;
    let peer_db = DbConfig::new(&bench.peer_url, None)?;

    let start = Instant::now();
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the clock")?
        .as_secs_f64()
        * 1000.0;
    let run_for = Duration::from_secs(secs);
    let stop_ingest = Arc::new(AtomicBool::new(false));

    // theirs: one process for the soak and a grace to drain
    let grace = Duration::from_secs(plan.soak_bucket_secs.max(10));
    let node = Command::new("node")
        .arg("drain.js")
        .arg("soak")
        .current_dir(peer::dir())
        .env("PEER_DATABASE_URL", &bench.peer_url)
        .env("PEER_CONCURRENCY", SETTINGS.concurrent_jobs.to_string())
        .env("PEER_LOCAL_QUEUE", SETTINGS.local_queue_size.to_string())
        .env("PEER_TASK", "noop")
        .env("PEER_SOAK_SECS", (run_for + grace).as_secs().to_string())
        .kill_on_drop(true)
        .output();
    let node = tokio::spawn(node);

    let ours_ingest = tokio::spawn(ingest_ours(
        bench.config.clone(),
        plan.soak_rate,
        stop_ingest.clone(),
    ));
    let theirs_ingest = tokio::spawn(ingest_theirs(
        peer_db.clone(),
        plan.soak_rate,
        stop_ingest.clone(),
    ));
    // set once our ingest has returned, its last statement committed: only then may an empty
    // claim end our worker (the stop flag alone can leave one tick in flight)
    let ingest_done = Arc::new(AtomicBool::new(false));
    let ours_work = tokio::spawn(work_ours(bench.config.clone(), start, ingest_done.clone()));
    let tables = tokio::spawn(watch_tables(
        bench.config.clone(),
        peer_db.clone(),
        start,
        Duration::from_secs(plan.soak_bucket_secs),
        run_for + grace,
    ));

    // the held transactions, one in each database
    tokio::time::sleep_until((start + Duration::from_secs(from)).into()).await;
    crate::step!("soak: REPEATABLE READ open on both databases");
    let held = hold(&bench.config, OURS_TABLE).await;
    let held_theirs = hold(&peer_db, THEIRS_TABLE).await;
    tokio::time::sleep_until((start + Duration::from_secs(to)).into()).await;
    for h in [&held, &held_theirs].into_iter().flatten() {
        h.batch_execute("COMMIT")
            .await
            .context("end the held transaction")?;
    }
    let (_held, _held_theirs) = (held?, held_theirs?);
    crate::step!("soak: REPEATABLE READ closed");
    tokio::time::sleep_until((start + run_for).into()).await;
    stop_ingest.store(true, Ordering::SeqCst);
    let ours_jobs = ours_ingest.await.context("our ingest");
    ingest_done.store(true, Ordering::SeqCst);
    let ours_jobs = ours_jobs??;
    let theirs_jobs = theirs_ingest.await.context("their ingest")??;
    let ours_claims = ours_work.await.context("our worker")??;
    let out = node.await.context("the peer")?.context("run node")?;
    ensure!(
        out.status.success(),
        "node drain.js soak failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let theirs_claims = node_claims(&String::from_utf8_lossy(&out.stdout), epoch_ms);
    let (ours_tables, theirs_tables) = tables.await.context("the table watch")??;

    let sent = bench.counts().await?;
    ensure!(
        sent.open == 0 && sent.sent == ours_jobs,
        "soak: ours ingested {ours_jobs} jobs, sent {}, {} still open",
        sent.sent,
        sent.open
    );
    peer::check(&peer_client, theirs_jobs).await?;

    let window = (from as f64, to as f64);
    soak.ours = side(
        OURS_TABLE,
        ours_jobs,
        &ours_claims,
        &ours_tables,
        window,
        plan.soak_bucket_secs,
    );
    soak.theirs = side(
        THEIRS_TABLE,
        theirs_jobs,
        &theirs_claims,
        &theirs_tables,
        window,
        plan.soak_bucket_secs,
    );
    let ratio = |a: f64, b: f64| (a.is_finite() && b > 0.0).then(|| a / b);
    soak.claim_p99_ratio = ratio(soak.ours.claims.p99_ms, soak.theirs.claims.p99_ms);
    soak.claim_p50_ratio = ratio(soak.ours.claims.p50_ms, soak.theirs.claims.p50_ms);
    soak.held_claim_p99_ratio = ratio(soak.ours.held.p99_ms, soak.theirs.held.p99_ms);
    soak.status = "measured".into();
    let csv = plan.soak_dir.join("soak.csv");
    write_csv(&soak, &csv)?;
    soak.csv = csv.display().to_string();
    soak.png = plot(&csv).await;
    Ok(soak)
}

/// A session on `db` holding a REPEATABLE READ snapshot, or why not.
async fn hold(db: &DbConfig, table: &str) -> Result<Client> {
    let client = db.connect().await.context("connect the held transaction")?;
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM {table}"
        ))
        .await
        .context("open the held transaction")?;
    Ok(client)
}

/// `rate` jobs a second, a statement per [`TICK`], until `stop`; returns the jobs inserted.
async fn ingest_ours(db: DbConfig, rate: u32, stop: Arc<AtomicBool>) -> Result<i64> {
    let store = PgStore::connect(db).await.context("our ingest's store")?;
    let org: Uuid = ORG.parse()?;
    let per_tick = (rate / 10).max(1) as usize;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0i64;
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let now = chrono::Utc::now();
        let jobs: Vec<NewJob> = (0..per_tick)
            .map(|i| {
                let body = sms(n + i as i64);
                notify_api::validate::validate(&body, now)
                    .map(|r| r.into_job(org, None, notify_api::DEFAULT_MAX_AGE))
                    .map_err(|e| anyhow::anyhow!("a soak request is invalid: {e:?}"))
            })
            .collect::<Result<_>>()?;
        store.insert_many(&jobs).await.context("our ingest")?;
        n += per_tick as i64;
    }
    Ok(n)
}

fn sms(n: i64) -> serde_json::Value {
    json!({"channel": "sms", "to": format!("+1555{:07}", n % 10_000_000),
           "message": "Your verification code is 123456"})
}

async fn ingest_theirs(db: DbConfig, rate: u32, stop: Arc<AtomicBool>) -> Result<i64> {
    let client = db.connect().await.context("their ingest's connection")?;
    let add = client.prepare(peer::ADD_JOBS).await?;
    let per_tick = (rate / 10).max(1) as i64;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0i64;
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let specs: Vec<serde_json::Value> = (n..n + per_tick)
            .map(|i| json!({"identifier": "noop", "payload": sms(i)}))
            .collect();
        client
            .query_one(&add, &[&serde_json::Value::Array(specs).to_string()])
            .await
            .context("their ingest")?;
        n += per_tick;
    }
    Ok(n)
}

/// Claims and completes until ingest is done (its last insert committed) and nothing is due.
async fn work_ours(
    db: DbConfig,
    start: Instant,
    ingest_done: Arc<AtomicBool>,
) -> Result<Vec<ClaimSample>> {
    let store = PgStore::connect(db).await.context("our worker's store")?;
    let mut samples = Vec::new();
    loop {
        // read before the claim: a claim that starts after ingest is done sees every job
        let last = ingest_done.load(Ordering::SeqCst);
        let t0 = Instant::now();
        let claimed = store
            .claim(Claim {
                batch_size: BATCH,
                now: None,
            })
            .await?;
        samples.push(ClaimSample {
            at: start.elapsed().as_secs_f64(),
            ms: t0.elapsed().as_secs_f64() * 1000.0,
            rows: claimed.len() as u64,
        });
        if claimed.is_empty() {
            if last {
                return Ok(samples);
            }
            tokio::time::sleep(POLL).await;
            continue;
        }
        let done = crate::claim::sent(&claimed);
        store
            .complete(Complete {
                completions: &done,
                now: None,
            })
            .await?;
    }
}

/// graphile-worker's claim lines (`claim <epoch ms> <ms> <rows>`), on the soak's clock.
fn node_claims(stdout: &str, start_epoch_ms: f64) -> Vec<ClaimSample> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("claim ")?.split_whitespace();
            let at: f64 = f.next()?.parse().ok()?;
            let ms: f64 = f.next()?.parse().ok()?;
            let rows: u64 = f.next()?.parse().ok()?;
            Some(ClaimSample {
                at: (at - start_epoch_ms) / 1000.0,
                ms,
                rows,
            })
        })
        .collect()
}

/// Both queue tables every `every`, for `span`.
async fn watch_tables(
    ours: DbConfig,
    theirs: DbConfig,
    start: Instant,
    every: Duration,
    span: Duration,
) -> Result<(Vec<TableSample>, Vec<TableSample>)> {
    let (a, b) = (ours.connect().await?, theirs.connect().await?);
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while start.elapsed() < span {
        tick.tick().await;
        sa.push(table_sample(&a, OURS_TABLE, start).await?);
        sb.push(table_sample(&b, THEIRS_TABLE, start).await?);
    }
    Ok((sa, sb))
}

async fn table_sample(client: &Client, table: &str, start: Instant) -> Result<TableSample> {
    let row = client
        .query_one(
            "SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
                    pg_indexes_size(c.oid), pg_table_size(c.oid)
             FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE c.oid = $1::text::regclass",
            &[&table],
        )
        .await
        .with_context(|| format!("the state of {table}"))?;
    Ok(TableSample {
        at: start.elapsed().as_secs_f64(),
        dead: row.get(0),
        live: row.get(1),
        index_bytes: row.get(2),
        table_bytes: row.get(3),
    })
}

fn latency(claims: &[ClaimSample], keep: impl Fn(f64) -> bool) -> Latency {
    Samples::from_ms(
        claims
            .iter()
            .filter(|c| c.rows > 0 && keep(c.at))
            .map(|c| c.ms)
            .collect(),
    )
    .latency()
}

fn side(
    table: &str,
    jobs: i64,
    claims: &[ClaimSample],
    tables: &[TableSample],
    (from, to): (f64, f64),
    bucket_secs: u64,
) -> SoakSide {
    let width = bucket_secs.max(1) as f64;
    let last = claims
        .iter()
        .map(|c| c.at)
        .chain(tables.iter().map(|t| t.at))
        .fold(0.0, f64::max);
    let buckets = (0..(last / width).ceil() as u64)
        .map(|i| {
            let (lo, hi) = (i as f64 * width, (i + 1) as f64 * width);
            let l = latency(claims, |at| at >= lo && at < hi);
            // the bucket's last reading of the table
            let t = tables
                .iter()
                .rfind(|t| t.at < hi)
                .copied()
                .unwrap_or_default();
            Bucket {
                at_secs: (i + 1) * bucket_secs,
                claims: l.n,
                p50_ms: l.p50_ms,
                p99_ms: l.p99_ms,
                dead_tuples: t.dead,
                live_tuples: t.live,
                index_bytes: t.index_bytes,
                table_bytes: t.table_bytes,
            }
        })
        .collect();
    SoakSide {
        table: table.into(),
        jobs,
        claims: latency(claims, |_| true),
        before: latency(claims, |at| at < from),
        held: latency(claims, |at| at >= from && at < to),
        after: latency(claims, |at| at >= to),
        max_dead_tuples: tables.iter().map(|t| t.dead).max().unwrap_or(0),
        max_index_bytes: tables.iter().map(|t| t.index_bytes).max().unwrap_or(0),
        end_index_bytes: tables.last().map_or(0, |t| t.index_bytes),
        buckets,
    }
}

fn write_csv(soak: &Soak, path: &PathBuf) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut out = format!(
        "# held_from_secs={} held_to_secs={} rate_per_sec={}\n\
         side,at_secs,claims,p50_ms,p99_ms,dead_tuples,live_tuples,index_bytes,table_bytes\n",
        soak.held_from_secs, soak.held_to_secs, soak.rate_per_sec
    );
    for (name, side) in [("ours", &soak.ours), ("graphile-worker", &soak.theirs)] {
        for b in &side.buckets {
            out.push_str(&format!(
                "{name},{},{},{:.3},{:.3},{},{},{},{}\n",
                b.at_secs,
                b.claims,
                b.p50_ms,
                b.p99_ms,
                b.dead_tuples,
                b.live_tuples,
                b.index_bytes,
                b.table_bytes
            ));
        }
    }
    std::fs::write(path, out).with_context(|| format!("write {}", path.display()))
}

/// Draws `soak.png` beside the CSV with bench/plot_soak.py; the path, or why not.
async fn plot(csv: &std::path::Path) -> String {
    let Ok(python) = std::env::var("BENCH_PYTHON") else {
        return "not drawn: BENCH_PYTHON is not set (tests/scripts/bench.sh sets it)".into();
    };
    let png = csv.with_extension("png");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plot_soak.py");
    match Command::new(&python)
        .arg(&script)
        .arg(csv)
        .arg(&png)
        .output()
        .await
    {
        Ok(o) if o.status.success() => png.display().to_string(),
        Ok(o) => format!("not drawn: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => format!("not drawn: {python}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lines_are_put_on_the_soaks_clock() {
        let c = node_claims(
            "x\nclaim 1000500 2.5 3\nclaim 1002000 1.0 0\nclaim bad\n",
            1000000.0,
        );
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].at, c[0].ms, c[0].rows), (0.5, 2.5, 3));
        assert_eq!(c[1].at, 2.0);
    }

    #[test]
    fn buckets_and_windows_count_claims_that_returned_jobs() {
        let claims: Vec<ClaimSample> = (0..60)
            .map(|i| ClaimSample {
                at: i as f64 + 0.5,
                ms: if (20..40).contains(&i) { 10.0 } else { 1.0 },
                rows: if i % 10 == 9 { 0 } else { 5 },
            })
            .collect();
        let tables = [TableSample {
            at: 25.0,
            dead: 7,
            live: 1,
            index_bytes: 100,
            table_bytes: 200,
        }];
        let s = side("t", 540, &claims, &tables, (20.0, 40.0), 10);
        assert_eq!(s.buckets.len(), 6);
        assert_eq!(s.buckets[0].claims, 9, "the empty claim is left out");
        assert_eq!(s.buckets[2].p99_ms, 10.0);
        assert_eq!((s.buckets[2].dead_tuples, s.buckets[1].dead_tuples), (7, 0));
        assert_eq!(
            (s.before.p99_ms, s.held.p50_ms, s.after.p99_ms),
            (1.0, 10.0, 1.0)
        );
        assert_eq!((s.max_dead_tuples, s.end_index_bytes), (7, 100));
    }
}
