//! `make bench` (issue 7): the service's throughput and latencies on a durable local
//! PostgreSQL, side by side with graphile-worker and with pgbench running the same SQL.
//!
//! Usage: `DATABASE_URL=… bench [--quick] [--peer | --no-peer]` (tests/scripts/bench.sh
//! starts a durable throwaway cluster and sets DATABASE_URL). Prints a table, then one line
//! `BENCH {json}` holding every figure. Targets are reported, never enforced.

mod ceiling;
mod claim;
mod cold_start;
mod db;
mod ingest;
mod latency;
mod out;
mod peer;
mod stats;
mod worked;

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use stats::round;

/// arm64 Lambda duration price, us-east-1, first pricing tier (USD per GB-second).
const ARM64_USD_PER_GB_SECOND: f64 = 0.000_013_333_4;
/// The worker's memory (template.yaml's WorkerMemorySize default).
const WORKER_MEMORY_MB: f64 = 512.0;
/// Lambda gives a function one full vCPU at 1,769 MB, proportionally less below.
const FULL_VCPU_MB: f64 = 1769.0;

struct Plan {
    quick: bool,
    /// Runs of each grid and ceiling cell; the best counts (other work on the machine can
    /// only slow a run down).
    reps: usize,
    jobs: i64,
    workers: Vec<usize>,
    batches: Vec<u32>,
    claim_jobs: i64,
    claim_batches: Vec<u32>,
    finished_rows: i64,
    ingest_c1: u64,
    ingest_c8_each: u64,
    rate: u32,
    poll_span: Duration,
    period: Duration,
    ticks: u32,
    peer: bool,
    peer_processes: Vec<usize>,
    /// Cold starts of each function in each migrations setting (and database handshakes).
    cold_runs: usize,
}

impl Plan {
    fn new(quick: bool, peer: Option<bool>) -> Self {
        if quick {
            Self {
                quick,
                reps: 1,
                jobs: 5_000,
                workers: vec![1, 2],
                batches: vec![100],
                claim_jobs: 3_000,
                claim_batches: vec![100],
                finished_rows: 50_000,
                ingest_c1: 200,
                ingest_c8_each: 50,
                rate: 50,
                poll_span: Duration::from_secs(3),
                period: Duration::from_secs(1),
                ticks: 3,
                peer: peer.unwrap_or(false),
                peer_processes: vec![1],
                cold_runs: 5,
            }
        } else {
            Self {
                quick,
                reps: 2,
                jobs: 100_000,
                workers: vec![1, 2, 4, 8],
                batches: vec![10, 100, 500],
                claim_jobs: 30_000,
                claim_batches: vec![10, 100, 500],
                finished_rows: 1_000_000,
                ingest_c1: 3_000,
                ingest_c8_each: 500,
                rate: 100,
                poll_span: Duration::from_secs(15),
                period: Duration::from_secs(3),
                ticks: 6,
                peer: peer.unwrap_or(true),
                peer_processes: vec![1, 2, 4],
                cold_runs: 20,
            }
        }
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut quick = false;
    let mut peer = None;
    for arg in &args {
        match arg.as_str() {
            "--quick" => quick = true,
            "--peer" => peer = Some(true),
            "--no-peer" => peer = Some(false),
            "-h" | "--help" => {
                println!("usage: bench [--quick] [--peer | --no-peer]   (needs DATABASE_URL; `make bench` sets it)");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (try --help)"),
        }
    }
    let url = std::env::var("DATABASE_URL")
        .context("DATABASE_URL is not set: run `make bench` (or tests/scripts/bench.sh), which starts a durable PostgreSQL")?;
    out::capture_stdout().context("redirect stdout")?;
    // the functions' own JSON logging, as in Lambda (its output goes to /dev/null here)
    shared::config::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(Plan::new(quick, peer), &url))
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

fn fmt_n(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn ms(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.2} ms")
    }
}

struct Target {
    name: &'static str,
    want: String,
    got: String,
    met: Option<bool>,
}

async fn run(plan: Plan, url: &str) -> Result<()> {
    let load_before = loadavg();
    let started = std::time::Instant::now();
    let date = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    step!("setting up the databases");
    let bench = db::Bench::setup(url).await?;
    let pg = bench.settings().await?;
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "optimized"
    };
    let mut report = serde_json::Map::new();
    report.insert(
        "mode".into(),
        json!(if plan.quick { "quick" } else { "full" }),
    );
    report.insert("date".into(), json!(date));
    report.insert("build".into(), json!(profile));
    report.insert(
        "machine".into(),
        json!({"cores": cores, "cpu": cpu_model(), "load_before": load_before}),
    );
    report.insert("postgres".into(), pg.clone());

    say!(
        "notification-service benchmark ({} mode, {profile} build) — {date}",
        if plan.quick { "quick" } else { "full" }
    );
    say!(
        "machine: {cores} cores, {}; load average before: {load_before}",
        cpu_model()
    );
    say!(
        "postgres {}: fsync={} synchronous_commit={} full_page_writes={} shared_buffers={}",
        pg["server_version"].as_str().unwrap_or("?"),
        pg["fsync"].as_str().unwrap_or("?"),
        pg["synchronous_commit"].as_str().unwrap_or("?"),
        pg["full_page_writes"].as_str().unwrap_or("?"),
        pg["shared_buffers"].as_str().unwrap_or("?"),
    );

    // 8: cold starts first, while the machine is quiet (and a function that cannot start
    // fails the run before the long parts)
    step!(
        "cold start: ingest, worker, sweeper × migrations on/off, {} rounds",
        plan.cold_runs
    );
    let cold = cold_start::measure(&bench, plan.cold_runs).await?;

    // 1 and 7: the grid
    let mut cells = Vec::new();
    for &batch in &plan.batches {
        for &workers in &plan.workers {
            step!(
                "worked jobs/s: {} jobs, {workers} workers, batch {batch}",
                plan.jobs
            );
            // best of plan.reps runs, like the ceiling and the peer
            let mut cell = worked::cell(&bench, plan.jobs, workers, batch).await?;
            for _ in 1..plan.reps {
                let again = worked::cell(&bench, plan.jobs, workers, batch).await?;
                let mut runs = std::mem::take(&mut cell.runs);
                runs.extend(again.runs.iter().copied());
                if again.jobs_per_sec > cell.jobs_per_sec {
                    cell = again;
                }
                cell.runs = runs;
            }
            cells.push(cell);
        }
    }
    let best = cells
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .cloned()
        .context("an empty grid")?;

    // 6: the ceiling, same grid
    let pgbench = ceiling::find_pgbench();
    let mut ceilings = Vec::new();
    let mut ceiling_note = None;
    match (&pgbench, ceiling::script()) {
        (Some(pgbench), Ok(script)) => {
            let path =
                std::env::temp_dir().join(format!("notif-bench-{}.pgbench", std::process::id()));
            std::fs::write(&path, &script)?;
            for &batch in &plan.batches {
                for &clients in &plan.workers {
                    let mut runs: Vec<ceiling::Ceiling> = Vec::new();
                    for rep in 1..=plan.reps {
                        step!("ceiling (pgbench): {clients} connections, batch {batch} (run {rep}/{})", plan.reps);
                        match ceiling::cell(&bench, pgbench, &path, plan.jobs, clients, batch).await
                        {
                            Ok(c) => runs.push(c),
                            Err(e) => {
                                ceiling_note = Some(format!("{e:#}"));
                                break;
                            }
                        }
                    }
                    let all: Vec<f64> = runs.iter().map(|c| c.jobs_per_sec).collect();
                    if let Some(mut best) = runs
                        .into_iter()
                        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
                    {
                        best.runs = all;
                        ceilings.push(best);
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        }
        (None, _) => ceiling_note = Some("pgbench not found (set PGBENCH or PG_BINDIR)".into()),
        (_, Err(e)) => ceiling_note = Some(format!("{e:#}")),
    }
    let best_ceiling = ceilings
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .cloned();

    // 5: the peer
    let mut peer_runs = Vec::new();
    let peer_status = if plan.peer {
        match peer::install().await {
            Ok(what) => {
                step!("peer: {what}");
                let result = async {
                    let client = peer::setup(&bench).await?;
                    let startup = peer::startup(&bench).await?;
                    for &p in &plan.peer_processes {
                        step!("peer: {} jobs, {p} processes × 24", plan.jobs);
                        let mut best: Option<peer::PeerRun> = None;
                        for _ in 0..plan.reps {
                            let r = peer::run(&bench, &client, plan.jobs, p, startup).await?;
                            if best
                                .as_ref()
                                .is_none_or(|b| r.jobs_per_sec > b.jobs_per_sec)
                            {
                                best = Some(r);
                            }
                        }
                        peer_runs.extend(best);
                    }
                    Ok::<_, anyhow::Error>(())
                }
                .await;
                match result {
                    Ok(()) => what,
                    Err(e) => format!("{what}: failed: {e:#}"),
                }
            }
            // the fallback, pg-boss, is not wired in: it would come from the same
            // npm registry, so it mostly fails for the same reason
            Err(why) => format!("graphile-worker cannot be installed: {why}; no peer this run (the pg-boss fallback is not implemented)"),
        }
    } else {
        "skipped (quick mode; --peer runs it)".to_owned()
    };
    let best_peer = peer_runs
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .cloned();

    // 3: ingest
    step!("ingest: {} requests at concurrency 1", plan.ingest_c1);
    bench.truncate().await?;
    let ingest1 = ingest::run(&bench, 1, plan.ingest_c1).await?;
    step!(
        "ingest: {} requests at concurrency 8",
        plan.ingest_c8_each * 8
    );
    bench.truncate().await?;
    let ingest8 = ingest::run(&bench, 8, plan.ingest_c8_each).await?;

    // 4: accept → provider
    step!(
        "accept → provider: polling on, {} requests/s for {:?}",
        plan.rate,
        plan.poll_span
    );
    let poll_on = latency::polling_on(&bench, plan.rate, plan.poll_span).await?;
    step!(
        "accept → provider: polling off, a tick every {:?}",
        plan.period
    );
    let poll_off = latency::polling_off(&bench, plan.rate, plan.period, plan.ticks).await?;

    // 2: claim latency, with no finished rows, then with many
    let mut claim0 = Vec::new();
    bench.truncate().await?;
    for &batch in &plan.claim_batches {
        step!("claim latency: batch {batch}, no finished rows before the run");
        bench.truncate().await?;
        claim0.push(claim::latencies(&bench, plan.claim_jobs, batch).await?);
    }
    bench.truncate().await?;
    bench.insert_due(plan.claim_jobs).await?;
    bench.settle().await?;
    let explain0 = claim::explain(&bench, 100).await?;
    bench.truncate().await?;
    step!(
        "filling {} finished jobs (and their delivery rows)",
        plan.finished_rows
    );
    claim::fill_finished(&bench, plan.finished_rows).await?;
    let mut claim_full = Vec::new();
    for &batch in &plan.claim_batches {
        step!(
            "claim latency: batch {batch}, {} finished rows",
            plan.finished_rows
        );
        claim_full.push(claim::latencies(&bench, plan.claim_jobs, batch).await?);
    }
    bench.insert_due(plan.claim_jobs).await?;
    bench.settle().await?;
    let explain_full = claim::explain(&bench, 100).await?;
    let load_after = loadavg();
    bench.teardown().await;

    // ---- report ----
    let mut targets = Vec::new();
    say!("");
    say!("1. worked jobs/s ({} due jobs; each worker = own connection + shared::worker::run, WORKER_CONCURRENCY default, no-op delivery; delivery rows written; best of {} runs)", plan.jobs, plan.reps);
    let mut header = "   batch \\ workers".to_owned();
    for w in &plan.workers {
        header.push_str(&format!("{w:>12}"));
    }
    say!("{header}");
    for &batch in &plan.batches {
        let mut line = format!("   {batch:>17}");
        for &w in &plan.workers {
            let v = cells
                .iter()
                .find(|c| c.batch == batch && c.workers == w)
                .map_or(f64::NAN, |c| c.jobs_per_sec);
            line.push_str(&format!("{:>12}", fmt_n(v)));
        }
        say!("{line}");
    }
    say!(
        "   best: {} jobs/s ({} workers, batch {})",
        fmt_n(best.jobs_per_sec),
        best.workers,
        best.batch
    );

    say!("");
    say!("6. ceiling: shared/sql/claim.sql + complete.sql driven by pgbench (-M prepared), same grid, best of {} runs", plan.reps);
    if !ceilings.is_empty() {
        say!(
            "{}",
            header.replace("batch \\ workers    ", "batch \\ connections")
        );
        for &batch in &plan.batches {
            let mut line = format!("   {batch:>17}");
            let mut ratios = String::from("   ours ÷ ceiling:");
            for &w in &plan.workers {
                let c = ceilings.iter().find(|c| c.batch == batch && c.clients == w);
                let ours = cells.iter().find(|c| c.batch == batch && c.workers == w);
                line.push_str(&format!(
                    "{:>12}",
                    fmt_n(c.map_or(f64::NAN, |c| c.jobs_per_sec))
                ));
                if let (Some(c), Some(o)) = (c, ours) {
                    ratios.push_str(&format!(" {:.2}", o.jobs_per_sec / c.jobs_per_sec));
                }
            }
            say!("{line}{ratios}");
        }
    }
    if let Some(note) = &ceiling_note {
        say!("   ceiling incomplete: {note}");
    }
    let ceiling_ratio = best_ceiling
        .as_ref()
        .map(|c| best.jobs_per_sec / c.jobs_per_sec);
    if let (Some(c), Some(r)) = (&best_ceiling, ceiling_ratio) {
        say!("   best ceiling: {} jobs/s ({} connections, batch {}); our best ÷ best ceiling = {r:.2}", fmt_n(c.jobs_per_sec), c.clients, c.batch);
    }

    say!("");
    if peer_runs.is_empty() {
        say!("5. peer: {peer_status}");
    } else {
        say!("5. peer: {peer_status} (best of {} runs each)", plan.reps);
    }
    say!("   settings of its own performance test: 24 concurrent jobs per process, pool 25, localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0");
    for r in &peer_runs {
        say!(
            "   {} process(es): {} jobs/s ({} jobs in {:.2} s, start-up {:.2} s subtracted)",
            r.processes,
            fmt_n(r.jobs_per_sec),
            r.jobs,
            r.secs,
            r.startup_secs
        );
    }
    let peer_ratio = best_peer
        .as_ref()
        .map(|p| best.jobs_per_sec / p.jobs_per_sec);
    if let (Some(p), Some(r)) = (&best_peer, peer_ratio) {
        say!(
            "   best: {} jobs/s ({} processes); our best ÷ graphile-worker's best = {r:.2}",
            fmt_n(p.jobs_per_sec),
            p.processes
        );
    }
    targets.push(Target {
        name: "worked jobs/s ≥ 1.0× graphile-worker",
        want: "≥ 1.00".into(),
        got: peer_ratio.map_or("not measured".into(), |r| format!("{r:.2}")),
        met: peer_ratio.map(|r| r >= 1.0),
    });
    targets.push(Target {
        name: "worked jobs/s ≥ 0.9× pgbench ceiling",
        want: "≥ 0.90".into(),
        got: ceiling_ratio.map_or("not measured".into(), |r| format!("{r:.2}")),
        met: ceiling_ratio.map(|r| r >= 0.9),
    });
    targets.push(Target {
        name: "worked jobs/s ≥ 10,000 on this machine",
        want: "≥ 10,000".into(),
        got: fmt_n(best.jobs_per_sec),
        met: Some(best.jobs_per_sec >= 10_000.0),
    });

    say!("");
    say!("2. claim latency per claim (claim.sql via JobStore::claim, one connection draining {} due jobs; each batch then completed)", plan.claim_jobs);
    say!(
        "   {:>6} {:>22} {:>22} {:>16}",
        "batch",
        "0 finished p50 / p99",
        format!("{} finished p50 / p99", fmt_n(plan.finished_rows as f64)),
        "ratio p50 / p99"
    );
    let mut claim_json = Vec::new();
    let mut ratio_100 = None;
    for (i, &batch) in plan.claim_batches.iter().enumerate() {
        let (a, b) = (&claim0[i].0, &claim_full[i].0);
        let (r50, r99) = (b.p50() / a.p50(), b.p99() / a.p99());
        if batch == 100 {
            ratio_100 = Some(r50);
        }
        say!(
            "   {batch:>6} {:>22} {:>22} {:>16}",
            format!("{} / {}", ms(a.p50()), ms(a.p99())),
            format!("{} / {}", ms(b.p50()), ms(b.p99())),
            format!("{r50:.2} / {r99:.2}")
        );
        claim_json.push(json!({
            "batch": batch,
            "finished_0": claim::json(&claim0[i]),
            "finished_many": claim::json(&claim_full[i]),
            "ratio_p50": round(r50, 3),
            "ratio_p99": round(r99, 3),
        }));
    }
    say!(
        "   EXPLAIN (ANALYZE, BUFFERS) of the claim, batch 100, with {} finished rows:",
        fmt_n(plan.finished_rows as f64)
    );
    for l in explain_full.lines() {
        say!("     {l}");
    }
    targets.push(Target {
        name: "claim latency with many finished rows ÷ with none (p50, batch 100)",
        want: "≤ 1.20".into(),
        got: ratio_100.map_or("not measured".into(), |r| format!("{r:.2}")),
        met: ratio_100.map(|r| r <= 1.2),
    });

    say!("");
    say!("3. ingest: Ingest::handle in-process (API Gateway v2 event, SMS with an Idempotency-Key), one connection per instance");
    for r in [&ingest1, &ingest8] {
        say!(
            "   concurrency {}: p50 {} p99 {}, {} requests/s ({} requests)",
            r.concurrency,
            ms(r.latency.p50()),
            ms(r.latency.p99()),
            fmt_n(r.per_sec),
            r.latency.len()
        );
    }
    targets.push(Target {
        name: "ingest p99 ≤ 5 ms (concurrency 1)",
        want: "≤ 5 ms".into(),
        got: ms(ingest1.latency.p99()),
        met: Some(ingest1.latency.p99() <= 5.0),
    });

    say!("");
    say!(
        "4. accept → provider call ({} requests/s through ingest; one worker, batch 100)",
        plan.rate
    );
    say!("   polling on (WORKER_POLL_SECS set; empty queue polled every {} ms): p50 {} p99 {} ({} jobs)", shared::worker::POLL_INTERVAL.as_millis(), ms(poll_on.p50()), ms(poll_on.p99()), poll_on.len());
    say!("   polling off, schedule scaled to {} s (measured): p50 {} p99 {}; work after the tick p50 {} p99 {}", plan.period.as_secs_f64(), ms(poll_off.measured.p50()), ms(poll_off.measured.p99()), ms(poll_off.work.p50()), ms(poll_off.work.p99()));
    say!("   polling off, 1-minute EventBridge schedule (projected: wait × 60/{} + measured work): p50 {:.1} s p99 {:.1} s", plan.period.as_secs_f64(), poll_off.projected.p50() / 1000.0, poll_off.projected.p99() / 1000.0);
    targets.push(Target {
        name: "accept → provider p50 ≤ 1 s, polling on",
        want: "≤ 1 s".into(),
        got: ms(poll_on.p50()),
        met: Some(poll_on.p50() <= 1000.0),
    });

    // 7: CPU and Lambda cost, from the cell closest to one Lambda invocation: 1 worker,
    // the default batch (100) when measured
    let lambda_cell = cells
        .iter()
        .find(|c| c.workers == 1 && c.batch == 100)
        .or_else(|| cells.iter().find(|c| c.workers == 1))
        .unwrap_or(&best)
        .clone();
    let cpu_ms = lambda_cell.cpu_ms_per_job;
    let wall_ms = 1000.0 / lambda_cell.jobs_per_sec;
    let throttled_ms = cpu_ms * (FULL_VCPU_MB / WORKER_MEMORY_MB).max(1.0);
    let billed_ms = wall_ms.max(throttled_ms);
    let usd_per_million =
        billed_ms / 1000.0 * (WORKER_MEMORY_MB / 1024.0) * ARM64_USD_PER_GB_SECOND * 1e6;
    say!("");
    say!("7. worker CPU (getrusage of this process over each worked-jobs run; user + system)");
    say!(
        "   per delivered job: {cpu_ms:.4} CPU-ms at 1 worker, batch {}; {:.4} at the best cell",
        lambda_cell.batch,
        best.cpu_ms_per_job
    );
    say!("   Lambda at {WORKER_MEMORY_MB:.0} MB arm64 (${ARM64_USD_PER_GB_SECOND}/GB-s, us-east-1 first tier; {WORKER_MEMORY_MB:.0}/{FULL_VCPU_MB:.0} of a vCPU):");
    say!("   billed time per job ≈ max(wall {wall_ms:.4} ms at 1 worker, CPU {cpu_ms:.4} ms × {:.2} throttling) = {billed_ms:.4} ms → ${usd_per_million:.4} per million notifications (duration only; the per-minute invocations' request charge is not per notification; CPU measured on this machine, not Graviton)", (FULL_VCPU_MB / WORKER_MEMORY_MB).max(1.0));

    say!("");
    cold.render();
    targets.push(Target {
        name: "ingest cold start − DB handshake ≤ 50 ms (migrations off)",
        want: format!("≤ {} ms", cold_start::GOAL_MS),
        got: ms(cold.ingest_minus_handshake_ms),
        met: Some(cold.goal_met),
    });

    say!("");
    say!("targets (reported, not enforced):");
    for t in &targets {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        say!(
            "   {:<68} {:>10} (want {}) {verdict}",
            t.name,
            t.got,
            t.want
        );
    }
    say!(
        "load average after: {load_after}; total time {:.0} s",
        started.elapsed().as_secs_f64()
    );

    report.insert(
        "worked".into(),
        json!({
            "jobs": plan.jobs,
            "worker_concurrency": worked::worker_config(100).concurrency,
        "runs_per_cell": plan.reps,
            "grid": cells.iter().map(worked::Cell::json).collect::<Vec<_>>(),
            "best": best.json(),
        }),
    );
    report.insert(
        "ceiling".into(),
        json!({
            "tool": pgbench.map(|p| p.display().to_string()),
        "runs_per_cell": plan.reps,
            "grid": ceilings.iter().map(ceiling::Ceiling::json).collect::<Vec<_>>(),
            "best": best_ceiling.as_ref().map(ceiling::Ceiling::json),
            "ours_best_over_ceiling_best": ceiling_ratio.map(|r| round(r, 3)),
            "note": ceiling_note,
        }),
    );
    report.insert("peer".into(), json!({
        "status": peer_status,
        "settings": {"concurrent_jobs": 24, "max_pool_size": 25, "local_queue_size": 500, "refetch_delay_ms": 10, "complete_job_batch_delay": 0, "fail_job_batch_delay": 0},
        "runs": peer_runs.iter().map(peer::PeerRun::json).collect::<Vec<_>>(),
        "best": best_peer.as_ref().map(peer::PeerRun::json),
        "ours_best_over_peer_best": peer_ratio.map(|r| round(r, 3)),
    }));
    report.insert(
        "claim_latency".into(),
        json!({
            "due_jobs": plan.claim_jobs,
            "finished_rows": plan.finished_rows,
            "batches": claim_json,
            "explain_finished_0": explain0,
            "explain_finished_many": explain_full,
        }),
    );
    report.insert(
        "ingest".into(),
        json!({"concurrency_1": ingest1.json(), "concurrency_8": ingest8.json()}),
    );
    report.insert(
        "accept_to_provider".into(),
        json!({
            "rate_per_sec": plan.rate,
            "polling_on": poll_on.json(),
            "polling_off": poll_off.json(),
        }),
    );
    report.insert("cpu".into(), json!({
        "cell": {"workers": lambda_cell.workers, "batch": lambda_cell.batch},
        "cpu_ms_per_job": round(cpu_ms, 5),
        "best_cell_cpu_ms_per_job": round(best.cpu_ms_per_job, 5),
        "lambda": {
            "arch": "arm64",
            "usd_per_gb_second": ARM64_USD_PER_GB_SECOND,
            "memory_mb": WORKER_MEMORY_MB,
            "billed_ms_per_job": round(billed_ms, 5),
            "usd_per_million_notifications": round(usd_per_million, 4),
            "model": "max(wall ms per job at 1 worker, CPU ms per job × 1769/memory MB) × memory GB × price; duration only",
        },
    }));
    report.insert(
        "cold_start".into(),
        serde_json::to_value(&cold).context("cold start figures")?,
    );
    report.insert(
        "targets".into(),
        Value::Array(
            targets
                .iter()
                .map(|t| {
                    json!({
                        "target": t.name, "want": t.want, "value": t.got, "met": t.met,
                    })
                })
                .collect(),
        ),
    );
    report.insert("load_after".into(), json!(load_after));
    report.insert(
        "total_secs".into(),
        json!(round(started.elapsed().as_secs_f64(), 1)),
    );
    say!("BENCH {}", Value::Object(report));
    Ok(())
}
