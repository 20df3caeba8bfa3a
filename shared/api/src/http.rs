//! Reading an API Gateway request: its route, its organization, its body and headers.
//! Nothing here touches the store.

use lambda_http::http::{HeaderMap, Method, StatusCode, header};
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use uuid::Uuid;

use super::error::ApiError;

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Create,
    Batch,
    List,
    Get(String),
    Cancel(String),
    Requeue(String),
    /// `POST /notifications/requeue`: dead jobs, many at once.
    RequeueDead,
    ListSuppressions,
    AddSuppression,
    /// The recipient as the path spells it, still URL-encoded.
    RemoveSuppression(String),
    CreateWebhook,
    ListWebhooks,
    GetWebhook(String),
    DeleteWebhook(String),
    RotateWebhookSecret(String),
    ListWebhookAttempts(String),
}

/// The request's path without the API Gateway stage prefix, if any.
pub(crate) fn path(req: &Request) -> String {
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

pub(crate) fn route(req: &Request) -> Result<(Route, &'static str), ApiError> {
    let path = path(req);
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let method = req.method().clone();
    let (route, name, allow) = match segments.as_slice() {
        ["notifications"] => match method {
            Method::POST => (Some(Route::Create), "POST /notifications", "GET, POST"),
            Method::GET => (Some(Route::List), "GET /notifications", "GET, POST"),
            _ => (None, "/notifications", "GET, POST"),
        },
        ["notifications", "batch"] => match method {
            Method::POST => (Some(Route::Batch), "POST /notifications/batch", "POST"),
            _ => (None, "/notifications/batch", "POST"),
        },
        ["notifications", "requeue"] => match method {
            Method::POST => (
                Some(Route::RequeueDead),
                "POST /notifications/requeue",
                "POST",
            ),
            _ => (None, "/notifications/requeue", "POST"),
        },
        ["notifications", id] => match method {
            Method::GET => (
                Some(Route::Get((*id).to_owned())),
                "GET /notifications/{id}",
                "GET",
            ),
            _ => (None, "/notifications/{id}", "GET"),
        },
        ["notifications", id, action @ ("cancel" | "requeue")] => {
            let (change, name) = if *action == "cancel" {
                (
                    Route::Cancel as fn(String) -> Route,
                    "POST /notifications/{id}/cancel",
                )
            } else {
                (
                    Route::Requeue as fn(String) -> Route,
                    "POST /notifications/{id}/requeue",
                )
            };
            match method {
                Method::POST => (Some(change((*id).to_owned())), name, "POST"),
                _ => (None, name.trim_start_matches("POST "), "POST"),
            }
        }
        ["suppressions"] => match method {
            Method::GET => (
                Some(Route::ListSuppressions),
                "GET /suppressions",
                "GET, POST",
            ),
            Method::POST => (
                Some(Route::AddSuppression),
                "POST /suppressions",
                "GET, POST",
            ),
            _ => (None, "/suppressions", "GET, POST"),
        },
        ["suppressions", recipient] => match method {
            Method::DELETE => (
                Some(Route::RemoveSuppression((*recipient).to_owned())),
                "DELETE /suppressions/{recipient}",
                "DELETE",
            ),
            _ => (None, "/suppressions/{recipient}", "DELETE"),
        },
        ["webhooks"] => match method {
            Method::GET => (Some(Route::ListWebhooks), "GET /webhooks", "GET, POST"),
            Method::POST => (Some(Route::CreateWebhook), "POST /webhooks", "GET, POST"),
            _ => (None, "/webhooks", "GET, POST"),
        },
        ["webhooks", id] => match method {
            Method::GET => (
                Some(Route::GetWebhook((*id).to_owned())),
                "GET /webhooks/{id}",
                "DELETE, GET",
            ),
            Method::DELETE => (
                Some(Route::DeleteWebhook((*id).to_owned())),
                "DELETE /webhooks/{id}",
                "DELETE, GET",
            ),
            _ => (None, "/webhooks/{id}", "DELETE, GET"),
        },
        ["webhooks", id, "rotate-secret"] => match method {
            Method::POST => (
                Some(Route::RotateWebhookSecret((*id).to_owned())),
                "POST /webhooks/{id}/rotate-secret",
                "POST",
            ),
            _ => (None, "/webhooks/{id}/rotate-secret", "POST"),
        },
        ["webhooks", id, "deliveries"] => match method {
            Method::GET => (
                Some(Route::ListWebhookAttempts((*id).to_owned())),
                "GET /webhooks/{id}/deliveries",
                "GET",
            ),
            _ => (None, "/webhooks/{id}/deliveries", "GET"),
        },
        _ => return Err(ApiError::not_found("no such route")),
    };
    match route {
        Some(route) => Ok((route, name)),
        None => Err(ApiError {
            allow: Some(allow),
            ..ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this method is not allowed on this path",
            )
        }),
    }
}

/// The Lambda request id, else API Gateway's, so every answer can be traced.
pub(crate) fn request_id(req: &Request) -> String {
    if let Some(ctx) = req.lambda_context_ref()
        && !ctx.request_id.is_empty()
    {
        return ctx.request_id.clone();
    }
    let gateway = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.request_id.clone(),
        Some(RequestContext::ApiGatewayV1(ctx)) => ctx.request_id.clone(),
        _ => None,
    };
    gateway.unwrap_or_else(|| Uuid::new_v4().to_string())
}

/// The caller's organization: from the authorizer only (JWT claim `org_id`, or the
/// Lambda-authorizer context key `organization_id`); the `X-Organization-Id` header only
/// when explicitly allowed for local use. Never from the body.
pub(crate) fn organization(req: &Request, allow_header: bool) -> Result<Uuid, ApiError> {
    let authorizer = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => ctx.authorizer.as_ref(),
        Some(RequestContext::ApiGatewayV1(ctx)) => Some(&ctx.authorizer),
        _ => None,
    };
    let from_authorizer = authorizer.and_then(|auth| {
        let claim = auth
            .jwt
            .as_ref()
            .and_then(|jwt| jwt.claims.get(crate::auth::ORG_CLAIM))
            .cloned();
        claim.or_else(|| {
            auth.fields
                .get("organization_id")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
    });
    let raw = from_authorizer.or_else(|| {
        allow_header
            .then(|| req.headers().get("x-organization-id"))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let Some(raw) = raw else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "no organization in the authorizer context",
        ));
    };
    Uuid::parse_str(raw.trim()).map_err(|_| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the organization id from the authorizer is not a UUID",
        )
    })
}

fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        })
        .unwrap_or(false);
    if is_json {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be JSON: send Content-Type: application/json",
        ))
    }
}

/// An idempotency key: 1–255 visible ASCII characters.
pub(crate) fn valid_key(bytes: &[u8]) -> bool {
    (1..=255).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// The `Idempotency-Key` header: 1–255 visible ASCII characters.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    if valid_key(value.as_bytes()) {
        Ok(Some(String::from_utf8_lossy(value.as_bytes()).into_owned()))
    } else {
        Err(ApiError::field(
            "invalid_idempotency_key",
            "Idempotency-Key",
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
            "must be 1 to 255 visible ASCII characters",
        ))
    }
}

/// The body as JSON, after the content type and size checks.
pub(crate) fn json_body(req: &Request, max_bytes: usize) -> Result<serde_json::Value, ApiError> {
    check_content_type(req.headers())?;
    let bytes: &[u8] = req.body().as_ref();
    if bytes.len() > max_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body must be at most {max_bytes} bytes"),
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("the body is not valid JSON: {e}"),
        )
    })
}

pub(crate) fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| {
        ApiError::field(
            "invalid_id",
            "id",
            "the id must be a UUID",
            "must be a UUID",
        )
    })
}
