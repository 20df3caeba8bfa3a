//! `--only prepared`: the store's statements prepared once per connection (as the template
//! ships them on a direct connection, `DATABASE_PREPARED_STATEMENTS`) against the same
//! statements unnamed (parsed and planned on every call, as through a transaction pooler), in
//! rounds taken in turns, ABBA as part 5's (prepared, unnamed, unnamed, prepared, …), each
//! round measuring:
//! - ingest's requests one at a time on one instance (part 3's run at concurrency 1);
//! - the worker's drain at the template's defaults (part 5's side of ours: one worker,
//!   batch 100, timed by the database's clock).
//!
//! Only the setting differs between the two sides: the same database, the same code, the
//! same clocks. Decision 0014 reads these figures.

use anyhow::Result;
use serde::Serialize;

use crate::Plan;
use crate::db::Bench;
use crate::peer::{OURS_DEFAULT, ratio_of_rounds};
use crate::stats::{median, rounded, rounded_all};

/// One side's figures over the rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Side {
    /// ingest, one request at a time: each round's median latency
    #[serde(serialize_with = "rounded_all::<3, _>")]
    pub ingest_p50_ms: Vec<f64>,
    /// the same: each round's requests per second
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub ingest_per_sec: Vec<f64>,
    /// the drain at the defaults: each round's jobs per second
    #[serde(serialize_with = "rounded_all::<1, _>")]
    pub drain_jobs_per_sec: Vec<f64>,
}

/// A figure's comparison: each side's median, and the median of the rounds' ratios
/// (prepared ÷ unnamed) with its bootstrap 95% interval.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ratio {
    #[serde(serialize_with = "rounded::<3, _>")]
    pub prepared: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub unnamed: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub ratio: f64,
    pub ratio_ci95: Option<[f64; 2]>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Compared {
    pub rounds: usize,
    pub ingest_requests: u64,
    pub drain_jobs: i64,
    pub prepared: Side,
    pub unnamed: Side,
    pub ingest_p50_ms: Ratio,
    pub ingest_per_sec: Ratio,
    pub drain_jobs_per_sec: Ratio,
}

/// The rounds in turns; `bench`'s setting is left as the template ships it (prepared).
pub async fn measure(bench: &mut Bench, plan: &Plan) -> Result<Compared> {
    let rounds = plan.prepared_rounds;
    let (workers, batch) = OURS_DEFAULT;
    let mut out = Compared {
        rounds,
        ingest_requests: plan.ingest_c1,
        drain_jobs: plan.peer_jobs,
        ..Compared::default()
    };
    for round in 0..rounds {
        let first = round % 2 == 0;
        for prepared in [first, !first] {
            bench.set_prepared_statements(prepared);
            let name = if prepared { "prepared" } else { "unnamed" };
            crate::step!(
                "prepared or unnamed, round {}/{rounds}, {name}: ingest ({} requests), then a drain of {} jobs",
                round + 1,
                plan.ingest_c1,
                plan.peer_jobs
            );
            bench.truncate().await?;
            let ingest = crate::ingest::run(bench, 1, plan.ingest_c1).await?;
            let drain = crate::worked::cell(bench, plan.peer_jobs, workers, batch).await?;
            let side = if prepared {
                &mut out.prepared
            } else {
                &mut out.unnamed
            };
            side.ingest_p50_ms.push(ingest.latency.p50_ms);
            side.ingest_per_sec.push(ingest.per_sec);
            side.drain_jobs_per_sec.push(drain.jobs_per_sec);
        }
    }
    bench.set_prepared_statements(true);
    out.ingest_p50_ms = ratio(&out.prepared.ingest_p50_ms, &out.unnamed.ingest_p50_ms);
    out.ingest_per_sec = ratio(&out.prepared.ingest_per_sec, &out.unnamed.ingest_per_sec);
    out.drain_jobs_per_sec = ratio(
        &out.prepared.drain_jobs_per_sec,
        &out.unnamed.drain_jobs_per_sec,
    );
    Ok(out)
}

fn ratio(prepared: &[f64], unnamed: &[f64]) -> Ratio {
    let (ratio, ratio_ci95) = ratio_of_rounds(prepared, unnamed);
    Ratio {
        prepared: median(prepared),
        unnamed: median(unnamed),
        ratio,
        ratio_ci95,
    }
}

impl Compared {
    pub fn render(&self) {
        crate::say!(
            "statements prepared once per connection ÷ unnamed (parsed and planned each call), {} rounds in turns, medians:",
            self.rounds
        );
        let line = |what: &str, r: &Ratio, unit: &str| {
            let ci = r
                .ratio_ci95
                .map(|[lo, hi]| format!(", 95% interval {lo:.3} to {hi:.3}"))
                .unwrap_or_default();
            crate::say!(
                "   {what}: prepared {:.3}{unit}, unnamed {:.3}{unit}; ratio {:.3}{ci}",
                r.prepared,
                r.unnamed,
                r.ratio
            );
        };
        line(
            &format!(
                "ingest, one request at a time ({} requests), p50",
                self.ingest_requests
            ),
            &self.ingest_p50_ms,
            " ms",
        );
        line("the same, requests/s", &self.ingest_per_sec, "");
        line(
            &format!(
                "the worker's drain at the defaults ({} jobs, 1 worker, batch 100), jobs/s",
                self.drain_jobs
            ),
            &self.drain_jobs_per_sec,
            "",
        );
    }
}
