//! One clock for both sides of a comparison: the database's. While a queue drains, a
//! connection of its own counts the jobs still open every [`SAMPLE_EVERY`]; the rate is the
//! jobs finished between 10% and 90% of the drain over the time between those two points
//! (each interpolated between the samples around it).
//!
//! So neither side's start-up (spawning Node.js, opening connections, a first claim) nor its
//! tail (the last stragglers, a process exiting) is timed, and both are timed the same way,
//! whatever each side reports of itself. The counting costs both alike: one `count(*)` of the
//! table that holds the open jobs (ours `job_queue`, graphile-worker's `_private_jobs`; each
//! deletes a job when it is done) every 50 ms.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use notify_postgres::db::DbConfig;

pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Our open jobs: an ended job has no queue row.
pub const OURS_OPEN: &str = "SELECT count(*) FROM job_queue";
/// graphile-worker's: it deletes a job it completes.
pub const THEIRS_OPEN: &str = "SELECT count(*) FROM graphile_worker._private_jobs";

/// The window's edges: the share of the drain finished.
const FROM: f64 = 0.1;
const TO: f64 = 0.9;

/// Counting the open jobs in the background, on a thread and runtime of its own: the side
/// under test (our workers run as tasks of the bench's runtime) cannot delay its ticks.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<(f64, i64)>>>,
}

impl Sampler {
    /// Connects, takes the first sample (so the clock runs before the drain starts), and
    /// goes on every [`SAMPLE_EVERY`] until [`Sampler::finish`] (or no job is open).
    pub async fn start(config: &DbConfig, count: &'static str) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let config = config.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("the clock's runtime")?;
            rt.block_on(async move {
                let connected = async {
                    let client = config.connect().await.context("the clock's connection")?;
                    let statement = client.prepare(count).await.context("prepare the count")?;
                    Ok::<_, anyhow::Error>((client, statement))
                };
                let (client, statement) = match connected.await {
                    Ok(c) => c,
                    Err(e) => {
                        let why = format!("{e:#}");
                        let _ = ready_tx.send(Err(e));
                        anyhow::bail!(why);
                    }
                };
                let started = Instant::now();
                let first: i64 = client.query_one(&statement, &[]).await?.get(0);
                let _ = ready_tx.send(Ok(()));
                let mut samples = vec![(0.0, first)];
                let mut tick = tokio::time::interval(SAMPLE_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                while !flag.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let open: i64 = client.query_one(&statement, &[]).await?.get(0);
                    samples.push((started.elapsed().as_secs_f64(), open));
                    if open == 0 {
                        break;
                    }
                }
                Ok(samples)
            })
        });
        ready_rx
            .await
            .context("the clock's thread ended before its first sample")??;
        Ok(Self { stop, thread })
    }

    /// Stops the clock: (seconds since start, jobs still open), in order.
    pub async fn finish(self) -> Result<Vec<(f64, i64)>> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .context("join the clock")?
            .map_err(|_| anyhow::anyhow!("the clock's thread panicked"))?
    }
}

/// What the clock saw of one drain of `total` jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// Jobs per second between 10% and 90% of the drain.
    pub jobs_per_sec: f64,
    /// The seconds between those two points.
    pub window_secs: f64,
}

/// The rate between 10% and 90% of `total` finished, from `samples` of the open count.
pub fn window_rate(samples: &[(f64, i64)], total: i64) -> Result<Timed> {
    ensure!(total > 0, "nothing to time");
    let at = |share: f64| -> Option<f64> {
        let level = share * total as f64;
        let finished = |open: i64| (total - open) as f64;
        let i = samples
            .iter()
            .position(|(_, open)| finished(*open) >= level)?;
        if i == 0 {
            return Some(samples[0].0);
        }
        let ((t0, o0), (t1, o1)) = (samples[i - 1], samples[i]);
        let (f0, f1) = (finished(o0), finished(o1));
        Some(t0 + (t1 - t0) * (level - f0) / (f1 - f0))
    };
    let (from, to) = (at(FROM), at(TO));
    let (Some(from), Some(to)) = (from, to) else {
        anyhow::bail!(
            "the clock never saw {:.0}% of {total} jobs finished ({} samples, last open {})",
            TO * 100.0,
            samples.len(),
            samples.last().map_or(-1, |(_, open)| *open)
        );
    };
    let inside = samples
        .iter()
        .filter(|(t, _)| (from..=to).contains(t))
        .count();
    ensure!(
        inside >= 4,
        "the drain of {total} jobs was too quick for a {} ms clock ({inside} samples in its \
         window): queue more jobs",
        SAMPLE_EVERY.as_millis()
    );
    Ok(Timed {
        jobs_per_sec: (TO - FROM) * total as f64 / (to - from),
        window_secs: to - from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_taken_between_10_and_90_percent_and_ignores_the_ends() {
        // a slow start (nothing for 2 s), 100 jobs/s, then a straggler tail
        let mut samples = vec![(0.0, 1000), (1.0, 1000), (2.0, 1000)];
        for s in 1..=9 {
            samples.push((2.0 + s as f64, 1000 - 100 * s));
        }
        samples.push((20.0, 50));
        samples.push((40.0, 0));
        let timed = window_rate(&samples, 1000).unwrap();
        assert!((timed.jobs_per_sec - 100.0).abs() < 1e-9, "{timed:?}");
        assert!((timed.window_secs - 8.0).abs() < 1e-9, "{timed:?}");
    }

    #[test]
    fn crossings_are_interpolated_between_samples() {
        // 0 → 1000 finished linearly over 10 s, sampled every 0.7 s (no sample on an edge)
        let samples: Vec<(f64, i64)> = (0..=15)
            .map(|i| (0.7 * i as f64, (1000.0 - 70.0 * i as f64).max(0.0) as i64))
            .collect();
        let timed = window_rate(&samples, 1000).unwrap();
        assert!((timed.jobs_per_sec - 100.0).abs() < 1e-9, "{timed:?}");
    }

    #[test]
    fn a_drain_the_clock_did_not_see_through_is_an_error() {
        assert!(window_rate(&[(0.0, 100), (1.0, 50)], 100).is_err());
        // finished between two samples: no time inside the window to speak of
        assert!(window_rate(&[(0.0, 100), (0.05, 0)], 100).is_err());
    }
}
