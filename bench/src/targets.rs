//! The goals, judged from the results alone: reported, never enforced.

use serde::Serialize;

use crate::cold_start::GOAL_MS;
use crate::render::{fmt_n, ms};
use crate::results::Results;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    #[serde(rename = "target")]
    pub name: &'static str,
    pub want: String,
    /// The figure, formatted as the table shows it.
    #[serde(rename = "value")]
    pub got: String,
    /// `None`: not measured in this run.
    pub met: Option<bool>,
}

/// Every target with this run's figure and whether it was met.
pub fn targets(r: &Results) -> Vec<Target> {
    let peer = r.peer.ours_best_over_peer_best;
    let default = r.peer.default.as_ref().map(|h| h.ratio);
    let lower = r.peer.ratio_ci95.map(|[lo, _]| lo);
    let ceiling = r.ceiling.ours_best_over_ceiling_best;
    let best = r.worked.best.jobs_per_sec;
    let ingest_p99 = r.ingest.concurrency_1.latency.p99_ms;
    let polling_p50 = r.accept_to_provider.polling_on.p50_ms;
    let cold = r.cold_start.ingest_minus_handshake_ms;
    let wal = r.wal.whole_life.ratio;
    let soak = r.soak.claim_p99_ratio;
    [
        Target {
            name: "worked jobs/s ≥ 1.0× graphile-worker, both at their defaults (medians, ABBA)",
            want: "≥ 1.00".into(),
            got: ratio(default),
            met: default.map(|r| r >= 1.0),
        },
        Target {
            name: "the same, the lower end of the rounds' bootstrap 95% interval",
            want: "≥ 1.00".into(),
            got: ratio(lower),
            met: lower.map(|r| r >= 1.0),
        },
        Target {
            name: "the same, each side's best over a grid of the same size",
            want: "≥ 1.00".into(),
            got: ratio(peer),
            met: peer.map(|r| r >= 1.0),
        },
        Target {
            name: "worked jobs/s ≥ 0.9× pgbench ceiling",
            want: "≥ 0.90".into(),
            got: ratio(ceiling),
            met: ceiling.map(|r| r >= 0.9),
        },
        Target {
            name: "worked jobs/s ≥ 10,000 on this machine",
            want: "≥ 10,000".into(),
            got: fmt_n(best),
            met: Some(best >= 10_000.0),
        },
    ]
    .into_iter()
    .chain(claim(r))
    .chain([
        Target {
            name: "WAL over a job's whole life ≤ 1.5× graphile-worker's, history included",
            want: "≤ 1.50".into(),
            got: ratio(wal),
            met: wal.map(|r| r <= 1.5),
        },
        Target {
            name: "soak: claim p99 ≤ 1.2× graphile-worker's, a long transaction in the middle",
            want: "≤ 1.20".into(),
            got: ratio(soak),
            met: soak.map(|r| r <= 1.2),
        },
        Target {
            name: "ingest p99 ≤ 5 ms (concurrency 1)",
            want: "≤ 5 ms".into(),
            got: ms(ingest_p99),
            met: Some(ingest_p99 <= 5.0),
        },
        Target {
            name: "accept → provider p50 ≤ 1 s, polling on",
            want: "≤ 1 s".into(),
            got: ms(polling_p50),
            met: Some(polling_p50 <= 1000.0),
        },
        Target {
            name: "ingest cold start − DB handshake ≤ 50 ms (migrations off)",
            want: format!("≤ {GOAL_MS} ms"),
            got: ms(cold),
            met: Some(cold <= GOAL_MS),
        },
    ])
    .chain(wake(r))
    .collect()
}

/// Part 13's targets (the wake, the burst, the fan-out, idle), each named `fleet: …`; a
/// figure of a run that did not measure it is "not measured". The fan-out has one per
/// `WORKER_MAX_INVOCATIONS` above 1 that was measured beside N = 1.
pub fn wake(r: &Results) -> Vec<Target> {
    let w = &r.wake;
    let steady = (w.steady.accept_to_provider.n > 0).then_some(&w.steady.accept_to_provider);
    let warm = (w.after_idle.warm.n > 0).then_some(w.after_idle.warm_max_ms);
    let cold = w.after_idle.cold.max_ms;
    let burst = (w.burst.requests > 0).then_some(w.burst.invocations.total);
    let idle = (w.idle.scheduled > 0).then_some(w.idle.invocations.total);
    let within = |v: Option<f64>, bound: f64| Target {
        name: "",
        want: String::new(),
        got: v.map_or("not measured".into(), ms),
        met: v.map(|v| v <= bound),
    };
    let count = |v: Option<u64>, bound: u64| Target {
        name: "",
        want: String::new(),
        got: v.map_or("not measured".into(), |v| v.to_string()),
        met: v.map(|v| v <= bound),
    };
    let mut out = vec![
        Target {
            name: "fleet: accept → provider p50 ≤ 250 ms, 100 requests/s, polling off, wake on",
            want: "≤ 250 ms".into(),
            ..within(steady.map(|l| l.p50_ms), 250.0)
        },
        Target {
            name: "fleet: accept → provider p99 ≤ 1 s, 100 requests/s, polling off, wake on",
            want: "≤ 1 s".into(),
            ..within(steady.map(|l| l.p99_ms), 1000.0)
        },
        Target {
            name: "fleet: a request after idle reaches its provider ≤ 1 s, warm (every round)",
            want: "≤ 1 s".into(),
            ..within(warm, 1000.0)
        },
        Target {
            name: "fleet: the same, cold (derived: warm + part 8's worker cold start)",
            want: "≤ 1 s".into(),
            ..within(cold, 1000.0)
        },
        Target {
            name: "fleet: invocations started by 1,000 requests within a second ≤ 5",
            want: "≤ 5".into(),
            ..count(burst, 5)
        },
    ];
    let base = w.fan_out.runs.iter().any(|run| run.max_invocations == 1);
    for run in w.fan_out.runs.iter().filter(|run| run.max_invocations > 1) {
        let n = f64::from(run.max_invocations);
        let speed_up = run.speed_up.filter(|_| base);
        out.push(Target {
            name: "fleet: fan-out drain speed-up over WORKER_MAX_INVOCATIONS 1 ≥ 0.8 × N",
            want: format!("≥ {:.2} (N = {})", 0.8 * n, run.max_invocations),
            got: ratio(speed_up),
            met: speed_up.map(|s| s >= 0.8 * n),
        });
    }
    out.push(Target {
        name: "fleet: invocations started with nothing posted (a scheduled one, empty queue)",
        want: "0".into(),
        ..count(idle, 0)
    });
    out
}

/// Whether a target belongs to `--only life`, `soak`, `cold`, `retention` or `wake`.
pub fn of_part(part: &str, t: &Target) -> bool {
    match part {
        "wake" => t.name.starts_with("fleet:"),
        "life" => t.name.starts_with("WAL over a job's whole life"),
        "soak" => t.name.starts_with("soak:"),
        "cold" => t.name.starts_with("ingest cold start"),
        _ => false,
    }
}

/// Part 2's targets: the claim latency with many finished rows ÷ with none, batch 100.
/// The comparison with graphile-worker's targets (`--only peer`): the first three.
pub fn peer(r: &Results) -> Vec<Target> {
    targets(r).into_iter().take(3).collect()
}

pub fn claim(r: &Results) -> [Target; 2] {
    let claim_100 = r.claim_latency.batches.iter().find(|b| b.batch == 100);
    let p50 = claim_100.map(|b| b.ratio_p50);
    let p99 = claim_100.map(|b| b.ratio_p99);
    [
        Target {
            name: "claim latency with many finished rows ÷ with none (p50, batch 100)",
            want: "≤ 1.20".into(),
            got: ratio(p50),
            met: p50.map(|r| r <= 1.2),
        },
        Target {
            name: "claim latency with many finished rows ÷ with none (p99, batch 100)",
            want: "≤ 1.20".into(),
            got: ratio(p99),
            met: p99.map(|r| r <= 1.2),
        },
    ]
}

/// A ratio as the table shows it.
fn ratio(v: Option<f64>) -> String {
    v.map_or("not measured".into(), |r| format!("{r:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::example;

    fn verdicts(r: &Results) -> Vec<(String, Option<bool>)> {
        targets(r).into_iter().map(|t| (t.got, t.met)).collect()
    }

    #[test]
    fn a_run_that_meets_every_goal() {
        let got = verdicts(&example());
        let want = [
            ("1.10", Some(true)),
            ("1.02", Some(true)),
            ("1.25", Some(true)),
            ("0.95", Some(true)),
            ("12,346", Some(true)),
            ("1.10", Some(true)),
            ("1.15", Some(true)),
            ("1.40", Some(true)),
            ("1.10", Some(true)),
            ("1.39 ms", Some(true)),
            ("127 ms", Some(true)),
            ("9.21 ms", Some(true)),
            ("98.50 ms", Some(true)),
            ("212 ms", Some(true)),
            ("31.00 ms", Some(true)),
            ("211 ms", Some(true)),
            ("1", Some(true)),
            ("1.89", Some(true)),
            ("0", Some(true)),
        ];
        let want: Vec<_> = want.iter().map(|(g, m)| (g.to_string(), *m)).collect();
        assert_eq!(got, want);
        let all = targets(&example());
        let cold = all
            .iter()
            .find(|t| t.name.starts_with("ingest cold start"))
            .unwrap();
        assert_eq!(cold.want, "≤ 50 ms");
        let fan_out = all.iter().find(|t| t.name.contains("fan-out")).unwrap();
        assert_eq!(fan_out.want, "≥ 1.60 (N = 2)");
    }

    #[test]
    fn the_wake_parts_goals_are_missed_just_past_their_bounds_and_met_on_them() {
        let mut r = example();
        let w = &mut r.wake;
        w.steady.accept_to_provider.p50_ms = 250.0;
        w.steady.accept_to_provider.p99_ms = 1000.01;
        w.after_idle.warm_max_ms = 1000.0;
        w.after_idle.cold.max_ms = Some(1000.5);
        w.burst.invocations.total = 6;
        w.fan_out.runs[1].speed_up = Some(1.6);
        w.idle.invocations.total = 1;
        let met: Vec<_> = wake(&r).into_iter().map(|t| t.met).collect();
        let want = [true, false, true, false, false, true, false];
        assert_eq!(met, want.map(Some));
        r.wake.fan_out.runs[1].speed_up = Some(1.599);
        assert_eq!(wake(&r)[5].met, Some(false));
    }

    #[test]
    fn the_wake_part_not_measured_is_neither_met_nor_missed() {
        let r = Results::default();
        let t = wake(&r);
        assert_eq!(t.len(), 6, "no fan-out run, no fan-out target");
        for t in &t {
            assert_eq!(
                (t.got.as_str(), t.met),
                ("not measured", None),
                "{}",
                t.name
            );
        }
        assert!(t.iter().all(|t| of_part("wake", t)));
        // a fan-out without N = 1 has no speed-up to judge
        let mut r = example();
        r.wake.fan_out.runs.remove(0);
        let fan_out = wake(&r)
            .into_iter()
            .find(|t| t.name.contains("fan-out"))
            .unwrap();
        assert_eq!((fan_out.got.as_str(), fan_out.met), ("not measured", None));
    }

    #[test]
    fn each_goal_is_missed_just_past_its_bound_and_met_on_it() {
        let mut r = example();
        r.peer.default.as_mut().unwrap().ratio = 0.999;
        r.peer.ratio_ci95 = Some([1.0, 1.2]);
        r.peer.ours_best_over_peer_best = Some(1.0);
        r.ceiling.ours_best_over_ceiling_best = Some(0.9);
        r.worked.best.jobs_per_sec = 9_999.0;
        r.claim_latency.batches[0].ratio_p50 = 1.2;
        r.claim_latency.batches[0].ratio_p99 = 1.2001;
        r.wal.whole_life.ratio = Some(1.5001);
        r.soak.claim_p99_ratio = Some(1.2);
        r.ingest.concurrency_1.latency.p99_ms = 5.01;
        r.accept_to_provider.polling_on.p50_ms = 1000.0;
        r.cold_start.ingest_minus_handshake_ms = 50.001;
        let met: Vec<_> = targets(&r).into_iter().map(|t| t.met).collect();
        let want = [
            false, true, true, true, false, true, false, false, true, false, true, false,
        ];
        assert_eq!(met[..12], want.map(Some));
    }

    #[test]
    fn what_was_not_measured_is_neither_met_nor_missed() {
        let mut r = example();
        r.peer.ours_best_over_peer_best = None;
        r.peer.default = None;
        r.peer.ratio_ci95 = None;
        r.ceiling.ours_best_over_ceiling_best = None;
        r.claim_latency.batches.retain(|b| b.batch != 100);
        r.wal.whole_life.ratio = None;
        r.soak.claim_p99_ratio = None;
        let t = targets(&r);
        for t in &t[..4] {
            assert_eq!(
                (t.got.as_str(), t.met),
                ("not measured", None),
                "{}",
                t.name
            );
        }
        for t in &t[5..9] {
            assert_eq!(
                (t.got.as_str(), t.met),
                ("not measured", None),
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn a_figure_that_is_missing_misses_its_goal() {
        let mut r = example();
        r.ingest.concurrency_1.latency.p99_ms = f64::NAN;
        r.cold_start.ingest_minus_handshake_ms = f64::NAN;
        let t = targets(&r);
        assert_eq!((t[9].got.as_str(), t[9].met), ("-", Some(false)));
        assert_eq!((t[11].got.as_str(), t[11].met), ("-", Some(false)));
    }
}
