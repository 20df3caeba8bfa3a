//! Provider feedback: what SES and SNS report after accepting a message (delivered, bounced,
//! complained), matched to the attempt by the provider message id the worker recorded.
//!
//! [`events`] reads the two event shapes the `feedback` function receives (SNS records that
//! carry SES event-publishing records, and CloudWatch Logs subscription batches of SNS SMS
//! delivery-status lines) into [`FeedbackEvent`]s; the store records and applies them.

pub mod events;

pub use crate::domain::feedback::{
    FeedbackEvent, FeedbackKind, JOB_LOOKBACK, RAW_EVENT_MAX_BYTES, StatusEffect, jobs_window,
};

/// A record that could not be read: counted and logged (without recipients), never an
/// invocation error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// Where in the invocation: e.g. `Records[2]` or `awslogs.logEvents[0]`.
    pub at: String,
    pub reason: String,
}

/// What one invocation's payload held.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Parsed {
    pub events: Vec<FeedbackEvent>,
    pub malformed: Vec<Malformed>,
}

/// What one invocation did (the function's answer, and its log line).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FeedbackSummary {
    /// Events read from the payload.
    pub events: u64,
    /// Records that could not be read (logged without recipients, never an error).
    pub malformed: u64,
    #[serde(flatten)]
    pub report: crate::store::FeedbackReport,
}

/// Records and applies one invocation's events. Malformed records are logged and counted;
/// only a store error fails the invocation (so the event source delivers it again, and the
/// copies already recorded change nothing).
pub async fn handle(
    store: &dyn crate::store::FeedbackStore,
    payload: &serde_json::Value,
) -> Result<FeedbackSummary, crate::store::StoreError> {
    let parsed = events::parse(payload);
    for bad in &parsed.malformed {
        tracing::warn!(at = %bad.at, reason = %bad.reason, "malformed feedback record skipped");
    }
    let report = store
        .record_feedback(crate::store::RecordFeedback {
            events: &parsed.events,
            now: None,
        })
        .await?;
    let summary = FeedbackSummary {
        events: parsed.events.len() as u64,
        malformed: parsed.malformed.len() as u64,
        report,
    };
    tracing::info!(summary = %serde_json::json!(summary), "feedback recorded");
    println!(
        "{}",
        metrics_line(&summary, chrono::Utc::now().timestamp_millis())
    );
    Ok(summary)
}

/// The metrics the bounce and complaint alarms read, as one EMF line. Only events recorded
/// for the first time count (a redelivered copy does not). `Deliveries`, `Bounces` and
/// `Complaints` are email's (SES rates the sender on them); SMS has its own two.
pub fn metrics_line(summary: &FeedbackSummary, timestamp_ms: i64) -> String {
    let count = |channel: crate::domain::Channel, kind: FeedbackKind| {
        summary
            .report
            .recorded
            .get(channel.as_str())
            .and_then(|kinds| kinds.get(kind.as_str()))
            .copied()
            .unwrap_or(0)
    };
    use crate::domain::Channel::{Email, Sms};
    crate::telemetry::emf::job_metrics(
        &[
            ("Deliveries", count(Email, FeedbackKind::Delivery)),
            // SES leaves sends to its account-level suppression list out of its bounce rate
            (
                "Bounces",
                count(Email, FeedbackKind::PermanentBounce)
                    .saturating_sub(summary.report.account_suppressed_bounces),
            ),
            ("Complaints", count(Email, FeedbackKind::Complaint)),
            ("SmsDeliveries", count(Sms, FeedbackKind::Delivery)),
            (
                "SmsFailures",
                count(Sms, FeedbackKind::SmsFailure { suppress: false }),
            ),
            ("FeedbackMalformed", summary.malformed),
        ],
        timestamp_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn delivery_at(occurred_at: DateTime<Utc>) -> FeedbackEvent {
        FeedbackEvent {
            channel: crate::domain::Channel::Sms,
            provider_message_id: "m".into(),
            key: "k".into(),
            kind: FeedbackKind::Delivery,
            subtype: None,
            diagnostic: None,
            occurred_at,
            raw: serde_json::Value::Null,
        }
    }

    #[test]
    fn the_jobs_window_spans_the_lookback_before_the_events_to_a_day_after() {
        let now = at("2026-12-01T12:00:00Z");
        // (the events' times, the window)
        let cases = [
            // no events: the days around now
            (vec![], ("2026-11-28T12:00:00Z", "2026-12-02T12:00:00Z")),
            // events of the last hours: the same, from the earliest
            (
                vec!["2026-12-01T09:00:00Z", "2026-12-01T11:00:00Z"],
                ("2026-11-28T09:00:00Z", "2026-12-02T12:00:00Z"),
            ),
            // an old event (a replay, a test fixture) widens it back; one ahead of the
            // clock, forward
            (
                vec!["2016-06-28T00:40:34Z", "2026-12-01T18:00:00Z"],
                ("2016-06-25T00:40:34Z", "2026-12-02T18:00:00Z"),
            ),
        ];
        for (times, (from, to)) in cases {
            let events: Vec<FeedbackEvent> = times.iter().map(|t| delivery_at(at(t))).collect();
            assert_eq!(jobs_window(&events, now), (at(from), at(to)), "{times:?}");
        }
    }

    #[test]
    fn the_metrics_count_email_and_sms_apart() {
        let mut summary = FeedbackSummary {
            malformed: 2,
            ..FeedbackSummary::default()
        };
        let recorded = &mut summary.report.recorded;
        recorded
            .entry("email".into())
            .or_default()
            .insert("delivery".into(), 3);
        recorded
            .entry("email".into())
            .or_default()
            .insert("bounce".into(), 1);
        recorded
            .entry("sms".into())
            .or_default()
            .insert("delivery".into(), 5);
        recorded
            .entry("sms".into())
            .or_default()
            .insert("sms_failure".into(), 4);
        let line: serde_json::Value = serde_json::from_str(&metrics_line(&summary, 1)).unwrap();
        assert_eq!(line["Deliveries"], 3);
        assert_eq!(line["Bounces"], 1);
        assert_eq!(line["Complaints"], 0);
        assert_eq!(line["SmsDeliveries"], 5);
        assert_eq!(line["SmsFailures"], 4);
        assert_eq!(line["FeedbackMalformed"], 2);
        let names: Vec<&str> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 6);
        // a bounce SES reported for its account-level suppression list is not in the rate
        summary.report.account_suppressed_bounces = 1;
        let line: serde_json::Value = serde_json::from_str(&metrics_line(&summary, 1)).unwrap();
        assert_eq!(line["Bounces"], 0);
        assert_eq!(line["Deliveries"], 3);
    }
}
