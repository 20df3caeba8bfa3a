//! API Gateway requests for handler tests, built from the JSON fixtures in
//! `tests/fixtures/apigw/` (an HTTP API v2 event with a JWT authorizer, and a REST v1 event
//! with a Lambda authorizer and a `prod` stage) and parsed by lambda_http as in Lambda.

use base64::Engine;
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, Response};
use serde_json::{Value, json};
use uuid::Uuid;

const V2: &str = include_str!("../fixtures/apigw/v2_http_api.json");
const V1: &str = include_str!("../fixtures/apigw/v1_rest_api.json");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP API, payload 2.0, JWT authorizer claim `org_id`.
    V2,
    /// REST API, payload 1.0, Lambda-authorizer context key `organization_id`.
    V1,
}

/// A request under construction; [`ApiRequest::build`] turns it into a lambda_http request.
#[derive(Clone, Debug)]
pub struct ApiRequest {
    version: Version,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    org: Option<String>,
}

impl ApiRequest {
    pub fn new(version: Version, method: &str, path: &str) -> Self {
        Self {
            version,
            method: method.to_owned(),
            path: path.to_owned(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: None,
            org: None,
        }
    }

    pub fn post(version: Version, body: &Value) -> Self {
        Self::new(version, "POST", "/notifications").body(body.to_string())
    }

    pub fn get(version: Version, id: &str) -> Self {
        Self::new(version, "GET", &format!("/notifications/{id}"))
    }

    /// The organization the authorizer vouches for.
    pub fn org(mut self, org: impl ToString) -> Self {
        self.org = Some(org.to_string());
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    pub fn without_header(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// The API Gateway event as JSON.
    pub fn event(&self) -> Value {
        let mut event: Value = serde_json::from_str(match self.version {
            Version::V2 => V2,
            Version::V1 => V1,
        })
        .expect("fixture is JSON");
        let (body, base64) = match &self.body {
            None => (Value::Null, false),
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => (json!(text), false),
                Err(_) => (
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
                    true,
                ),
            },
        };
        event["body"] = body;
        event["isBase64Encoded"] = json!(base64);
        let (path, query) = self.path.split_once('?').unwrap_or((&self.path, ""));
        let pairs: Vec<(&str, &str)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        let single: serde_json::Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let single = if single.is_empty() {
            Value::Null
        } else {
            Value::Object(single)
        };
        let headers: serde_json::Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        match self.version {
            Version::V2 => {
                event["rawPath"] = json!(path);
                event["rawQueryString"] = json!(query);
                event["queryStringParameters"] = single;
                event["routeKey"] = json!(format!("{} {}", self.method, path));
                event["requestContext"]["http"]["method"] = json!(self.method);
                event["requestContext"]["http"]["path"] = json!(path);
                event["headers"] = Value::Object(headers);
                match &self.org {
                    Some(org) => {
                        event["requestContext"]["authorizer"]["jwt"]["claims"]["org_id"] =
                            json!(org)
                    }
                    None => {
                        event["requestContext"]
                            .as_object_mut()
                            .unwrap()
                            .remove("authorizer");
                    }
                }
            }
            Version::V1 => {
                event["path"] = json!(path);
                event["httpMethod"] = json!(self.method);
                event["requestContext"]["httpMethod"] = json!(self.method);
                event["requestContext"]["path"] = json!(format!("/prod{path}"));
                let multi: serde_json::Map<String, Value> = pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), json!([v])))
                    .collect();
                event["queryStringParameters"] = single;
                event["multiValueQueryStringParameters"] = if multi.is_empty() {
                    Value::Null
                } else {
                    Value::Object(multi)
                };
                let multi_headers: serde_json::Map<String, Value> = self
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), json!([v])))
                    .collect();
                event["headers"] = Value::Object(headers);
                event["multiValueHeaders"] = Value::Object(multi_headers);
                match &self.org {
                    Some(org) => {
                        event["requestContext"]["authorizer"]["organization_id"] = json!(org)
                    }
                    None => {
                        event["requestContext"]["authorizer"] = json!({});
                    }
                }
            }
        }
        event
    }

    pub fn build(&self) -> Request {
        lambda_http::request::from_str(&self.event().to_string())
            .expect("lambda_http parses the event")
    }
}

/// A response's status and JSON body.
pub fn parts(response: &Response<Body>) -> (StatusCode, Value) {
    let body = match response.body() {
        Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
        Body::Binary(b) => serde_json::from_slice(b).expect("JSON body"),
        Body::Empty => Value::Null,
        _ => Value::Null,
    };
    (response.status(), body)
}

pub fn header<'a>(response: &'a Response<Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

pub fn new_org() -> Uuid {
    Uuid::new_v4()
}
