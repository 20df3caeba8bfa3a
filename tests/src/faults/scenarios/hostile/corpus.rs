//! The hostile-input corpus as a table: each case a name, the API Gateway event, and the
//! answer expected. Cases that carry something hostile in a header pair it with a body that
//! is refused anyway, so the header alone can never be what gets a request accepted.

use std::fmt;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::apigw::{ApiRequest, Version};

/// The answer a case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Exactly this status.
    Status(u16),
}

impl Expect {
    pub fn allows(&self, status: u16) -> bool {
        match self {
            Expect::Status(want) => status == *want,
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Status(want) => write!(f, "{want}"),
        }
    }
}

/// Invalid JSON or fields.
const INVALID: Expect = Expect::Status(400);
/// No organization.
const UNAUTHORIZED: Expect = Expect::Status(401);
const NOT_FOUND: Expect = Expect::Status(404);
const METHOD_NOT_ALLOWED: Expect = Expect::Status(405);
const TOO_LARGE: Expect = Expect::Status(413);
const NOT_JSON: Expect = Expect::Status(415);

/// One row of the corpus.
pub struct Case {
    pub name: String,
    /// The API Gateway (HTTP API, payload 2.0) event.
    pub request: Value,
    pub expect: Expect,
}

fn case(name: impl Into<String>, request: Value, expect: Expect) -> Case {
    Case {
        name: name.into(),
        request,
        expect,
    }
}

/// A body the ingest refuses (the recipient is not a phone number).
const REFUSED: &str = r#"{"channel":"sms","to":"not a number","message":"x"}"#;

/// Requests of one organization.
struct Kit {
    org: String,
    valid: Value,
}

impl Kit {
    /// A valid request.
    fn ok(&self) -> ApiRequest {
        ApiRequest::post(Version::V2, &self.valid).org(&self.org)
    }

    /// A POST with this body.
    fn post(&self, body: &str) -> ApiRequest {
        self.ok().body(body.to_owned())
    }

    /// A valid request's event, edited.
    fn edited(&self, edit: impl FnOnce(&mut Value)) -> Value {
        let mut event = self.ok().event();
        edit(&mut event);
        event
    }

    fn on(&self, method: &str, path: &str) -> ApiRequest {
        ApiRequest::new(Version::V2, method, path)
            .org(&self.org)
            .body(self.valid.to_string())
    }
}

/// The whole corpus.
pub fn corpus() -> Vec<Case> {
    let kit = Kit {
        org: Uuid::new_v4().to_string(),
        valid: json!({"channel": "sms", "to": "+15555550100", "message": "hello"}),
    };
    [
        headers(&kit),
        nesting(&kit),
        nul_bytes(&kit),
        encodings(&kit),
        sql(&kit),
        methods(&kit),
        content_types(&kit),
        bodies(&kit),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Oversized headers, NUL bytes and CR LF in headers.
fn headers(kit: &Kit) -> Vec<Case> {
    let mut many = kit.post(REFUSED);
    for i in 0..500 {
        many = many.header(&format!("x-h{i}"), &"b".repeat(1000));
    }
    let big_type = format!("application/json{}", " ".repeat(65536));
    vec![
        case(
            "one 64 KiB header",
            kit.post(REFUSED)
                .header("x-big", &"a".repeat(64 * 1024))
                .event(),
            INVALID,
        ),
        case("500 headers of 1 KB", many.event(), INVALID),
        case(
            "64 KiB Idempotency-Key",
            kit.ok()
                .header("idempotency-key", &"k".repeat(64 * 1024))
                .event(),
            INVALID,
        ),
        case(
            "64 KiB Content-Type",
            kit.post(REFUSED).header("content-type", &big_type).event(),
            INVALID,
        ),
        case(
            "NUL byte in a header value",
            kit.edited(|e| {
                e["headers"]["x-nul"] = json!("a\u{0}b");
                e["body"] = json!(REFUSED);
            }),
            INVALID,
        ),
        case(
            "NUL byte in Idempotency-Key",
            kit.edited(|e| e["headers"]["idempotency-key"] = json!("key\u{0}")),
            INVALID,
        ),
        case(
            "CR LF in a header name",
            kit.edited(|e| {
                e["headers"]["bad header\r\nx"] = json!("v");
                e["body"] = json!(REFUSED);
            }),
            INVALID,
        ),
        case(
            "CR LF in Content-Type",
            kit.edited(|e| {
                e["headers"]["content-type"] = json!("application/json\r\nx-injected: 1")
            }),
            INVALID,
        ),
    ]
}

/// Deeply nested JSON, in the body and in fields.
fn nesting(kit: &Kit) -> Vec<Case> {
    let objects = format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    let in_field = format!(
        r#"{{"channel":"sms","to":"+15555550100","message":{}1{}}}"#,
        "[".repeat(5_000),
        "]".repeat(5_000)
    );
    let as_attempts = format!(
        r#"{{"channel":"sms","to":"+15555550100","message":"m","max_attempts":{}1{}}}"#,
        "{\"a\":".repeat(120),
        "}".repeat(120)
    );
    vec![
        case(
            "100 000 nested arrays (past the size limit)",
            kit.post(&"[".repeat(100_000)).event(),
            TOO_LARGE,
        ),
        case("10 000 nested objects", kit.post(&objects).event(), INVALID),
        case(
            "nested arrays in a field",
            kit.post(&in_field).event(),
            INVALID,
        ),
        case(
            "nested object as max_attempts",
            kit.post(&as_attempts).event(),
            INVALID,
        ),
    ]
}

/// NUL bytes, raw and escaped, in every kind of field.
fn nul_bytes(kit: &Kit) -> Vec<Case> {
    [
        (
            "raw NUL in the body",
            "{\"channel\":\"sms\",\"to\":\"+15555550100\",\"message\":\"a\u{0}b\"}",
        ),
        (
            "escaped \\u0000 in the message",
            r#"{"channel":"sms","to":"+15555550100","message":"a\u0000b"}"#,
        ),
        (
            "escaped \\u0000 in an email subject",
            r#"{"channel":"email","to":"a@example.com","subject":"s\u0000","text":"t"}"#,
        ),
        (
            "escaped \\u0000 in an unknown field",
            r#"{"channel":"sms","to":"+15555550100","message":"m","x\u0000":"\u0000"}"#,
        ),
        (
            "escaped \\u0000 in the recipient",
            r#"{"channel":"sms","to":"+1555555\u00000100","message":"m"}"#,
        ),
        ("only NUL bytes", "\u{0}\u{0}\u{0}\u{0}"),
    ]
    .into_iter()
    .map(|(name, body)| case(name, kit.post(body).event(), INVALID))
    .collect()
}

/// Overlong and invalid UTF-8 (binary bodies travel base64-encoded), lone surrogates,
/// look-alike characters, a body that is not base64.
fn encodings(kit: &Kit) -> Vec<Case> {
    let mut cases: Vec<Case> = [
        ("overlong '/' (C0 AF)", &[0xC0, 0xAF][..]),
        ("overlong '/' (E0 80 AF)", &[0xE0, 0x80, 0xAF]),
        ("overlong '/' (F0 80 80 AF)", &[0xF0, 0x80, 0x80, 0xAF]),
        ("overlong NUL (C0 80)", &[0xC0, 0x80]),
        ("UTF-16 surrogate (ED A0 80)", &[0xED, 0xA0, 0x80]),
        ("bytes FE FF", &[0xFE, 0xFF]),
    ]
    .into_iter()
    .map(|(name, bytes)| {
        let mut body = br#"{"channel":"sms","to":"+15555550100","message":"x"#.to_vec();
        body.extend_from_slice(bytes);
        body.extend_from_slice(br#""}"#);
        case(
            format!("{name} in the message"),
            kit.ok().body(body).event(),
            INVALID,
        )
    })
    .collect();
    let rtl = "{\"channel\":\"email\",\"to\":\"a\u{202e}moc.elpmaxe@b\",\"subject\":\"s\",\"text\":\"t\"}";
    cases.extend([
        case(
            "lone surrogate escape",
            kit.post(r#"{"channel":"sms","to":"+15555550100","message":"\ud800"}"#)
                .event(),
            INVALID,
        ),
        case(
            "fullwidth digits in the number",
            kit.post(r#"{"channel":"sms","to":"+１５５５５５５０１００","message":"m"}"#)
                .event(),
            INVALID,
        ),
        case(
            "right-to-left override in an address",
            kit.post(rtl).event(),
            INVALID,
        ),
        case(
            "invalid base64 body",
            kit.edited(|e| {
                e["isBase64Encoded"] = json!(true);
                e["body"] = json!("%%% not base64 %%%");
            }),
            INVALID,
        ),
    ]);
    cases
}

/// SQL-looking strings in every field that is checked, the path and the organization.
fn sql(kit: &Kit) -> Vec<Case> {
    let mut cases: Vec<Case> = [
        (
            "SQL in the recipient",
            r#"{"channel":"sms","to":"'; DROP TABLE notification_jobs; --","message":"m"}"#,
        ),
        (
            "SQL in the channel",
            r#"{"channel":"sms' OR '1'='1","to":"+15555550100","message":"m"}"#,
        ),
        (
            "SQL in send_at",
            r#"{"channel":"sms","to":"+15555550100","message":"m","send_at":"now()); DELETE FROM notification_jobs; --"}"#,
        ),
        (
            "SQL in max_attempts",
            r#"{"channel":"sms","to":"+15555550100","message":"m","max_attempts":"1; DROP TABLE x"}"#,
        ),
        (
            "SQL in an email address",
            r#"{"channel":"email","to":"x@example.com' OR 1=1 --","subject":"s","text":"t"}"#,
        ),
    ]
    .into_iter()
    .map(|(name, body)| case(name, kit.post(body).event(), INVALID))
    .collect();
    let header_only = ApiRequest::post(Version::V2, &kit.valid).header(
        "x-organization-id",
        "00000000-0000-0000-0000-000000000000' OR '1'='1",
    );
    cases.extend([
        case(
            "SQL in the Idempotency-Key (body refused)",
            kit.post(REFUSED)
                .header("idempotency-key", "'OR'1'='1';--")
                .event(),
            INVALID,
        ),
        case(
            "SQL in the path id",
            ApiRequest::get(Version::V2, "1'%20OR%20'1'='1")
                .org(&kit.org)
                .event(),
            INVALID,
        ),
        case(
            "SQL in the organization claim",
            kit.ok().org("' OR 1=1 --").event(),
            UNAUTHORIZED,
        ),
        case(
            "SQL in X-Organization-Id without a claim",
            header_only.event(),
            UNAUTHORIZED,
        ),
    ]);
    cases
}

/// Methods the routes do not take, a method with a space, path traversal, a 10 KB path.
fn methods(kit: &Kit) -> Vec<Case> {
    let job = format!("/notifications/{}", Uuid::new_v4());
    let mut cases: Vec<Case> = [
        "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT", "FOO",
    ]
    .into_iter()
    .map(|m| {
        case(
            format!("{m} /notifications"),
            kit.on(m, "/notifications").event(),
            METHOD_NOT_ALLOWED,
        )
    })
    .collect();
    cases.extend(["POST", "PUT", "DELETE"].into_iter().map(|m| {
        case(
            format!("{m} /notifications/{{id}}"),
            kit.on(m, &job).event(),
            METHOD_NOT_ALLOWED,
        )
    }));
    let long_path = format!("/notifications/{}", "a".repeat(10_000));
    cases.extend([
        case(
            "a method with a space",
            kit.edited(|e| e["requestContext"]["http"]["method"] = json!("GE T")),
            INVALID,
        ),
        case(
            "path traversal",
            kit.on("POST", "/notifications/../admin").event(),
            NOT_FOUND,
        ),
        case("10 KB path", kit.on("GET", &long_path).event(), INVALID),
    ]);
    cases
}

/// Content types other than JSON, with a valid body, and none at all.
fn content_types(kit: &Kit) -> Vec<Case> {
    let mut cases: Vec<Case> = [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/jsonx",
        "json",
        "",
    ]
    .into_iter()
    .map(|ct| {
        case(
            format!("Content-Type {ct:?}"),
            kit.ok().header("content-type", ct).event(),
            NOT_JSON,
        )
    })
    .collect();
    cases.push(case(
        "no Content-Type",
        kit.ok().without_header("content-type").event(),
        NOT_JSON,
    ));
    cases
}

/// Bodies that are not an object, or too large, or out of range.
fn bodies(kit: &Kit) -> Vec<Case> {
    let mut cases: Vec<Case> = ["", "null", "[]", "\"str\"", "1e999", "{", "{}"]
        .into_iter()
        .map(|body| case(format!("body {body:?}"), kit.post(body).event(), INVALID))
        .collect();
    let huge = format!(
        r#"{{"channel":"sms","to":"+15555550100","message":"{}"}}"#,
        "m".repeat(1 << 20)
    );
    cases.extend([
        case("1 MiB body", kit.post(&huge).event(), TOO_LARGE),
        case(
            "huge max_attempts",
            kit.post(r#"{"channel":"sms","to":"+15555550100","message":"m","max_attempts":1e400}"#)
                .event(),
            INVALID,
        ),
        case(
            "send_at far in the future",
            kit.post(r#"{"channel":"sms","to":"+15555550100","message":"m","send_at":"+275760-09-13T00:00:00Z"}"#)
                .event(),
            INVALID,
        ),
    ]);
    cases
}
