//! Invoking the functions as API Gateway and EventBridge would.

use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use super::process::Function;
use super::runtime::Outcome;
use crate::apigw::ApiRequest;

/// What the ingest binary answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status API Gateway would return: the function's `statusCode`, 502 for a
    /// function error, 504 when no answer came in time.
    pub status: u16,
    pub body: Value,
    pub headers: Value,
    pub function_error: bool,
    pub latency: Duration,
}

impl Answer {
    fn from_outcome(outcome: Option<Outcome>, latency: Duration) -> Self {
        let (status, body, headers, function_error) = match outcome {
            Some(Outcome::Response(bytes)) => {
                let resp: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let status = resp
                    .get("statusCode")
                    .and_then(Value::as_u64)
                    .unwrap_or(502) as u16;
                let body = resp
                    .get("body")
                    .and_then(Value::as_str)
                    .and_then(|b| serde_json::from_str(b).ok())
                    .unwrap_or(Value::Null);
                let headers = resp.get("headers").cloned().unwrap_or(Value::Null);
                (status, body, headers, false)
            }
            Some(Outcome::Error(bytes)) => {
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                (502, body, Value::Null, true)
            }
            None => (504, Value::Null, Value::Null, true),
        };
        Self {
            status,
            body,
            headers,
            function_error,
            latency,
        }
    }

    /// The id in a 202/200 answer.
    pub fn id(&self) -> Option<Uuid> {
        self.body
            .get("id")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
    }
}

/// Sends one API Gateway event through the ingest function.
pub async fn send_event(ingest: &Function, event: &Value) -> Answer {
    send_event_within(ingest, event, Duration::from_secs(15)).await
}

/// [`send_event`], waiting at most `wait` for the answer (504 past it, as API Gateway
/// answers when its integration outlives its timeout).
pub async fn send_event_within(ingest: &Function, event: &Value, wait: Duration) -> Answer {
    let started = Instant::now();
    let outcome = ingest
        .emulator
        .call(event.to_string().as_bytes(), Duration::from_secs(10), wait)
        .await;
    Answer::from_outcome(outcome, started.elapsed())
}

pub async fn send(ingest: &Function, req: &ApiRequest) -> Answer {
    send_event(ingest, &req.event()).await
}

pub const SCHEDULED_EVENT: &str = include_str!("../../fixtures/events/scheduled.json");

/// Invokes a worker or sweeper with the scheduled event; the summary, or why not.
pub async fn invoke_scheduled(f: &Function, timeout: Duration) -> Result<Value, String> {
    match f.call(SCHEDULED_EVENT.as_bytes(), timeout).await {
        Some(Outcome::Response(b)) => serde_json::from_slice(&b).map_err(|e| e.to_string()),
        Some(Outcome::Error(b)) => Err(String::from_utf8_lossy(&b).into_owned()),
        None => Err("no answer (timed out)".into()),
    }
}

/// A number in a worker's or sweeper's summary (0 when absent).
pub fn summary_count(summary: &Value, field: &str) -> u64 {
    summary.get(field).and_then(Value::as_u64).unwrap_or(0)
}
