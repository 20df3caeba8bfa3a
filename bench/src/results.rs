//! Everything a run measured. [`crate::measure`] fills it in, [`crate::targets`] judges it,
//! [`crate::render`] prints it as the table, and the `BENCH` line is its JSON ([`Report`]).
//! Figures are kept exact; the JSON rounds them (see [`crate::stats::rounded`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ceiling::Ceilings;
use crate::claim::ClaimLatency;
use crate::cold_start::ColdStart;
use crate::cpu::Cpu;
use crate::floor::HistoryFloor;
use crate::ingest::IngestRuns;
use crate::latency::AcceptToProvider;
use crate::life::{LifeSide, WholeLife};
use crate::peer::Peer;
use crate::stats::rounded;
use crate::targets::Target;
use crate::worked::Worked;
use crate::writes::WriteBudget;

/// The server's time per job over its whole life, at the shipped defaults, with realistic
/// payloads ([`crate::life`]): what capacity is planned from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DbCost {
    pub ours: JobCost,
    pub theirs: JobCost,
    #[serde(serialize_with = "crate::stats::rounded_opt::<3, _>")]
    pub ours_over_theirs: Option<f64>,
    /// The RDS class the time is priced on ([`RDS_CLASS`]).
    pub rds_class: String,
}

/// The class the database's time is priced on: its name, vCPUs and on-demand price per hour
/// (us-east-1, single-AZ, PostgreSQL). A job's server time is priced as its share of the
/// class's vCPU-hours, as if the instance did nothing else; at 100% busy, not a sizing.
pub const RDS_CLASS: (&str, f64, f64) = ("db.t4g.medium", 2.0, 0.065);

/// The database's time for 1M jobs at `ms_per_job`, priced on [`RDS_CLASS`], in US dollars.
pub fn rds_usd_per_million(ms_per_job: f64) -> f64 {
    let (_, vcpus, usd_per_hour) = RDS_CLASS;
    ms_per_job * 1e6 / 1000.0 / vcpus / 3600.0 * usd_per_hour
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct JobCost {
    /// The run's setting, or why it was not measured.
    pub setting: String,
    /// Ingest's and work's statements' execution time per job, in milliseconds.
    #[serde(serialize_with = "crate::stats::rounded_opt::<4, _>")]
    pub exec_ms_per_job: Option<f64>,
    /// VACUUM's and retention's time per job, in milliseconds.
    #[serde(serialize_with = "crate::stats::rounded::<4, _>")]
    pub maintenance_ms_per_job: f64,
    /// Both, for 1M jobs, priced on [`RDS_CLASS`].
    #[serde(serialize_with = "crate::stats::rounded_opt::<4, _>")]
    pub rds_usd_per_million: Option<f64>,
}

impl DbCost {
    pub fn of(life: &WholeLife) -> Self {
        let side = |s: &LifeSide| JobCost {
            setting: if s.status == "measured" {
                s.setting.clone()
            } else {
                s.status.clone()
            },
            exec_ms_per_job: s.exec_ms_per_job,
            maintenance_ms_per_job: s.maintenance_ms_per_job,
            rds_usd_per_million: s
                .exec_ms_per_job
                .map(|ms| rds_usd_per_million(ms + s.maintenance_ms_per_job)),
        };
        Self {
            ours: side(&life.ours),
            theirs: side(&life.theirs),
            ours_over_theirs: life.exec_ratio,
            rds_class: format!(
                "{}: {} vCPUs, ${}/h on demand (us-east-1, single-AZ)",
                RDS_CLASS.0, RDS_CLASS.1, RDS_CLASS.2
            ),
        }
    }
}

/// The WAL a job writes, in the keys a reader looks for first.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Wal {
    pub whole_life: WholeLifeWal,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct WholeLifeWal {
    #[serde(serialize_with = "crate::stats::rounded_opt::<1, _>")]
    pub ours_bytes_per_job: Option<f64>,
    #[serde(serialize_with = "crate::stats::rounded_opt::<1, _>")]
    pub theirs_bytes_per_job: Option<f64>,
    #[serde(serialize_with = "crate::stats::rounded_opt::<3, _>")]
    pub ratio: Option<f64>,
}

impl Wal {
    pub fn of(life: &WholeLife) -> Self {
        let side = |s: &LifeSide| (s.status == "measured").then_some(s.wal_bytes_per_job);
        Self {
            whole_life: WholeLifeWal {
                ours_bytes_per_job: side(&life.ours),
                theirs_bytes_per_job: side(&life.theirs),
                ratio: life.wal_ratio,
            },
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Results {
    /// `quick` or `full`.
    pub mode: &'static str,
    /// When the run started (RFC 3339, UTC).
    pub date: String,
    /// `debug` or `optimized`.
    pub build: &'static str,
    pub machine: Machine,
    /// The server's version and the settings that decide durability (`SHOW name`).
    pub postgres: BTreeMap<String, String>,
    /// 8
    pub cold_start: ColdStart,
    /// 1
    pub worked: Worked,
    /// 6
    pub ceiling: Ceilings,
    /// 5
    pub peer: Peer,
    /// 5, continued: both defaults again, each call waiting as a provider's does
    pub provider_shaped: Option<crate::peer::ProviderShaped>,
    /// 9: what working one job writes, ours and the peer's
    pub write_budget: WriteBudget,
    /// 11, in short: what one job costs the server over its whole life, ours and the peer's
    pub db_cost: DbCost,
    /// 11, in short: the WAL of one job's whole life
    pub wal: Wal,
    /// 11: a job's whole life, phase by phase
    pub whole_life: WholeLife,
    /// 12: both sides under a steady load, a long transaction in the middle
    pub soak: crate::soak::Soak,
    /// 9, continued: what one history row costs, ours and the other shapes
    pub history_rows: HistoryFloor,
    /// 3
    pub ingest: IngestRuns,
    /// 4
    pub accept_to_provider: AcceptToProvider,
    /// 2
    pub claim_latency: ClaimLatency,
    /// 10
    pub retention: crate::retention::Retention,
    /// 10, continued: the sweeper's pass while ingest and a worker run
    pub retention_under_load: crate::retention::UnderLoad,
    /// 7
    pub cpu: Cpu,
    /// 13: the wake, a burst and the fan-out, at the shipped defaults (polling off, wake on)
    pub wake: crate::wake::WakeRuns,
    /// `--only lanes`: the claim on a deep queue with priority lanes (not in a full run)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lanes: Option<crate::lanes::Lanes>,
    /// `--only ours`: one drain at the template's defaults (not in a full run)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ours_default: Option<crate::worked::Cell>,
    /// `--only prepared`: statements prepared against unnamed, in turns (not in a full run)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepared: Option<crate::prepared::Compared>,
    /// `--only keys`: the events' key, random against time-ordered (not in a full run)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<crate::keys::Keys>,
    /// `--only publish`: the events published by row claims against the cursor (not in a
    /// full run)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<crate::publish::Publish>,
    /// The load average after the run (1, 5 and 15 minutes).
    pub load_after: String,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub total_secs: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu: String,
    /// The load average before the run (1, 5 and 15 minutes).
    pub load_before: String,
}

/// The `BENCH {json}` line: every figure, and the targets.
#[derive(Serialize)]
pub struct Report<'a> {
    #[serde(flatten)]
    pub results: &'a Results,
    pub targets: &'a [Target],
}

/// A hand-built run for the tests: the quick grid, every target met.
#[cfg(test)]
pub fn example() -> Results {
    use crate::claim::ClaimBatch;
    use crate::stats::Latency;
    use crate::worked::Cell;

    let cell = |workers, jobs_per_sec| Cell {
        workers,
        batch: 100,
        jobs: 5_000,
        secs: 5_000.0 / jobs_per_sec,
        jobs_per_sec,
        cpu_ms_per_job: 0.02,
        runs: vec![jobs_per_sec],
    };
    let latency = |p50_ms, p99_ms| Latency {
        n: 100,
        p50_ms,
        p99_ms,
    };
    let grid = vec![cell(1, 11_000.0), cell(2, 12_345.6)];
    let mut results = Results {
        worked: Worked {
            jobs: 5_000,
            best: grid[1].clone(),
            grid,
            ..Worked::default()
        },
        ..Results::default()
    };
    results.ceiling.ours_best_over_ceiling_best = Some(0.95);
    results.peer.ours_best_over_peer_best = Some(1.25);
    results.peer.default = Some(crate::peer::Headline::of(
        "1 worker, batch 100".into(),
        "1 process, concurrentJobs 24".into(),
        &[
            (12_000.0, 10_000.0),
            (9_000.0, 10_000.0),
            (11_000.0, 12_000.0),
        ],
    ));
    results.peer.rounds = 3;
    results.peer.ratio_median = Some(0.917);
    results.peer.ratio_ci95 = Some([1.02, 1.3]);
    results.claim_latency.batches = vec![ClaimBatch {
        batch: 100,
        ratio_p50: 1.1,
        ratio_p99: 1.15,
        ..ClaimBatch::default()
    }];
    results.ingest.concurrency_1.latency = latency(0.8, 1.394);
    results.accept_to_provider.polling_on = latency(127.0, 251.0);
    results.cold_start.ingest_minus_handshake_ms = 9.21;
    results.cpu = Cpu::of(&results.worked);
    results.write_budget = example_write_budget();
    results.wal.whole_life.ratio = Some(1.4);
    results.soak.claim_p99_ratio = Some(1.1);
    results.history_rows = crate::floor::HistoryFloor {
        rows: 5_000,
        shapes: vec![crate::floor::RowCost {
            shape: "ours: an outcome row with the job's last attempt (job_outcomes)".into(),
            indexes: 3,
            wal_bytes_per_row: 500.66,
        }],
    };
    results.wake = example_wake();
    results.retention = crate::retention::Retention {
        jobs: 20_000,
        kept_days: 30,
        day: "2026-01-01".into(),
        partition_bytes: 9_000_000,
        keys_bytes: 3_000_000,
        days_dropped: 1,
        secs: 0.0456,
        wal_bytes: 2_500_000,
        keys_deleted: 20_000,
        vacuum_secs: 0.0123,
        vacuum_wal_bytes: 700_000,
    };
    results
}

/// Part 13 with every goal met: N = 1 and 2, as in quick mode.
#[cfg(test)]
pub fn example_wake() -> crate::wake::WakeRuns {
    use crate::fanout::{FanOut, FanOutRun};
    use crate::lambda::Starts;
    use crate::stats::Latency;
    use crate::wake::{AfterIdle, Burst, ColdDerived, Idle, Settings, Steady, WakeRuns};

    let latency = |n, p50_ms, p99_ms| Latency { n, p50_ms, p99_ms };
    let woke = Starts {
        total: 1,
        wake: 1,
        ..Starts::default()
    };
    let run = |n: u32, jobs_per_sec: f64, backlog: u64| FanOutRun {
        max_invocations: n,
        drain_secs: 5_000.0 / jobs_per_sec,
        jobs_per_sec,
        invocations: Starts {
            total: 1 + backlog,
            backlog,
            ..woke
        },
        peak_running: n as usize,
        ..FanOutRun::default()
    };
    let mut runs = vec![run(1, 280.0, 0), run(2, 530.0, 1)];
    for r in &mut runs {
        r.speed_up = Some(r.jobs_per_sec / 280.0);
        r.speed_up_per_invocation = r.speed_up.map(|s| s / f64::from(r.max_invocations));
    }
    WakeRuns {
        settings: Settings::shipped(),
        steady: Steady {
            rate_per_sec: 100,
            ingest_instances: 4,
            secs: 3.01,
            achieved_per_sec: 99.7,
            accept_to_provider: latency(300, 98.5, 212.0),
            ingest_answer: latency(300, 1.2, 3.4),
            invocations: woke,
            environments_opened: 0,
        },
        after_idle: AfterIdle {
            rounds: 3,
            warm: latency(3, 20.5, 31.0),
            warm_max_ms: 31.0,
            invocations: Starts {
                total: 3,
                wake: 3,
                ..Starts::default()
            },
            cold: ColdDerived {
                derived: "derived, not measured end to end".into(),
                worker_init_median_ms: Some(150.0),
                worker_init_max_ms: Some(180.0),
                p50_ms: Some(170.5),
                max_ms: Some(211.0),
            },
        },
        burst: Burst {
            requests: 1_000,
            ingest_instances: 16,
            secs: 1.05,
            invocations: woke,
            peak_running: 1,
            accept_to_provider: latency(1_000, 400.0, 900.0),
            environments_opened: 0,
        },
        fan_out: FanOut {
            jobs: 5_000,
            provider_ms: [30.0, 80.0],
            runs,
        },
        idle: Idle {
            scheduled: 1,
            invocations: Starts::default(),
            claimed: 0,
            ran_ms: 2_105.0,
        },
        ..WakeRuns::default()
    }
}

/// Ours measured, the peer not (as in quick mode).
#[cfg(test)]
fn example_write_budget() -> WriteBudget {
    use crate::writes::{Side, Writes};

    let ours = Writes {
        setting: "2 workers, batch 100".into(),
        jobs: 5_000,
        secs: 0.4,
        jobs_per_sec: 12_500.0,
        wal_bytes_per_job: 2_345.67,
        heap_tuples_per_job: 3.0,
        index_entries_per_job: Some(7.0),
        buffers_dirtied_per_job: Some(0.1234),
        ..Writes::default()
    };
    WriteBudget::compare(
        Side {
            status: "measured".into(),
            run: Some(ours),
        },
        Side::not_measured("not measured (quick mode; --peer runs it)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_million_jobs_of_one_ms_are_a_thousand_vcpu_seconds() {
        // 1,000 s over 2 vCPUs is 500 s of the instance
        let usd = rds_usd_per_million(1.0);
        assert!((usd - 500.0 / 3600.0 * RDS_CLASS.2).abs() < 1e-12);
    }

    #[test]
    fn the_bench_line_keeps_the_keys_readers_use() {
        let results = example();
        let targets = crate::targets::targets(&results);
        let line = serde_json::to_string(&Report {
            results: &results,
            targets: &targets,
        })
        .unwrap();
        let json: Value = serde_json::from_str(&line).unwrap();
        let at = |path: &str| json.pointer(path).cloned().unwrap_or(Value::Null);
        assert_eq!(at("/worked/best/jobs_per_sec"), 12_345.6);
        assert_eq!(at("/worked/grid/0/runs_jobs_per_sec/0"), 11_000.0);
        assert_eq!(at("/ceiling/ours_best_over_ceiling_best"), 0.95);
        assert_eq!(at("/peer/ours_best_over_peer_best"), 1.25);
        assert_eq!(at("/peer/settings/concurrent_jobs"), 24);
        // medians 11,000 and 10,000
        assert_eq!(at("/peer/default/ours_jobs_per_sec"), 11_000.0);
        assert_eq!(at("/peer/default/theirs_jobs_per_sec"), 10_000.0);
        assert_eq!(at("/peer/default/ratio"), 1.1);
        assert_eq!(at("/peer/default/round_ratios/1"), 0.9);
        assert_eq!(at("/peer/rounds"), 3);
        assert_eq!(at("/peer/ratio_median"), 0.917);
        assert_eq!(at("/peer/ratio_ci95/0"), 1.02);
        assert_eq!(at("/targets/1/value"), "1.02");
        assert_eq!(at("/claim_latency/batches/0/ratio_p50"), 1.1);
        assert_eq!(at("/ingest/concurrency_1/p99_ms"), 1.394);
        assert_eq!(at("/accept_to_provider/polling_on/p50_ms"), 127.0);
        assert_eq!(at("/cold_start/ingest_minus_handshake_ms"), 9.21);
        assert_eq!(at("/wake/steady/accept_to_provider/p99_ms"), 212.0);
        assert_eq!(at("/wake/after_idle/warm/p50_ms"), 20.5);
        assert_eq!(at("/wake/after_idle/cold/p50_ms"), 170.5);
        assert_eq!(at("/wake/burst/invocations/total"), 1);
        assert_eq!(at("/wake/fan_out/runs/1/max_invocations"), 2);
        assert_eq!(at("/wake/fan_out/runs/1/speed_up"), 1.893);
        assert_eq!(at("/wake/idle/invocations/total"), 0);
        assert!(at("/wake/fan_out/runs/0/server/server_cores").is_null());
        assert_eq!(at("/cpu/cell/workers"), 1);
        assert_eq!(at("/write_budget/ours/run/wal_bytes_per_job"), 2_345.7);
        assert_eq!(at("/write_budget/ours/run/buffers_dirtied_per_job"), 0.123);
        assert_eq!(at("/history_rows/shapes/0/wal_bytes_per_row"), 500.7);
        assert_eq!(at("/history_rows/shapes/0/indexes"), 3);
        assert_eq!(at("/retention/secs"), 0.046);
        assert_eq!(at("/retention/keys_deleted"), 20_000);
        assert_eq!(at("/retention/vacuum_wal_bytes"), 700_000);
        assert_eq!(
            at("/write_budget/graphile_worker/status"),
            "not measured (quick mode; --peer runs it)"
        );
        assert!(at("/write_budget/ours_over_theirs/wal_bytes").is_null());
        assert_eq!(
            at("/targets/0/target"),
            "worked jobs/s ≥ 1.0× graphile-worker, both at their defaults (medians, ABBA)"
        );
        assert_eq!(at("/targets/0/value"), "1.10");
        assert_eq!(at("/targets/0/met"), true);
        assert!(json["ceiling"]["best"].is_null(), "absent figures are null");
        for key in [
            "mode",
            "date",
            "build",
            "machine",
            "postgres",
            "load_after",
            "total_secs",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }
}
