//! SES event-publishing records, as SNS carries them: the top-level `eventType` (or, from
//! SES notifications, `notificationType`), `mail` (the message: `messageId`, `timestamp`,
//! `destination`, …) and the object of the type (`bounce`, `complaint`, `delivery`, `send`,
//! `reject`, `deliveryDelay`, `failure`), as "Contents of event data that Amazon SES
//! publishes to Amazon SNS" describes them.

use crate::domain::Channel;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    Bad, FeedbackEvent, bounded_raw, key_time, message_id, provider_text, recipients_digest, text,
};
use crate::feedback::FeedbackKind;

/// The SES event types recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    Send,
    Delivery,
    Bounce,
    Complaint,
    Reject,
    DeliveryDelay,
    RenderingFailure,
}

impl EventType {
    /// `None`: a record that reports nothing, SES's test message to a topic that identity
    /// notifications were just pointed at.
    fn parse(name: &str) -> Result<Option<Self>, Bad> {
        let event_type = match name {
            "Send" => EventType::Send,
            "Delivery" => EventType::Delivery,
            "Bounce" => EventType::Bounce,
            "Complaint" => EventType::Complaint,
            "Reject" => EventType::Reject,
            "DeliveryDelay" => EventType::DeliveryDelay,
            // SES writes it with a space; the configuration set API spells it RENDERING_FAILURE
            "Rendering Failure" | "RenderingFailure" => EventType::RenderingFailure,
            "AmazonSnsSubscriptionSucceeded" => return Ok(None),
            // documented types this service does not record: the event destination should
            // not publish them
            "Open" => return Err(Bad::new("eventType Open is not recorded")),
            "Click" => return Err(Bad::new("eventType Click is not recorded")),
            "Subscription" => return Err(Bad::new("eventType Subscription is not recorded")),
            _ => return Err(Bad::new("eventType is not an SES event type")),
        };
        Ok(Some(event_type))
    }

    /// The key of the record's object for this type.
    fn object_key(self) -> &'static str {
        match self {
            EventType::Send => "send",
            EventType::Delivery => "delivery",
            EventType::Bounce => "bounce",
            EventType::Complaint => "complaint",
            EventType::Reject => "reject",
            EventType::DeliveryDelay => "deliveryDelay",
            EventType::RenderingFailure => "failure",
        }
    }

    fn kind(self, object: &Value) -> Result<FeedbackKind, Bad> {
        Ok(match self {
            EventType::Send => FeedbackKind::Send,
            EventType::Delivery => FeedbackKind::Delivery,
            EventType::Bounce => match object.get("bounceType").and_then(Value::as_str) {
                Some("Permanent") => FeedbackKind::PermanentBounce,
                Some("Transient" | "Undetermined") => FeedbackKind::TransientBounce,
                Some(_) => {
                    return Err(Bad::new(
                        "bounce.bounceType is not Permanent, Transient or Undetermined",
                    ));
                }
                None => return Err(Bad::new("bounce.bounceType is missing or not a string")),
            },
            EventType::Complaint => FeedbackKind::Complaint,
            EventType::Reject => FeedbackKind::Reject,
            EventType::DeliveryDelay => FeedbackKind::DeliveryDelay,
            EventType::RenderingFailure => FeedbackKind::RenderingFailure,
        })
    }

    /// Bounce `bounceType/bounceSubType`, complaint `complaintFeedbackType` (else
    /// `complaintSubType`), reject `reason`, delay `delayType`.
    fn subtype(self, object: &Value) -> Option<String> {
        match self {
            EventType::Bounce => {
                let bounce_type = text(object, "bounceType")?;
                Some(match text(object, "bounceSubType") {
                    Some(sub_type) => format!("{bounce_type}/{sub_type}"),
                    None => bounce_type.to_owned(),
                })
            }
            EventType::Complaint => text(object, "complaintFeedbackType")
                .or_else(|| text(object, "complaintSubType"))
                .map(str::to_owned),
            EventType::Reject => text(object, "reason").map(str::to_owned),
            EventType::DeliveryDelay => text(object, "delayType").map(str::to_owned),
            EventType::Send | EventType::Delivery | EventType::RenderingFailure => None,
        }
    }

    /// Bounce and delay: the first recipient's `diagnosticCode` (else its `status`);
    /// delivery `smtpResponse`; rendering failure `errorMessage`.
    fn diagnostic(self, object: &Value) -> Option<&str> {
        match self {
            EventType::Bounce => recipient_diagnostic(object, "bouncedRecipients"),
            EventType::DeliveryDelay => recipient_diagnostic(object, "delayedRecipients"),
            EventType::Delivery => text(object, "smtpResponse"),
            EventType::RenderingFailure => text(object, "errorMessage"),
            EventType::Send | EventType::Complaint | EventType::Reject => None,
        }
    }

    /// The addresses the event is about: its own list, else the message's `destination`.
    fn recipients<'a>(self, object: &'a Value, mail: &'a Value) -> Vec<&'a str> {
        let own = match self {
            EventType::Bounce => addresses(object, "bouncedRecipients"),
            EventType::Complaint => addresses(object, "complainedRecipients"),
            EventType::DeliveryDelay => addresses(object, "delayedRecipients"),
            EventType::Delivery => strings(object, "recipients"),
            EventType::Send | EventType::Reject | EventType::RenderingFailure => Vec::new(),
        };
        if own.is_empty() {
            strings(mail, "destination")
        } else {
            own
        }
    }
}

/// Reads one SES record. `None`: a record that reports nothing.
pub(super) fn event(record: &Value) -> Result<Option<FeedbackEvent>, Bad> {
    let type_name = text(record, "eventType")
        .or_else(|| text(record, "notificationType"))
        .ok_or(Bad::new(
            "neither eventType nor notificationType is a non-empty string",
        ))?;
    let Some(event_type) = EventType::parse(type_name)? else {
        return Ok(None);
    };
    let mail = record
        .get("mail")
        .filter(|mail| mail.is_object())
        .ok_or(Bad::new("mail is missing or not an object"))?;
    let provider_message_id = message_id(
        text(mail, "messageId").ok_or(Bad::new("mail.messageId is missing or not a string"))?,
    )?;
    let object = record.get(event_type.object_key()).unwrap_or(&Value::Null);
    let kind = event_type.kind(object)?;
    let occurred_at = timestamp(object)
        .or_else(|| timestamp(mail))
        .ok_or(Bad::new(
            "neither the event's timestamp nor mail.timestamp is an RFC 3339 time",
        ))?;

    let recipients = event_type.recipients(object, mail);
    // what the texts may name: the event's recipients and all of the message's
    let mut named = recipients.clone();
    named.extend(strings(mail, "destination"));
    Ok(Some(FeedbackEvent {
        channel: Channel::Email,
        key: format!(
            "{}:{}:{}",
            kind.as_str(),
            key_time(occurred_at),
            recipients_digest(&recipients)
        ),
        kind,
        subtype: event_type
            .subtype(object)
            .map(|subtype| provider_text(&subtype, &named)),
        diagnostic: event_type
            .diagnostic(object)
            .map(|diagnostic| provider_text(diagnostic, &named)),
        occurred_at,
        raw: bounded_raw(record, "eventType", type_name, &provider_message_id),
        provider_message_id,
    }))
}

/// `object.timestamp`, when it is an RFC 3339 time.
fn timestamp(object: &Value) -> Option<DateTime<Utc>> {
    let at = DateTime::parse_from_rfc3339(text(object, "timestamp")?).ok()?;
    Some(at.with_timezone(&Utc))
}

/// The first `diagnosticCode` (else `status`) among the recipients listed at `key`.
fn recipient_diagnostic<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    let recipients = object.get(key)?.as_array()?;
    recipients
        .iter()
        .find_map(|recipient| text(recipient, "diagnosticCode"))
        .or_else(|| {
            recipients
                .iter()
                .find_map(|recipient| text(recipient, "status"))
        })
}

/// The `emailAddress` of each recipient listed at `key`.
fn addresses<'a>(object: &'a Value, key: &str) -> Vec<&'a str> {
    let listed = object.get(key).and_then(Value::as_array);
    listed
        .into_iter()
        .flatten()
        .filter_map(|recipient| text(recipient, "emailAddress"))
        .collect()
}

/// The non-empty strings listed at `key`.
fn strings<'a>(object: &'a Value, key: &str) -> Vec<&'a str> {
    let listed = object.get(key).and_then(Value::as_array);
    listed
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|text| !text.is_empty())
        .collect()
}
