//! The worker's metric lines: one Embedded Metric Format document per invocation with every
//! name in [`WORKER_METRICS`](crate::telemetry::emf::WORKER_METRICS) that applies, a document per further hundred provider calls of
//! a channel, and, when the queue was measured, one [`QUEUE_DEPTH`] document per state.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::Channel;
use crate::store::QueueDepth;
use crate::telemetry::emf::{Emf, MAX_VALUES, QUEUE_DEPTH, QUEUE_STATES, Unit};

use super::WorkerSummary;

/// How often one instance measures the queue.
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

    /// The channels that had calls.
    pub fn channels(&self) -> Vec<Channel> {
        let mut channels = Vec::new();
        if !self.sms.is_empty() {
            channels.push(Channel::Sms);
        }
        if !self.email.is_empty() {
            channels.push(Channel::Email);
        }
        channels
    }

    /// The mean latency of every call, `None` without any.
    pub fn mean_ms(&self) -> Option<f64> {
        let n = self.sms.len() + self.email.len();
        (n > 0).then(|| (self.sms.iter().sum::<f64>() + self.email.iter().sum::<f64>()) / n as f64)
    }

    /// A channel's calls, in the order they finished (ms, to the microsecond).
    pub fn of(&self, channel: Channel) -> Vec<f64> {
        let values = match channel {
            Channel::Sms => &self.sms,
            Channel::Email => &self.email,
        };
        values.iter().map(|ms| round3(*ms)).collect()
    }
}

/// The latency metric of each channel.
const LATENCY: [(Channel, &str); 2] = [
    (Channel::Sms, "SmsProviderLatency"),
    (Channel::Email, "EmailProviderLatency"),
];

/// The invocation's metric lines: the first has the outcome counts always, a channel's first
/// hundred latencies when it had calls, the backlog's age when the queue was measured; then a
/// line per further hundred latencies, and one per queue state.
pub fn worker_lines(
    summary: &WorkerSummary,
    latencies: &Latencies,
    queue: Option<QueueDepth>,
    timestamp_ms: i64,
) -> Vec<String> {
    let mut first = Emf::new(timestamp_ms)
        .count("Sent", summary.sent)
        .count("Retried", summary.retried)
        .count("Held", summary.held)
        .count("Dead", summary.dead)
        .count("Fenced", summary.fenced);
    let mut more = Vec::new();
    for (channel, name) in LATENCY {
        let values = latencies.of(channel);
        let mut chunks = values.chunks(MAX_VALUES);
        if let Some(chunk) = chunks.next() {
            first = first.values(name, Unit::Milliseconds, chunk);
        }
        more.extend(chunks.map(|chunk| {
            Emf::new(timestamp_ms)
                .values(name, Unit::Milliseconds, chunk)
                .line()
        }));
    }
    if let Some(queue) = queue {
        first = first.metric(
            "BacklogAgeSeconds",
            Unit::Seconds,
            round3(queue.backlog_age_secs),
        );
    }
    let mut lines = vec![first.line()];
    lines.extend(more);
    if let Some(queue) = queue {
        let counts = [queue.due, queue.processing, queue.held, queue.scheduled];
        for (state, count) in QUEUE_STATES.into_iter().zip(counts) {
            lines.push(
                Emf::new(timestamp_ms)
                    .dimension("State", state)
                    .metric_by(&["State"], QUEUE_DEPTH, Unit::Count, count as f64)
                    .line(),
            );
        }
    }
    lines
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Whether this instance should measure the queue now: the first time, then at most once
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

    fn names(line: &str) -> Vec<String> {
        published(line).unwrap().into_iter().map(|m| m.0).collect()
    }

    #[test]
    fn the_first_line_has_every_worker_metric_and_the_latencies_as_arrays() {
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
        latencies.add(Channel::Email, 42.0004);
        let queue = QueueDepth {
            backlog_age_secs: 12.5,
            due: 4,
            processing: 3,
            held: 2,
            scheduled: 1,
        };
        let lines = worker_lines(&summary, &latencies, Some(queue), 1);
        assert_eq!(names(&lines[0]), WORKER_METRICS.map(String::from).to_vec());
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["Sent"], 3);
        assert_eq!(v["Fenced"], 1);
        assert_eq!(v["SmsProviderLatency"].as_array().unwrap().len(), 100);
        assert_eq!(v["SmsProviderLatency"][99].as_f64(), Some(100.0));
        assert_eq!(v["EmailProviderLatency"], serde_json::json!([42.0]));
        assert_eq!(v["BacklogAgeSeconds"], 12.5);
        // then one line per state, each a QueueDepth with its State
        assert_eq!(lines.len(), 1 + QUEUE_STATES.len());
        for (line, (state, count)) in lines[1..].iter().zip(QUEUE_STATES.iter().zip([4, 3, 2, 1])) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["State"], *state);
            assert_eq!(v[QUEUE_DEPTH], count);
            assert_eq!(
                published(line).unwrap(),
                [(
                    QUEUE_DEPTH.to_owned(),
                    vec![vec!["Service".to_owned(), "State".to_owned()]]
                )]
            );
        }
    }

    #[test]
    fn more_than_a_hundred_calls_take_more_lines() {
        let mut latencies = Latencies::default();
        for ms in 0..250 {
            latencies.add(Channel::Email, f64::from(ms));
        }
        let lines = worker_lines(&WorkerSummary::default(), &latencies, None, 1);
        assert_eq!(lines.len(), 3);
        let sizes: Vec<usize> = lines
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["EmailProviderLatency"].as_array().unwrap().len()
            })
            .collect();
        assert_eq!(sizes, [100, 100, 50], "every call counted once");
        assert_eq!(names(&lines[2]), ["EmailProviderLatency"]);
    }

    #[test]
    fn a_channel_without_calls_and_an_unmeasured_queue_are_left_out() {
        let lines = worker_lines(&WorkerSummary::default(), &Latencies::default(), None, 1);
        assert_eq!(lines.len(), 1);
        assert_eq!(
            names(&lines[0]),
            ["Sent", "Retried", "Held", "Dead", "Fenced"]
        );
    }

    #[test]
    fn the_queue_is_measured_at_most_once_a_minute() {
        let last = Mutex::new(None);
        let start = Instant::now();
        assert!(backlog_due(&last, start));
        assert!(!backlog_due(&last, start + Duration::from_secs(59)));
        assert!(backlog_due(&last, start + Duration::from_secs(60)));
        assert!(!backlog_due(&last, start + Duration::from_secs(61)));
    }
}
