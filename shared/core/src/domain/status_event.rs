//! A status event: what callers hear of a change of their notification's status, as the
//! database records it (migrations/0004_status_events.sql) and the worker sends it.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use uuid::Uuid;

/// Every event type, in the order a notification can meet them.
pub const EVENT_TYPES: &[&str] = &[
    "notification.sent",
    "notification.delivered",
    "notification.bounced",
    "notification.complained",
    "notification.dead",
    "notification.expired",
    "notification.cancelled",
    "notification.requeued",
];

/// The EventBridge `Source` of every event.
pub const EVENT_SOURCE: &str = "notification-service";
/// The EventBridge `DetailType` of every event.
pub const EVENT_DETAIL_TYPE: &str = "Notification Status Changed";

/// One recorded event: its id (the `webhook-id` of every delivery of it), its type, when the
/// change happened, and its `data` as the database built it (no recipient, no body).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusEvent {
    pub id: Uuid,
    pub event_type: String,
    pub timestamp: DateTime<Utc>,
    pub organization_id: Uuid,
    /// Its place in the order of all changes (the outbox's own column): `data.sequence` in
    /// the envelope.
    pub sequence: i64,
    /// The envelope's `data` as the database built it, but `sequence`.
    pub data: serde_json::Value,
}

#[derive(Serialize)]
struct Envelope<'a> {
    id: Uuid,
    #[serde(rename = "type")]
    event_type: &'a str,
    timestamp: String,
    data: &'a serde_json::Value,
}

impl StatusEvent {
    /// The envelope as JSON text: `{"id","type","timestamp","data"}`, the body of a webhook
    /// delivery and the `Detail` of an EventBridge entry.
    pub fn envelope(&self) -> String {
        let mut data = self.data.clone();
        if let Some(fields) = data.as_object_mut() {
            fields.insert("sequence".to_owned(), self.sequence.into());
        }
        serde_json::to_string(&Envelope {
            id: self.id,
            event_type: &self.event_type,
            timestamp: self.timestamp.to_rfc3339_opts(SecondsFormat::Millis, true),
            data: &data,
        })
        .unwrap_or_default()
    }
}
