//! Provider feedback: what SES and SNS report after accepting a message (delivered, bounced,
//! complained), matched to the attempt by the provider message id the worker recorded.
//!
//! [`events`] reads the two event shapes the `feedback` function receives (SNS records that
//! carry SES event-publishing records, and CloudWatch Logs subscription batches of SNS SMS
//! delivery-status lines) into [`FeedbackEvent`]s; the store records and applies them.

use chrono::{DateTime, Utc};

pub mod events;

/// The largest raw event kept with a feedback row (bytes of JSON); larger ones are cut to
/// their `eventType`/`status` and the ids (see [`events`]).
pub const RAW_EVENT_MAX_BYTES: usize = 8 * 1024;

/// How long before a provider event the job it names may have been accepted, for the
/// feedback function's own matching: a message is sent within minutes of its job's
/// acceptance (hours with retries), and its events follow within minutes to a day or two.
/// An event whose job is older waits for the sweeper's pass (once a minute), which searches
/// every day kept.
pub const JOB_LOOKBACK: chrono::TimeDelta = chrono::TimeDelta::days(3);

/// The job creation times the feedback function searches for the attempts that `events`
/// name: from [`JOB_LOOKBACK`] before the earliest event (or `now`, if earlier) to a day after
/// the latest (or `now`, if later; the day covers clocks that disagree). Events from a test
/// or a replay with old timestamps widen it rather than miss their jobs. The history is
/// partitioned by that day, so the window is what keeps the matching statement from being
/// planned over every day kept (apply_feedback.sql).
pub fn jobs_window<'a>(
    events: impl IntoIterator<Item = &'a FeedbackEvent>,
    now: DateTime<Utc>,
) -> (DateTime<Utc>, DateTime<Utc>) {
    let (earliest, latest) = events.into_iter().fold((now, now), |(lo, hi), e| {
        (lo.min(e.occurred_at), hi.max(e.occurred_at))
    });
    (earliest - JOB_LOOKBACK, latest + chrono::TimeDelta::days(1))
}

/// What a provider reported about one accepted message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedbackKind {
    /// SES `Send`: SES accepted the request (no status change).
    Send,
    /// SES `Delivery`, or an SNS SMS `SUCCESS`: the provider confirmed delivery.
    Delivery,
    /// SES `Bounce` of type `Permanent`: undeliverable; the recipient is suppressed.
    PermanentBounce,
    /// SES `Bounce` of type `Transient` or `Undetermined`: recorded, no status change.
    TransientBounce,
    /// SES `Complaint`: the recipient marked it as spam; suppressed, no status change.
    Complaint,
    /// SES `Reject`: SES refused to send it (e.g. a virus): undeliverable.
    Reject,
    /// SES `DeliveryDelay`: recorded, no status change.
    DeliveryDelay,
    /// SES `RenderingFailure`: recorded, no status change.
    RenderingFailure,
    /// SNS SMS `FAILURE`. `suppress`: the provider response means the number is opted out
    /// or invalid, so the recipient is suppressed.
    SmsFailure { suppress: bool },
}

/// What an event does to its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusEffect {
    None,
    Delivered,
    Bounced,
}

impl FeedbackKind {
    /// The `kind` column of `delivery_feedback`.
    pub fn as_str(self) -> &'static str {
        match self {
            FeedbackKind::Send => "send",
            FeedbackKind::Delivery => "delivery",
            FeedbackKind::PermanentBounce => "bounce",
            FeedbackKind::TransientBounce => "transient_bounce",
            FeedbackKind::Complaint => "complaint",
            FeedbackKind::Reject => "reject",
            FeedbackKind::DeliveryDelay => "delivery_delay",
            FeedbackKind::RenderingFailure => "rendering_failure",
            FeedbackKind::SmsFailure { .. } => "sms_failure",
        }
    }

    pub fn effect(self) -> StatusEffect {
        match self {
            FeedbackKind::Delivery => StatusEffect::Delivered,
            FeedbackKind::PermanentBounce
            | FeedbackKind::Reject
            | FeedbackKind::SmsFailure { .. } => StatusEffect::Bounced,
            FeedbackKind::Send
            | FeedbackKind::TransientBounce
            | FeedbackKind::Complaint
            | FeedbackKind::DeliveryDelay
            | FeedbackKind::RenderingFailure => StatusEffect::None,
        }
    }

    /// Whether the recipient goes on the organization's suppression list.
    pub fn suppresses(self) -> bool {
        match self {
            FeedbackKind::PermanentBounce | FeedbackKind::Complaint => true,
            FeedbackKind::SmsFailure { suppress } => suppress,
            _ => false,
        }
    }
}

/// One provider event about one message.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackEvent {
    /// Email for SES events, SMS for SNS delivery-status lines.
    pub channel: crate::domain::Channel,
    /// SES `mail.messageId` / SNS `notification.messageId`: what the worker recorded as the
    /// attempt's `provider_message_id`.
    pub provider_message_id: String,
    /// Identifies the event itself, so a redelivered copy changes nothing: the kind, the
    /// event's own timestamp and (SES) the recipients it names.
    pub key: String,
    pub kind: FeedbackKind,
    /// SES bounce `bounceType/bounceSubType`, complaint `complaintFeedbackType`, reject
    /// `reason`, delay `delayType`; SMS: none.
    pub subtype: Option<String>,
    /// The provider's diagnostic: SES bounce/delay `diagnosticCode` (else `status`), delivery
    /// `smtpResponse`, rendering `errorMessage`; SNS `delivery.providerResponse`. A recipient
    /// named in it is replaced by `[recipient]`.
    pub diagnostic: Option<String>,
    /// When the provider says it happened.
    pub occurred_at: DateTime<Utc>,
    /// The event as received, at most [`RAW_EVENT_MAX_BYTES`] of JSON.
    pub raw: serde_json::Value,
}

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
    let report = store.record_feedback(&parsed.events, None).await?;
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
    crate::worker::job_metrics(
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
