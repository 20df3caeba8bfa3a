//! The step `lambda_http::run` does before and after the handler — API Gateway event in,
//! proxy response out — made total. lambda_http fails the invocation when it cannot read an
//! event (a NUL or CR LF in a header, a method it cannot parse) and panics on a body marked
//! base64 that is not; either way API Gateway answers the caller 502. Here such an event is
//! answered 400 in the common error shape, and the function never fails.

use std::panic::AssertUnwindSafe;

use lambda_http::request::LambdaRequest;
use lambda_http::{Body, Context, Request, RequestExt, Response};
use serde_json::{json, Map, Value};

use shared::ingest::Ingest;

/// Answers one raw API Gateway event (REST v1, HTTP API v2 or a function URL) with the
/// proxy response Lambda returns to API Gateway.
pub async fn handle_event(ingest: &Ingest, event: Value, context: Context) -> Value {
    match to_request(event) {
        Ok(request) => proxy_response(ingest.handle(request.with_lambda_context(context)).await),
        Err(reason) => {
            tracing::warn!(request_id = %context.request_id, status = 400, reason, "unreadable event");
            json!({
                "statusCode": 400,
                "headers": {"content-type": "application/json"},
                "body": json!({"error": {"code": "bad_request", "message": reason, "fields": []}})
                    .to_string(),
                "isBase64Encoded": false,
            })
        }
    }
}

fn to_request(event: Value) -> Result<Request, &'static str> {
    if event.get("isBase64Encoded") == Some(&Value::Bool(true)) {
        if let Some(body) = event.get("body").and_then(Value::as_str) {
            if !is_base64(body) {
                return Err("the body is marked base64 but is not");
            }
        }
    }
    let payload: LambdaRequest =
        serde_json::from_value(event).map_err(|_| "the request could not be read")?;
    // lambda_http panics on what it cannot convert; a panic here must not fail the function
    std::panic::catch_unwind(AssertUnwindSafe(|| Request::from(payload)))
        .map_err(|_| "the request could not be read")
}

/// Standard base64 with padding, as API Gateway encodes bodies.
fn is_base64(text: &str) -> bool {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return false;
    }
    let padding = bytes.iter().rev().take_while(|b| **b == b'=').count();
    padding <= 2
        && bytes[..bytes.len() - padding]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
}

/// The proxy response (the fields API Gateway REST v1 and HTTP API v2 both read).
fn proxy_response(response: Response<Body>) -> Value {
    let mut headers = Map::new();
    let mut multi = Map::new();
    for name in response.headers().keys() {
        let values: Vec<String> = response
            .headers()
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        headers.insert(name.to_string(), json!(values.join(", ")));
        multi.insert(name.to_string(), json!(values));
    }
    let body = match response.body() {
        Body::Text(text) => text.clone(),
        Body::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        _ => String::new(),
    };
    json!({
        "statusCode": response.status().as_u16(),
        "headers": headers,
        "multiValueHeaders": multi,
        "body": body,
        "isBase64Encoded": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_bodies() {
        assert!(is_base64(""));
        assert!(is_base64("aGk="));
        assert!(is_base64("aGVsbG8gd29ybGQ="));
        assert!(!is_base64("%%% not base64 %%%"));
        assert!(!is_base64("aGk"));
        assert!(!is_base64("a==="));
    }

    #[test]
    fn unreadable_events_are_refused_not_failed() {
        let mut event: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/apigw/v2_http_api.json"
        ))
        .unwrap();
        assert!(to_request(event.clone()).is_ok());
        event["headers"]["x-nul"] = json!("a\u{0}b");
        assert!(to_request(event.clone()).is_err());
        event["headers"] = json!({});
        event["isBase64Encoded"] = json!(true);
        event["body"] = json!("%%%");
        assert!(to_request(event).is_err());
    }
}
