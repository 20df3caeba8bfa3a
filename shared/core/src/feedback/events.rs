//! Reads the `feedback` function's invocation payload into [`FeedbackEvent`]s.
//!
//! Two shapes arrive:
//! - an SNS event, `{"Records":[{"EventSource":"aws:sns","Sns":{"Message":"…"}}]}`, whose
//!   messages are SES event-publishing records (or SES notifications, the older feature, which
//!   name the type `notificationType`): read by `ses`;
//! - a CloudWatch Logs subscription event, `{"awslogs":{"data":"…"}}` (base64 of gzip of a
//!   JSON batch), whose log events are SNS SMS delivery-status lines: read by `sms`.
//!
//! [`parse`] never fails and never panics. A record it cannot read becomes a [`Malformed`]
//! saying where and what was wrong, and the other records of the payload are still read. A
//! reason never quotes a value of the payload (values hold recipients), only field names and
//! positions: `Bad`, the only way a reason is made, has no constructor that takes one.

use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, SecondsFormat, Utc};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{FeedbackEvent, Malformed, Parsed, RAW_EVENT_MAX_BYTES};

mod ses;
mod sms;
#[cfg(test)]
mod tests;

/// The longest provider message id taken (bytes); SES ids are about 60, SNS ids 36. A longer
/// one is malformed rather than stored.
const MESSAGE_ID_MAX_BYTES: usize = 256;

/// The longest `subtype` or `diagnostic` kept (characters); the rest of a longer one is cut.
const TEXT_MAX_CHARS: usize = 1000;

/// The most a CloudWatch Logs batch may inflate to (bytes). CloudWatch Logs batches are about
/// 1 MiB of JSON; this only stops a gzip bomb.
const AWSLOGS_DECODED_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Reads one invocation's payload: an SNS event of SES records, or a CloudWatch Logs event of
/// SNS SMS delivery-status lines. Anything else is one [`Malformed`] at `payload`.
pub fn parse(payload: &Value) -> Parsed {
    let mut parsed = Parsed::default();
    if let Some(records) = payload.get("Records") {
        sns_records(records, &mut parsed);
    } else if let Some(awslogs) = payload.get("awslogs") {
        awslogs_batch(awslogs, &mut parsed);
    } else {
        let bad = Bad::new("neither an SNS event (Records) nor a CloudWatch Logs event (awslogs)");
        parsed.malformed.push(bad.at("payload"));
    }
    parsed
}

/// The Lambda event CloudWatch Logs sends for `decoded`, a subscription batch
/// (`{"messageType":"DATA_MESSAGE","logEvents":[…],…}`): `{"awslogs":{"data":"<base64 of
/// gzip of its JSON>"}}`. For tests and the demo, which build events from the fixtures in
/// `tests/fixtures/feedback/`.
#[doc(hidden)]
pub fn encode_awslogs(decoded: &Value) -> Value {
    awslogs_event(decoded.to_string().as_bytes())
}

/// `{"awslogs":{"data":"<base64 of gzip of bytes>"}}`.
fn awslogs_event(bytes: &[u8]) -> Value {
    let mut gzip = GzEncoder::new(Vec::new(), Compression::default());
    // writing to a Vec cannot fail
    gzip.write_all(bytes).expect("gzip into memory");
    let compressed = gzip.finish().expect("gzip into memory");
    json!({ "awslogs": { "data": BASE64.encode(compressed) } })
}

fn sns_records(records: &Value, parsed: &mut Parsed) {
    let Some(records) = records.as_array() else {
        parsed
            .malformed
            .push(Bad::new("Records is not an array").at("Records"));
        return;
    };
    for (i, record) in records.iter().enumerate() {
        match sns_record(record) {
            Ok(Some(event)) => parsed.events.push(event),
            Ok(None) => {}
            Err(bad) => parsed.malformed.push(bad.at(format!("Records[{i}]"))),
        }
    }
}

/// One SNS record: its message is an SES record. `None`: a message that reports nothing
/// (SES's subscription test message).
fn sns_record(record: &Value) -> Result<Option<FeedbackEvent>, Bad> {
    match record.get("EventSource") {
        None => {}
        Some(source) if source == "aws:sns" => {}
        Some(_) => return Err(Bad::new("EventSource is not aws:sns")),
    }
    let message = record
        .get("Sns")
        .and_then(|sns| sns.get("Message"))
        .and_then(Value::as_str)
        .ok_or(Bad::new("Sns.Message is missing or not a string"))?;
    let ses_record: Value = serde_json::from_str(message)
        .map_err(|err| Bad::json("Sns.Message is not an SES record (not JSON)", &err))?;
    ses::event(&ses_record)
}

fn awslogs_batch(awslogs: &Value, parsed: &mut Parsed) {
    let log_events = match log_events(awslogs) {
        Ok(log_events) => log_events,
        Err(malformed) => {
            parsed.malformed.push(malformed);
            return;
        }
    };
    for (i, log_event) in log_events.iter().enumerate() {
        match sms_log_event(log_event) {
            Ok(event) => parsed.events.push(event),
            Err(bad) => parsed
                .malformed
                .push(bad.at(format!("awslogs.logEvents[{i}]"))),
        }
    }
}

/// The log events of the batch in `awslogs.data`: none for a `CONTROL_MESSAGE`, which
/// CloudWatch Logs sends once when the subscription filter is created.
fn log_events(awslogs: &Value) -> Result<Vec<Value>, Malformed> {
    let mut batch = decode_awslogs(awslogs).map_err(|bad| bad.at("awslogs.data"))?;
    match batch.get("messageType").and_then(Value::as_str) {
        Some("DATA_MESSAGE") => {}
        Some("CONTROL_MESSAGE") => return Ok(Vec::new()),
        _ => {
            let bad = Bad::new("messageType is neither DATA_MESSAGE nor CONTROL_MESSAGE");
            return Err(bad.at("awslogs.messageType"));
        }
    }
    match batch.get_mut("logEvents").map(Value::take) {
        Some(Value::Array(log_events)) => Ok(log_events),
        _ => Err(Bad::new("logEvents is missing or not an array").at("awslogs.logEvents")),
    }
}

/// `awslogs.data`: base64 of gzip of the batch's JSON.
fn decode_awslogs(awslogs: &Value) -> Result<Value, Bad> {
    let data = awslogs
        .get("data")
        .and_then(Value::as_str)
        .ok_or(Bad::new("awslogs.data is missing or not a string"))?;
    let compressed = BASE64
        .decode(data.trim())
        .map_err(|_| Bad::new("awslogs.data is not base64"))?;
    let mut json = Vec::new();
    GzDecoder::new(compressed.as_slice())
        .take(AWSLOGS_DECODED_MAX_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|_| Bad::new("awslogs.data is not gzip"))?;
    if json.len() as u64 > AWSLOGS_DECODED_MAX_BYTES {
        return Err(Bad::new("awslogs.data inflates to more than 16 MiB"));
    }
    serde_json::from_slice(&json).map_err(|err| Bad::json("awslogs.data does not hold JSON", &err))
}

/// One log event: its `message` is an SNS SMS delivery-status line, its `timestamp` (epoch
/// milliseconds) when CloudWatch Logs took it.
fn sms_log_event(log_event: &Value) -> Result<FeedbackEvent, Bad> {
    let message = log_event
        .get("message")
        .and_then(Value::as_str)
        .ok_or(Bad::new("message is missing or not a string"))?;
    let line: Value = serde_json::from_str(message).map_err(|err| {
        Bad::json(
            "message is not an SMS delivery-status line (not JSON)",
            &err,
        )
    })?;
    sms::event(&line, log_event.get("timestamp").and_then(Value::as_i64))
}

/// Why a record could not be read. Made only from static text and positions in a JSON text,
/// so that a reason can never quote a recipient.
#[derive(Debug)]
struct Bad(String);

impl Bad {
    fn new(reason: &'static str) -> Self {
        Bad(reason.to_owned())
    }

    /// `what`, and where serde_json stopped. Its message is not used: it quotes values.
    fn json(what: &'static str, err: &serde_json::Error) -> Self {
        use serde_json::error::Category;
        let trouble = match err.classify() {
            Category::Syntax => "syntax error",
            Category::Eof => "unexpected end",
            Category::Data => "unexpected data",
            Category::Io => "read error",
        };
        Bad(format!(
            "{what}: {trouble} at line {} column {}",
            err.line(),
            err.column()
        ))
    }

    fn at(self, at: impl Into<String>) -> Malformed {
        Malformed {
            at: at.into(),
            reason: self.0,
        }
    }
}

/// The string at `key` of `object`, when there is one and it is not empty.
fn text<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .get(key)
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
}

/// A provider message id as stored: at most [`MESSAGE_ID_MAX_BYTES`].
fn message_id(id: &str) -> Result<String, Bad> {
    if id.len() > MESSAGE_ID_MAX_BYTES {
        return Err(Bad::new("messageId is longer than 256 bytes"));
    }
    Ok(id.to_owned())
}

/// A provider's text (subtype, diagnostic) as stored: each recipient it names replaced by
/// `[recipient]` (a diagnostic such as `550 5.1.1 <someone@example.com>: user unknown` names
/// one), at most [`TEXT_MAX_CHARS`].
fn provider_text(text: &str, recipients: &[&str]) -> String {
    let mut text = text.to_owned();
    for recipient in recipients {
        text = replace_ignoring_ascii_case(&text, recipient, "[recipient]");
    }
    match text.char_indices().nth(TEXT_MAX_CHARS) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text,
    }
}

/// `haystack` with every occurrence of `needle`, compared ignoring ASCII case, replaced.
/// ASCII lowercasing keeps every byte where it was, so the offsets found in the lowercased
/// copy are char boundaries of `haystack` too.
fn replace_ignoring_ascii_case(haystack: &str, needle: &str, with: &str) -> String {
    if needle.is_empty() {
        return haystack.to_owned();
    }
    let lower_haystack = haystack.to_ascii_lowercase();
    let lower_needle = needle.to_ascii_lowercase();
    let mut out = String::with_capacity(haystack.len());
    let mut from = 0;
    while let Some(found) = lower_haystack[from..].find(&lower_needle) {
        out.push_str(&haystack[from..from + found]);
        out.push_str(with);
        from += found + lower_needle.len();
    }
    out.push_str(&haystack[from..]);
    out
}

/// An event time as keys spell it: RFC 3339 in UTC with milliseconds.
fn key_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Stands for the recipients an event names, in a key, without naming them: the first 16
/// bytes of SHA-256 over the sorted, distinct addresses, in hex.
fn recipients_digest(recipients: &[&str]) -> String {
    let mut sorted = recipients.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let digest = Sha256::digest(sorted.join("\n").as_bytes());
    hex::encode(&digest[..16])
}

/// `record` as stored with its event: itself when its JSON fits in [`RAW_EVENT_MAX_BYTES`],
/// else `{"truncated": true, <type_field>: type_value, "messageId": message_id}`.
fn bounded_raw(record: &Value, type_field: &str, type_value: &str, message_id: &str) -> Value {
    let fits = serde_json::to_vec(record).is_ok_and(|json| json.len() <= RAW_EVENT_MAX_BYTES);
    if fits {
        return record.clone();
    }
    let mut summary = Map::new();
    summary.insert("truncated".into(), Value::Bool(true));
    summary.insert(type_field.into(), type_value.into());
    summary.insert("messageId".into(), message_id.into());
    Value::Object(summary)
}
