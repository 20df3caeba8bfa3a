//! The database server's side of a run, for telling whether the database binds: its
//! transactions (pg_stat_database) and its CPU time (/proc, when the server runs on this
//! machine, as tests/scripts/bench.sh starts it), beside this process's CPU and the whole
//! machine's, sampled every [`EVERY`] in the background and read at any instant in between
//! by interpolation ([`Series::between`]).
//!
//! The server's CPU is the postmaster's own and its reaped children's (`cutime`, `cstime`)
//! plus every live child's (backends, autovacuum, the checkpointer, the WAL writer): a
//! backend that exits between two samples moves its time from the second term to the first,
//! so the total counts it once. pg_stat_database's counters lag each backend's transactions
//! by up to a second (a backend flushes its statistics when idle, at most once a second).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::db::Bench;
use crate::stats::{process_cpu, rounded_opt};

/// How often the background sampler reads the counters.
pub const EVERY: Duration = Duration::from_millis(500);

/// The counters at one instant (CPU in seconds).
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    /// Transactions committed and rolled back in the benchmark's database.
    xacts: f64,
    /// The server's CPU time, when readable.
    server_cpu: Option<f64>,
    /// This process's CPU time.
    bench_cpu: f64,
    /// The machine's busy and total CPU time, over all its cores.
    machine: Option<(f64, f64)>,
}

/// The sampler, running.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<Vec<Sample>>>,
}

/// The samples of a finished run.
pub struct Series {
    samples: Vec<Sample>,
    /// Why the server's CPU was not read, if it was not.
    server_cpu_note: Option<String>,
}

/// The server's side over a window of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerSide {
    /// Transactions per second in the benchmark's database (pg_stat_database).
    #[serde(serialize_with = "rounded_opt::<1, _>")]
    pub xacts_per_sec: Option<f64>,
    /// The server's CPU time over the window, in cores (1.0: one core busy throughout).
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub server_cores: Option<f64>,
    /// This benchmark process's CPU (the workers, ingest, the provider stand-in), in cores.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub bench_cores: Option<f64>,
    /// The whole machine's busy share (every process, other work on it included; 1.0: every
    /// core busy throughout), from /proc/stat.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub machine_busy: Option<f64>,
    /// Why the server's CPU is not measured, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Sampler {
    /// Takes a first sample, then one every [`EVERY`] on a connection of its own.
    pub async fn start(bench: &Bench) -> Result<Self> {
        let client = bench
            .config
            .connect()
            .await
            .context("the server sampler's connection")?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .context("pg_backend_pid")?
            .get(0);
        let postmaster = parent_of(pid as u32);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let statement = client
                .prepare(
                    "SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database
                     WHERE datname = current_database()",
                )
                .await
                .context("prepare the transactions' count")?;
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // the last sample is taken after the stop, so it covers the run's end
                let last = flag.load(Ordering::SeqCst);
                // each read its own transaction: a fresh statistics snapshot
                let xacts: f64 = client
                    .query_one(&statement, &[])
                    .await
                    .context("pg_stat_database")?
                    .get(0);
                samples.push(Sample {
                    at: Instant::now(),
                    xacts,
                    server_cpu: postmaster.ok().and_then(server_cpu),
                    bench_cpu: process_cpu().as_secs_f64(),
                    machine: machine_cpu(),
                });
                if last {
                    return Ok(samples);
                }
            }
        });
        Ok(Self { stop, task })
    }

    /// Stops after one more sample.
    pub async fn finish(self, why_no_server_cpu: Option<String>) -> Result<Series> {
        self.stop.store(true, Ordering::SeqCst);
        let samples = self.task.await.context("the server sampler")??;
        let server_cpu_note = match samples.first() {
            Some(s) if s.server_cpu.is_some() => None,
            _ => Some(why_no_server_cpu.unwrap_or_else(|| {
                "the server's processes are not readable here (a server on another machine?)".into()
            })),
        };
        Ok(Series {
            samples,
            server_cpu_note,
        })
    }
}

impl Series {
    /// The server's side between two instants (each counter interpolated between the
    /// samples around it; outside the samples, the nearest).
    pub fn between(&self, from: Instant, to: Instant) -> ServerSide {
        let secs = to.saturating_duration_since(from).as_secs_f64();
        let delta = |f: &dyn Fn(&Sample) -> Option<f64>| -> Option<f64> {
            let a = interpolate(&self.samples, from, f)?;
            let b = interpolate(&self.samples, to, f)?;
            (secs > 0.0).then_some((b - a) / secs)
        };
        let busy = interpolate(&self.samples, to, &|s| s.machine.map(|m| m.0))
            .zip(interpolate(&self.samples, from, &|s| {
                s.machine.map(|m| m.0)
            }))
            .map(|(b, a)| b - a);
        let total = interpolate(&self.samples, to, &|s| s.machine.map(|m| m.1))
            .zip(interpolate(&self.samples, from, &|s| {
                s.machine.map(|m| m.1)
            }))
            .map(|(b, a)| b - a);
        ServerSide {
            xacts_per_sec: delta(&|s| Some(s.xacts)),
            server_cores: delta(&|s| s.server_cpu),
            bench_cores: delta(&|s| Some(s.bench_cpu)),
            machine_busy: busy
                .zip(total)
                .and_then(|(b, t)| (t > 0.0).then_some(b / t)),
            note: self.server_cpu_note.clone(),
        }
    }
}

/// A counter at `at`, linear between the samples around it.
fn interpolate(samples: &[Sample], at: Instant, f: &dyn Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let after = samples.iter().position(|s| s.at >= at);
    match after {
        None => samples.last().and_then(f),
        Some(0) => samples.first().and_then(f),
        Some(i) => {
            let (a, b) = (&samples[i - 1], &samples[i]);
            let (va, vb) = (f(a)?, f(b)?);
            let span = b.at.duration_since(a.at).as_secs_f64();
            let share = if span > 0.0 {
                at.duration_since(a.at).as_secs_f64() / span
            } else {
                1.0
            };
            Some(va + (vb - va) * share)
        }
    }
}

/// A process's parent, from /proc/PID/stat.
fn parent_of(pid: u32) -> std::result::Result<u32, ()> {
    let stat = Stat::read(pid).ok_or(())?;
    Ok(stat.ppid)
}

/// The fields of /proc/PID/stat used here (CPU times in clock ticks).
struct Stat {
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

impl Stat {
    fn read(pid: u32) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// After the command name's closing parenthesis (the name may hold spaces): state,
    /// ppid, … utime is the 14th field of the line, stime the 15th, cutime, cstime.
    fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n = |i: usize| f.get(i)?.parse::<u64>().ok();
        Some(Self {
            ppid: f.get(1)?.parse().ok()?,
            utime: n(11)?,
            stime: n(12)?,
            cutime: n(13)?,
            cstime: n(14)?,
        })
    }
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// The server's CPU seconds so far: the postmaster's own and reaped children's, plus every
/// live child's own.
fn server_cpu(postmaster: u32) -> Option<f64> {
    let main = Stat::read(postmaster)?;
    let mut ticks = main.utime + main.stime + main.cutime + main.cstime;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(s) = Stat::read(pid)
            && s.ppid == postmaster
        {
            ticks += s.utime + s.stime;
        }
    }
    Some(ticks as f64 / ticks_per_sec())
}

/// The machine's (busy, total) CPU seconds over all cores, from /proc/stat's first line
/// (idle and iowait are not busy).
fn machine_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().sum();
    let idle = v[3] + v[4];
    let t = ticks_per_sec();
    Some(((total - idle) as f64 / t, total as f64 / t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_after_the_command_name() {
        let line = "4242 (postgres: bench (x) idle) S 4200 4200 4200 0 -1 4194560 1 0 0 0 \
                    17 5 3 2 20 0 1 0 100 0 0";
        let s = Stat::parse(line).unwrap();
        assert_eq!(
            (s.ppid, s.utime, s.stime, s.cutime, s.cstime),
            (4200, 17, 5, 3, 2)
        );
        assert!(Stat::parse("garbage").is_none());
    }

    #[test]
    fn counters_are_read_between_samples_by_interpolation() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let sample = |ms, xacts, cpu| Sample {
            at: at(ms),
            xacts,
            server_cpu: Some(cpu),
            bench_cpu: 0.0,
            machine: Some((cpu, 2.0 * ms as f64 / 1000.0)),
        };
        let series = Series {
            samples: vec![
                sample(0, 0.0, 0.0),
                sample(1000, 1000.0, 0.5),
                sample(2000, 3000.0, 1.5),
            ],
            server_cpu_note: None,
        };
        let side = series.between(at(500), at(1500));
        assert!(
            (side.xacts_per_sec.unwrap() - 1500.0).abs() < 1e-6,
            "{side:?}"
        );
        assert!((side.server_cores.unwrap() - 0.75).abs() < 1e-6, "{side:?}");
        assert!(
            (side.machine_busy.unwrap() - 0.375).abs() < 1e-6,
            "{side:?}"
        );
    }
}
