//! The one error shape every refusal and failure is answered in:
//! `{"error":{"code","message","fields":[{"field","message"}]}}`.

use lambda_http::http::StatusCode;
use serde_json::json;

use super::FieldError;
use notify_core::store::StoreError;

/// A refusal or failure, answered in the common error shape.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub fields: Vec<FieldError>,
    /// The methods the path allows (for 405's `Allow`).
    pub allow: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            fields: Vec::new(),
            allow: None,
        }
    }

    /// 400 for a request that cannot even be read (the function's event layer uses it).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn invalid(fields: Vec<FieldError>) -> Self {
        Self {
            fields,
            ..Self::new(
                StatusCode::BAD_REQUEST,
                "validation_failed",
                "the request has invalid fields",
            )
        }
    }

    pub(crate) fn not_found(message: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 400 with one named field.
    pub(crate) fn field(code: &'static str, field: &str, message: &str, detail: &str) -> Self {
        let mut err = Self::new(StatusCode::BAD_REQUEST, code, message);
        err.fields.push(FieldError::new(field, detail));
        err
    }

    /// The JSON body of the answer.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message, "fields": self.fields}})
    }
}

/// A store error becomes 503 (try again) or 500, logged once here with its whole chain; the
/// caller's answer names no internals.
impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        tracing::error!(error = %notify_core::error::report(&err), "store error");
        if err.is_unavailable() {
            Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the service is temporarily unavailable; retry shortly",
            )
        } else {
            Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "an internal error occurred",
            )
        }
    }
}
