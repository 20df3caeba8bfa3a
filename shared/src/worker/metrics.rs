//! The worker's CloudWatch metric, as an Embedded Metric Format line (CloudWatch Logs turns
//! it into a metric; no API call, no extra permission).

/// The metric namespace (the alarm in `template.yaml` reads it).
pub const METRIC_NAMESPACE: &str = "NotificationService";
/// The value of the `Service` dimension.
pub const SERVICE: &str = "notification-service";

/// One EMF line: metric `DeadJobs` (Count) = `dead`, dimension set `[["Service"]]`.
pub fn dead_jobs_metric(dead: u64, timestamp_ms: i64) -> String {
    serde_json::json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": METRIC_NAMESPACE,
                "Dimensions": [["Service"]],
                "Metrics": [{"Name": "DeadJobs", "Unit": "Count"}],
            }],
        },
        "Service": SERVICE,
        "DeadJobs": dead,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_embedded_metric_format() {
        let line = dead_jobs_metric(3, 1_700_000_000_000);
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["DeadJobs"], 3);
        assert_eq!(v["Service"], "notification-service");
        assert_eq!(v["_aws"]["Timestamp"], 1_700_000_000_000_i64);
        let m = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(m["Namespace"], "NotificationService");
        assert_eq!(m["Dimensions"], serde_json::json!([["Service"]]));
        assert_eq!(m["Metrics"][0]["Name"], "DeadJobs");
        assert_eq!(m["Metrics"][0]["Unit"], "Count");
    }
}
