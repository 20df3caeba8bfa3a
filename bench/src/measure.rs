//! One run: every part in turn on the benchmark's databases, into [`Results`].

use std::time::Instant;

use anyhow::Result;

use crate::Plan;
use crate::cpu::Cpu;
use crate::db::Bench;
use crate::results::{Machine, Results};
use crate::writes::{self, WriteBudget};
use crate::{
    ceiling, claim, cold_start, floor, ingest, lanes, latency, life, peer, retention, soak, worked,
};

pub async fn measure(plan: &Plan, url: &str) -> Result<Results> {
    let (bench, mut r, started) = begin(plan, url).await?;
    // 8: cold starts first, while the machine is quiet (and a function that cannot start
    // fails the run before the long parts)
    crate::step!(
        "cold start: ingest, worker, sweeper × migrations on/off, {} rounds",
        plan.cold_runs
    );
    r.cold_start = cold_start::measure(&bench, plan.cold_runs).await?;
    let worked = worked::grid(&bench, plan).await?;
    // 9: a run of its own at the best cell (see writes.rs for why)
    let ours_writes = writes::ours(&bench, plan.jobs, &worked.best).await;
    // 9, continued: on a quiet server (the drain's dead rows vacuumed, a checkpoint)
    bench.settle().await?;
    r.history_rows = floor::measure(&bench, plan.jobs).await?;
    let ours = worked.best.jobs_per_sec;
    let mut ceiling = ceiling::grid(&bench, plan).await?;
    ceiling.ours_best_over_ceiling_best = ceiling.best.as_ref().map(|c| ours / c.jobs_per_sec);
    let (mut peer, peer_writes) = peer::measure(&bench, plan, &worked.best).await?;
    r.provider_shaped = peer.provider_shaped.take();
    r.ingest = ingest::measure(&bench, plan).await?;
    r.accept_to_provider = latency::measure(&bench, plan).await?;
    r.claim_latency = claim::measure(&bench, plan).await?;
    r.retention = retention::measure(&bench, plan).await?;
    r.retention_under_load = retention::under_load(&bench, plan).await?;
    r.whole_life = life::measure(&bench, plan).await?;
    r.db_cost = crate::results::DbCost::of(&r.whole_life);
    r.wal = crate::results::Wal::of(&r.whole_life);
    r.soak = soak::measure(&bench, plan).await?;
    r.cpu = Cpu::of(&worked);
    r.worked = worked;
    r.ceiling = ceiling;
    r.peer = peer;
    r.write_budget = WriteBudget::compare(ours_writes, peer_writes);
    Ok(end(bench, r, started).await)
}

/// `--only claim`: the claim latency alone, on the benchmark's databases set up as in a full
/// run; every other part is left at its default (not measured).
pub async fn claim_only(plan: &Plan, url: &str) -> Result<Results> {
    let (bench, mut r, started) = begin(plan, url).await?;
    let claim_latency = claim::measure(&bench, plan).await;
    r = end(bench, r, started).await;
    r.claim_latency = claim_latency?;
    Ok(r)
}

/// `--only peer`: our grid (part 1) and the comparison with graphile-worker (part 5) alone.
pub async fn peer_only(plan: &Plan, url: &str) -> Result<Results> {
    let (bench, mut r, started) = begin(plan, url).await?;
    let worked = worked::grid(&bench, plan).await;
    let compared = match &worked {
        Ok(w) => Some(peer::measure(&bench, plan, &w.best).await),
        Err(_) => None,
    };
    r = end(bench, r, started).await;
    r.worked = worked?;
    if let Some(compared) = compared {
        r.peer = compared?.0;
        r.provider_shaped = r.peer.provider_shaped.take();
    }
    Ok(r)
}

/// `--only life`, `soak`, `cold`, `retention`, `lanes`, `ours`, `prepared`, `keys` or `publish`: that part alone (the peer
/// installed first for the first two, as part 5 does in a full run).
pub async fn part_only(part: &str, plan: &Plan, url: &str) -> Result<Results> {
    let (mut bench, mut r, started) = begin(plan, url).await?;
    let measured = async {
        if part == "cold" {
            r.cold_start = cold_start::measure(&bench, plan.cold_runs).await?;
            return anyhow::Ok(());
        }
        if part == "lanes" {
            r.lanes = Some(lanes::measure(&bench, plan).await?);
            return anyhow::Ok(());
        }
        if part == "ours" {
            // the headline's side of part 5: one drain of as many jobs, at the same settings
            let (workers, batch) = peer::OURS_DEFAULT;
            crate::step!(
                "ours at the template's defaults: {} jobs, {workers} worker, batch {batch}",
                plan.peer_jobs
            );
            r.ours_default = Some(worked::cell(&bench, plan.peer_jobs, workers, batch).await?);
            return anyhow::Ok(());
        }
        if part == "keys" {
            r.keys = Some(crate::keys::measure(&bench, plan).await?);
            return anyhow::Ok(());
        }
        if part == "publish" {
            r.publish = Some(crate::publish::measure(&bench, plan).await?);
            return anyhow::Ok(());
        }
        if part == "prepared" {
            r.prepared = Some(crate::prepared::measure(&mut bench, plan).await?);
            return anyhow::Ok(());
        }
        if part == "retention" {
            r.retention = retention::measure(&bench, plan).await?;
            r.retention_under_load = retention::under_load(&bench, plan).await?;
            return anyhow::Ok(());
        }
        if plan.peer {
            let what = peer::install().await.map_err(|why| {
                anyhow::anyhow!("graphile-worker cannot run: {why} (--no-peer skips it)")
            })?;
            crate::step!("peer: {what}");
        }
        if part == "life" {
            r.whole_life = life::measure(&bench, plan).await?;
            r.db_cost = crate::results::DbCost::of(&r.whole_life);
            r.wal = crate::results::Wal::of(&r.whole_life);
        } else {
            r.soak = soak::measure(&bench, plan).await?;
        }
        anyhow::Ok(())
    }
    .await;
    r = end(bench, r, started).await;
    measured?;
    Ok(r)
}

/// The databases set up, and what a run records about itself before its parts.
async fn begin(plan: &Plan, url: &str) -> Result<(Bench, Results, Instant)> {
    let started = Instant::now();
    let machine = Machine::now();
    let date = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    crate::step!("setting up the databases");
    let bench = Bench::setup(url).await?;
    let results = Results {
        mode: if plan.quick { "quick" } else { "full" },
        date,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "optimized"
        },
        machine,
        postgres: bench.settings().await?,
        ..Results::default()
    };
    Ok((bench, results, started))
}

/// The databases dropped, and what a run records about itself after its parts.
async fn end(bench: Bench, mut results: Results, started: Instant) -> Results {
    results.load_after = loadavg();
    bench.teardown().await;
    results.total_secs = started.elapsed().as_secs_f64();
    results
}

impl Machine {
    fn now() -> Self {
        Self {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu: cpu_model(),
            load_before: loadavg(),
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.into())
}
