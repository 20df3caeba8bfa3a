//! The ingest API behind API Gateway: `/notifications` (send, batch, read, list, cancel,
//! requeue), the organization's suppression list (`/suppressions`) and its webhook endpoints
//! (`/webhooks`).
//!
//! The handler validates, persists and answers; it never calls a provider. Every answer
//! is either "accepted and persisted" or a refusal that wrote nothing, in one JSON error
//! shape: `{"error":{"code","message","fields":[{"field","message"}]}}`.

pub mod auth;
pub mod batch;
pub mod error;
pub mod event;
mod http;
mod listing;
mod metrics;
pub mod requeue;
pub mod suppressions;
pub mod trace;
pub mod validate;
pub mod webhooks;

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use lambda_http::http::{StatusCode, header};
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Serialize;
use uuid::Uuid;

pub use error::ApiError;
pub(crate) use http::valid_key;
use http::{Route, idempotency_key, json_body, organization, parse_id, request_id, route};
use notify_core::config::{self, ConfigError};
use notify_core::fleet::{WakeReason, Waker};
use notify_core::store::{
    CountIngest, Inserted, JobSummary, ListCursor, NewJob, Store, Transition,
};
pub use validate::{FieldError, SendRequest, validate};

/// Bodies above this size are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// A batch's body may be larger: up to [`batch::MAX_ITEMS`] notifications.
pub const MAX_BATCH_BODY_BYTES: usize = 1024 * 1024;
/// Seconds a client is told to wait when the database is unavailable.
pub const RETRY_AFTER_SECS: u32 = 5;

/// The ingest function's settings.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Also honour an `X-Organization-Id` header. For local use only: never in production.
    pub allow_org_header: bool,
    /// Requests (single or batch) an organization may make per minute; 0 = no limit.
    pub rate_limit_per_min: u32,
    /// A job without `expires_at` expires this long after `send_at` (`JOB_MAX_AGE_SECS`).
    pub max_age: std::time::Duration,
    /// Accept webhook URLs with `http://` and private, loopback or link-local addresses
    /// (`WEBHOOK_ALLOW_PRIVATE_ADDRESSES`). For local use only: never in production.
    pub webhook_allow_private: bool,
}

/// The default `JOB_MAX_AGE_SECS`: a day.
pub const DEFAULT_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            allow_org_header: false,
            rate_limit_per_min: 0,
            max_age: DEFAULT_MAX_AGE,
            webhook_allow_private: false,
        }
    }
}

impl IngestConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&config::Vars::process())
    }

    /// Reads `ALLOW_ORG_HEADER`, `INGEST_RATE_LIMIT_PER_ORG_PER_MIN`, `JOB_MAX_AGE_SECS` and
    /// `WEBHOOK_ALLOW_PRIVATE_ADDRESSES`.
    pub fn from_lookup(vars: &config::Vars) -> Result<Self, ConfigError> {
        Ok(Self {
            allow_org_header: vars.flag("ALLOW_ORG_HEADER", false)?,
            rate_limit_per_min: vars.parse_or(
                "INGEST_RATE_LIMIT_PER_ORG_PER_MIN",
                0u32,
                0..=1_000_000,
            )?,
            max_age: std::time::Duration::from_secs(vars.parse_or(
                "JOB_MAX_AGE_SECS",
                DEFAULT_MAX_AGE.as_secs(),
                60..=30 * 86_400,
            )?),
            webhook_allow_private: vars.flag("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", false)?,
        })
    }
}

/// What a route answers: the status, the JSON body and the job it concerns, or a refusal.
type Answer = Result<(StatusCode, serde_json::Value, Option<Uuid>), ApiError>;

/// What one request produced: the response and what the access log records.
struct Outcome {
    response: Answer,
    organization_id: Option<Uuid>,
    route: &'static str,
    /// `RateLimit-*` headers, when ingest is rate-limited.
    rate_limit: Option<RateLimitHeaders>,
}

/// The IETF `RateLimit-*` fields for one organization's current window.
#[derive(Debug, Clone, Copy)]
struct RateLimitHeaders {
    limit: u32,
    remaining: u32,
    reset_secs: u32,
    /// This request went past the limit.
    over: bool,
}

/// The ingest service: holds the store port, answers API Gateway requests.
pub struct Ingest {
    store: Arc<dyn Store>,
    config: IngestConfig,
    /// Starts a worker after a commit that made a job due now (`WORKER_FUNCTION_NAME`);
    /// `None`: the schedule alone does.
    waker: Option<Waker>,
}

impl Ingest {
    pub fn new(store: Arc<dyn Store>, config: IngestConfig) -> Self {
        Self {
            store,
            config,
            waker: None,
        }
    }

    /// Wakes the worker after every commit that makes a job due now (accepted, or
    /// requeued): at most one wake while none runs, never failing the request, and waiting
    /// on Lambda at most briefly ([`notify_core::fleet::Waker::wake`]).
    pub fn with_waker(mut self, waker: Waker) -> Self {
        self.waker = Some(waker);
        self
    }

    /// After the commit that made a job due now.
    async fn wake(&self, reason: WakeReason) {
        if let Some(waker) = &self.waker {
            waker.wake(reason).await;
        }
    }

    /// Answers one request. Never fails: every problem becomes an HTTP answer.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        let started = Instant::now();
        let request_id = request_id(&req);
        let outcome = self.dispatch(&req).await;
        let (status, body, job_id) = match &outcome.response {
            Ok((status, body, job_id)) => (*status, body.clone(), *job_id),
            Err(err) => (err.status, err.body(), None),
        };
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        tracing::info!(
            request_id = %request_id,
            method = %req.method(),
            route = outcome.route,
            status = status.as_u16(),
            organization_id = outcome.organization_id.map(|o| o.to_string()),
            job_id = job_id.map(|j| j.to_string()),
            error_code = outcome.response.as_ref().err().map(|e| e.code),
            latency_ms,
            "request"
        );
        // one Embedded Metric Format line per request: accepted and refused counts
        println!(
            "{}",
            metrics::line(
                outcome.route,
                status,
                &body,
                outcome.response.as_ref().err().map(|e| e.code),
                Utc::now().timestamp_millis()
            )
        );
        let no_content = status == StatusCode::NO_CONTENT;
        let mut builder = Response::builder()
            .status(status)
            .header("x-request-id", request_id);
        if !no_content {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        if status == StatusCode::ACCEPTED
            && let Some(id) = job_id
        {
            builder = builder.header(header::LOCATION, format!("/notifications/{id}"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            builder = builder.header(header::RETRY_AFTER, RETRY_AFTER_SECS);
        }
        if let Some(limit) = outcome.rate_limit {
            builder = builder
                .header("ratelimit-limit", limit.limit)
                .header("ratelimit-remaining", limit.remaining)
                .header("ratelimit-reset", limit.reset_secs);
            if status == StatusCode::TOO_MANY_REQUESTS {
                builder = builder.header(header::RETRY_AFTER, limit.reset_secs);
            }
        }
        if let Some(allow) = outcome.response.as_ref().err().and_then(|e| e.allow) {
            builder = builder.header(header::ALLOW, allow);
        }
        let body = if no_content {
            Body::Empty
        } else {
            Body::Text(body.to_string())
        };
        builder
            .body(body)
            .unwrap_or_else(|_| Response::new(Body::Empty))
    }

    async fn dispatch(&self, req: &Request) -> Outcome {
        let mut outcome = Outcome {
            response: Ok((StatusCode::OK, serde_json::Value::Null, None)),
            organization_id: None,
            route: "unknown",
            rate_limit: None,
        };
        outcome.response = self.serve(req, &mut outcome).await;
        outcome
    }

    /// Routes, authorizes, rate-limits and runs one request, noting in `seen` what the
    /// access log records as it learns it.
    async fn serve(&self, req: &Request, seen: &mut Outcome) -> Answer {
        let (route, route_name) = route(req)?;
        seen.route = route_name;
        let organization_id = organization(req, self.config.allow_org_header)?;
        seen.organization_id = Some(organization_id);
        if matches!(route, Route::Create | Route::Batch) && self.config.rate_limit_per_min > 0 {
            let limit = self.count_request(organization_id).await?;
            seen.rate_limit = Some(limit);
            if limit.over {
                return Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!(
                        "more than {} requests this minute for this organization; retry in {} s",
                        limit.limit, limit.reset_secs
                    ),
                ));
            }
        }
        match route {
            Route::Create => self.create(req, organization_id).await,
            Route::Batch => self.batch(req, organization_id).await,
            Route::List => self.list(req, organization_id).await,
            Route::Get(id) => self.get(organization_id, &id).await,
            Route::Cancel(id) => self.transition(organization_id, &id, Change::Cancel).await,
            Route::Requeue(id) => self.transition(organization_id, &id, Change::Requeue).await,
            Route::RequeueDead => self.requeue_dead(req, organization_id).await,
            Route::ListSuppressions => self.list_suppressions(req, organization_id).await,
            Route::AddSuppression => self.add_suppression(req, organization_id).await,
            Route::RemoveSuppression(recipient) => {
                self.remove_suppression(organization_id, &recipient).await
            }
            Route::CreateWebhook => self.create_webhook(req, organization_id).await,
            Route::ListWebhooks => self.list_webhooks(organization_id).await,
            Route::GetWebhook(id) => self.get_webhook(organization_id, &id).await,
            Route::DeleteWebhook(id) => self.delete_webhook(organization_id, &id).await,
            Route::RotateWebhookSecret(id) => {
                self.rotate_webhook_secret(organization_id, &id).await
            }
            Route::ListWebhookAttempts(id) => {
                self.list_webhook_attempts(req, organization_id, &id).await
            }
        }
    }

    /// Counts this request in the organization's window.
    async fn count_request(&self, organization_id: Uuid) -> Result<RateLimitHeaders, ApiError> {
        let window = self
            .store
            .count_ingest(CountIngest {
                organization_id,
                requests: 1,
                now: None,
            })
            .await?;
        let limit = self.config.rate_limit_per_min;
        Ok(RateLimitHeaders {
            limit,
            remaining: limit.saturating_sub(window.used),
            reset_secs: window.resets_in_secs,
            over: window.used > limit,
        })
    }

    /// `POST /notifications`. A suppressed recipient is refused by the insert statement
    /// itself, so the refusal writes nothing; that includes the replay of a request accepted
    /// before the recipient was suppressed (its job ends `dead`, `suppressed`, when claimed).
    async fn create(&self, req: &Request, organization_id: Uuid) -> Answer {
        let body = json_body(req, MAX_BODY_BYTES)?;
        let key = idempotency_key(req.headers())?;
        let job = NewJob {
            trace_header: crate::trace::trace_header(req),
            ..validate(&body, Utc::now())
                .map_err(ApiError::invalid)?
                .into_job(organization_id, key, self.config.max_age)
        };
        let inserted = self.store.insert(&job).await?;
        match inserted {
            Inserted::Created(summary) => {
                if due_now(&summary) {
                    self.wake(WakeReason::Accepted).await;
                }
                Ok((
                    StatusCode::ACCEPTED,
                    summary_body(&summary),
                    Some(summary.id),
                ))
            }
            Inserted::Existing(summary) => {
                Ok((StatusCode::OK, summary_body(&summary), Some(summary.id)))
            }
            Inserted::KeyReused => Err(ApiError::new(
                StatusCode::CONFLICT,
                "idempotency_key_reused",
                "this Idempotency-Key was already used with a different request",
            )),
            Inserted::Suppressed => Err(suppressions::refusal()),
        }
    }

    async fn get(&self, organization_id: Uuid, id: &str) -> Answer {
        let id = parse_id(id)?;
        let job = self.store.get(organization_id, id).await?;
        match job {
            Some(job) => Ok((StatusCode::OK, to_json(&job), Some(id))),
            None => Err(ApiError::not_found("no notification with this id")),
        }
    }
}

/// Cancel or requeue.
#[derive(Clone, Copy)]
enum Change {
    Cancel,
    Requeue,
}

impl Ingest {
    async fn transition(&self, organization_id: Uuid, id: &str, change: Change) -> Answer {
        let id = parse_id(id)?;
        let result = match change {
            Change::Cancel => self.store.cancel(organization_id, id).await,
            Change::Requeue => self.store.requeue(organization_id, id).await,
        }?;
        match result {
            Transition::Done(summary) => {
                if matches!(change, Change::Requeue) && due_now(&summary) {
                    self.wake(WakeReason::Requeued).await;
                }
                Ok((StatusCode::OK, summary_body(&summary), Some(id)))
            }
            Transition::NotFound => Err(ApiError::not_found("no notification with this id")),
            Transition::Refused(status) => {
                let (verb, allowed) = match change {
                    Change::Cancel => ("cancel", "pending or failed"),
                    Change::Requeue => ("requeue", "dead"),
                };
                Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "invalid_transition",
                    format!(
                        "cannot {verb} a notification that is {}: only {allowed} ones",
                        status.as_str()
                    ),
                ))
            }
        }
    }

    async fn list(&self, req: &Request, organization_id: Uuid) -> Answer {
        let query =
            listing::ListQuery::parse(&req.query_string_parameters()).map_err(ApiError::invalid)?;
        let jobs = self
            .store
            .list(organization_id, query.status, query.after, query.limit)
            .await?;
        let page = listing::answer(&jobs, query.limit, |last| {
            listing::encode_cursor(ListCursor {
                created_at: last.created_at,
                id: last.id,
            })
        });
        Ok((StatusCode::OK, page, None))
    }
}

impl Ingest {
    /// `POST /notifications/batch`: every valid item inserted in one statement, which also
    /// leaves out the items to recipients the organization suppressed; the answer says, item
    /// by item, what became of it.
    async fn batch(&self, req: &Request, organization_id: Uuid) -> Answer {
        let body = json_body(req, MAX_BATCH_BODY_BYTES)?;
        let items = batch::items(&body).map_err(ApiError::invalid)?;
        let now = Utc::now();
        let trace_header = crate::trace::trace_header(req);
        let checked: Vec<Result<NewJob, Vec<FieldError>>> = items
            .iter()
            .map(|item| {
                batch::new_job(item, organization_id, now, self.config.max_age).map(|job| NewJob {
                    trace_header: trace_header.clone(),
                    ..job
                })
            })
            .collect();
        let valid: Vec<NewJob> = checked
            .iter()
            .filter_map(|c| c.as_ref().ok())
            .cloned()
            .collect();
        let inserted = self.store.insert_many(&valid).await?;
        if inserted
            .iter()
            .any(|i| matches!(i, Inserted::Created(summary) if due_now(summary)))
        {
            self.wake(WakeReason::Accepted).await;
        }
        let mut inserted = inserted.into_iter();
        let results: Vec<batch::ItemResult> = checked
            .into_iter()
            .enumerate()
            .map(|(index, check)| match check {
                Err(errors) => batch::ItemResult::invalid(index, errors),
                Ok(_) => batch::ItemResult::stored(index, inserted.next()),
            })
            .collect();
        Ok((StatusCode::OK, batch::answer(&results), None))
    }
}

fn to_json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

fn summary_body(summary: &JobSummary) -> serde_json::Value {
    to_json(summary)
}

/// The job may be claimed now (not scheduled for later): a worker should be running.
fn due_now(summary: &JobSummary) -> bool {
    summary.next_attempt_at <= Utc::now()
}

#[cfg(test)]
mod tests;
