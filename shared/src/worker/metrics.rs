//! The worker's and the sweeper's CloudWatch metrics, as one Embedded Metric Format line per
//! invocation (CloudWatch Logs turns it into metrics; no API call, no extra permission).
//!
//! - `DeadJobs`: jobs that went dead (the worker: a permanent error or the budget spent; the
//!   sweeper: a lost worker's job with no attempt left).
//! - `HeldJobs` (worker): attempts held back by account or configuration trouble or an
//!   outage; retried later with the attempt given back. Persistently above 0: a person must act.
//! - `ExpiredJobs` (sweeper): jobs that expired before they could be delivered.

/// The metric namespace (the alarms in `template.yaml` read it).
pub const METRIC_NAMESPACE: &str = "NotificationService";
/// The value of the `Service` dimension.
pub const SERVICE: &str = "notification-service";

/// Every metric the functions emit (each has an alarm in `template.yaml`).
pub const JOB_METRICS: [&str; 3] = ["DeadJobs", "HeldJobs", "ExpiredJobs"];

/// One EMF line with each `(name, count)` as a `Count` metric, dimension set `[["Service"]]`.
pub fn job_metrics(counts: &[(&str, u64)], timestamp_ms: i64) -> String {
    let mut line = serde_json::json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": METRIC_NAMESPACE,
                "Dimensions": [["Service"]],
                "Metrics": counts
                    .iter()
                    .map(|(name, _)| serde_json::json!({"Name": name, "Unit": "Count"}))
                    .collect::<Vec<_>>(),
            }],
        },
        "Service": SERVICE,
    });
    for (name, count) in counts {
        line[*name] = (*count).into();
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_embedded_metric_format() {
        let line = job_metrics(&[("DeadJobs", 3), ("HeldJobs", 2)], 1_700_000_000_000);
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["DeadJobs"], 3);
        assert_eq!(v["HeldJobs"], 2);
        assert_eq!(v["Service"], "notification-service");
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000_i64);
        let m = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], "NotificationService");
        assert_eq!(m["Dimensions"], serde_json::json!([["Service"]]));
        assert_eq!(m["Metrics"][0]["Name"], "DeadJobs");
        assert_eq!(m["Metrics"][1]["Name"], "HeldJobs");
        assert_eq!(m["Metrics"][1]["Unit"], "Count");
    }
}
