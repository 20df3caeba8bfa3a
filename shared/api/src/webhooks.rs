//! An organization's webhook endpoints: `POST /webhooks`, `GET /webhooks`,
//! `GET /webhooks/{id}`, `DELETE /webhooks/{id}`, `POST /webhooks/{id}/rotate-secret` and
//! `GET /webhooks/{id}/deliveries`.
//!
//! An endpoint's URL is checked at registration (https, a public address once its host is
//! resolved: `notify_core::webhooks`), and again by the worker at every call. Its secret
//! (`whsec_…`) is shown once, in the answer that made it; nothing reads it back.

use lambda_http::http::StatusCode;
use lambda_http::{Request, RequestExt};
use serde_json::{Value, json};
use uuid::Uuid;

use super::http::{json_body, parse_id};
use super::validate::Fields;
use super::{Answer, ApiError, FieldError, Ingest, MAX_BODY_BYTES, to_json};
use notify_core::events::{EVENT_TYPES, MAX_ENDPOINTS, SECRET_OVERLAP, WebhookEndpoint};
use notify_core::webhooks::{self, MAX_URL_CHARS};

/// Attempts `GET /webhooks/{id}/deliveries` lists by default, and at most.
pub const DEFAULT_ATTEMPTS: u32 = 50;
pub const MAX_ATTEMPTS_LISTED: u32 = 500;

/// The body of `POST /webhooks`: `{"url", "events"?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebhook {
    pub url: String,
    /// `None`: every type.
    pub events: Option<Vec<String>>,
}

impl NewWebhook {
    /// Reads the body; the URL is checked for its form only (`check_url`), its host is
    /// resolved afterwards.
    pub fn parse(body: &Value, allow_private: bool) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let Some(mut fields) = Fields::of(body, &mut errors) else {
            return Err(errors);
        };
        let url = fields.string("url", true, 1, MAX_URL_CHARS);
        let events = match fields.obj.get("events") {
            None => None,
            Some(Value::Array(items)) if !items.is_empty() => {
                let mut types: Vec<String> = Vec::new();
                for item in items {
                    match item.as_str() {
                        Some(t) if types.iter().any(|seen| seen == t) => {
                            fields.error("events", &format!("names {t} twice"));
                        }
                        Some(t) if EVENT_TYPES.contains(&t) => types.push(t.to_owned()),
                        _ => fields.error(
                            "events",
                            &format!("must hold event types only: {}", EVENT_TYPES.join(", ")),
                        ),
                    }
                }
                Some(types)
            }
            Some(_) => {
                fields.error(
                    "events",
                    "must be a non-empty array of event types (leave it out for every type)",
                );
                None
            }
        };
        fields.refuse_unknown(&["url", "events"]);
        if let Some(url) = &url
            && let Err(refusal) = webhooks::check_url(url, allow_private)
        {
            errors.push(FieldError::new("url", refusal.to_string()));
        }
        match url {
            Some(url) if errors.is_empty() => Ok(Self { url, events }),
            _ => Err(errors),
        }
    }
}

/// The answer that shows a secret: the endpoint and its `secret`.
fn with_secret(endpoint: &WebhookEndpoint, secret: &str) -> Value {
    let mut body = to_json(endpoint);
    body["secret"] = Value::String(secret.to_owned());
    body
}

fn no_endpoint() -> ApiError {
    ApiError::not_found("no webhook endpoint with this id")
}

impl Ingest {
    /// `POST /webhooks`: 201 with the endpoint and its secret.
    pub(super) async fn create_webhook(&self, req: &Request, organization_id: Uuid) -> Answer {
        let body = json_body(req, MAX_BODY_BYTES)?;
        let allow_private = self.config.webhook_allow_private;
        let wanted = NewWebhook::parse(&body, allow_private).map_err(ApiError::invalid)?;
        // the host resolved now, as the worker will at each call: a name that points at a
        // private address is refused at once, not at the first event
        let checked = webhooks::check_url(&wanted.url, allow_private).map_err(refused)?;
        webhooks::resolve(&checked, allow_private)
            .await
            .map_err(refused)?;
        let secret = webhooks::new_secret();
        let created = self
            .store
            .create_webhook(
                organization_id,
                checked.url.as_str(),
                wanted.events.as_deref(),
                &secret,
            )
            .await?;
        match created {
            Some(endpoint) => Ok((StatusCode::CREATED, with_secret(&endpoint, &secret), None)),
            None => Err(ApiError::new(
                StatusCode::CONFLICT,
                "too_many_webhooks",
                format!(
                    "this organization has {MAX_ENDPOINTS} webhook endpoints, the most it may \
                     have; DELETE /webhooks/{{id}} one first"
                ),
            )),
        }
    }

    /// `GET /webhooks`: every endpoint of the organization (without secrets).
    pub(super) async fn list_webhooks(&self, organization_id: Uuid) -> Answer {
        let endpoints = self.store.list_webhooks(organization_id).await?;
        Ok((StatusCode::OK, json!({ "items": endpoints }), None))
    }

    /// `GET /webhooks/{id}`: the endpoint (without its secret): whether it is disabled, and
    /// since when it fails. An organization has a handful at most, so this reads its list.
    pub(super) async fn get_webhook(&self, organization_id: Uuid, id: &str) -> Answer {
        let id = parse_id(id)?;
        let endpoints = self.store.list_webhooks(organization_id).await?;
        match endpoints.iter().find(|e| e.id == id) {
            Some(endpoint) => Ok((StatusCode::OK, to_json(endpoint), None)),
            None => Err(no_endpoint()),
        }
    }

    /// `DELETE /webhooks/{id}`: 204; its waiting deliveries are dropped with it.
    pub(super) async fn delete_webhook(&self, organization_id: Uuid, id: &str) -> Answer {
        let id = parse_id(id)?;
        if self.store.delete_webhook(organization_id, id).await? {
            Ok((StatusCode::NO_CONTENT, Value::Null, None))
        } else {
            Err(no_endpoint())
        }
    }

    /// `POST /webhooks/{id}/rotate-secret`: 200 with the new secret; the old one signs too
    /// for [`SECRET_OVERLAP`].
    pub(super) async fn rotate_webhook_secret(&self, organization_id: Uuid, id: &str) -> Answer {
        let id = parse_id(id)?;
        let secret = webhooks::new_secret();
        match self
            .store
            .rotate_webhook_secret(organization_id, id, &secret, SECRET_OVERLAP)
            .await?
        {
            Some(endpoint) => Ok((StatusCode::OK, with_secret(&endpoint, &secret), None)),
            None => Err(no_endpoint()),
        }
    }

    /// `GET /webhooks/{id}/deliveries?limit=`: the endpoint's latest attempts, newest first.
    pub(super) async fn list_webhook_attempts(
        &self,
        req: &Request,
        organization_id: Uuid,
        id: &str,
    ) -> Answer {
        let id = parse_id(id)?;
        let query = req.query_string_parameters();
        let limit = match query.first("limit") {
            None => DEFAULT_ATTEMPTS,
            Some(raw) => match raw.parse::<u32>() {
                Ok(n) if (1..=MAX_ATTEMPTS_LISTED).contains(&n) => n,
                _ => {
                    return Err(ApiError::invalid(vec![FieldError::new(
                        "limit",
                        format!("must be an integer from 1 to {MAX_ATTEMPTS_LISTED}"),
                    )]));
                }
            },
        };
        match self
            .store
            .list_webhook_attempts(organization_id, id, limit)
            .await?
        {
            Some(attempts) => Ok((StatusCode::OK, json!({ "items": attempts }), None)),
            None => Err(no_endpoint()),
        }
    }
}

/// 400 for a URL refused once resolved, with the refusal's own code.
fn refused(refusal: webhooks::UrlRefusal) -> ApiError {
    ApiError::field(
        refusal.code(),
        "url",
        &format!("the webhook URL is refused: {refusal}"),
        &refusal.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_names_an_https_url_and_known_event_types() {
        let parse = |body: Value| NewWebhook::parse(&body, false);
        assert_eq!(
            parse(json!({"url": "https://hooks.example.com/in"})),
            Ok(NewWebhook {
                url: "https://hooks.example.com/in".into(),
                events: None
            })
        );
        assert_eq!(
            parse(json!({"url": "https://hooks.example.com/in",
                         "events": ["notification.sent", "notification.dead"]}))
            .unwrap()
            .events,
            Some(vec!["notification.sent".into(), "notification.dead".into()])
        );
        for bad in [
            json!({}),
            json!({"url": ""}),
            json!({"url": 7}),
            json!({"url": "http://hooks.example.com/in"}),
            json!({"url": "https://127.0.0.1/in"}),
            json!({"url": "https://169.254.169.254/latest/meta-data"}),
            json!({"url": "https://[::1]/in"}),
            json!({"url": "https://hooks.example.com/in", "events": []}),
            json!({"url": "https://hooks.example.com/in", "events": ["notification.maybe"]}),
            json!({"url": "https://hooks.example.com/in",
                   "events": ["notification.sent", "notification.sent"]}),
            json!({"url": "https://hooks.example.com/in", "events": "notification.sent"}),
            json!({"url": "https://hooks.example.com/in", "secret": "mine"}),
            json!("https://hooks.example.com/in"),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
        // for local use, plain http to this machine
        assert!(NewWebhook::parse(&json!({"url": "http://127.0.0.1:9000/in"}), true).is_ok());
    }
}
