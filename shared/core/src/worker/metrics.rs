//! The worker's metric line: one Embedded Metric Format document per invocation with every
//! name in [`WORKER_METRICS`](crate::telemetry::emf::WORKER_METRICS) that applies.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::Channel;
use crate::stats::nearest_rank;
use crate::telemetry::emf::{Emf, Unit};

use super::WorkerSummary;

/// How often one instance measures the backlog's age.
pub const BACKLOG_EVERY: Duration = Duration::from_secs(60);

/// Provider-call latencies of one invocation, per channel (ms).
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    sms: Vec<f64>,
    email: Vec<f64>,
}

impl Latencies {
    pub fn add(&mut self, channel: Channel, ms: f64) {
        match channel {
            Channel::Sms => self.sms.push(ms),
            Channel::Email => self.email.push(ms),
        }
    }

    pub fn extend(&mut self, other: Latencies) {
        self.sms.extend(other.sms);
        self.email.extend(other.email);
    }

    /// (p50, p99) of a channel's calls, `None` without calls.
    pub fn percentiles(&self, channel: Channel) -> Option<(f64, f64)> {
        let mut values = match channel {
            Channel::Sms => self.sms.clone(),
            Channel::Email => self.email.clone(),
        };
        values.sort_by(f64::total_cmp);
        Some((nearest_rank(&values, 0.50)?, nearest_rank(&values, 0.99)?))
    }
}

/// The invocation's metric line: outcome counts always, a channel's latencies when it had
/// calls, the backlog's age when it was measured.
pub fn worker_line(
    summary: &WorkerSummary,
    latencies: &Latencies,
    backlog_age_secs: Option<f64>,
    timestamp_ms: i64,
) -> String {
    let mut emf = Emf::new(timestamp_ms)
        .count("Sent", summary.sent)
        .count("Retried", summary.retried)
        .count("Held", summary.held)
        .count("Dead", summary.dead)
        .count("Fenced", summary.fenced);
    for (channel, p50, p99) in [
        (
            Channel::Sms,
            "SmsProviderLatencyP50",
            "SmsProviderLatencyP99",
        ),
        (
            Channel::Email,
            "EmailProviderLatencyP50",
            "EmailProviderLatencyP99",
        ),
    ] {
        if let Some((at50, at99)) = latencies.percentiles(channel) {
            emf = emf.metric(p50, Unit::Milliseconds, round3(at50)).metric(
                p99,
                Unit::Milliseconds,
                round3(at99),
            );
        }
    }
    if let Some(age) = backlog_age_secs {
        emf = emf.metric("BacklogAgeSeconds", Unit::Seconds, round3(age));
    }
    emf.line()
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Whether this instance should measure the backlog now: the first time, then at most once
/// per [`BACKLOG_EVERY`] (a worker invoked every minute measures once per invocation; one
/// polling for minutes, once a minute).
pub fn backlog_due(last: &Mutex<Option<Instant>>, now: Instant) -> bool {
    let mut last = last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match *last {
        Some(at) if now.duration_since(at) < BACKLOG_EVERY => false,
        _ => {
            *last = Some(now);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::emf::{WORKER_METRICS, published};

    #[test]
    fn the_line_has_every_worker_metric_when_both_channels_were_called() {
        let summary = WorkerSummary {
            claimed: 7,
            sent: 3,
            retried: 1,
            held: 1,
            dead: 1,
            fenced: 1,
            ..WorkerSummary::default()
        };
        let mut latencies = Latencies::default();
        for ms in 1..=100 {
            latencies.add(Channel::Sms, f64::from(ms));
        }
        latencies.add(Channel::Email, 42.0);
        let line = worker_line(&summary, &latencies, Some(12.5), 1);
        let names: Vec<String> = published(&line).unwrap().into_iter().map(|m| m.0).collect();
        assert_eq!(names, WORKER_METRICS.map(String::from).to_vec());
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["Sent"], 3);
        assert_eq!(v["Fenced"], 1);
        assert_eq!(v["SmsProviderLatencyP50"], 50);
        assert_eq!(v["SmsProviderLatencyP99"], 99);
        assert_eq!(v["EmailProviderLatencyP99"], 42);
        assert_eq!(v["BacklogAgeSeconds"], 12.5);
    }

    #[test]
    fn a_channel_without_calls_and_an_unmeasured_backlog_are_left_out() {
        let line = worker_line(&WorkerSummary::default(), &Latencies::default(), None, 1);
        let names: Vec<String> = published(&line).unwrap().into_iter().map(|m| m.0).collect();
        assert_eq!(names, ["Sent", "Retried", "Held", "Dead", "Fenced"]);
    }

    #[test]
    fn the_backlog_is_measured_at_most_once_a_minute() {
        let last = Mutex::new(None);
        let start = Instant::now();
        assert!(backlog_due(&last, start));
        assert!(!backlog_due(&last, start + Duration::from_secs(59)));
        assert!(backlog_due(&last, start + Duration::from_secs(60)));
        assert!(!backlog_due(&last, start + Duration::from_secs(61)));
    }
}
