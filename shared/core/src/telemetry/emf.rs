//! CloudWatch metrics as one Embedded Metric Format line per invocation, printed on stdout
//! (CloudWatch Logs turns it into metrics: no API call, no extra permission).
//!
//! Namespace [`METRIC_NAMESPACE`], dimension `Service` = [`SERVICE`] on every metric; the
//! ingest's `Refused` is also published by `Code`. The names below are the ones
//! docs/observability.md documents and `template.yaml`'s dashboard and alarms read.

use serde_json::{Map, Value, json};

/// The metric namespace (the alarms in `template.yaml` read it).
pub const METRIC_NAMESPACE: &str = "NotificationService";
/// The value of the `Service` dimension.
pub const SERVICE: &str = "notification-service";

/// The worker's metrics:
/// - `Sent`, `Retried`, `Held`, `Dead`, `Fenced`: attempts by outcome (`Held`: given back
///   for account or configuration trouble or an outage; `Fenced`: the job had been swept
///   and claimed again meanwhile);
/// - `{Sms,Email}ProviderLatency`: every provider call's latency in this invocation (ms), as
///   EMF value arrays, from which CloudWatch computes true percentiles (p50, p99) across
///   invocations; present when the channel had calls;
/// - `BacklogAgeSeconds`: how long the oldest due job has waited (0: none due), measured at
///   the start of an invocation at most once a minute per instance, with [`QUEUE_DEPTH`].
pub const WORKER_METRICS: [&str; 8] = [
    "Sent",
    "Retried",
    "Held",
    "Dead",
    "Fenced",
    "SmsProviderLatency",
    "EmailProviderLatency",
    "BacklogAgeSeconds",
];

/// The worker's status-event metrics, one line per invocation after its deliveries:
/// `EventsPublished` (events the bus took), `WebhookDelivered` and `WebhookFailed` (webhook
/// attempts by outcome), `WebhookBacklogAge` (seconds the oldest due webhook delivery has
/// waited; 0: none).
pub const EVENT_METRICS: [&str; 4] = [
    "EventsPublished",
    "WebhookDelivered",
    "WebhookFailed",
    "WebhookBacklogAge",
];

/// The providers' pace, one line per invocation ([`crate::pace::pace_line`]): `Throttled`
/// (calls the provider throttled), `PacedSeconds` (seconds deliveries waited for a send
/// slot), `QuotaHeld` (jobs held by a spent quota), and the rate in force per channel,
/// `EmailSendRate` and `SmsSendRate` (per second; present when the channel is paced).
pub const PACE_METRICS: [&str; 5] = [
    "Throttled",
    "PacedSeconds",
    "QuotaHeld",
    "EmailSendRate",
    "SmsSendRate",
];

/// The worker's queue metric: the open jobs by state, dimensions `Service` and `State` (one
/// of [`QUEUE_STATES`]), measured with `BacklogAgeSeconds`.
pub const QUEUE_DEPTH: &str = "QueueDepth";

/// The states of [`QUEUE_DEPTH`]: due now and unclaimed; claimed by a worker; waiting to be
/// tried again after a failed or held attempt; not due yet and never tried (`send_at` ahead).
pub const QUEUE_STATES: [&str; 4] = ["Due", "Processing", "Held", "Scheduled"];

/// The most values one EMF metric may hold in one document (CloudWatch's limit).
pub const MAX_VALUES: usize = 100;

/// The sweeper's metrics: `Dead` (a lost worker's job with no attempt left), `Expired` (jobs
/// that expired undelivered), `FeedbackDropped` (provider events that never found their
/// attempt).
pub const SWEEPER_METRICS: [&str; 3] = ["Dead", "Expired", "FeedbackDropped"];

/// The ingest function's metrics, one line per request: `Accepted` (notifications stored),
/// `Refused` (a refused request, also by `Code`: the error code it answered), and
/// `RefusedItems` (a batch's items not stored: invalid, suppressed or a reused key).
pub const INGEST_METRICS: [&str; 3] = ["Accepted", "Refused", "RefusedItems"];

/// The feedback function's metrics (see [`crate::feedback`]).
pub const FEEDBACK_METRICS: [&str; 6] = [
    "Deliveries",
    "Bounces",
    "Complaints",
    "SmsDeliveries",
    "SmsFailures",
    "FeedbackMalformed",
];

/// The job metrics that have an alarm in `template.yaml`.
pub const JOB_METRICS: [&str; 3] = ["Dead", "Held", "Expired"];

/// A metric's unit, as CloudWatch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
    Seconds,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::Seconds => "Seconds",
        }
    }
}

/// One EMF document under construction: metrics grouped by their dimension sets.
#[derive(Debug, Clone)]
pub struct Emf {
    timestamp_ms: i64,
    /// (dimension names besides `Service`, metric definitions)
    directives: Vec<(Vec<&'static str>, Vec<Value>)>,
    values: Map<String, Value>,
}

impl Emf {
    pub fn new(timestamp_ms: i64) -> Self {
        let mut values = Map::new();
        values.insert("Service".to_owned(), SERVICE.into());
        Self {
            timestamp_ms,
            directives: Vec::new(),
            values,
        }
    }

    /// Adds `name` = `value` with the `Service` dimension.
    pub fn metric(self, name: &str, unit: Unit, value: f64) -> Self {
        self.metric_by(&[], name, unit, value)
    }

    /// Adds a count with the `Service` dimension.
    pub fn count(self, name: &str, value: u64) -> Self {
        self.metric(name, Unit::Count, value as f64)
    }

    /// Adds `name` as an array of values (at most [`MAX_VALUES`]; CloudWatch keeps each as a
    /// sample, so statistics such as p99 are computed over all of them) with `Service`.
    pub fn values(mut self, name: &str, unit: Unit, values: &[f64]) -> Self {
        debug_assert!(
            values.len() <= MAX_VALUES,
            "{name}: {} values",
            values.len()
        );
        self.define(&[], name, unit);
        self.values.insert(name.to_owned(), json!(values));
        self
    }

    /// Files `name`'s definition under its dimension set (`Service` plus `dimensions`).
    fn define(&mut self, dimensions: &[&'static str], name: &str, unit: Unit) {
        let definition = json!({"Name": name, "Unit": unit.as_str()});
        match self.directives.iter_mut().find(|(d, _)| d == dimensions) {
            Some((_, metrics)) => metrics.push(definition),
            None => self
                .directives
                .push((dimensions.to_vec(), vec![definition])),
        }
    }

    /// Sets a dimension's value (a property of the document, e.g. `Code`).
    pub fn dimension(mut self, name: &'static str, value: &str) -> Self {
        self.values.insert(name.to_owned(), value.into());
        self
    }

    /// Adds `name` = `value` published under `Service` plus `dimensions` (set each with
    /// [`Emf::dimension`]). A name may be published under several dimension sets.
    pub fn metric_by(
        mut self,
        dimensions: &[&'static str],
        name: &str,
        unit: Unit,
        value: f64,
    ) -> Self {
        self.define(dimensions, name, unit);
        // whole numbers print as integers: `"Sent":3`, not `3.0`
        let value = if value.fract() == 0.0 && value.abs() < 9.0e15 {
            Value::from(value as i64)
        } else {
            Value::from(value)
        };
        self.values.insert(name.to_owned(), value);
        self
    }

    /// The document as one line.
    pub fn line(&self) -> String {
        let directives: Vec<Value> = self
            .directives
            .iter()
            .map(|(dimensions, metrics)| {
                let mut set = vec!["Service"];
                set.extend(dimensions.iter().copied());
                json!({
                    "Namespace": METRIC_NAMESPACE,
                    "Dimensions": [set],
                    "Metrics": metrics,
                })
            })
            .collect();
        let mut document = self.values.clone();
        document.insert(
            "_aws".to_owned(),
            json!({"Timestamp": self.timestamp_ms, "CloudWatchMetrics": directives}),
        );
        Value::Object(document).to_string()
    }
}

/// One EMF line with each `(name, count)` as a `Count` metric, dimension set `[["Service"]]`.
pub fn job_metrics(counts: &[(&str, u64)], timestamp_ms: i64) -> String {
    counts
        .iter()
        .fold(Emf::new(timestamp_ms), |emf, (name, count)| {
            emf.count(name, *count)
        })
        .line()
}

/// Every metric an EMF `line` publishes: (name, dimension sets), in document order.
/// For tests and tools that read the functions' output.
pub fn published(line: &str) -> Option<Vec<(String, Vec<Vec<String>>)>> {
    let document: Value = serde_json::from_str(line).ok()?;
    let directives = document.get("_aws")?.get("CloudWatchMetrics")?.as_array()?;
    let mut found: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    for directive in directives {
        let dimensions: Vec<Vec<String>> =
            serde_json::from_value(directive.get("Dimensions")?.clone()).ok()?;
        for metric in directive.get("Metrics")?.as_array()? {
            let name = metric.get("Name")?.as_str()?.to_owned();
            // a metric without its value (a number, or an array of them) is not published
            match document.get(&name)? {
                Value::Array(values) => {
                    if values.is_empty() || values.iter().any(|v| v.as_f64().is_none()) {
                        return None;
                    }
                }
                value => {
                    value.as_f64()?;
                }
            }
            for set in &dimensions {
                // every dimension a set names must have a value in the document
                if set
                    .iter()
                    .any(|d| document.get(d).and_then(Value::as_str).is_none())
                {
                    return None;
                }
            }
            match found.iter_mut().find(|(n, _)| *n == name) {
                Some((_, sets)) => sets.extend(dimensions.iter().cloned()),
                None => found.push((name, dimensions.clone())),
            }
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_embedded_metric_format() {
        let line = job_metrics(&[("Dead", 3), ("Held", 2)], 1_700_000_000_000);
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["Dead"], 3);
        assert_eq!(v["Held"], 2);
        assert_eq!(v["Service"], "notification-service");
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000_i64);
        let m = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], "NotificationService");
        assert_eq!(m["Dimensions"], json!([["Service"]]));
        assert_eq!(m["Metrics"][0]["Name"], "Dead");
        assert_eq!(m["Metrics"][1]["Name"], "Held");
        assert_eq!(m["Metrics"][1]["Unit"], "Count");
    }

    #[test]
    fn a_metric_can_be_published_by_a_dimension_too() {
        let line = Emf::new(1)
            .dimension("Code", "validation_failed")
            .count("Refused", 1)
            .metric_by(&["Code"], "Refused", Unit::Count, 1.0)
            .metric("ExampleLatency", Unit::Milliseconds, 12.5)
            .line();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["Code"], "validation_failed");
        assert_eq!(v["ExampleLatency"], 12.5);
        let published = published(&line).unwrap();
        assert_eq!(
            published,
            vec![
                (
                    "Refused".to_owned(),
                    vec![
                        vec!["Service".to_owned()],
                        vec!["Service".to_owned(), "Code".to_owned()]
                    ]
                ),
                (
                    "ExampleLatency".to_owned(),
                    vec![vec!["Service".to_owned()]]
                ),
            ]
        );
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Unit"],
            "Milliseconds"
        );
    }

    #[test]
    fn published_refuses_a_metric_without_its_value_or_dimension() {
        let mut v: Value = serde_json::from_str(&job_metrics(&[("Sent", 1)], 1)).unwrap();
        v.as_object_mut().unwrap().remove("Sent");
        assert_eq!(published(&v.to_string()), None);
        let mut v: Value = serde_json::from_str(&job_metrics(&[("Sent", 1)], 1)).unwrap();
        v.as_object_mut().unwrap().remove("Service");
        assert_eq!(published(&v.to_string()), None);
        assert_eq!(published("not json"), None);
    }
}
