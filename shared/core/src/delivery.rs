//! The delivery port ([`Deliverer`]) and the rules about provider errors.
//!
//! - [`classify`]: the one table sorting error codes into permanent, transient and account
//!   trouble.
//! - [`Router`]: the deliverer the worker uses, sending each job to its channel's adapter.
//!
//! The adapters (SNS for SMS, SES v2 for email) and the SDKs' typed errors classed variant by
//! variant are `notify-delivery`'s: only the worker links the AWS SDKs that send.

pub mod classify;

use async_trait::async_trait;
use serde::Deserialize;

use crate::domain::Channel;
use crate::store::ClaimedJob;

pub use classify::{ErrorClass, classify};

/// The code of a payload the worker cannot read (a permanent error: no retry can fix it).
pub const INVALID_PAYLOAD: &str = "InvalidPayload";
/// The code of a provider call that did not answer within `PROVIDER_TIMEOUT_MS`.
pub const TIMEOUT: &str = "Timeout";
/// The code of a delivery that panicked inside the worker.
pub const WORKER_PANIC: &str = "WorkerPanic";
/// The code (and the whole `last_error`) of a job whose recipient its organization
/// suppressed after the job was accepted: dead, and the provider never called.
pub const SUPPRESSED: &str = "suppressed";

/// Longest error message kept in a delivery row.
const MAX_MESSAGE_CHARS: usize = 1000;

/// Why one delivery attempt failed: a provider error code (or one of the worker's own, such
/// as [`TIMEOUT`]), its class, a message for the delivery row, and the cause.
///
/// The class is decided where the error is made: [`DeliveryError::new`] and
/// [`DeliveryError::with_source`] class the code with [`classify`]; the AWS adapters class the
/// SDK's typed error (`notify_delivery::publish_error`, `send_email_error`), which can say more than the
/// code (SES's `MessageRejected` for an unverified sender is account trouble, for an
/// unverified recipient permanent) and set it with [`DeliveryError::with_class`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DeliveryError {
    pub code: String,
    pub message: String,
    class: ErrorClass,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl DeliveryError {
    /// An error classed by its code.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        let code = code.into();
        Self {
            class: classify(&code),
            code,
            message: message.into(),
            source: None,
        }
    }

    /// An error its code says all about: the delivery row and `last_error` hold the code
    /// alone (see [`DeliveryError::row_message`]).
    pub fn code_only(code: impl Into<String>) -> Self {
        Self::new(code, "")
    }

    /// An error classed by its code, with its cause.
    pub fn with_source(
        code: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            source: Some(source.into()),
            ..Self::new(code, message)
        }
    }

    /// The same error in another class: for what knows more than the code.
    pub fn with_class(self, class: ErrorClass) -> Self {
        Self { class, ..self }
    }

    /// The provider call took longer than `timeout`.
    pub fn timeout(timeout: std::time::Duration) -> Self {
        Self::new(
            TIMEOUT,
            format!(
                "no answer from the provider within {} ms",
                timeout.as_millis()
            ),
        )
    }

    /// What this failure means for the job.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// The delivery row's message: [`DeliveryError::detail`], none for a
    /// [`DeliveryError::code_only`] error.
    pub fn row_message(&self) -> Option<String> {
        (!self.message.is_empty() || self.source.is_some()).then(|| self.detail())
    }

    /// The message and its whole cause chain on one line, bounded, for the delivery row.
    pub fn detail(&self) -> String {
        let line = crate::error::report(self);
        match line.char_indices().nth(MAX_MESSAGE_CHARS) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line,
        }
    }
}

/// Delivers one claimed job; returns the provider's message id.
#[async_trait]
pub trait Deliverer: Send + Sync {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError>;

    /// Waits, at most `max_wait`, until the job may be handed to its provider (its turn at
    /// the provider's pace: [`crate::pace::Paced`]); [`NotNow`] when it may not be before
    /// the invocation must stop, and the job goes back untried. At once by default.
    async fn admit(&self, _job: &ClaimedJob, _max_wait: std::time::Duration) -> Result<(), NotNow> {
        Ok(())
    }

    /// The most messages per second every worker together may hand to `channel`'s provider
    /// (its shared rate), `None` for no limit. The fleet starts no more workers than the
    /// rates of the channels it sends keep busy.
    async fn send_rate(&self, _channel: crate::domain::Channel) -> Option<f64> {
        None
    }

    /// After a call that failed with `err`: when the job may go again if the provider
    /// pushed back (a throttle), the attempt spent on nothing; `None` for the worker's own
    /// decision. `None` by default.
    async fn throttled(
        &self,
        _job: &ClaimedJob,
        _err: &DeliveryError,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        None
    }
}

/// Why a job is not handed to its provider now ([`Deliverer::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotNow {
    /// No send slot begins before the invocation must stop; the next free one is at `at`.
    NoSlot { at: chrono::DateTime<chrono::Utc> },
    /// The channel is held (a provider quota is spent) until `until`.
    Held {
        until: chrono::DateTime<chrono::Utc>,
    },
}

impl NotNow {
    /// When the job is due again.
    pub fn due_at(self) -> chrono::DateTime<chrono::Utc> {
        match self {
            NotNow::NoSlot { at } => at,
            NotNow::Held { until } => until,
        }
    }
}

/// What an SMS job's payload holds (written by ingest). Unknown fields are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SmsPayload {
    pub to: String,
    pub message: String,
}

/// What an email job's payload holds (written by ingest): text or html, or both.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EmailPayload {
    pub to: String,
    pub subject: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub html: Option<String>,
    #[serde(default)]
    pub reply_to: Option<String>,
}

impl SmsPayload {
    pub fn parse(payload: &serde_json::Value) -> Result<Self, DeliveryError> {
        parse_payload(payload, "sms")
    }
}

impl EmailPayload {
    pub fn parse(payload: &serde_json::Value) -> Result<Self, DeliveryError> {
        let email: Self = parse_payload(payload, "email")?;
        if email.text.is_none() && email.html.is_none() {
            return Err(DeliveryError::new(
                INVALID_PAYLOAD,
                "the email payload has neither text nor html",
            ));
        }
        Ok(email)
    }
}

fn parse_payload<T: serde::de::DeserializeOwned>(
    payload: &serde_json::Value,
    channel: &str,
) -> Result<T, DeliveryError> {
    T::deserialize(payload).map_err(|err| {
        DeliveryError::with_source(
            INVALID_PAYLOAD,
            format!("the job's payload is not a valid {channel} payload"),
            err,
        )
    })
}

/// The deliverer the worker uses: each job goes to its channel's adapter.
pub struct Router {
    sms: Box<dyn Deliverer>,
    email: Box<dyn Deliverer>,
}

impl Router {
    pub fn new(sms: Box<dyn Deliverer>, email: Box<dyn Deliverer>) -> Self {
        Self { sms, email }
    }
}

#[async_trait]
impl Deliverer for Router {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        match job.channel {
            Channel::Sms => self.sms.deliver(job).await,
            Channel::Email => self.email.deliver(job).await,
        }
    }
}

/// Where the adapters send from: `EMAIL_FROM` (required), `SES_CONFIGURATION_SET` and
/// `SMS_SENDER_ID` (optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    pub email_from: String,
    pub ses_configuration_set: Option<String>,
    pub sms_sender_id: Option<String>,
}

impl DeliveryConfig {
    pub fn new(email_from: impl Into<String>) -> Self {
        Self {
            email_from: email_from.into(),
            ses_configuration_set: None,
            sms_sender_id: None,
        }
    }

    pub fn from_env() -> Result<Self, crate::config::ConfigError> {
        Self::from_lookup(&crate::config::Vars::process())
    }

    /// Reads `EMAIL_FROM` (required), `SMS_SENDER_ID` and `SES_CONFIGURATION_SET`.
    pub fn from_lookup(vars: &crate::config::Vars) -> Result<Self, crate::config::ConfigError> {
        use crate::config::ConfigError;
        let email_from = vars.required(
            "EMAIL_FROM",
            "the sender address of every email (an SES-verified identity, e.g. \
             noreply@example.com); the worker does not start without it",
        )?;
        if !is_sender_address(&email_from) {
            return Err(ConfigError::Invalid {
                name: "EMAIL_FROM",
                value: email_from,
                reason: "expected an email address, e.g. noreply@example.com or \
                         \"Example <noreply@example.com>\""
                    .into(),
            });
        }
        let sms_sender_id = vars.optional("SMS_SENDER_ID");
        if let Some(id) = &sms_sender_id {
            let valid = (1..=11).contains(&id.len())
                && id.chars().all(|c| c.is_ascii_alphanumeric())
                && id.chars().any(|c| c.is_ascii_alphabetic());
            if !valid {
                return Err(ConfigError::Invalid {
                    name: "SMS_SENDER_ID",
                    value: id.clone(),
                    reason: "expected 1 to 11 letters and digits, at least one letter".into(),
                });
            }
        }
        Ok(Self {
            email_from,
            ses_configuration_set: vars.optional("SES_CONFIGURATION_SET"),
            sms_sender_id,
        })
    }
}

/// `a@example.com` or `Name <a@example.com>`.
fn is_sender_address(value: &str) -> bool {
    email_address::EmailAddress::is_valid(sender_address(value))
}

/// The address of `EMAIL_FROM`: `a@example.com` from `Name <a@example.com>`.
pub fn sender_address(value: &str) -> &str {
    let value = value.trim();
    match (value.rfind('<'), value.strip_suffix('>')) {
        (Some(open), Some(inner)) => &inner[open + 1..],
        _ => value,
    }
}

/// A recipient fit for a log line: at most its last 4 characters (`***0100`, `***.com`), and
/// none of a short one.
pub fn mask_recipient(to: &str) -> String {
    let chars: Vec<char> = to.trim().chars().collect();
    if chars.len() < 8 {
        return "***".to_owned();
    }
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("***{tail}")
}

/// The recipient of a job, masked for logs (`"?"` when the payload has none).
pub fn masked_recipient_of(job: &ClaimedJob) -> String {
    job.payload
        .get("to")
        .and_then(|v| v.as_str())
        .map(mask_recipient)
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn recipients_are_masked() {
        assert_eq!(mask_recipient("+15555550100"), "***0100");
        assert_eq!(mask_recipient("alice@example.com"), "***.com");
        assert_eq!(mask_recipient("+1234"), "***");
        assert_eq!(mask_recipient(""), "***");
        // never panics on multi-byte characters
        assert_eq!(mask_recipient("ééééééééééé"), "***éééé");
        for to in ["+15555550100", "alice@example.com", "bob@x.io"] {
            let masked = mask_recipient(to);
            assert!(masked.chars().count() <= 7, "{masked}");
            assert!(
                !masked.contains("alice") && !masked.contains("5555"),
                "{masked}"
            );
        }
    }

    #[test]
    fn payloads_parse_and_ignore_unknown_fields() {
        let sms =
            SmsPayload::parse(&json!({"to": "+15555550100", "message": "hi", "x": 1})).unwrap();
        assert_eq!(sms.to, "+15555550100");
        let email = EmailPayload::parse(&json!({
            "to": "a@example.com", "subject": "s", "html": "<b>h</b>", "reply_to": "r@example.com"
        }))
        .unwrap();
        assert_eq!(email.text, None);
        assert_eq!(email.reply_to.as_deref(), Some("r@example.com"));
    }

    #[test]
    fn unreadable_payloads_are_permanent_errors() {
        for (payload, email) in [
            (json!({"to": "+15555550100"}), false),
            (json!("not an object"), false),
            (json!({"to": "a@example.com", "subject": "s"}), true),
            (json!({"to": 5, "subject": "s", "text": "t"}), true),
        ] {
            let err = if email {
                EmailPayload::parse(&payload).unwrap_err()
            } else {
                SmsPayload::parse(&payload).unwrap_err()
            };
            assert_eq!(err.code, INVALID_PAYLOAD, "{payload}");
            assert_eq!(err.class(), ErrorClass::Permanent);
        }
    }

    #[test]
    fn detail_keeps_the_chain_and_is_bounded() {
        let err = DeliveryError::with_source("X", "outer", std::io::Error::other("root"));
        assert_eq!(err.detail(), "outer: root");
        let long = DeliveryError::new("X", "é".repeat(5000));
        assert_eq!(long.detail().chars().count(), MAX_MESSAGE_CHARS + 1);
    }

    #[test]
    fn the_class_comes_from_the_code_unless_set() {
        assert_eq!(
            DeliveryError::new("MessageRejected", "x").class(),
            ErrorClass::Permanent
        );
        assert_eq!(
            DeliveryError::new("SomethingNew", "x").class(),
            ErrorClass::Transient
        );
        let err = DeliveryError::with_source("MessageRejected", "x", std::io::Error::other("y"))
            .with_class(ErrorClass::Account);
        assert_eq!(
            (err.code.as_str(), err.class()),
            ("MessageRejected", ErrorClass::Account)
        );
        assert_eq!(err.detail(), "x: y");
        assert_eq!(err.row_message().as_deref(), Some("x: y"));
        let suppressed = DeliveryError::code_only(SUPPRESSED);
        assert_eq!(suppressed.row_message(), None, "the code says it all");
        assert_eq!(suppressed.class(), ErrorClass::Permanent);
    }

    #[test]
    fn sender_addresses() {
        assert_eq!(
            sender_address("Example <noreply@example.com>"),
            "noreply@example.com"
        );
        assert_eq!(
            sender_address(" noreply@example.com "),
            "noreply@example.com"
        );
        assert!(is_sender_address("noreply@example.com"));
        assert!(is_sender_address("Example <noreply@example.com>"));
        assert!(!is_sender_address("noreply"));
        assert!(!is_sender_address("Example <noreply>"));
    }
}
