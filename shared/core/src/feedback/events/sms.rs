//! SNS SMS delivery-status lines, as SNS writes them to the log groups
//! `sns/<region>/<account>/DirectPublishToPhoneNumber[/Failure]` ("Viewing Amazon CloudWatch
//! metrics and logs for SMS deliveries"): `notification` (`messageId`, `timestamp`),
//! `delivery` (`destination`, `providerResponse`, …) and `status`, `SUCCESS` or `FAILURE`.

use crate::domain::Channel;
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use serde_json::Value;

use super::{Bad, FeedbackEvent, bounded_raw, key_time, message_id, provider_text, text};
use crate::feedback::FeedbackKind;

/// Phrases of a failed delivery's `providerResponse` that mean the number will not take a
/// message again: it opted out, or it is not a valid number. Matched ignoring case, anywhere
/// in the response. Of the failure reasons SNS documents, "Phone number is opted out" and
/// "Invalid phone number" suppress; "Phone is currently unreachable/unavailable", "Phone has
/// blocked SMS", "… is on a blocked list", "Blocked as spam by phone carrier", "Message body
/// is invalid", "This delivery would exceed max price" and "Unknown error attempting to reach
/// phone" do not (the next message may get through, or the fault is ours).
pub(super) const SUPPRESSING_RESPONSES: &[&str] = &[
    "opted out",
    "invalid phone number",
    "not a valid",
    "does not exist",
];

/// Whether a failed delivery's `providerResponse` suppresses the number.
pub(super) fn suppresses(provider_response: &str) -> bool {
    let response = provider_response.to_lowercase();
    SUPPRESSING_RESPONSES
        .iter()
        .any(|phrase| response.contains(phrase))
}

/// Reads one delivery-status line; `logged_at_ms` is its log event's `timestamp`, the time
/// used when the line's own cannot be read.
pub(super) fn event(line: &Value, logged_at_ms: Option<i64>) -> Result<FeedbackEvent, Bad> {
    let notification = line.get("notification").unwrap_or(&Value::Null);
    let delivery = line.get("delivery").unwrap_or(&Value::Null);
    let provider_message_id = message_id(text(notification, "messageId").ok_or(Bad::new(
        "notification.messageId is missing or not a string",
    ))?)?;
    let response = text(delivery, "providerResponse");
    let (kind, status) = match line.get("status").and_then(Value::as_str) {
        Some(status @ "SUCCESS") => (FeedbackKind::Delivery, status),
        Some(status @ "FAILURE") => {
            let suppress = response.is_some_and(suppresses);
            (FeedbackKind::SmsFailure { suppress }, status)
        }
        Some(_) => return Err(Bad::new("status is neither SUCCESS nor FAILURE")),
        None => return Err(Bad::new("status is missing or not a string")),
    };
    let occurred_at = text(notification, "timestamp")
        .and_then(sns_time)
        .or_else(|| logged_at_ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single()))
        .ok_or(Bad::new(
            "neither notification.timestamp nor the log event's timestamp is a time",
        ))?;
    let destination: Vec<&str> = text(delivery, "destination").into_iter().collect();
    Ok(FeedbackEvent {
        channel: Channel::Sms,
        key: format!("{}:{}", kind.as_str(), key_time(occurred_at)),
        kind,
        subtype: None,
        diagnostic: response.map(|response| provider_text(response, &destination)),
        occurred_at,
        raw: bounded_raw(line, "status", status, &provider_message_id),
        provider_message_id,
    })
}

/// SNS's `YYYY-MM-DD HH:MM:SS.mmm`, in UTC with no zone; RFC 3339 is taken too.
fn sns_time(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
        .map(|at| at.and_utc())
        .ok()
        .or_else(|| {
            DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|at| at.with_timezone(&Utc))
        })
}
