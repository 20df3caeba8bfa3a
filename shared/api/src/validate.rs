//! Validating a send request: every invalid field is reported, not only the first, and a
//! value that passes is normalised (the payload the worker reads, the hash idempotency uses).

use chrono::{DateTime, Duration, Utc};
use email_address::EmailAddress;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use notify_core::domain::{Channel, Priority, normalize_recipient};

pub const MAX_SMS_CHARS: usize = 1600;
pub const MAX_SUBJECT_CHARS: usize = 998;
/// The longest address SMTP carries (RFC 5321's 256-octet path, less its angle brackets).
pub const MAX_EMAIL_CHARS: usize = 254;
pub const MAX_SCHEDULE_AHEAD_DAYS: i64 = 30;
/// `expires_at` may be at most this long after `send_at`.
pub const MAX_LIFETIME_DAYS: i64 = 30;
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;
pub const MAX_ATTEMPTS_LIMIT: i64 = 20;

/// One invalid field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A request that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct SendRequest {
    pub channel: Channel,
    /// What the worker needs to deliver: `{to, message}` or `{to, subject, text?, html?, reply_to?}`.
    pub payload: Value,
    pub max_attempts: i32,
    /// When the first attempt is due (a past `send_at` means now).
    pub send_at: DateTime<Utc>,
    /// The caller's `expires_at`: never sent after it (else `send_at` + the service's
    /// maximum age, see [`SendRequest::into_job`]).
    pub expires_at: Option<DateTime<Utc>>,
    /// The job's lane (`normal` unless the caller chose another).
    pub priority: Priority,
    /// SHA-256 of the normalised request, for idempotency.
    pub request_hash: String,
}

impl SendRequest {
    /// The job to persist for `organization_id`, with the caller's idempotency key if any.
    /// `max_age` is the service's default maximum age: without `expires_at` a job expires
    /// that long after `send_at`.
    pub fn into_job(
        self,
        organization_id: uuid::Uuid,
        key: Option<String>,
        max_age: std::time::Duration,
    ) -> notify_core::store::NewJob {
        let max_age = Duration::from_std(max_age).unwrap_or(Duration::MAX);
        notify_core::store::NewJob {
            organization_id,
            channel: self.channel,
            payload: self.payload,
            max_attempts: self.max_attempts,
            next_attempt_at: self.send_at,
            expires_at: self.expires_at.unwrap_or_else(|| {
                self.send_at
                    .checked_add_signed(max_age)
                    .unwrap_or(self.send_at)
            }),
            priority: self.priority,
            idempotency: key.map(|key| notify_core::store::Idempotency {
                key,
                request_hash: self.request_hash,
            }),
            trace_header: None,
        }
    }
}

/// A phone number in E.164: `+`, then 2–15 digits, the first not 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhoneNumber(String);

impl PhoneNumber {
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        let digits = s
            .strip_prefix('+')
            .ok_or("must be in E.164 format: + then 2 to 15 digits")?;
        let ok = (2..=15).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err("must be in E.164 format: + then 2 to 15 digits, the first not 0")
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An email address SES delivers to: the address alone, no display name ("Ann <a@x>"); a
/// dotted host name, no address literal ("a@[192.0.2.1]") nor dotless host ("a@host"); no
/// control or bidirectional-formatting characters (U+202E turns "moc.elpmaxe" into
/// "example.com" on screen); 7-bit ASCII only, as SES takes no other (it does not support
/// SMTPUTF8): a domain in another script is written in Punycode (`xn--…`), and a local part
/// cannot be. ASCII only also means one way to fold case, the same in every reader of the
/// address ([`notify_core::domain::normalize_recipient`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

/// Why an email address with a character outside 7-bit ASCII is refused.
pub const NOT_ASCII: &str = "must be 7-bit ASCII: Amazon SES sends to no other address (write a \
     domain in another script in Punycode, xn--…; the part before @ must be ASCII)";

impl Email {
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        const INVALID: &str = "must be a valid email address";
        if s.chars().any(|c| c.is_control() || is_format_char(c)) {
            return Err(INVALID);
        }
        if !s.is_ascii() {
            return Err(NOT_ASCII);
        }
        match s.parse::<EmailAddress>() {
            Ok(addr)
                if addr.display_part().is_empty()
                    && addr.as_str() == s
                    && is_deliverable_domain(addr.domain()) =>
            {
                Ok(Self(s.to_owned()))
            }
            _ => Err(INVALID),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The channel of a recipient named without one (the suppression routes): a phone number
/// starts with `+` (E.164) and has no `@`; anything else is taken for an email address (whose
/// local part may start with `+` too: `+tag@example.com`).
pub fn recipient_channel(recipient: &str) -> Channel {
    if recipient.trim_start().starts_with('+') && !recipient.contains('@') {
        Channel::Sms
    } else {
        Channel::Email
    }
}

/// A recipient named without its channel (`POST /suppressions`), held to the rules `to`
/// follows on that channel, and normalised as the suppression list keeps it.
pub fn parse_recipient(raw: &str) -> Result<String, &'static str> {
    let channel = recipient_channel(raw);
    match channel {
        Channel::Sms => {
            PhoneNumber::parse(raw)?;
        }
        Channel::Email => {
            Email::parse(raw).map_err(|why| {
                if why == NOT_ASCII {
                    why
                } else {
                    "must be an email address, or a phone number in E.164 format (+ then 2 to \
                     15 digits)"
                }
            })?;
        }
    }
    Ok(normalize_recipient(channel, raw))
}

/// Validates a parsed JSON body against the send contract, `now` being the current time.
pub fn validate(body: &Value, now: DateTime<Utc>) -> Result<SendRequest, Vec<FieldError>> {
    let mut errors = Vec::new();
    let Some(mut fields) = Fields::of(body, &mut errors) else {
        return Err(errors);
    };
    let obj = fields.obj;

    let channel = match obj.get("channel") {
        None => {
            fields.error("channel", "is required: \"sms\" or \"email\"");
            None
        }
        Some(Value::String(s)) => match Channel::parse(s) {
            Some(c) => Some(c),
            None => {
                fields.error("channel", "must be \"sms\" or \"email\"");
                None
            }
        },
        Some(_) => {
            fields.error("channel", "must be a string: \"sms\" or \"email\"");
            None
        }
    };

    let mut payload = Map::new();
    let allowed: &[&str] = match channel {
        Some(Channel::Sms) => {
            if let Some(to) = fields.string("to", true, 1, 16) {
                match PhoneNumber::parse(&to) {
                    Ok(phone) => {
                        payload.insert("to".into(), phone.as_str().into());
                    }
                    Err(msg) => fields.error("to", msg),
                }
            }
            if let Some(message) = fields.string("message", true, 1, MAX_SMS_CHARS) {
                payload.insert("message".into(), message.into());
            }
            &[
                "channel",
                "to",
                "message",
                "send_at",
                "expires_at",
                "max_attempts",
                "priority",
            ]
        }
        Some(Channel::Email) => {
            if let Some(to) = fields.email("to", true) {
                // as the suppression list keys it: every reader compares it as it is
                payload.insert("to".into(), normalize_recipient(Channel::Email, &to).into());
            }
            if let Some(subject) = fields.string("subject", true, 1, MAX_SUBJECT_CHARS) {
                if subject.contains(['\r', '\n']) {
                    fields.error("subject", "must be a single line");
                } else {
                    payload.insert("subject".into(), subject.into());
                }
            }
            let text = fields.string("text", false, 1, usize::MAX);
            let html = fields.string("html", false, 1, usize::MAX);
            if !obj.contains_key("text") && !obj.contains_key("html") {
                fields.error("text", "text or html (or both) is required");
            }
            if let Some(text) = text {
                payload.insert("text".into(), text.into());
            }
            if let Some(html) = html {
                payload.insert("html".into(), html.into());
            }
            if let Some(reply_to) = fields.email("reply_to", false) {
                payload.insert("reply_to".into(), reply_to.into());
            }
            &[
                "channel",
                "to",
                "subject",
                "text",
                "html",
                "reply_to",
                "send_at",
                "expires_at",
                "max_attempts",
                "priority",
            ]
        }
        None => &[],
    };
    if channel.is_some() {
        fields.refuse_unknown(allowed);
    }

    let max_attempts = fields.integer(
        "max_attempts",
        1..=MAX_ATTEMPTS_LIMIT,
        i64::from(DEFAULT_MAX_ATTEMPTS),
    ) as i32;

    let priority = match obj.get("priority") {
        None => Priority::default(),
        Some(value) => match value.as_str().and_then(Priority::parse) {
            Some(priority) => priority,
            None => {
                fields.error("priority", "must be \"high\", \"normal\" or \"low\"");
                Priority::default()
            }
        },
    };

    let mut send_at_given = None;
    if let Some(raw) = fields.string("send_at", false, 1, 64) {
        match DateTime::parse_from_rfc3339(&raw) {
            Ok(t) if t.with_timezone(&Utc) > now + Duration::days(MAX_SCHEDULE_AHEAD_DAYS) => {
                fields.error("send_at", "must be at most 30 days ahead")
            }
            Ok(t) => send_at_given = Some(t.with_timezone(&Utc)),
            Err(_) => fields.error(
                "send_at",
                "must be an RFC 3339 time, e.g. 2030-01-31T09:00:00Z",
            ),
        }
    }

    let send_at = send_at_given.map_or(now, |t| t.max(now));
    let mut expires_at = None;
    if let Some(raw) = fields.string("expires_at", false, 1, 64) {
        match DateTime::parse_from_rfc3339(&raw).map(|t| t.with_timezone(&Utc)) {
            Ok(t) if t <= send_at => fields.error("expires_at", "must be after send_at (or now)"),
            Ok(t) if t > send_at + Duration::days(MAX_LIFETIME_DAYS) => fields.error(
                "expires_at",
                "must be at most 30 days after send_at (or now)",
            ),
            Ok(t) => expires_at = Some(t),
            Err(_) => fields.error(
                "expires_at",
                "must be an RFC 3339 time, e.g. 2030-01-31T09:05:00Z",
            ),
        }
    }

    let Some(channel) = channel.filter(|_| errors.is_empty()) else {
        return Err(errors);
    };
    let payload = Value::Object(payload);
    let request_hash = hash(
        channel,
        &payload,
        max_attempts,
        send_at_given,
        expires_at,
        priority,
    );
    Ok(SendRequest {
        channel,
        payload,
        max_attempts,
        send_at,
        expires_at,
        priority,
        request_hash,
    })
}

/// SHA-256 over the normalised request: field order, whitespace and time-zone spelling do
/// not change it (serde_json's maps are sorted), a changed value does. A repeat with another
/// priority is another request; `"priority": "normal"` is the request without it.
fn hash(
    channel: Channel,
    payload: &Value,
    max_attempts: i32,
    send_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    priority: Priority,
) -> String {
    let time = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let mut normalised = serde_json::json!({
        "channel": channel.as_str(),
        "payload": payload,
        "max_attempts": max_attempts,
        "send_at": send_at.map(time),
    });
    // only when given: requests without it hash as they always did
    if let Some(expires_at) = expires_at {
        normalised["expires_at"] = time(expires_at).into();
    }
    // only when not the default, for the same reason
    if priority != Priority::Normal {
        normalised["priority"] = priority.as_str().into();
    }
    hex::encode(Sha256::digest(normalised.to_string().as_bytes()))
}

/// A JSON object's fields, read one by one; every problem is noted in `errors`.
pub(super) struct Fields<'a> {
    pub(super) obj: &'a Map<String, Value>,
    errors: &'a mut Vec<FieldError>,
}

impl<'a> Fields<'a> {
    /// The fields of `body`; `None` (and the error noted) when it is not a JSON object.
    pub(super) fn of(body: &'a Value, errors: &'a mut Vec<FieldError>) -> Option<Self> {
        match body.as_object() {
            Some(obj) => Some(Self { obj, errors }),
            None => {
                errors.push(FieldError::new("", "the body must be a JSON object"));
                None
            }
        }
    }

    pub(super) fn error(&mut self, field: &str, message: &str) {
        self.errors.push(FieldError::new(field, message));
    }

    /// Names every field not in `allowed`: bodies refuse what they do not know.
    pub(super) fn refuse_unknown(&mut self, allowed: &[&str]) {
        for key in self.obj.keys() {
            if !allowed.contains(&key.as_str()) {
                self.errors
                    .push(FieldError::new(key.as_str(), "is not a known field"));
            }
        }
    }

    /// A string field of `min..=max` characters, without NUL (PostgreSQL cannot store it).
    pub(super) fn string(
        &mut self,
        name: &str,
        required: bool,
        min: usize,
        max: usize,
    ) -> Option<String> {
        match self.obj.get(name) {
            None if required => {
                self.error(name, "is required");
                None
            }
            None => None,
            Some(Value::String(s)) => {
                let chars = s.chars().count();
                if chars < min {
                    self.error(name, "must not be empty");
                } else if chars > max {
                    self.error(name, &format!("must be at most {max} characters"));
                } else if s.contains('\0') {
                    self.error(name, "must not contain NUL characters");
                } else {
                    return Some(s.clone());
                }
                None
            }
            Some(_) => {
                self.error(name, "must be a string");
                None
            }
        }
    }

    /// An integer field in `range`, `default` when absent. JSON Schema's `integer` is any
    /// number with no fraction, so `4.0` is 4 (as every validator of the spec reads it).
    pub(super) fn integer(
        &mut self,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
        default: i64,
    ) -> i64 {
        let Some(value) = self.obj.get(name) else {
            return default;
        };
        let integral = value.as_i64().or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() <= 2f64.powi(53))
                .map(|f| f as i64)
        });
        match integral {
            Some(n) if range.contains(&n) => n,
            _ => {
                self.error(
                    name,
                    &format!(
                        "must be an integer from {} to {}",
                        range.start(),
                        range.end()
                    ),
                );
                default
            }
        }
    }

    fn email(&mut self, name: &str, required: bool) -> Option<String> {
        let raw = self.string(name, required, 1, MAX_EMAIL_CHARS)?;
        match Email::parse(&raw) {
            Ok(_) => Some(raw),
            Err(why) => {
                self.error(name, why);
                None
            }
        }
    }
}

/// A domain SES sends to: a dotted host name, not an address literal.
fn is_deliverable_domain(domain: &str) -> bool {
    !domain.starts_with('[')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
}

/// Invisible formatting characters: zero-width, bidirectional marks, embeddings,
/// overrides and isolates, the byte-order mark.
fn is_format_char(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    fn fields(errors: Vec<FieldError>) -> Vec<String> {
        errors.into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn an_integer_may_be_written_with_a_zero_fraction_as_json_schema_reads_it() {
        let sms = |attempts: Value| {
            validate(
                &json!({"channel": "sms", "to": "+15555550100", "message": "hi",
                        "max_attempts": attempts}),
                now(),
            )
        };
        assert_eq!(sms(json!(4.0)).unwrap().max_attempts, 4);
        for bad in [
            json!(4.5),
            json!(0.0),
            json!(21.0),
            json!(1e300),
            json!("4"),
        ] {
            assert_eq!(
                fields(sms(bad.clone()).unwrap_err()),
                ["max_attempts"],
                "{bad}"
            );
        }
    }

    #[test]
    fn a_valid_sms_is_normalised() {
        let req = validate(
            &json!({"channel": "sms", "to": "+15555550100", "message": "Your code is 1234"}),
            now(),
        )
        .unwrap();
        assert_eq!(req.channel, Channel::Sms);
        assert_eq!(
            req.payload,
            json!({"to": "+15555550100", "message": "Your code is 1234"})
        );
        assert_eq!(req.max_attempts, 5);
        assert_eq!(req.send_at, now());
    }

    #[test]
    fn phone_numbers_follow_e164() {
        for ok in ["+12", "+15555550100", "+123456789012345"] {
            assert!(PhoneNumber::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "15555550100",
            "+1",
            "+0123",
            "+1234567890123456",
            "+1555-555",
            "+",
            "+１２",
        ] {
            assert!(PhoneNumber::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_invalid_field_is_listed() {
        let errors = validate(
            &json!({"channel": "email", "to": "not-an-address", "subject": "",
                    "max_attempts": 0, "send_at": "tomorrow", "colour": "red"}),
            now(),
        )
        .unwrap_err();
        let mut got = fields(errors);
        got.sort();
        assert_eq!(
            got,
            ["colour", "max_attempts", "send_at", "subject", "text", "to"]
        );
    }

    #[test]
    fn email_needs_text_or_html_and_valid_addresses() {
        let base = json!({"channel": "email", "to": "a@example.com", "subject": "Hi"});
        assert_eq!(fields(validate(&base, now()).unwrap_err()), ["text"]);
        let mut with_html = base.clone();
        with_html["html"] = json!("<p>Hi</p>");
        with_html["reply_to"] = json!("support@example.com");
        assert!(validate(&with_html, now()).is_ok());
        let mut bad_reply = with_html.clone();
        bad_reply["reply_to"] = json!("Support <support@example.com>");
        assert_eq!(
            fields(validate(&bad_reply, now()).unwrap_err()),
            ["reply_to"]
        );
    }

    #[test]
    fn lengths_are_counted_in_characters() {
        let ok = "é".repeat(MAX_SMS_CHARS);
        let body = json!({"channel": "sms", "to": "+15555550100", "message": ok});
        assert!(validate(&body, now()).is_ok());
        let long = "é".repeat(MAX_SMS_CHARS + 1);
        let body = json!({"channel": "sms", "to": "+15555550100", "message": long});
        assert_eq!(fields(validate(&body, now()).unwrap_err()), ["message"]);
    }

    #[test]
    fn formatting_characters_in_addresses_are_refused() {
        for to in [
            "a\u{202e}moc.elpmaxe@b",
            "a\u{200b}b@example.com",
            "a@exam\u{feff}ple.com",
        ] {
            let body = json!({"channel": "email", "to": to, "subject": "s", "text": "t"});
            assert_eq!(
                fields(validate(&body, now()).unwrap_err()),
                ["to"],
                "{to:?}"
            );
        }
    }

    #[test]
    fn nul_characters_are_refused() {
        let body = json!({"channel": "sms", "to": "+15555550100", "message": "a\u{0}b"});
        assert_eq!(fields(validate(&body, now()).unwrap_err()), ["message"]);
    }

    #[test]
    fn send_at_in_the_past_means_now_and_beyond_30_days_is_refused() {
        let past = json!({"channel": "sms", "to": "+15555550100", "message": "x",
                          "send_at": "2029-12-31T23:00:00Z"});
        assert_eq!(validate(&past, now()).unwrap().send_at, now());
        let later = json!({"channel": "sms", "to": "+15555550100", "message": "x",
                           "send_at": "2030-01-02T01:00:00+01:00"});
        assert_eq!(
            validate(&later, now()).unwrap().send_at,
            "2030-01-02T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        let too_far = json!({"channel": "sms", "to": "+15555550100", "message": "x",
                             "send_at": "2030-02-01T00:00:01Z"});
        assert_eq!(fields(validate(&too_far, now()).unwrap_err()), ["send_at"]);
    }

    #[test]
    fn the_hash_ignores_spelling_but_not_values() {
        let a = validate(
            &json!({"channel": "sms", "to": "+15555550100", "message": "x",
                    "send_at": "2030-01-02T01:00:00+01:00"}),
            now(),
        )
        .unwrap();
        let b = validate(
            &json!({"send_at": "2030-01-02T00:00:00Z", "message": "x",
                    "to": "+15555550100", "channel": "sms"}),
            now(),
        )
        .unwrap();
        assert_eq!(a.request_hash, b.request_hash);
        let c = validate(
            &json!({"channel": "sms", "to": "+15555550100", "message": "y",
                    "send_at": "2030-01-02T00:00:00Z"}),
            now(),
        )
        .unwrap();
        assert_ne!(a.request_hash, c.request_hash);
    }

    #[test]
    fn priority_is_normal_unless_the_caller_chooses_high_or_low() {
        let with = |priority: Option<Value>| {
            let mut body = json!({"channel": "email", "to": "a@example.com", "subject": "s",
                                  "text": "t"});
            if let Some(priority) = priority {
                body["priority"] = priority;
            }
            validate(&body, now())
        };
        assert_eq!(with(None).unwrap().priority, Priority::Normal);
        for priority in Priority::ALL {
            let request = with(Some(json!(priority.as_str()))).unwrap();
            assert_eq!(request.priority, priority);
            let job = request.into_job(uuid::Uuid::nil(), None, std::time::Duration::from_secs(60));
            assert_eq!(job.priority, priority, "the job keeps it");
        }
        for bad in [
            json!("HIGH"),
            json!("urgent"),
            json!(""),
            json!(1),
            json!(null),
            json!(["high"]),
        ] {
            let errors = with(Some(bad.clone())).unwrap_err();
            assert_eq!(fields(errors.clone()), ["priority"], "{bad}");
            assert_eq!(
                errors[0].message, r#"must be "high", "normal" or "low""#,
                "{bad}"
            );
        }
        let sms = json!({"channel": "sms", "to": "+15555550100", "message": "code 1234",
                         "priority": "high"});
        assert_eq!(validate(&sms, now()).unwrap().priority, Priority::High);
    }

    #[test]
    fn the_hash_tells_priorities_apart_and_normal_is_the_request_without_one() {
        let hash_of = |priority: Option<&str>| {
            let mut body = json!({"channel": "sms", "to": "+15555550100", "message": "x"});
            if let Some(priority) = priority {
                body["priority"] = json!(priority);
            }
            validate(&body, now()).unwrap().request_hash
        };
        assert_eq!(hash_of(None), hash_of(Some("normal")));
        assert_ne!(hash_of(None), hash_of(Some("high")));
        assert_ne!(hash_of(None), hash_of(Some("low")));
        assert_ne!(hash_of(Some("high")), hash_of(Some("low")));
        // a request without one hashes as it did before priorities (keys stored then still
        // match a repeat)
        let before = json!({"channel": "sms", "payload": {"to": "+15555550100", "message": "x"},
                            "max_attempts": 5, "send_at": null});
        assert_eq!(
            hash_of(None),
            hex::encode(Sha256::digest(before.to_string().as_bytes()))
        );
    }

    #[test]
    fn non_objects_and_unknown_channels_are_refused() {
        assert_eq!(fields(validate(&json!([1, 2]), now()).unwrap_err()), [""]);
        assert_eq!(
            fields(validate(&json!({"channel": "fax"}), now()).unwrap_err()),
            ["channel"]
        );
    }

    #[test]
    fn expires_at_must_follow_send_at_within_30_days() {
        let at = |t: &str| DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc);
        let ok = validate(
            &json!({"channel": "sms", "to": "+15555550100", "message": "code 1234",
                    "send_at": "2027-01-01T09:00:00Z", "expires_at": "2027-01-01T09:05:00Z"}),
            at("2026-12-15T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(ok.expires_at, Some(at("2027-01-01T09:05:00Z")));
        let job = ok
            .clone()
            .into_job(uuid::Uuid::nil(), None, std::time::Duration::from_secs(60));
        assert_eq!(
            job.expires_at,
            at("2027-01-01T09:05:00Z"),
            "the caller's own wins"
        );
        let mut no_expiry = ok;
        no_expiry.expires_at = None;
        let job = no_expiry.into_job(
            uuid::Uuid::nil(),
            None,
            std::time::Duration::from_secs(3600),
        );
        assert_eq!(
            job.expires_at,
            at("2027-01-01T10:00:00Z"),
            "send_at + the maximum age"
        );

        for (expires_at, why) in [
            ("2027-01-01T08:59:00Z", "must be after send_at"),
            ("2027-01-01T09:00:00Z", "must be after send_at"),
            ("2027-02-01T09:00:01Z", "at most 30 days after"),
            ("soon", "RFC 3339"),
        ] {
            let errors = validate(
                &json!({"channel": "sms", "to": "+15555550100", "message": "m",
                        "send_at": "2027-01-01T09:00:00Z", "expires_at": expires_at}),
                at("2026-12-15T00:00:00Z"),
            )
            .unwrap_err();
            assert_eq!(errors.len(), 1, "{expires_at}");
            assert_eq!(errors[0].field, "expires_at");
            assert!(
                errors[0].message.contains(why),
                "{expires_at}: {}",
                errors[0].message
            );
        }
    }

    #[test]
    fn addresses_ses_will_not_deliver_to_are_refused() {
        for to in [
            "a@[192.0.2.1]",
            "a@[IPv6:2001:db8::1]",
            "a@localhost",
            "a@example.",
            "a@.example.com",
        ] {
            let errors = validate(
                &json!({"channel": "email", "to": to, "subject": "s", "text": "t"}),
                now(),
            )
            .unwrap_err();
            assert_eq!(errors.len(), 1, "{to}");
            assert_eq!(errors[0].field, "to", "{to}");
        }
        assert!(validate(
            &json!({"channel": "email", "to": "a@mail.example.com", "subject": "s", "text": "t"}),
            now(),
        )
        .is_ok());
    }
}
