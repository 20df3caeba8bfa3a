//! `POST /notifications/requeue`: an organization's dead notifications back in the queue in
//! one call (an outage's, say), chosen by when they died and the error that ended them.

use chrono::{DateTime, Utc};
use lambda_http::Request;
use lambda_http::http::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::http::json_body;
use crate::validate::Fields;
use crate::{Answer, ApiError, FieldError, Ingest, MAX_BODY_BYTES};
use notify_core::store::RequeueDead;

/// How many a request requeues when it does not say.
pub const DEFAULT_LIMIT: u32 = 100;
/// The most one request requeues; a larger outage takes several calls.
pub const MAX_LIMIT: u32 = 1000;
/// The longest error code a filter names (the providers' are under 40 characters).
const MAX_ERROR_CODE_CHARS: usize = 64;

/// The body: `{"status": "dead", "since"?, "until"?, "error_code"?, "limit"?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkRequeue {
    /// Died at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Died before this.
    pub until: Option<DateTime<Utc>>,
    pub error_code: Option<String>,
    pub limit: u32,
}

impl BulkRequeue {
    /// Only `status` is required, and only `dead` notifications can be requeued; every
    /// problem is named.
    pub fn parse(body: &Value) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let Some(mut fields) = Fields::of(body, &mut errors) else {
            return Err(errors);
        };
        if let Some(status) = fields.string("status", true, 1, 32)
            && status != "dead"
        {
            fields.error(
                "status",
                "only dead notifications can be requeued: must be \"dead\"",
            );
        }
        let mut time = |name: &str| {
            let raw = fields.string(name, false, 1, 64)?;
            match DateTime::parse_from_rfc3339(&raw) {
                Ok(t) => Some(t.with_timezone(&Utc)),
                Err(_) => {
                    fields.error(name, "must be an RFC 3339 time, e.g. 2030-01-31T09:00:00Z");
                    None
                }
            }
        };
        let (since, until) = (time("since"), time("until"));
        if let (Some(since), Some(until)) = (since, until)
            && since >= until
        {
            fields.error("until", "must be later than since");
        }
        let error_code = fields
            .string("error_code", false, 1, MAX_ERROR_CODE_CHARS)
            .filter(|code| {
                let plain = code
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if !plain {
                    fields.error(
                        "error_code",
                        "must be an error code: letters, digits, '_', '-' and '.'",
                    );
                }
                plain
            });
        let limit =
            fields.integer("limit", 1..=i64::from(MAX_LIMIT), i64::from(DEFAULT_LIMIT)) as u32;
        fields.refuse_unknown(&["status", "since", "until", "error_code", "limit"]);
        if errors.is_empty() {
            Ok(Self {
                since,
                until,
                error_code,
                limit,
            })
        } else {
            Err(errors)
        }
    }
}

impl Ingest {
    /// `POST /notifications/requeue`: `{"requeued": n}`, the organization's only.
    pub(crate) async fn requeue_dead(&self, req: &Request, organization_id: Uuid) -> Answer {
        let body = json_body(req, MAX_BODY_BYTES)?;
        let filter = BulkRequeue::parse(&body).map_err(ApiError::invalid)?;
        let requeued = self
            .store
            .requeue_dead(RequeueDead {
                organization_id,
                since: filter.since,
                until: filter.until,
                error_code: filter.error_code.as_deref(),
                limit: filter.limit,
            })
            .await?;
        if requeued > 0 {
            self.wake(notify_core::fleet::WakeReason::Requeued).await;
        }
        Ok((StatusCode::OK, json!({ "requeued": requeued }), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(body: Value) -> Vec<String> {
        BulkRequeue::parse(&body)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn only_status_is_required_and_the_limit_has_a_default() {
        let parsed = BulkRequeue::parse(&json!({"status": "dead"})).unwrap();
        assert_eq!(
            parsed,
            BulkRequeue {
                since: None,
                until: None,
                error_code: None,
                limit: DEFAULT_LIMIT
            }
        );
        let full = BulkRequeue::parse(&json!({
            "status": "dead", "since": "2030-01-01T00:00:00Z", "until": "2030-01-01T02:00:00+01:00",
            "error_code": "Throttling", "limit": 1000
        }))
        .unwrap();
        assert_eq!(
            full.until.unwrap().to_rfc3339(),
            "2030-01-01T01:00:00+00:00"
        );
        assert_eq!(full.error_code.as_deref(), Some("Throttling"));
        assert_eq!(full.limit, MAX_LIMIT);
        let float = BulkRequeue::parse(&json!({"status": "dead", "limit": 435.0})).unwrap();
        assert_eq!(float.limit, 435);
    }

    #[test]
    fn anything_else_is_refused_field_by_field() {
        assert_eq!(fields(json!({})), ["status"]);
        assert_eq!(fields(json!({"status": "failed"})), ["status"]);
        assert_eq!(fields(json!({"status": 1})), ["status"]);
        assert_eq!(
            fields(json!({"status": "dead", "since": "yesterday", "limit": 0})),
            ["since", "limit"]
        );
        assert_eq!(
            fields(json!({"status": "dead", "limit": 1001, "error_code": "a b"})),
            ["error_code", "limit"]
        );
        assert_eq!(
            fields(json!({
                "status": "dead", "since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"
            })),
            ["until"]
        );
        assert_eq!(fields(json!({"status": "dead", "ids": []})), ["ids"]);
        assert_eq!(fields(json!(["dead"])), [""]);
    }
}
