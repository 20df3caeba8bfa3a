//! The step `lambda_http::run` does before and after the handler — API Gateway event in,
//! proxy response out — made total. lambda_http fails the invocation when it cannot read an
//! event (a NUL or CR LF in a header, a method it cannot parse) and panics on a body marked
//! base64 that is not; either way API Gateway answers the caller 502. Here such an event is
//! answered 400 in the common error shape, and the function never fails.

use std::panic::AssertUnwindSafe;

use lambda_http::request::LambdaRequest;
use lambda_http::{Body, Context, Request, RequestExt, Response};
use serde_json::{Map, Value, json};

use crate::Ingest;

/// Answers one raw API Gateway event (REST v1, HTTP API v2 or a function URL) with the
/// proxy response Lambda returns to API Gateway.
pub async fn handle_event(ingest: &Ingest, event: Value, context: Context) -> Value {
    match to_request(event) {
        Ok(request) => proxy_response(ingest.handle(request.with_lambda_context(context)).await),
        Err(reason) => {
            tracing::warn!(request_id = %context.request_id, status = 400, reason, "unreadable event");
            proxy_response(unreadable(reason, &context.request_id))
        }
    }
}

/// The 400 for an event that could not be read, in the common error shape, with the
/// `x-request-id` every answer carries (functions/ingest/openapi.yaml).
fn unreadable(reason: &str, request_id: &str) -> Response<Body> {
    let body = json!({"error": {"code": "bad_request", "message": reason, "fields": []}});
    let mut response = Response::new(Body::Text(body.to_string()));
    *response.status_mut() = lambda_http::http::StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        lambda_http::http::header::CONTENT_TYPE,
        lambda_http::http::HeaderValue::from_static("application/json"),
    );
    if let Ok(id) = lambda_http::http::HeaderValue::from_str(request_id) {
        response.headers_mut().insert("x-request-id", id);
    }
    response
}

fn to_request(event: Value) -> Result<Request, &'static str> {
    if event.get("isBase64Encoded") == Some(&Value::Bool(true))
        && let Some(body) = event.get("body").and_then(Value::as_str)
        && !is_base64(body)
    {
        return Err("the body is marked base64 but is not");
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

/// The proxy response, in the one shape every caller of the function reads:
/// - API Gateway REST (v1) reads `statusCode`, `headers`, `multiValueHeaders`, `body` and
///   `isBase64Encoded` (where a name is in both header maps, `multiValueHeaders` wins);
/// - API Gateway HTTP API (v2) and function URLs read `statusCode`, `headers`, `cookies`,
///   `body` and `isBase64Encoded`; a function URL reply without `cookies` is refused by
///   `cargo lambda watch`'s emulation (it is required in `LambdaFunctionUrlResponse`).
///
/// `Set-Cookie` values go to `cookies` (v2, URLs) and `multiValueHeaders` (v1), never to
/// `headers`, so no reader sees a cookie twice.
fn proxy_response(response: Response<Body>) -> Value {
    let mut headers = Map::new();
    let mut multi = Map::new();
    let mut cookies = Vec::new();
    for name in response.headers().keys() {
        let values: Vec<String> = response
            .headers()
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        if name == lambda_http::http::header::SET_COOKIE {
            cookies.extend(values.iter().cloned());
        } else {
            headers.insert(name.to_string(), json!(values.join(", ")));
        }
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
        "cookies": cookies,
        "body": body,
        "isBase64Encoded": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IngestConfig;
    use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayV2httpResponse};
    use aws_lambda_events::encodings::Body as EventBody;
    use aws_lambda_events::lambda_function_urls::LambdaFunctionUrlResponse;
    use lambda_http::http::header::{HeaderMap, SET_COOKIE};
    use notify_postgres::PgStore;
    use notify_postgres::db::DbConfig;
    use std::sync::Arc;

    /// What each reader of the reply sees: status, body, one header's values, cookies.
    #[derive(Debug, PartialEq)]
    struct Seen {
        status: i64,
        body: String,
        content_type: Vec<String>,
        cookies: Vec<String>,
    }

    fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    fn text(body: Option<EventBody>) -> String {
        match body {
            Some(EventBody::Text(text)) => text,
            other => panic!("expected a text body, got {other:?}"),
        }
    }

    /// Reads `reply` as each caller of the function does, with aws_lambda_events' own types:
    /// a function URL (what `cargo lambda watch` parses), API Gateway HTTP API (v2) and REST
    /// (v1). Each must read it, and all must see the same answer.
    fn read_by_every_caller(reply: &Value) -> Seen {
        let url: LambdaFunctionUrlResponse = serde_json::from_value(reply.clone())
            .unwrap_or_else(|e| panic!("a function URL cannot read {reply}: {e}"));
        let v2: ApiGatewayV2httpResponse = serde_json::from_value(reply.clone())
            .unwrap_or_else(|e| panic!("an HTTP API (v2) cannot read {reply}: {e}"));
        let v1: ApiGatewayProxyResponse = serde_json::from_value(reply.clone())
            .unwrap_or_else(|e| panic!("a REST API (v1) cannot read {reply}: {e}"));
        assert!(!url.is_base64_encoded && !v2.is_base64_encoded && !v1.is_base64_encoded);
        let seen_url = Seen {
            status: url.status_code,
            body: url.body.unwrap_or_default(),
            content_type: values(&url.headers, "content-type"),
            cookies: url.cookies.clone(),
        };
        // v2 and URLs take cookies from `cookies` only: a Set-Cookie header too would be a
        // second copy
        assert!(url.headers.get(SET_COOKIE).is_none(), "{reply}");
        assert!(v2.headers.get(SET_COOKIE).is_none(), "{reply}");
        let seen_v2 = Seen {
            status: v2.status_code,
            body: text(v2.body),
            content_type: values(&v2.headers, "content-type"),
            cookies: v2.cookies,
        };
        // v1 reads the multi-value map (it wins over `headers` where both name a header)
        let seen_v1 = Seen {
            status: v1.status_code,
            body: text(v1.body),
            content_type: values(&v1.multi_value_headers, "content-type"),
            cookies: values(&v1.multi_value_headers, "set-cookie"),
        };
        assert_eq!(seen_url, seen_v2, "{reply}");
        assert_eq!(seen_url, seen_v1, "{reply}");
        seen_url
    }

    #[test]
    fn the_reply_is_read_alike_by_function_urls_http_apis_and_rest_apis() {
        let response = Response::builder()
            .status(202)
            .header("content-type", "application/json")
            .header("location", "/notifications/5b0f6c0e")
            .header("vary", "origin")
            .header("vary", "accept")
            .header("set-cookie", "a=1; Path=/")
            .header("set-cookie", "b=2; Secure")
            .body(Body::Text(r#"{"id":"5b0f6c0e"}"#.to_owned()))
            .unwrap();
        let reply = proxy_response(response);
        let seen = read_by_every_caller(&reply);
        assert_eq!(
            seen,
            Seen {
                status: 202,
                body: r#"{"id":"5b0f6c0e"}"#.to_owned(),
                content_type: vec!["application/json".to_owned()],
                cookies: vec!["a=1; Path=/".to_owned(), "b=2; Secure".to_owned()],
            }
        );
        let url: LambdaFunctionUrlResponse = serde_json::from_value(reply.clone()).unwrap();
        assert_eq!(
            values(&url.headers, "location"),
            ["/notifications/5b0f6c0e"]
        );
        assert_eq!(values(&url.headers, "vary"), ["origin, accept"]);
        let v1: ApiGatewayProxyResponse = serde_json::from_value(reply).unwrap();
        assert_eq!(
            values(&v1.multi_value_headers, "vary"),
            ["origin", "accept"]
        );
    }

    fn ingest() -> Ingest {
        // never connects: neither event below reaches the store
        let db = DbConfig::new("postgres://nobody@127.0.0.1:1/none?sslmode=disable", None).unwrap();
        let config = IngestConfig {
            allow_org_header: true,
            ..IngestConfig::default()
        };
        Ingest::new(Arc::new(PgStore::new(db)), config)
    }

    fn v2_event() -> Value {
        serde_json::from_str(include_str!(
            "../../../tests/fixtures/apigw/v2_http_api.json"
        ))
        .unwrap()
    }

    /// A context with the request id Lambda gives every invocation.
    fn context() -> Context {
        let mut context = Context::default();
        context.request_id = "8476a536-e9f4-11e8-9739-2dfe598c3fcd".to_owned();
        context
    }

    /// `reply` to `method path` keeps the API contract (functions/ingest/openapi.yaml).
    fn assert_conforms(method: &str, path: &str, reply: &Value) {
        let headers = reply["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        let body = reply["body"].as_str().unwrap();
        let answer = api_contract::Answer {
            status: reply["statusCode"].as_u64().unwrap() as u16,
            headers,
            body: body.as_bytes(),
        };
        let problems = api_contract::contract().problems(method, path, &answer);
        assert!(problems.is_empty(), "{problems:?}: {reply}");
    }

    #[tokio::test]
    async fn answers_are_read_alike_by_every_caller() {
        let ingest = ingest();
        // an answer of Ingest itself (an unknown path: 404 before any database work)
        let mut event = v2_event();
        event["rawPath"] = json!("/nowhere");
        event["requestContext"]["http"]["path"] = json!("/nowhere");
        let reply = handle_event(&ingest, event, context()).await;
        let seen = read_by_every_caller(&reply);
        assert_eq!((seen.status, seen.cookies.len()), (404, 0), "{reply}");
        assert_conforms("GET", "/nowhere", &reply);
        assert_eq!(seen.content_type, ["application/json"]);
        let body: Value = serde_json::from_str(&seen.body).unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{reply}");

        // the 400 for an event lambda_http cannot read
        let mut event = v2_event();
        event["headers"]["x-nul"] = json!("a\u{0}b");
        let reply = handle_event(&ingest, event, context()).await;
        let seen = read_by_every_caller(&reply);
        assert_eq!((seen.status, seen.cookies.len()), (400, 0), "{reply}");
        // the fixture's route: POST /notifications
        assert_conforms("POST", "/notifications", &reply);
        assert_eq!(seen.content_type, ["application/json"]);
        let body: Value = serde_json::from_str(&seen.body).unwrap();
        assert_eq!(
            body,
            json!({"error": {"code": "bad_request", "message": "the request could not be read", "fields": []}})
        );
    }

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
