//! The API contract, `functions/ingest/openapi.yaml`, as the tests hold the ingest handler to
//! it. Every answer a test gets goes through [`checked`] (or [`Contract::problems`]):
//! - a path the spec has, with a method it declares: the status must be one the operation
//!   declares, every required header of that response must be there, every declared header
//!   that is there must match its schema, and the body must be of a declared media type and
//!   validate against its JSON Schema (`$ref`s resolved inside the document, formats checked),
//!   and an error's `error.code` must be one the response lists in `x-error-codes`;
//!   a response without content must have no body (204);
//! - a path the spec has, with a method it does not declare: 405 with `Allow` naming exactly
//!   the methods the spec declares for that path, in the `MethodNotAllowed` response's shape;
//! - a path the spec does not have: 404, in the `NotFound` response's shape.
//!
//! A crate of its own (lambda_http, serde_json, jsonschema and serde_yaml_ng only), so that the
//! API crate's unit tests use the very checker the integration tests do.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::Value;

/// The spec, as the repository holds it.
pub const SPEC: &str = include_str!("../../../functions/ingest/openapi.yaml");

/// The HTTP methods a path item may hold, as OpenAPI spells them.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// An answer as the checker reads it.
#[derive(Debug, Clone)]
pub struct Answer<'a> {
    pub status: u16,
    /// (name, value), names in any case.
    pub headers: Vec<(String, String)>,
    pub body: &'a [u8],
}

/// A parsed spec and the validators built from it so far (one per schema, by JSON pointer).
pub struct Contract {
    spec: Value,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

/// The repository's spec, parsed once per test binary.
pub fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        Contract::parse(SPEC)
            .unwrap_or_else(|e| panic!("functions/ingest/openapi.yaml cannot be read: {e}"))
    })
}

/// Answers `req` with `handle` and checks the answer against the contract (panics, naming
/// every problem, when it breaks it).
pub async fn checked<F, Fut>(req: Request, handle: F) -> Response<Body>
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response<Body>>,
{
    let method = req.method().as_str().to_owned();
    let path = request_path(&req);
    let response = handle(req).await;
    assert_conforms(&method, &path, &response);
    response
}

/// Panics, naming every problem, when `response` to `method path` breaks the contract.
pub fn assert_conforms(method: &str, path: &str, response: &Response<Body>) {
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let answer = Answer {
        status: response.status().as_u16(),
        headers,
        body: response.body().as_ref(),
    };
    let problems = contract().problems(method, path, &answer);
    assert!(
        problems.is_empty(),
        "{method} {path} answered {}, which breaks the API contract \
         (functions/ingest/openapi.yaml):\n  - {}\nheaders: {:?}\nbody: {}",
        answer.status,
        summary(&problems),
        answer.headers,
        String::from_utf8_lossy(&answer.body[..answer.body.len().min(2000)])
    );
}

/// The first problems, one a line (a 500-item batch can have 500).
pub fn summary(problems: &[String]) -> String {
    let mut lines: Vec<String> = problems.iter().take(8).cloned().collect();
    if problems.len() > 8 {
        lines.push(format!("… and {} more", problems.len() - 8));
    }
    lines.join("\n  - ")
}

/// The path the router sees: the request's, less an API Gateway stage prefix (as
/// `notify_api`'s router strips it).
pub fn request_path(req: &Request) -> String {
    let path = req.uri().path();
    let stage = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.stage.clone(),
        Some(RequestContext::ApiGatewayV1(ctx)) => ctx.stage.clone(),
        _ => None,
    };
    if let Some(stage) = stage.filter(|s| s != "$default")
        && let Some(rest) = path.strip_prefix(&format!("/{stage}"))
        && rest.starts_with('/')
    {
        return rest.to_owned();
    }
    path.to_owned()
}

/// A JSON pointer token, escaped.
fn token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn header<'a>(answer: &'a Answer, name: &str) -> Option<&'a str> {
    answer
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Contract {
    pub fn parse(text: &str) -> Result<Self, String> {
        let spec: Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        if spec["paths"]
            .as_object()
            .is_none_or(|paths| paths.is_empty())
        {
            return Err("no paths".into());
        }
        Ok(Self {
            spec,
            validators: Mutex::new(HashMap::new()),
        })
    }

    /// Every operation, as `METHOD /template` (the names the router gives its routes).
    pub fn operations(&self) -> BTreeSet<String> {
        self.paths()
            .flat_map(|(template, item)| {
                Self::methods(item)
                    .into_iter()
                    .map(move |method| format!("{method} {template}"))
            })
            .collect()
    }

    fn paths(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.spec["paths"].as_object().into_iter().flatten()
    }

    /// The methods a path item declares, upper case.
    fn methods(item: &Value) -> Vec<String> {
        METHODS
            .iter()
            .filter(|m| item.get(**m).is_some())
            .map(|m| m.to_ascii_uppercase())
            .collect()
    }

    /// The path template `path` falls under (the one with most literal segments, so that
    /// `/notifications/batch` is not taken for `/notifications/{id}`), with its path item.
    pub fn path_item(&self, path: &str) -> Option<(&str, &Value)> {
        let path = path.split('?').next().unwrap_or_default();
        let concrete: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
        self.paths()
            .filter(|(template, _)| {
                let parts: Vec<&str> = template.split('/').skip(1).collect();
                parts.len() == concrete.len()
                    && parts.iter().zip(&concrete).all(|(t, c)| {
                        if t.starts_with('{') && t.ends_with('}') {
                            !c.is_empty()
                        } else {
                            t == c
                        }
                    })
            })
            .max_by_key(|(template, _)| {
                template
                    .split('/')
                    .filter(|t| !t.starts_with('{') && !t.is_empty())
                    .count()
            })
            .map(|(template, item)| (template.as_str(), item))
    }

    /// Follows `$ref`s (local JSON pointers) from the value at `pointer`: the pointer and
    /// value it ends at.
    fn resolve(&self, mut pointer: String) -> Result<(String, &Value), String> {
        for _ in 0..16 {
            let value = self
                .spec
                .pointer(&pointer)
                .ok_or_else(|| format!("the spec has nothing at {pointer}"))?;
            match value.get("$ref").and_then(Value::as_str) {
                Some(target) => {
                    pointer = target
                        .strip_prefix('#')
                        .ok_or_else(|| format!("{target}: only local references are read"))?
                        .to_owned();
                }
                None => return Ok((pointer, value)),
            }
        }
        Err(format!("{pointer}: a reference loop"))
    }

    /// What is wrong with `answer` to `method path` (nothing when it keeps the contract).
    pub fn problems(&self, method: &str, path: &str, answer: &Answer) -> Vec<String> {
        let Some((template, item)) = self.path_item(path) else {
            return self.expect_refusal(answer, 404, "/components/responses/NotFound");
        };
        let Some(operation) = item.get(method.to_ascii_lowercase()) else {
            let mut problems =
                self.expect_refusal(answer, 405, "/components/responses/MethodNotAllowed");
            let declared: BTreeSet<String> = Self::methods(item).into_iter().collect();
            let allowed: BTreeSet<String> = header(answer, "allow")
                .unwrap_or_default()
                .split(',')
                .map(|m| m.trim().to_ascii_uppercase())
                .filter(|m| !m.is_empty())
                .collect();
            if answer.status == 405 && allowed != declared {
                problems.push(format!(
                    "Allow names {allowed:?}, the spec declares {declared:?} for {template}"
                ));
            }
            return problems;
        };
        let responses = &operation["responses"];
        let status = answer.status.to_string();
        let range = format!("{}XX", answer.status / 100);
        let Some(key) = [status.as_str(), range.as_str(), "default"]
            .into_iter()
            .find(|key| responses.get(*key).is_some())
        else {
            let declared: Vec<&String> = responses
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
                .collect();
            return vec![format!(
                "{} {template} does not declare status {} (it declares {declared:?})",
                method.to_ascii_uppercase(),
                answer.status
            )];
        };
        let pointer = format!(
            "/paths/{}/{}/responses/{key}",
            token(template),
            method.to_ascii_lowercase()
        );
        self.check_response(pointer, answer)
    }

    /// A refusal outside any operation (404, 405): its status and the shape of `response`.
    fn expect_refusal(&self, answer: &Answer, status: u16, response: &str) -> Vec<String> {
        if answer.status != status {
            return vec![format!(
                "expected {status} (the path or method is not in the spec), got {}",
                answer.status
            )];
        }
        self.check_response(response.to_owned(), answer)
    }

    /// `answer` against the response object at `pointer`: headers, media type, body.
    fn check_response(&self, pointer: String, answer: &Answer) -> Vec<String> {
        let (pointer, response) = match self.resolve(pointer) {
            Ok(found) => found,
            Err(e) => return vec![e],
        };
        let mut problems = Vec::new();
        for (name, _) in response["headers"].as_object().into_iter().flatten() {
            let at = format!("{pointer}/headers/{}", token(name));
            let (at, declared) = match self.resolve(at) {
                Ok(found) => found,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            match header(answer, name) {
                None if declared["required"] == Value::Bool(true) => {
                    problems.push(format!("the required header {name} is missing"))
                }
                None => {}
                Some(value) => {
                    let schema = format!("{at}/schema");
                    let typed = match self.spec.pointer(&schema).map(|s| &s["type"]) {
                        Some(Value::String(t)) if t == "integer" || t == "number" => {
                            serde_json::from_str::<Value>(value)
                                .ok()
                                .filter(Value::is_number)
                                .unwrap_or_else(|| Value::String(value.to_owned()))
                        }
                        _ => Value::String(value.to_owned()),
                    };
                    for e in self.validate(&schema, &typed) {
                        problems.push(format!("header {name}: {value:?}: {e}"));
                    }
                }
            }
        }
        let content_type = header(answer, "content-type")
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase());
        let Some(content) = response["content"].as_object() else {
            if !answer.body.is_empty() {
                problems.push(format!(
                    "the response declares no content, yet it has a body of {} bytes",
                    answer.body.len()
                ));
            }
            return problems;
        };
        let Some(media_type) = content_type.filter(|ct| content.contains_key(ct)) else {
            problems.push(format!(
                "Content-Type {:?} is none of the declared {:?}",
                header(answer, "content-type"),
                content.keys().collect::<Vec<_>>()
            ));
            return problems;
        };
        let body: Value = match serde_json::from_slice(answer.body) {
            Ok(body) => body,
            Err(e) => {
                problems.push(format!("the body is not JSON: {e}"));
                return problems;
            }
        };
        let schema = format!("{pointer}/content/{}/schema", token(&media_type));
        for e in self.validate(&schema, &body) {
            problems.push(format!("body: {e}"));
        }
        problems.extend(Self::check_error_code(response, &body));
        problems
    }

    /// An error body's `error.code` against the codes its response lists in `x-error-codes`:
    /// the one type every error shares (`ApiError`) allows every code, the response says which
    /// it can carry. A body without `error.code` (API Gateway's own `{"message"}`) is the
    /// schema's to judge.
    fn check_error_code(response: &Value, body: &Value) -> Option<String> {
        let listed = response.get("x-error-codes")?.as_array()?;
        let code = body.pointer("/error/code")?;
        (!listed.contains(code)).then(|| {
            format!("error code {code} is not among this response's x-error-codes {listed:?}")
        })
    }

    /// Every error of `instance` against the schema at `pointer` in the spec.
    fn validate(&self, pointer: &str, instance: &Value) -> Vec<String> {
        let validator = match self.validator(pointer) {
            Ok(validator) => validator,
            Err(e) => return vec![e],
        };
        validator
            .iter_errors(instance)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("at {at}: {e}")
                }
            })
            .collect()
    }

    /// The validator of the schema at `pointer`: the whole document as the root schema, with
    /// a `$ref` to `pointer`, so the schema's own `$ref`s (`#/components/schemas/…`) resolve.
    fn validator(&self, pointer: &str) -> Result<Arc<jsonschema::Validator>, String> {
        let mut cache = self.validators.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(validator) = cache.get(pointer) {
            return Ok(validator.clone());
        }
        if self.spec.pointer(pointer).is_none() {
            return Err(format!("the spec has no schema at {pointer}"));
        }
        let mut root = self.spec.clone();
        // a URI fragment: the braces of path templates are percent-encoded
        let fragment = pointer.replace('{', "%7B").replace('}', "%7D");
        root["$ref"] = Value::String(format!("#{fragment}"));
        let validator = jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(&root)
            .map_err(|e| format!("the schema at {pointer} does not compile: {e}"))?;
        let validator = Arc::new(validator);
        cache.insert(pointer.to_owned(), validator.clone());
        Ok(validator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: u16, code: &str) -> Vec<String> {
        let body = format!(r#"{{"error":{{"code":"{code}","message":"m","fields":[]}}}}"#);
        let answer = Answer {
            status,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-request-id".into(), "r".into()),
            ],
            body: body.as_bytes(),
        };
        contract().problems("POST", "/notifications", &answer)
    }

    #[test]
    fn an_error_code_must_be_one_its_response_lists() {
        assert_eq!(refusal(409, "idempotency_key_reused"), Vec::<String>::new());
        assert_eq!(refusal(401, "unauthorized"), Vec::<String>::new());
        let wrong = refusal(409, "not_found");
        assert!(
            wrong.len() == 1 && wrong[0].contains("x-error-codes"),
            "{wrong:?}"
        );
        assert_eq!(refusal(401, "rate_limited").len(), 1);
    }

    #[test]
    fn every_error_response_lists_its_codes() {
        let spec = &contract().spec;
        let mut unlisted = Vec::new();
        let mut visit = |at: String, response: &Value| {
            let error = response.pointer("/content/application~1json/schema");
            let refs_error = error.is_some_and(|s| s.to_string().contains("/ApiError"));
            if refs_error && response.get("x-error-codes").is_none() {
                unlisted.push(at);
            }
        };
        for (name, response) in spec["components"]["responses"].as_object().unwrap() {
            visit(format!("components/responses/{name}"), response);
        }
        for (path, item) in spec["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for (status, response) in op["responses"].as_object().into_iter().flatten() {
                    visit(format!("{method} {path} {status}"), response);
                }
            }
        }
        assert!(
            unlisted.is_empty(),
            "error responses without x-error-codes: {unlisted:?}"
        );
    }
}
