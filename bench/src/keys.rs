//! `--only keys`: what the status events' primary key costs the worker in the steady state,
//! random (UUIDv4, `gen_random_uuid()`, before migration 0009) against time-ordered (UUIDv7,
//! `time_ordered_uuid()`, migration 0009). Two databases on the server, one per kind of key,
//! alike but for the default of `status_events.id`:
//! - first rounds in turns, ABBA as part 5's (random, ordered, ordered, random, …), drain the
//!   queue on an empty `status_events` (as every other part runs);
//! - then each is emptied and filled with `plan.steady_events` published events of its own
//!   kind of key, spread over the last 30 days in time order (what RETENTION_DAYS = 30 keeps
//!   at 100,000 notifications a day), written with the index in place so its leaves are as
//!   full as inserts leave them;
//! - then as many rounds in turns beside the kept events. Each drain: 100,000 due jobs,
//!   VACUUM, a CHECKPOINT (so every page's first change after it is logged whole, as after
//!   any checkpoint), and a drain at the template's defaults (1 worker, batch 100, no-op
//!   provider), measured by pg_stat_wal (bytes, records, full-page images) and the
//!   database's clock. The drain's events are published as they are written (migration
//!   0010: the bus reads them from its cursor), so no round finds another's unpublished.

use anyhow::{Context, Result};
use serde::Serialize;

use crate::Plan;
use crate::db::{Bench, ORG, uuid_v7};
use crate::peer::{OURS_DEFAULT, ratio_of_rounds};
use crate::stats::{median, rounded};

/// The database of the random keys, beside the bench's own (time-ordered, as migrated).
const RANDOM_DB: &str = "notif_bench_random_keys";

/// One drain's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Drain {
    #[serde(serialize_with = "rounded::<1, _>")]
    pub wal_bytes_per_job: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub full_page_images_per_job: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub jobs_per_sec: f64,
}

/// One kind of key: on an empty table, then each steady-state round.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Side {
    pub empty: Vec<Drain>,
    pub steady: Vec<Drain>,
    /// The primary key's size once filled (bytes).
    pub index_bytes: i64,
    /// How long the fill took (seconds).
    #[serde(serialize_with = "rounded::<1, _>")]
    pub fill_secs: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Keys {
    pub events_kept: i64,
    pub jobs_per_drain: i64,
    pub random: Side,
    pub ordered: Side,
    /// The steady rounds' median WAL per job, ordered ÷ random, with its bootstrap interval.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub wal_ratio: f64,
    pub wal_ratio_ci95: Option<[f64; 2]>,
    /// The same for jobs per second.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub rate_ratio: f64,
    pub rate_ratio_ci95: Option<[f64; 2]>,
}

/// 100,000 due jobs (the plan's peer size), settled and checkpointed, then drained at the
/// defaults.
async fn drain(bench: &Bench, jobs: i64) -> Result<Drain> {
    let (workers, batch) = OURS_DEFAULT;
    bench.reset(jobs).await?;
    let (bytes0, fpi0) = bench.wal_counters().await?;
    let cell = crate::worked::drain(bench, workers, batch)
        .await?
        .checked(bench, jobs)
        .await?;
    let (bytes1, fpi1) = bench.wal_counters().await?;
    Ok(Drain {
        wal_bytes_per_job: (bytes1 - bytes0) / jobs as f64,
        full_page_images_per_job: (fpi1 - fpi0) / jobs as f64,
        jobs_per_sec: cell.jobs_per_sec,
    })
}

/// `n` published `sent` events of the bench's organization, one every 30 days ÷ `n` up to
/// now, in time order, each id random or of its time.
async fn fill(bench: &Bench, n: i64, ordered: bool) -> Result<(f64, i64)> {
    let started = std::time::Instant::now();
    // the kept events alone: not the empty rounds' (made now, they would sit above the fill)
    bench
        .client
        .batch_execute("TRUNCATE status_events")
        .await
        .context("empty status_events")?;
    let id = if ordered {
        uuid_v7("s.t")
    } else {
        "gen_random_uuid()".to_owned()
    };
    // in slices, so that no one statement holds the whole fill in memory
    let slice = 250_000;
    let mut from = 0;
    while from < n {
        let to = (from + slice).min(n);
        bench
            .client
            .execute(
                &format!(
                    "INSERT INTO status_events (id, organization_id, job_id, type, created_at,
                                                published_at, status, previous_status,
                                                channel, attempt, provider_message_id)
                     SELECT {id}, '{ORG}'::uuid, j.job, 'notification.sent', s.t, s.t,
                            'sent', 'processing', 'sms', 1, 'm-' || s.g
                     FROM (SELECT g, now() - interval '30 days'
                                     + (interval '30 days' / $3::bigint) * g AS t
                           FROM generate_series($1::bigint, $2::bigint - 1) AS g) AS s
                     CROSS JOIN LATERAL (SELECT gen_random_uuid() AS job, s.g) AS j
                     ORDER BY s.g"
                ),
                &[&from, &to, &n],
            )
            .await
            .context("fill status_events")?;
        from = to;
    }
    bench
        .client
        .batch_execute("VACUUM ANALYZE status_events")
        .await
        .context("vacuum status_events")?;
    let row = bench
        .client
        .query_one("SELECT pg_relation_size('status_events_pkey')", &[])
        .await?;
    Ok((started.elapsed().as_secs_f64(), row.get(0)))
}

pub async fn measure(bench: &Bench, plan: &Plan) -> Result<Keys> {
    let jobs = plan.peer_jobs;
    let random = bench.sibling(RANDOM_DB).await?;
    let result = async {
        // the previous default: what migration 0009 replaced
        random
            .client
            .batch_execute(
                "ALTER TABLE status_events ALTER COLUMN id SET DEFAULT gen_random_uuid()",
            )
            .await
            .context("random keys")?;
        let mut out = Keys {
            events_kept: plan.steady_events,
            jobs_per_drain: jobs,
            ..Keys::default()
        };
        rounds(&mut out, bench, &random, plan.keys_rounds, jobs, false).await?;
        for (name, side, db, ordered) in [
            ("random", &mut out.random, &random, false),
            ("ordered", &mut out.ordered, bench, true),
        ] {
            crate::step!("keys, {name}: {} events kept, filled", plan.steady_events);
            (side.fill_secs, side.index_bytes) = fill(db, plan.steady_events, ordered).await?;
        }
        rounds(&mut out, bench, &random, plan.keys_rounds, jobs, true).await?;
        let of = |side: &Side, f: fn(&Drain) -> f64| side.steady.iter().map(f).collect::<Vec<_>>();
        (out.wal_ratio, out.wal_ratio_ci95) = ratio_of_rounds(
            &of(&out.ordered, |d| d.wal_bytes_per_job),
            &of(&out.random, |d| d.wal_bytes_per_job),
        );
        (out.rate_ratio, out.rate_ratio_ci95) = ratio_of_rounds(
            &of(&out.ordered, |d| d.jobs_per_sec),
            &of(&out.random, |d| d.jobs_per_sec),
        );
        anyhow::Ok(out)
    }
    .await;
    random.drop_sibling().await;
    result
}

/// `n` rounds in turns of a drain on each database, onto each side's `empty` or `steady`.
async fn rounds(
    out: &mut Keys,
    ordered: &Bench,
    random: &Bench,
    n: usize,
    jobs: i64,
    steady: bool,
) -> Result<()> {
    let phase = if steady {
        "beside the kept events"
    } else {
        "on an empty status_events"
    };
    for round in 0..n {
        let random_first = round % 2 == 0;
        for is_random in [random_first, !random_first] {
            let name = if is_random { "random" } else { "ordered" };
            crate::step!(
                "keys, round {}/{n}, {name}: a drain of {jobs} jobs {phase}",
                round + 1
            );
            let (db, side) = if is_random {
                (random, &mut out.random)
            } else {
                (ordered, &mut out.ordered)
            };
            let drained = drain(db, jobs).await?;
            if steady {
                side.steady.push(drained);
            } else {
                side.empty.push(drained);
            }
        }
    }
    Ok(())
}

impl Keys {
    pub fn render(&self) {
        crate::say!(
            "the status events' primary key, random (v4) against time-ordered (v7): drains of {} jobs at the defaults, {} rounds in turns on an empty table, then as many beside {} published events (30 days)",
            self.jobs_per_drain,
            self.random.steady.len(),
            self.events_kept
        );
        for (name, s) in [("random", &self.random), ("ordered", &self.ordered)] {
            let med = |drains: &[Drain], f: fn(&Drain) -> f64| {
                median(&drains.iter().map(f).collect::<Vec<_>>())
            };
            crate::say!(
                "   {name:>7} (medians): empty table {:.0} B WAL a job, {:.3} full-page images a job, {:.0} jobs/s; steady {:.0} B, {:.3} images, {:.0} jobs/s; primary key {:.1} MiB, filled in {:.0} s",
                med(&s.empty, |d| d.wal_bytes_per_job),
                med(&s.empty, |d| d.full_page_images_per_job),
                med(&s.empty, |d| d.jobs_per_sec),
                med(&s.steady, |d| d.wal_bytes_per_job),
                med(&s.steady, |d| d.full_page_images_per_job),
                med(&s.steady, |d| d.jobs_per_sec),
                s.index_bytes as f64 / 1_048_576.0,
                s.fill_secs
            );
        }
        let ci = |c: Option<[f64; 2]>| {
            c.map(|[lo, hi]| format!(" (95% interval {lo:.3} to {hi:.3})"))
                .unwrap_or_default()
        };
        crate::say!(
            "   ordered ÷ random, steady: WAL a job {:.3}{}; jobs/s {:.3}{}",
            self.wal_ratio,
            ci(self.wal_ratio_ci95),
            self.rate_ratio,
            ci(self.rate_ratio_ci95)
        );
    }
}
