//! 11: a job's whole life, ours and graphile-worker's, at the shipped defaults: the WAL and
//! the server's time from the request's arrival to the last byte retention removes.
//!
//! The write budget (9) counts only the work, on no-op jobs with tiny payloads, from a
//! truncated queue. This part follows the same jobs through every phase, each side the same
//! way:
//! 1. **ingest**: the requests inserted in batches of [`INGEST_BATCH`] from a new session,
//!    ours through `JobStore::insert_many` (insert_jobs.sql: the request, the queue row and
//!    the idempotency key; each request validated as the API validates it), theirs through
//!    `graphile_worker.add_jobs` (the same payload, the same key as its `job_key`);
//! 2. **work**: drained at the defaults (ours: one worker, batch 100, `WORKER_CONCURRENCY` 32;
//!    theirs: one process at its performance test's settings), every provider message id a
//!    random UUIDv4 as SNS and SES give (ids in time order would only ever append to the
//!    message id index);
//! 3. **vacuum**: a plain `VACUUM` of the side's database, what autovacuum owes for the dead
//!    rows the first two phases left (autovacuum is off for the part on both sides, so it
//!    lands in no phase by chance);
//! 4. **retention** (ours only; graphile-worker deletes a finished job and keeps nothing): the
//!    sweeper's `drop_history_days`, asked as it would be once the day's retention has passed
//!    (its `now` moved forward that far), then the `VACUUM` of `idempotency_keys` the deleted
//!    keys leave owing.
//!
//! The payloads are realistic: half the jobs are SMS of one part, half emails with 5–30 KB of
//! HTML (uniform), built from a fixed template and a vocabulary, so TOAST compresses them
//! about as it would real markup. One CHECKPOINT before ingest (a job's ingest, work and
//! vacuum fall within one checkpoint's span under a steady load) and one before retention
//! (days later): both sides alike.
//!
//! Figures per job: WAL bytes (`pg_current_wal_lsn`, cluster-wide, nothing else running) and
//! the server's time: the statements' `total_exec_time` for ingest and work
//! (`pg_stat_statements`, tracked for those phases' sessions), and the elapsed time of the
//! one-statement maintenance phases (VACUUM, the retention call).

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use chrono::{Days, Utc};
use notify_core::store::{At, DropHistoryDays, JobStore, NewJob};
use notify_postgres::PgStore;
use notify_postgres::db::DbConfig;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_postgres::Client;
use uuid::Uuid;

use crate::Plan;
use crate::db::{Bench, DB, ORG, PEER_DB, set_autovacuum};
use crate::peer::{self, OURS_DEFAULT, SETTINGS, THEIRS_DEFAULT_PROCESSES, Task};
use crate::probe::{Deltas, Probe};
use crate::stats::{rounded, rounded_opt};
use crate::{walmap, worked};

/// Requests per ingest statement on both sides: a batch request's size.
pub const INGEST_BATCH: usize = 100;

/// The email HTML's size range, in bytes.
pub const HTML_BYTES: (usize, usize) = (5 * 1024, 30 * 1024);

#[derive(Debug, Clone, Default, Serialize)]
pub struct WholeLife {
    pub jobs: i64,
    /// The mean payload size (the request's JSON as the caller sends it), in bytes.
    #[serde(serialize_with = "rounded::<0, _>")]
    pub payload_bytes_mean: f64,
    pub ours: LifeSide,
    pub theirs: LifeSide,
    /// Ours ÷ theirs, WAL bytes over the whole life.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub wal_ratio: Option<f64>,
    /// Ours ÷ theirs, the statements' time (ingest and work).
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub exec_ratio: Option<f64>,
}

/// One side's life, or why it was not measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LifeSide {
    /// `measured`, or why not.
    pub status: String,
    pub setting: String,
    pub phases: Vec<Phase>,
    /// Every phase's WAL, per job.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub wal_bytes_per_job: f64,
    /// Ingest's and work's statements' execution time per job, in ms.
    #[serde(serialize_with = "rounded_opt::<4, _>")]
    pub exec_ms_per_job: Option<f64>,
    /// The maintenance phases' time per job (VACUUM, retention), in ms.
    #[serde(serialize_with = "rounded::<4, _>")]
    pub maintenance_ms_per_job: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Phase {
    pub name: &'static str,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub wal_bytes_per_job: f64,
    /// The statements' time (ingest, work) or the phase's elapsed time (maintenance), per
    /// job, in ms.
    #[serde(serialize_with = "rounded_opt::<4, _>")]
    pub ms_per_job: Option<f64>,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub secs: f64,
}

impl LifeSide {
    fn not_measured(why: impl Into<String>) -> Self {
        Self {
            status: why.into(),
            ..Self::default()
        }
    }

    fn of(setting: String, phases: Vec<Phase>) -> Self {
        let sum = |keep: fn(&Phase) -> bool| -> Option<f64> {
            phases
                .iter()
                .filter(|p| keep(p))
                .map(|p| p.ms_per_job)
                .sum()
        };
        Self {
            status: "measured".into(),
            setting,
            wal_bytes_per_job: phases.iter().map(|p| p.wal_bytes_per_job).sum(),
            exec_ms_per_job: sum(|p| !MAINTENANCE.contains(&p.name)),
            maintenance_ms_per_job: sum(|p| MAINTENANCE.contains(&p.name)).unwrap_or(0.0),
            phases,
        }
    }

    fn measured(&self) -> bool {
        self.status == "measured"
    }
}

/// The phases timed by their elapsed time, not by their statements'.
const MAINTENANCE: [&str; 2] = ["vacuum", "retention"];

impl WholeLife {
    fn compare(jobs: i64, payload_bytes_mean: f64, ours: LifeSide, theirs: LifeSide) -> Self {
        let both = ours.measured() && theirs.measured();
        let ratio = |a: Option<f64>, b: Option<f64>| {
            a.zip(b)
                .filter(|(_, b)| both && *b > 0.0)
                .map(|(a, b)| a / b)
        };
        Self {
            jobs,
            payload_bytes_mean,
            wal_ratio: ratio(Some(ours.wal_bytes_per_job), Some(theirs.wal_bytes_per_job)),
            exec_ratio: ratio(ours.exec_ms_per_job, theirs.exec_ms_per_job),
            ours,
            theirs,
        }
    }
}

/// A phase whose statements are tracked: `run` between the probe's two marks (sessions it
/// opens are tracked, `helper`'s counters flushed first), timed; its result after the
/// probe's reading, so a failed run still switches tracking off.
async fn tracked<T>(
    name: &'static str,
    jobs: i64,
    probe: &Probe,
    helper: &Client,
    run: impl std::future::Future<Output = Result<T>>,
) -> Result<(Phase, T)> {
    let at = walmap::mark(helper).await;
    let mark = probe.begin(helper).await?;
    let started = Instant::now();
    let out = run.await;
    let secs = started.elapsed().as_secs_f64();
    let deltas = probe.end(mark).await?;
    walmap::print(helper, name, jobs, at).await;
    let out = out.with_context(|| format!("the {name} phase"))?;
    let ms = statements_ms(&deltas);
    Ok((phase(name, jobs, secs, deltas.wal_bytes, ms), out))
}

/// A phase of `jobs` jobs from a probe's deltas (its statements' time) or from its elapsed
/// time.
fn phase(name: &'static str, jobs: i64, secs: f64, wal_bytes: f64, ms: Option<f64>) -> Phase {
    let n = jobs.max(1) as f64;
    Phase {
        name,
        wal_bytes_per_job: wal_bytes / n,
        ms_per_job: ms.map(|ms| ms / n),
        secs,
    }
}

fn statements_ms(d: &Deltas) -> Option<f64> {
    d.statements
        .as_ref()
        .ok()
        .map(|s| s.iter().map(|s| s.exec_ms).sum())
}

/// A small deterministic generator (SplitMix64): the same payloads on both sides.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const WORDS: [&str; 64] = [
    "account",
    "invoice",
    "payment",
    "receipt",
    "order",
    "shipping",
    "delivery",
    "update",
    "your",
    "the",
    "and",
    "for",
    "with",
    "from",
    "this",
    "that",
    "we",
    "have",
    "been",
    "will",
    "please",
    "review",
    "details",
    "below",
    "amount",
    "total",
    "due",
    "date",
    "thank",
    "you",
    "customer",
    "support",
    "team",
    "questions",
    "contact",
    "us",
    "at",
    "any",
    "time",
    "view",
    "online",
    "secure",
    "login",
    "password",
    "reset",
    "verify",
    "email",
    "address",
    "changes",
    "settings",
    "privacy",
    "policy",
    "terms",
    "service",
    "subscription",
    "renewal",
    "plan",
    "monthly",
    "annual",
    "discount",
    "offer",
    "today",
    "new",
    "features",
];

/// An email's HTML of about `size` bytes: a fixed head and layout, paragraphs of words.
fn html(rng: &mut Rng, size: usize) -> String {
    let mut out = String::with_capacity(size + 200);
    out.push_str(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{font-family:Arial,\
         sans-serif;color:#333}.wrap{max-width:600px;margin:0 auto}.btn{background:#0a66c2;\
         color:#fff;padding:12px 20px;border-radius:4px;text-decoration:none}</style></head>\
         <body><table class=\"wrap\" role=\"presentation\" width=\"100%\"><tr><td>",
    );
    while out.len() < size {
        out.push_str("<p style=\"margin:0 0 12px 0;line-height:1.5\">");
        for _ in 0..(20 + rng.below(40)) {
            out.push_str(WORDS[rng.below(WORDS.len())]);
            out.push(' ');
        }
        if rng.below(4) == 0 {
            out.push_str(&format!(
                "<a class=\"btn\" href=\"https://example.com/r/{:016x}\">View</a>",
                rng.next()
            ));
        }
        out.push_str("</p>\n");
    }
    out.push_str("</td></tr></table></body></html>");
    out
}

/// The `n`th request of the run, as a caller sends it: SMS for even `n`, email for odd.
fn request(rng: &mut Rng, n: usize) -> Value {
    if n.is_multiple_of(2) {
        json!({"channel": "sms", "to": format!("+1555{:07}", n % 10_000_000),
               "message": format!("Your verification code is {:06}", rng.below(1_000_000))})
    } else {
        let size = HTML_BYTES.0 + rng.below(HTML_BYTES.1 - HTML_BYTES.0 + 1);
        json!({"channel": "email", "to": format!("user{n}@example.com"),
               "subject": format!("Your invoice #{n}"), "html": html(rng, size)})
    }
}

/// The run's requests, each with its idempotency key (a random UUIDv4).
fn requests(jobs: i64) -> Vec<(Value, String)> {
    let mut rng = Rng(0x5EED);
    (0..jobs as usize)
        .map(|n| (request(&mut rng, n), Uuid::new_v4().to_string()))
        .collect()
}

pub async fn measure(bench: &Bench, plan: &Plan) -> Result<WholeLife> {
    let jobs = plan.life_jobs;
    crate::step!(
        "whole life: {jobs} jobs (half emails of 5-30 KB HTML), ingest, work, vacuum, retention"
    );
    let requests = requests(jobs);
    let payload_bytes_mean = requests
        .iter()
        .map(|(r, _)| r.to_string().len() as f64)
        .sum::<f64>()
        / jobs.max(1) as f64;
    let ours = bench.autovacuum(false).await;
    let ours = match ours {
        Ok(()) => {
            let measured = ours_life(bench, &requests).await;
            let restored = bench.autovacuum(true).await;
            match (measured, restored) {
                (Ok(side), Ok(())) => side,
                (Err(e), _) | (_, Err(e)) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    let theirs = if plan.peer {
        match theirs_life(bench, &requests).await {
            Ok(side) => side,
            Err(e) => LifeSide::not_measured(format!("not measured: {e:#}")),
        }
    } else {
        LifeSide::not_measured("not measured (--no-peer)")
    };
    Ok(WholeLife::compare(jobs, payload_bytes_mean, ours, theirs))
}

async fn ours_life(bench: &Bench, requests: &[(Value, String)]) -> Result<LifeSide> {
    let jobs = requests.len() as i64;
    let org: Uuid = ORG.parse().context("the bench's organization")?;
    let now = Utc::now();
    let new_jobs = requests
        .iter()
        .map(|(body, key)| {
            notify_api::validate::validate(body, now)
                .map(|r| r.into_job(org, Some(key.clone()), notify_api::DEFAULT_MAX_AGE))
                .map_err(|e| anyhow::anyhow!("a bench request is invalid: {e:?}"))
        })
        .collect::<Result<Vec<NewJob>>>()?;
    // BENCH_PAYLOAD_COPY=1: ingest copies each payload into the queue row, as on a database
    // upgraded from 1.0 (migration 0012), for the figures of the design before it
    let copy = std::env::var("BENCH_PAYLOAD_COPY").is_ok_and(|v| v == "1");
    bench
        .client
        .execute("UPDATE queue_settings SET copies_payload = $1", &[&copy])
        .await
        .context("set the payload's copy")?;
    bench.truncate().await?;
    bench.settle().await?;
    let probe = Probe::open(&bench.config, &bench.config, DB).await?;
    let mut phases = Vec::new();

    // 1. ingest, from a session opened after the probe's mark (tracked)
    let (ingested, ()) = tracked("ingest", jobs, &probe, &bench.client, async {
        let store = PgStore::connect(bench.config.clone()).await?;
        for chunk in new_jobs.chunks(INGEST_BATCH) {
            store.insert_many(chunk).await?;
        }
        anyhow::Ok(())
    })
    .await?;
    phases.push(ingested);

    // 2. work, at the defaults
    let (workers, batch) = OURS_DEFAULT;
    let (worked, _) = tracked("work", jobs, &probe, &bench.client, async {
        worked::drain(bench, workers, batch).await
    })
    .await?;
    // every job sent with its attempt recorded (its rate is not this part's: a quick run
    // may drain too fast for the database's clock)
    let counts = bench.counts().await?;
    ensure!(
        counts.sent == jobs && counts.deliveries == jobs && counts.open == 0,
        "whole life: {jobs} jobs, but {} sent, {} attempts recorded, {} still open",
        counts.sent,
        counts.deliveries,
        counts.open
    );
    phases.push(worked);

    // 3. what autovacuum would owe
    phases.push(
        maintenance("vacuum", jobs, &bench.client, |c| async move {
            c.batch_execute("VACUUM").await.context("VACUUM")
        })
        .await?,
    );

    // 4. retention, asked once the day's retention has passed
    let _ = bench.client.batch_execute("CHECKPOINT").await;
    let store = PgStore::connect(bench.config.clone()).await?;
    let keep = crate::retention::kept()?;
    // the first moment at which every job of today has ended more than `keep` ago
    let tomorrow = Utc::now()
        .date_naive()
        .checked_add_days(Days::new(1))
        .context("tomorrow")?
        .and_hms_opt(0, 0, 1)
        .context("tomorrow")?
        .and_utc();
    let later = tomorrow + chrono::Duration::from_std(keep).context("retention")?;
    let today = Utc::now().date_naive().to_string();
    let store = &store;
    let retained = maintenance("retention", jobs, &bench.client, |c| async move {
        let dropped = store
            .drop_history_days(DropHistoryDays {
                keep,
                now: Some(later),
            })
            .await?;
        ensure!(
            dropped.dropped_days.split(',').any(|d| d == today),
            "retention dropped {dropped:?}, not today's jobs"
        );
        c.batch_execute("VACUUM idempotency_keys")
            .await
            .context("VACUUM idempotency_keys")
    })
    .await;
    // the days the call dropped (today, and yesterday's empty one) again, for later parts
    store.add_history_days(At::SERVER).await?;
    phases.push(retained?);
    let left: i64 = bench
        .client
        .query_one(
            "SELECT (SELECT count(*) FROM job_requests) + (SELECT count(*) FROM job_outcomes)
                  + (SELECT count(*) FROM idempotency_keys)",
            &[],
        )
        .await?
        .get(0);
    ensure!(left == 0, "{left} history rows left after retention");
    let setting = format!(
        "{workers} worker, batch {batch}, WORKER_CONCURRENCY {} (the template's defaults)",
        worked::worker_config(batch).concurrency
    );
    Ok(LifeSide::of(setting, phases))
}

/// A one-statement phase on `client`, timed by its elapsed time, its WAL read around it.
async fn maintenance<'a, F, Fut>(
    name: &'static str,
    jobs: i64,
    client: &'a Client,
    run: F,
) -> Result<Phase>
where
    F: FnOnce(&'a Client) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let at = walmap::mark(client).await;
    let wal0 = wal(client).await?;
    let started = Instant::now();
    run(client).await?;
    let secs = started.elapsed().as_secs_f64();
    let wal_bytes = (wal(client).await? - wal0) as f64;
    walmap::print(client, name, jobs, at).await;
    Ok(phase(name, jobs, secs, wal_bytes, Some(secs * 1000.0)))
}

async fn wal(client: &Client) -> Result<i64> {
    Ok(client
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
            &[],
        )
        .await
        .context("pg_current_wal_lsn")?
        .get(0))
}

async fn theirs_life(bench: &Bench, requests: &[(Value, String)]) -> Result<LifeSide> {
    let client = peer::setup(bench).await?;
    set_autovacuum(&client, "graphile_worker", false).await?;
    let measured = theirs_phases(bench, &client, requests).await;
    let restored = set_autovacuum(&client, "graphile_worker", true).await;
    let phases = measured?;
    restored?;
    Ok(LifeSide::of(
        format!(
            "{THEIRS_DEFAULT_PROCESSES} process, concurrentJobs {}, localQueue {} (its performance test's)",
            SETTINGS.concurrent_jobs, SETTINGS.local_queue_size
        ),
        phases,
    ))
}

async fn theirs_phases(
    bench: &Bench,
    client: &Client,
    requests: &[(Value, String)],
) -> Result<Vec<Phase>> {
    let jobs = requests.len() as i64;
    peer::check(client, 0).await?;
    client.batch_execute("VACUUM ANALYZE").await?;
    let _ = client.batch_execute("CHECKPOINT").await;
    let target = DbConfig::new(&bench.peer_url, None)?;
    let probe = Probe::open(&bench.config, &target, PEER_DB).await?;
    let mut phases = Vec::new();

    // 1. ingest: add_jobs, the same batches, payloads and keys
    let specs: Vec<Value> = requests
        .chunks(INGEST_BATCH)
        .map(|chunk| {
            Value::Array(
                chunk
                    .iter()
                    .map(|(payload, key)| {
                        json!({"identifier": "noop", "payload": payload, "job_key": key})
                    })
                    .collect(),
            )
        })
        .collect();
    let (ingested, ()) = tracked("add_jobs", jobs, &probe, client, async {
        let session = target.connect().await?;
        let add = session.prepare(peer::ADD_JOBS).await?;
        for spec in &specs {
            session.query_one(&add, &[&spec.to_string()]).await?;
        }
        anyhow::Ok(())
    })
    .await?;
    phases.push(Phase {
        name: "ingest",
        ..ingested
    });

    // 2. work, at its performance test's settings
    let (worked, _) = tracked("work", jobs, &probe, client, async {
        peer::run_processes(bench, THEIRS_DEFAULT_PROCESSES, SETTINGS, Task::Noop).await
    })
    .await?;
    peer::check(client, jobs).await?;
    phases.push(worked);

    // 3. what autovacuum would owe (4: nothing of a finished job is kept)
    phases.push(
        maintenance("vacuum", jobs, client, |c| async move {
            c.batch_execute("VACUUM").await.context("VACUUM")
        })
        .await?,
    );
    Ok(phases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_carry_5_to_30_kb_of_html_and_sms_one_part() {
        let mut rng = Rng(1);
        let mut sizes = Vec::new();
        for n in 0..200 {
            let r = request(&mut rng, n);
            let body = notify_api::validate::validate(&r, Utc::now());
            assert!(body.is_ok(), "request {n} is valid: {body:?}");
            if n % 2 == 0 {
                assert!(r["message"].as_str().unwrap().len() <= 160);
            } else {
                sizes.push(r["html"].as_str().unwrap().len());
            }
        }
        let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(
            *lo >= HTML_BYTES.0 && *hi <= HTML_BYTES.1 + 1_000,
            "{lo}..{hi}"
        );
        assert!(hi - lo > 15_000, "spread over the range: {lo}..{hi}");
    }

    #[test]
    fn a_side_sums_its_phases_and_the_ratios_need_both() {
        let phases = |w: f64| {
            vec![
                phase("ingest", 10, 1.0, 10.0 * w, Some(5.0)),
                phase("work", 10, 1.0, 20.0 * w, Some(15.0)),
                phase("vacuum", 10, 1.0, 5.0 * w, Some(10.0)),
            ]
        };
        let ours = LifeSide::of("a".into(), phases(2.0));
        assert_eq!(ours.wal_bytes_per_job, 7.0);
        assert_eq!(ours.exec_ms_per_job, Some(2.0));
        assert_eq!(ours.maintenance_ms_per_job, 1.0);
        let life = WholeLife::compare(10, 1.0, ours.clone(), LifeSide::of("b".into(), phases(1.0)));
        assert_eq!(life.wal_ratio, Some(2.0));
        assert_eq!(life.exec_ratio, Some(1.0));
        let alone = WholeLife::compare(10, 1.0, ours, LifeSide::not_measured("no peer"));
        assert_eq!(alone.wal_ratio, None);
    }
}
