//! What a provider reports about an accepted message, as the store keeps it: the event, its
//! kind and what it does to its job. Reading the providers' shapes is `feedback::events`.

use chrono::{DateTime, Utc};

/// The largest raw event kept with a feedback row (bytes of JSON); larger ones are cut to
/// their `eventType`/`status` and the ids (see `feedback::events`).
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
