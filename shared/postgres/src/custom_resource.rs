//! The `Migrations` custom resource: CloudFormation's request, the decision, and the answer.
//!
//! `template.yaml` declares a `Custom::Migrations` resource served by the migrator function,
//! and every other function depends on it: a `sam deploy` that changes the migrator (the
//! migrations are embedded in it) applies the migrations before new code serves.
//!
//! CloudFormation invokes the function asynchronously and then waits for an answer: an HTTPS
//! `PUT` of a small JSON document to the request's presigned S3 `ResponseURL`. Without one the
//! stack waits until the resource's `ServiceTimeout` (an hour unless the template sets less),
//! so [`handle`] answers on every path: a bad setting, an unreachable database, a failing
//! migration or a deadline that comes first are each a `FAILED` answer with the reason. Only
//! an event that is not a custom resource request (no `ResponseURL` to answer) cannot be
//! answered; and when the `PUT` itself fails, the invocation fails, so Lambda's retries of an
//! asynchronous invocation run it again (migrating twice is a no-op).
//!
//! - `Create`, `Update`: apply the embedded migrations up to the resource's `SchemaVersion`
//!   property (the version the deployed code needs) and no further; `SUCCESS` with
//!   `Data.applied`. A database already past that version is left as it is: that is the
//!   `Update` a rolled-back deploy sends, with the previous template's properties, and the
//!   release rolled back to runs on the newer schema (every migration keeps it working).
//! - `Delete`: `SUCCESS` without touching the database. The schema and its rows outlive the
//!   stack; dropping data is not a deploy's job. (A `Create` that failed is followed by a
//!   `Delete` too, which must not fail for the rollback to finish.)

use std::error::Error;
use std::future::Future;
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request as HttpRequest, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;

use crate::db::{ConnectError, DbConfig};
use crate::migrate::{self, MigrateError, MigrateReport};
use notify_core::error::report;

/// The resource's physical id, the same on every answer: a changed id would make
/// CloudFormation treat an `Update` as a replacement and send a `Delete` for the old one.
pub const PHYSICAL_RESOURCE_ID: &str = "notification-service-schema-migrations";

/// Kept free before the function's deadline for the answer (every attempt of the `PUT`).
pub const RESPONSE_RESERVE: Duration = Duration::from_secs(20);

/// CloudFormation refuses an answer over 4096 bytes; the reason is the only long field.
const MAX_REASON_BYTES: usize = 1024;

/// Waits between connection attempts grow to this (a new RDS Proxy target, or a database
/// still starting, takes a while to accept connections).
const MAX_CONNECT_DELAY: Duration = Duration::from_secs(15);

/// One `PUT` attempt may take this long; a failed one is retried after each delay.
const PUT_TIMEOUT: Duration = Duration::from_secs(5);
const PUT_RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(2)];

/// A CloudFormation custom resource request, as the documentation gives it. Unknown fields
/// are ignored; `ResourceProperties` are the template's (all values arrive as strings).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    pub request_type: String,
    #[serde(rename = "ResponseURL")]
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    #[serde(default)]
    pub resource_type: String,
    pub logical_resource_id: String,
    /// Absent on `Create`; on `Update` and `Delete`, what the last answer said.
    #[serde(default)]
    pub physical_resource_id: Option<String>,
    #[serde(default)]
    pub resource_properties: Value,
    /// `Update` only: the properties before the change.
    #[serde(default)]
    pub old_resource_properties: Option<Value>,
}

/// What a request asks of the migrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `Create` and `Update`: apply pending migrations up to this schema version.
    Migrate { to: i32 },
    /// `Delete`: answer without touching the database.
    LeaveAlone,
}

/// The property naming the schema version the deployed code needs.
pub const SCHEMA_VERSION: &str = "SchemaVersion";

/// The decision: by request type, and for `Create` and `Update` the `SchemaVersion` of the
/// properties sent (on a rollback, the previous template's).
pub fn decide(request: &Request) -> Result<Action, MigrationError> {
    match request.request_type.as_str() {
        "Create" | "Update" => {
            let value = &request.resource_properties[SCHEMA_VERSION];
            // CloudFormation sends every property value as a string
            let to = match value {
                Value::String(s) => s.trim().parse::<i32>().ok(),
                Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
                _ => None,
            }
            .filter(|v| *v >= 1)
            .ok_or_else(|| MigrationError::SchemaVersion(value.to_string()))?;
            Ok(Action::Migrate { to })
        }
        "Delete" => Ok(Action::LeaveAlone),
        other => Err(MigrationError::UnknownRequestType(other.to_owned())),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Success,
    Failed,
}

/// The answer CloudFormation reads from the `ResponseURL`, field names as documented.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    pub status: Status,
    /// Shown in the stack's events: what was done, or the whole error chain on one line.
    pub reason: String,
    pub physical_resource_id: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    /// After a migration: `Fn::GetAtt Migrations.applied` and `.already_applied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Data>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Data {
    /// Migrations this request applied.
    pub applied: usize,
    /// Migrations found already applied.
    pub already_applied: usize,
}

/// Why a `Create` or `Update` could not be done.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("RequestType {0:?} is not Create, Update or Delete")]
    UnknownRequestType(String),
    #[error(
        "the resource's SchemaVersion property must be the schema version the deployed code \
         needs (a whole number from 1), not {0}"
    )]
    SchemaVersion(String),
    #[error("cannot read the database settings")]
    Config(#[source] ConnectError),
    #[error(transparent)]
    Connect(ConnectError),
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    #[error(
        "the migrations did not finish within {0:?}, before the function's deadline \
         (raise the migrator's Timeout)"
    )]
    TimedOut(Duration),
}

/// Why no answer could be delivered.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    #[error("the event is not a CloudFormation custom resource request")]
    NotARequest(#[source] serde_json::Error),
    #[error("cannot deliver the answer to CloudFormation")]
    Respond(#[source] RespondError),
}

/// Why the `PUT` to the `ResponseURL` failed. The URL's query is a credential (a presigned
/// signature): errors name the host only.
#[derive(Debug, thiserror::Error)]
pub enum RespondError {
    #[error("cannot load the system's root certificates for HTTPS")]
    Roots(#[source] std::io::Error),
    #[error("the ResponseURL is not a valid URL")]
    InvalidUrl(#[source] hyper::http::uri::InvalidUri),
    #[error("PUT to {host} failed")]
    Transport {
        host: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("PUT to {host} failed while reading the answer")]
    Body {
        host: String,
        #[source]
        source: hyper::Error,
    },
    #[error("PUT to {host} answered {status}: {body}")]
    Status {
        host: String,
        status: StatusCode,
        body: String,
    },
    #[error("PUT to {host} had no answer within {after:?}")]
    TimedOut { host: String, after: Duration },
}

impl RespondError {
    /// Worth another attempt: the network, a timeout, or the server's own trouble (5xx).
    /// A 4xx (an expired or altered signature) will not get better.
    fn is_transient(&self) -> bool {
        match self {
            RespondError::Transport { .. }
            | RespondError::Body { .. }
            | RespondError::TimedOut { .. } => true,
            RespondError::Status { status, .. } => status.is_server_error(),
            RespondError::Roots(_) | RespondError::InvalidUrl(_) => false,
        }
    }
}

/// What the handler needs from the Lambda invocation.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// When Lambda stops the function.
    pub deadline: Instant,
    /// Named in a `FAILED` reason, so the stack's events point at the logs.
    pub log_stream: Option<String>,
}

impl Invocation {
    pub fn from_context(context: &lambda_runtime::Context) -> Self {
        // a context without a deadline (a hand-made one) gets a generous budget
        let remaining = if context.deadline == 0 {
            Duration::from_secs(300)
        } else {
            context
                .deadline()
                .duration_since(SystemTime::now())
                .unwrap_or_default()
        };
        Self {
            deadline: Instant::now() + remaining,
            log_stream: Some(context.env_config.log_stream.clone()).filter(|s| !s.is_empty()),
        }
    }
}

/// Handles one request: decides, migrates if asked (through `migrate`, given the instant
/// to give up by), answers at the `ResponseURL` and returns the answer it delivered.
///
/// `migrate` is the port to the database, so a `Delete` provably never calls it, and the
/// tests can hand in any database.
pub async fn handle<M, F>(
    payload: Value,
    invocation: &Invocation,
    responder: &Responder,
    migrate: M,
) -> Result<Response, HandleError>
where
    M: FnOnce(i32, Instant) -> F,
    F: Future<Output = Result<MigrateReport, MigrationError>>,
{
    let request: Request = serde_json::from_value(payload).map_err(HandleError::NotARequest)?;
    tracing::info!(
        request_type = %request.request_type,
        stack_id = %request.stack_id,
        request_id = %request.request_id,
        logical_resource_id = %request.logical_resource_id,
        "custom resource request"
    );
    let started = Instant::now();
    let done = match decide(&request) {
        Err(err) => Err(err),
        Ok(Action::LeaveAlone) => Ok(None),
        Ok(Action::Migrate { to }) => {
            let give_up_at = invocation
                .deadline
                .checked_sub(RESPONSE_RESERVE)
                .unwrap_or(started)
                .max(started);
            match tokio::time::timeout_at(give_up_at, migrate(to, give_up_at)).await {
                Ok(result) => result.map(|report| Some((to, report))),
                Err(_) => Err(MigrationError::TimedOut(started.elapsed())),
            }
        }
    };
    let response = match &done {
        Ok(report) => answer(
            &request,
            Ok(report.as_ref().map(|(to, report)| (*to, report))),
            invocation.log_stream.as_deref(),
        ),
        Err(err) => {
            tracing::error!(error = %report(err), "custom resource request failed");
            answer(&request, Err(err), invocation.log_stream.as_deref())
        }
    };
    responder
        .send(&request.response_url, &response)
        .await
        .map_err(HandleError::Respond)?;
    tracing::info!(status = ?response.status, reason = %response.reason, "answered CloudFormation");
    Ok(response)
}

/// The answer to `request` given what was done: `Ok(Some((version, report)))` after
/// migrating to `version`, `Ok(None)` when there was nothing to do, `Err` with why it failed.
pub fn answer(
    request: &Request,
    done: Result<Option<(i32, &MigrateReport)>, &(dyn Error + 'static)>,
    log_stream: Option<&str>,
) -> Response {
    let (status, reason, data) = match done {
        Ok(Some((to, report))) => (
            Status::Success,
            if report.schema_version > to {
                format!(
                    "schema version {to} asked for; the database is at version {}, ahead of \
                     it, and is left as it is (a migration is never undone: the release that \
                     needs {to} runs on it)",
                    report.schema_version
                )
            } else {
                format!(
                    "applied {} migration(s), {} already applied: schema version {}",
                    report.applied.len(),
                    report.already_applied,
                    report.schema_version
                )
            },
            Some(Data {
                applied: report.applied.len(),
                already_applied: report.already_applied,
            }),
        ),
        Ok(None) => (
            Status::Success,
            format!(
                "{}: nothing to do; the database and its schema are kept",
                request.request_type
            ),
            None,
        ),
        Err(err) => {
            let chain = report(err);
            let reason = match log_stream {
                Some(stream) => format!("{chain} (log stream {stream})"),
                None => chain,
            };
            (Status::Failed, reason, None)
        }
    };
    Response {
        status,
        reason: shorten(&reason, MAX_REASON_BYTES),
        physical_resource_id: request
            .physical_resource_id
            .clone()
            .unwrap_or_else(|| PHYSICAL_RESOURCE_ID.to_owned()),
        stack_id: request.stack_id.clone(),
        request_id: request.request_id.clone(),
        logical_resource_id: request.logical_resource_id.clone(),
        data,
    }
}

/// At most `max` bytes, cut at a character boundary, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Connects with `db` and applies the embedded migrations up to version `to`. A connection
/// that is refused or
/// not answered is tried again, with growing waits, until `give_up_at`: a new RDS Proxy
/// target or a database still starting needs a while. Refused credentials are not retried
/// (`connect` has already read the secret again).
pub async fn apply_migrations(
    db: Result<DbConfig, ConnectError>,
    to: i32,
    give_up_at: Instant,
) -> Result<MigrateReport, MigrationError> {
    apply_migration_files(db, migrate::MIGRATIONS, to, give_up_at).await
}

/// [`apply_migrations`] with a given set of files (the tests add later ones).
pub async fn apply_migration_files(
    db: Result<DbConfig, ConnectError>,
    files: &[(&'static str, &'static str)],
    to: i32,
    give_up_at: Instant,
) -> Result<MigrateReport, MigrationError> {
    let db = db.map_err(MigrationError::Config)?;
    let mut delay = Duration::from_secs(1);
    let mut client = loop {
        match db.connect().await {
            Ok(client) => break client,
            Err(err) if !err.is_auth_failure() && Instant::now() + delay < give_up_at => {
                tracing::warn!(error = %report(&err), retry_in = ?delay, "database not reachable yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_CONNECT_DELAY);
            }
            Err(err) => return Err(MigrationError::Connect(err)),
        }
    };
    Ok(migrate::run_files_to(&mut client, files, to).await?)
}

/// Delivers answers: an HTTP/1.1 `PUT` over rustls with the system's root certificates.
/// Plain `http://` is accepted too, for a local stand-in of the presigned URL.
#[derive(Clone)]
pub struct Responder {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Responder {
    pub fn new() -> Result<Self, RespondError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())
            .map_err(RespondError::Roots)?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// `PUT`s the answer, retrying a transient failure twice.
    pub async fn send(&self, url: &str, response: &Response) -> Result<(), RespondError> {
        let uri: Uri = url.parse().map_err(RespondError::InvalidUrl)?;
        let body = Bytes::from(serde_json::to_vec(response).expect("a Response always serialises"));
        let mut delays = PUT_RETRY_DELAYS.iter();
        loop {
            match self.put(&uri, body.clone()).await {
                Ok(()) => return Ok(()),
                Err(err) if err.is_transient() => match delays.next() {
                    Some(delay) => {
                        tracing::warn!(error = %report(&err), retry_in = ?delay, "answer not delivered");
                        tokio::time::sleep(*delay).await;
                    }
                    None => return Err(err),
                },
                Err(err) => return Err(err),
            }
        }
    }

    async fn put(&self, uri: &Uri, body: Bytes) -> Result<(), RespondError> {
        let host = uri.host().unwrap_or("(no host)").to_owned();
        // The presigned URL was signed without a content type: S3 refuses one that differs.
        let request = HttpRequest::builder()
            .method(Method::PUT)
            .uri(uri.clone())
            .header(CONTENT_TYPE, "")
            .header(CONTENT_LENGTH, body.len())
            .body(Full::new(body))
            .expect("a PUT with a parsed URI and constant headers is a valid request");
        let attempt =
            async {
                let answer = self.client.request(request).await.map_err(|source| {
                    RespondError::Transport {
                        host: host.clone(),
                        source,
                    }
                })?;
                let status = answer.status();
                let bytes = answer
                    .into_body()
                    .collect()
                    .await
                    .map_err(|source| RespondError::Body {
                        host: host.clone(),
                        source,
                    })?
                    .to_bytes();
                if status.is_success() {
                    Ok(())
                } else {
                    Err(RespondError::Status {
                        host: host.clone(),
                        status,
                        body: shorten(&String::from_utf8_lossy(&bytes), 300),
                    })
                }
            };
        match tokio::time::timeout(PUT_TIMEOUT, attempt).await {
            Ok(result) => result,
            Err(_) => Err(RespondError::TimedOut {
                host,
                after: PUT_TIMEOUT,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(request_type: &str, physical: Option<&str>) -> Request {
        Request {
            request_type: request_type.into(),
            response_url: "https://example.com/r?X-Amz-Signature=x".into(),
            stack_id: "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1".into(),
            request_id: "r-1".into(),
            resource_type: "Custom::Migrations".into(),
            logical_resource_id: "Migrations".into(),
            physical_resource_id: physical.map(str::to_owned),
            resource_properties: Value::Null,
            old_resource_properties: None,
        }
    }

    fn with_version(mut request: Request, version: Value) -> Request {
        request.resource_properties = serde_json::json!({ SCHEMA_VERSION: version });
        request
    }

    #[test]
    fn create_and_update_migrate_to_their_schema_version_delete_leaves_the_database_alone() {
        let decided = |kind: &str, version: Value| {
            decide(&with_version(request(kind, None), version)).map_err(|e| e.to_string())
        };
        assert_eq!(decided("Create", "3".into()), Ok(Action::Migrate { to: 3 }));
        assert_eq!(
            decided("Update", "12".into()),
            Ok(Action::Migrate { to: 12 })
        );
        assert_eq!(decided("Update", 4.into()), Ok(Action::Migrate { to: 4 }));
        assert_eq!(decided("Delete", Value::Null), Ok(Action::LeaveAlone));
        for bad in [
            Value::Null,
            "".into(),
            "0".into(),
            "three".into(),
            "-1".into(),
        ] {
            let err = decided("Create", bad.clone()).unwrap_err();
            assert!(err.contains("SchemaVersion"), "{bad}: {err}");
        }
        for kind in ["delete", ""] {
            let err = decided(kind, "3".into()).unwrap_err();
            assert!(err.contains("is not Create, Update or Delete"), "{err}");
        }
    }

    #[test]
    fn a_create_gets_the_stable_physical_id_and_an_update_keeps_the_one_it_had() {
        let report = MigrateReport::default();
        let created = answer(&request("Create", None), Ok(Some((3, &report))), None);
        assert_eq!(created.physical_resource_id, PHYSICAL_RESOURCE_ID);
        let updated = answer(
            &request("Update", Some("earlier-id")),
            Ok(Some((3, &report))),
            None,
        );
        assert_eq!(updated.physical_resource_id, "earlier-id");
    }

    #[test]
    fn the_answer_has_the_documented_field_names() {
        let report = MigrateReport {
            applied: vec!["0004_a.sql".into(), "0005_b.sql".into()],
            already_applied: 3,
            schema_version: 5,
        };
        let body = serde_json::to_value(answer(
            &request("Create", None),
            Ok(Some((5, &report))),
            None,
        ))
        .unwrap();
        assert_eq!(body["Status"], "SUCCESS");
        assert_eq!(body["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
        assert_eq!(
            body["StackId"],
            "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1"
        );
        assert_eq!(body["RequestId"], "r-1");
        assert_eq!(body["LogicalResourceId"], "Migrations");
        assert_eq!(
            body["Data"],
            serde_json::json!({"applied": 2, "already_applied": 3})
        );
        assert!(body["Reason"].as_str().unwrap().contains("applied 2"));
        assert!(
            body["Reason"]
                .as_str()
                .unwrap()
                .contains("schema version 5")
        );
    }

    #[test]
    fn a_database_ahead_of_the_version_asked_for_is_said_to_be_left_as_it_is() {
        let report = MigrateReport {
            applied: vec![],
            already_applied: 3,
            schema_version: 4,
        };
        let rollback = answer(&request("Update", Some("p")), Ok(Some((3, &report))), None);
        assert_eq!(rollback.status, Status::Success);
        assert!(
            rollback.reason.contains("at version 4, ahead of it"),
            "{}",
            rollback.reason
        );
    }

    #[test]
    fn a_failure_reason_is_the_whole_chain_on_one_line_and_short() {
        let err = MigrationError::Config(ConnectError::MissingUrl);
        let failed = answer(
            &request("Update", Some("p")),
            Err(&err),
            Some("2025/01/01/[$LATEST]abc"),
        );
        assert_eq!(failed.status, Status::Failed);
        assert!(
            failed
                .reason
                .starts_with("cannot read the database settings: DATABASE_URL is not set"),
            "{}",
            failed.reason
        );
        assert!(
            failed
                .reason
                .ends_with("(log stream 2025/01/01/[$LATEST]abc)"),
            "{}",
            failed.reason
        );
        assert_eq!(failed.data, None);

        let long = MigrationError::UnknownRequestType("é".repeat(2000));
        let failed = answer(&request("x", None), Err(&long), None);
        assert!(
            failed.reason.len() <= MAX_REASON_BYTES,
            "{}",
            failed.reason.len()
        );
        assert!(failed.reason.ends_with('…'));
        let whole = serde_json::to_vec(&failed).unwrap();
        assert!(
            whole.len() < 4096,
            "CloudFormation refuses answers over 4096 bytes"
        );
    }
}
