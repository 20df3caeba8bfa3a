//! `make bench`: the service's throughput and latencies on a durable local
//! PostgreSQL, side by side with graphile-worker and with pgbench running the same SQL.
//!
//! Usage: `DATABASE_URL=… bench [--quick] [--peer | --no-peer] [--only PART]` (tests/scripts/bench.sh
//! starts a durable throwaway cluster and sets DATABASE_URL). Prints a table, then one line
//! `BENCH {json}` holding every figure. Targets are reported, never enforced.
//!
//! A run is [`measure::measure`] → [`results::Results`] → [`targets::targets`] →
//! [`render::render`], then the results and targets as JSON. Each part measures in its own
//! module (numbered as the questions): [`worked`] (1), [`claim`] (2), [`ingest`] (3),
//! [`latency`] (4), [`peer`] (5), [`ceiling`] (6), [`cpu`] (7), [`cold_start`] (8), and the
//! write budget, [`writes`] (9, its counters read by [`probe`], and what one
//! history row costs, [`floor`]), [`retention`] (10), a job's whole life, [`life`] (11), and
//! the soak, [`soak`] (12), and the wake, the burst and the fan-out, [`wake`] and [`fanout`]
//! (13, worker invocations started in-process by [`lambda`], the server's side read by
//! [`server`]; also alone, `--only wake`). Two parts run alone only: the claim on a deep queue with priority
//! lanes, [`lanes`] (`--only lanes`), and ours at the template's defaults (`--only ours`, the
//! headline's side of part 5 without the peer, what bench/compare.sh runs in turns).

mod ceiling;
mod claim;
mod clock;
mod cold_start;
mod cpu;
mod db;
mod fanout;
mod floor;
mod ingest;
mod keys;
mod lambda;
mod lanes;
mod latency;
mod life;
mod measure;
mod out;
mod peer;
mod prepared;
mod probe;
mod publish;
mod render;
mod results;
mod retention;
mod server;
mod soak;
mod stats;
mod targets;
mod wake;
mod walmap;
mod worked;
mod writes;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use results::Report;

/// The sizes of one run (`--quick` or full). The parts, child modules, read its fields.
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
    /// Drains of each claim batch size with no history and with a full one, taking turns.
    claim_rounds: usize,
    finished_rows: i64,
    /// Finished jobs of one day (each with its idempotency key) that retention drops (10).
    retention_jobs: i64,
    ingest_c1: u64,
    ingest_c8_each: u64,
    rate: u32,
    poll_span: Duration,
    period: Duration,
    ticks: u32,
    peer: bool,
    /// The peer's grid: processes × `concurrentJobs` × local queue size (12 settings in a full
    /// run, as many as our workers × batch sizes).
    peer_processes: Vec<usize>,
    peer_concurrency: Vec<u32>,
    peer_local_queue: Vec<u32>,
    /// Jobs each run of the comparison drains: enough for the database's clock to see
    /// the drain through (at least 4 samples between 10% and 90%).
    peer_jobs: i64,
    /// ABBA rounds of both sides at their defaults (the headline).
    peer_rounds: usize,
    /// The same with a provider's pace: rounds, and jobs per run.
    provider_rounds: usize,
    provider_jobs: i64,
    /// Jobs followed through their whole life (11), half of them emails of 5–30 KB.
    life_jobs: i64,
    /// The soak (12): how long, jobs/s into each side, the series' bucket, and where the
    /// series and the plot go.
    soak_secs: u64,
    soak_rate: u32,
    soak_bucket_secs: u64,
    soak_dir: std::path::PathBuf,
    /// Cold starts of each function in each migrations setting (and database handshakes).
    cold_runs: usize,
    /// `--only lanes`: due `low` jobs under the claim, and the claims timed on them.
    lanes_low_jobs: i64,
    lanes_claims: usize,
    /// `--only prepared`: rounds in turns of each side (ingest at concurrency 1 with
    /// `ingest_c1` requests, then a drain of `peer_jobs` at the defaults).
    prepared_rounds: usize,
    /// `--only keys`: the events kept beside the drains (30 days), and the rounds in turns.
    steady_events: i64,
    keys_rounds: usize,
    /// `--only publish`: rounds in turns of each side (a drain of `peer_jobs`, then its
    /// events published).
    publish_rounds: usize,
    /// The wake part (13): how long the steady 100 requests/s run, requests after idle (one
    /// at a time, each after the fleet left), the burst's requests (within one second), the
    /// fan-out's due jobs and its `WORKER_MAX_INVOCATIONS`.
    wake_span: Duration,
    wake_idle_rounds: usize,
    burst_requests: u64,
    fan_out_jobs: i64,
    fan_out_max: Vec<u32>,
}

impl Plan {
    fn new(quick: bool, peer: Option<bool>) -> Self {
        if quick {
            Self {
                quick,
                reps: 1,
                // enough for the database's clock (crate::clock) to see a drain through
                jobs: 20_000,
                workers: vec![1, 2],
                batches: vec![100],
                claim_jobs: 3_000,
                claim_batches: vec![100],
                claim_rounds: 2,
                finished_rows: 50_000,
                retention_jobs: 20_000,
                ingest_c1: 200,
                ingest_c8_each: 50,
                rate: 50,
                poll_span: Duration::from_secs(3),
                period: Duration::from_secs(1),
                ticks: 3,
                peer: peer.unwrap_or(true),
                peer_processes: vec![1],
                peer_concurrency: vec![24],
                peer_local_queue: vec![500],
                peer_jobs: 20_000,
                peer_rounds: 4,
                provider_rounds: 2,
                provider_jobs: 600,
                life_jobs: 2_000,
                soak_secs: 90,
                soak_rate: 100,
                soak_bucket_secs: 10,
                soak_dir: workspace().join("target/bench"),
                cold_runs: 5,
                lanes_low_jobs: 100_000,
                lanes_claims: 50,
                prepared_rounds: 2,
                steady_events: 200_000,
                keys_rounds: 2,
                publish_rounds: 2,
                wake_span: Duration::from_secs(3),
                wake_idle_rounds: 3,
                burst_requests: 1_000,
                fan_out_jobs: 5_000,
                fan_out_max: vec![1, 2],
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
                claim_rounds: 3,
                // the claim with 10M history rows beside the queue
                finished_rows: 10_000_000,
                // one day of 1M finished jobs
                retention_jobs: 1_000_000,
                ingest_c1: 3_000,
                ingest_c8_each: 500,
                rate: 100,
                poll_span: Duration::from_secs(15),
                period: Duration::from_secs(3),
                ticks: 6,
                peer: peer.unwrap_or(true),
                peer_processes: vec![1, 2, 4],
                peer_concurrency: vec![12, 24],
                peer_local_queue: vec![100, 500],
                peer_jobs: 100_000,
                peer_rounds: 10,
                provider_rounds: 6,
                provider_jobs: 6_000,
                life_jobs: 20_000,
                soak_secs: 1_800,
                soak_rate: 200,
                soak_bucket_secs: 60,
                soak_dir: workspace().join("bench/results"),
                cold_runs: 20,
                lanes_low_jobs: 1_000_000,
                lanes_claims: 200,
                prepared_rounds: 6,
                steady_events: 3_000_000,
                keys_rounds: 4,
                publish_rounds: 4,
                wake_span: Duration::from_secs(15),
                wake_idle_rounds: 10,
                burst_requests: 1_000,
                fan_out_jobs: 100_000,
                fan_out_max: vec![1, 2, 4, 8],
            }
        }
    }
}

/// The repository's root (the bench's manifest is in bench/).
fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut quick = false;
    let mut peer = None;
    let mut history = None;
    let mut only: Option<&str> = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--history" => {
                let n = args
                    .next()
                    .context("--history needs a number of finished jobs")?;
                history = Some(n.parse().with_context(|| format!("--history {n:?}"))?);
            }
            "--only" => match args.next().map(String::as_str) {
                Some(
                    part @ ("claim" | "peer" | "life" | "soak" | "cold" | "retention" | "lanes"
                    | "ours" | "wake" | "prepared" | "keys" | "publish"),
                ) => only = Some(part),
                Some(other) => {
                    anyhow::bail!(
                        "--only {other}: no such part (the parts that run alone are `claim`, `peer`, `life`, `soak`, `cold`, `retention`, `lanes`, `ours`, `wake`, `prepared`, `keys` and `publish`)"
                    )
                }
                None => anyhow::bail!(
                    "--only needs a part: `claim` (the claim latency alone), `peer` (our grid and graphile-worker's), `life` (a job's whole life, both sides), `soak` (both sides under steady load), `cold` (cold starts), `retention` (a day dropped, idle and under load), `lanes` (the claim on a deep queue with priority lanes), `ours` (one drain at the template's defaults), `wake` (the wake, a burst and the fan-out, after the cold starts) , `prepared` (statements prepared against unnamed: ingest and the drain at the defaults, in turns) `keys` (the status events' key, random against time-ordered, beside 30 days of events) or `publish` (the status events published by row claims against the stream's cursor)"
                ),
            },
            "--peer" => peer = Some(true),
            "--no-peer" => peer = Some(false),
            "-h" | "--help" => {
                println!(
                    "usage: bench [--quick] [--peer | --no-peer] [--history FINISHED_JOBS] [--only claim|peer|life|soak|cold|retention|lanes|ours|wake|prepared|keys|publish]   (needs DATABASE_URL; `make bench` sets it)"
                );
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (try --help)"),
        }
    }
    let url = std::env::var("DATABASE_URL")
        .context("DATABASE_URL is not set: run `make bench` (or tests/scripts/bench.sh), which starts a durable PostgreSQL")?;
    out::capture_stdout().context("redirect stdout")?;
    // the functions' own JSON logging, as in Lambda (its output goes to /dev/null here)
    notify_core::telemetry::logs::init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut plan = Plan::new(quick, peer);
    if let Some(n) = history {
        plan.finished_rows = n;
    }
    match only {
        Some("claim") => rt.block_on(run_claim(plan, &url)),
        Some("peer") => rt.block_on(run_peer(plan, &url)),
        Some("wake") => rt.block_on(run_wake(plan, &url)),
        Some(part) => rt.block_on(run_part(part, plan, &url)),
        None => rt.block_on(run(plan, &url)),
    }
}

/// `--only life`, `soak`, `cold`, `retention`, `lanes` or `ours`: that part alone, its
/// section, its targets, and a `BENCH` line with that part only.
async fn run_part(part: &str, plan: Plan, url: &str) -> Result<()> {
    let results = measure::part_only(part, &plan, url).await?;
    let targets: Vec<targets::Target> = targets::targets(&results)
        .into_iter()
        .filter(|t| targets::of_part(part, t))
        .collect();
    render::part_only(part, &results, &targets);
    let parts = match part {
        "life" => vec![
            ("whole_life", serde_json::to_value(&results.whole_life)?),
            ("wal", serde_json::to_value(&results.wal)?),
            ("db_cost", serde_json::to_value(&results.db_cost)?),
        ],
        "soak" => vec![("soak", serde_json::to_value(&results.soak)?)],
        "retention" => vec![
            ("retention", serde_json::to_value(&results.retention)?),
            (
                "retention_under_load",
                serde_json::to_value(&results.retention_under_load)?,
            ),
        ],
        "lanes" => vec![("lanes", serde_json::to_value(&results.lanes)?)],
        "ours" => vec![("ours_default", serde_json::to_value(&results.ours_default)?)],
        "prepared" => vec![("prepared", serde_json::to_value(&results.prepared)?)],
        "keys" => vec![("keys", serde_json::to_value(&results.keys)?)],
        "publish" => vec![("publish", serde_json::to_value(&results.publish)?)],
        _ => vec![("cold_start", serde_json::to_value(&results.cold_start)?)],
    };
    let line = part_line(&results, &targets, parts);
    say!("BENCH {line}");
    Ok(())
}

/// The `BENCH` line of a part run alone: the run's mode, date and machine, the part's
/// figures under their keys in the full line, and its targets.
fn part_line(
    results: &results::Results,
    targets: &[targets::Target],
    parts: Vec<(&str, serde_json::Value)>,
) -> serde_json::Value {
    let mut line = serde_json::json!({
        "mode": results.mode,
        "date": results.date,
        "machine": results.machine,
        "targets": targets,
    });
    for (key, value) in parts {
        line[key] = value;
    }
    line
}

/// `--only claim`: part 2 alone (to look into its figures without the hour of a full run),
/// its section of the table and its targets, and a `BENCH` line with that part only.
async fn run_claim(plan: Plan, url: &str) -> Result<()> {
    let results = measure::claim_only(&plan, url).await?;
    let targets = targets::claim(&results);
    render::claim_only(&results, &targets);
    let parts = vec![(
        "claim_latency",
        serde_json::to_value(&results.claim_latency)?,
    )];
    say!("BENCH {}", part_line(&results, &targets, parts));
    Ok(())
}

/// `--only peer`: parts 1 and 5 alone, their sections, their targets, and a `BENCH` line
/// with those parts only.
async fn run_peer(plan: Plan, url: &str) -> Result<()> {
    let results = measure::peer_only(&plan, url).await?;
    let targets = targets::peer(&results);
    render::peer_only(&results, &targets);
    let parts = vec![
        ("worked", serde_json::to_value(&results.worked)?),
        ("peer", serde_json::to_value(&results.peer)?),
        (
            "provider_shaped",
            serde_json::to_value(&results.provider_shaped)?,
        ),
    ];
    say!("BENCH {}", part_line(&results, &targets, parts));
    Ok(())
}

/// `--only wake`: part 8 first (at most 5 rounds: its worker's cold start is what the derived
/// cold figure adds), then part 13; both sections, part 13's targets, and a `BENCH` line with
/// both parts.
async fn run_wake(mut plan: Plan, url: &str) -> Result<()> {
    plan.cold_runs = plan.cold_runs.min(5);
    let mut results = measure::part_only("cold", &plan, url).await?;
    wake_part(&mut results, &plan, url).await?;
    let targets: Vec<targets::Target> = targets::targets(&results)
        .into_iter()
        .filter(|t| targets::of_part("wake", t))
        .collect();
    render::part_only("wake", &results, &targets);
    let parts = vec![
        ("wake", serde_json::to_value(&results.wake)?),
        ("cold_start", serde_json::to_value(&results.cold_start)?),
    ];
    say!("BENCH {}", part_line(&results, &targets, parts));
    Ok(())
}

/// Part 13 on databases of its own, set up once the other parts' are dropped, after part 8
/// (`results.cold_start`); its time is added to the run's, and the load after it is the run's.
async fn wake_part(results: &mut results::Results, plan: &Plan, url: &str) -> Result<()> {
    let started = Instant::now();
    crate::step!("setting up the databases for the wake part");
    let bench = db::Bench::setup(url).await?;
    let measured = wake::measure(&bench, plan, &results.cold_start).await;
    bench.teardown().await;
    results.wake = measured?;
    results.total_secs += started.elapsed().as_secs_f64();
    results.load_after = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into());
    Ok(())
}

async fn run(plan: Plan, url: &str) -> Result<()> {
    let mut results = measure::measure(&plan, url).await?;
    wake_part(&mut results, &plan, url).await?;
    let targets = targets::targets(&results);
    render::render(&results, &targets);
    let report = Report {
        results: &results,
        targets: &targets,
    };
    say!(
        "BENCH {}",
        serde_json::to_string(&report).context("the BENCH line")?
    );
    Ok(())
}
