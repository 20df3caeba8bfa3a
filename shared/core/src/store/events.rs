//! The status-event part of the store port: the outbox the database fills, the bus's claims
//! on it, and the webhook endpoints and their queue. `crate::events` re-exports it.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::StoreError;
use crate::domain::status_event::StatusEvent;

/// An event claimed for the bus, under a claim token that every later write checks: the
/// stream's cursor's, for an event read after it (every such event of one claim shares it),
/// or the event's own, for one the bus refused before.
#[derive(Debug, Clone)]
pub struct ClaimedEvent {
    pub event: StatusEvent,
    pub claim_token: Uuid,
    pub attempts: i32,
}

impl ClaimedEvent {
    /// Its result when the bus took it.
    pub fn taken(&self) -> Published {
        Published {
            event_id: self.event.id,
            claim_token: self.claim_token,
            retry_at: None,
            error: None,
        }
    }
}

/// A webhook delivery claimed for sending.
#[derive(Debug, Clone)]
pub struct ClaimedWebhook {
    pub delivery_id: i64,
    pub claim_token: Uuid,
    pub endpoint_id: Uuid,
    pub url: String,
    pub secrets: Vec<String>,
    /// This attempt's number (1 for the first).
    pub attempt: i32,
    pub event: StatusEvent,
}

/// How a bus publication ended: published, or to be tried again at `retry_at`.
#[derive(Debug, Clone)]
pub struct Published {
    pub event_id: Uuid,
    pub claim_token: Uuid,
    pub retry_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
}

/// One webhook attempt's result, as the store records it.
#[derive(Debug, Clone)]
pub struct WebhookResult {
    pub delivery_id: i64,
    pub claim_token: Uuid,
    /// `delivered`, `retry` or `dead`.
    pub outcome: &'static str,
    pub retry_at: Option<DateTime<Utc>>,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// What a completion of webhook attempts changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebhookReport {
    /// Results whose claim still held (the others were swept meanwhile: not recorded).
    pub applied: u64,
    /// Endpoints disabled because they have failed for [`DISABLE_AFTER`].
    pub disabled: u64,
}

/// Endpoints an organization may register (each event is one delivery per endpoint).
pub const MAX_ENDPOINTS: u32 = 10;

/// How long a rotated-out secret keeps signing beside the new one.
pub const SECRET_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// An endpoint failing this long, with no delivery in between, is disabled.
pub const DISABLE_AFTER: Duration = Duration::from_secs(5 * 24 * 3600);

/// A registered endpoint, as the API shows it (never its secret, but at registration and
/// rotation).
#[derive(Debug, Clone, Serialize)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    pub url: String,
    /// `null`: every type.
    pub events: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Since when every attempt has failed (`null` while it answers).
    pub failing_since: Option<DateTime<Utc>>,
}

/// One attempt of one delivery, as `GET /webhooks/{id}/deliveries` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct WebhookAttemptView {
    pub event_id: Uuid,
    pub event_type: String,
    pub attempt: i32,
    /// `delivered`, `retry` or `dead`.
    pub outcome: String,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<String>,
    pub attempted_at: DateTime<Utc>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// The outbox and the webhook queue.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Claims up to `limit` events for the bus: the next ones of the stream, read after its
    /// cursor in commit-safe order by one reader at a time (a reader that held it past
    /// `lease` is taken to be lost), and the ones it refused before that are due again
    /// (SKIP LOCKED).
    async fn claim_events(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<ClaimedEvent>, StoreError>;
    /// Records what the bus did with claimed events (fenced by their claim tokens): the
    /// cursor moves past the stream's, and the refused wait for a retry. Answers how many
    /// results were recorded.
    async fn complete_events(&self, done: &[Published]) -> Result<u64, StoreError>;
    /// Claims up to `limit` due webhook deliveries to enabled endpoints, at most
    /// `per_endpoint` of one endpoint, oldest first (SKIP LOCKED).
    async fn claim_webhooks(
        &self,
        limit: u32,
        per_endpoint: u32,
    ) -> Result<Vec<ClaimedWebhook>, StoreError>;
    /// Records webhook attempts (fenced), ends delivered and dead deliveries, and keeps each
    /// endpoint's failing streak (disabling it past [`DISABLE_AFTER`]).
    async fn complete_webhooks(&self, done: &[WebhookResult]) -> Result<WebhookReport, StoreError>;
    /// Whether any organization has an enabled webhook endpoint.
    async fn any_webhook_endpoint(&self) -> Result<bool, StoreError>;
    /// The age of the oldest due webhook delivery (zero when none waits).
    async fn webhook_backlog_age(&self) -> Result<Duration, StoreError>;
    /// Makes due again the publications and deliveries claimed longer than `older_than`
    /// ago (their worker was lost): (events, deliveries).
    async fn sweep_dispatch(&self, older_than: Duration) -> Result<(u64, u64), StoreError>;
    /// Drops up to `limit` events and webhook attempts older than `retention_days`:
    /// (events, attempts).
    async fn prune_events(&self, retention_days: u32, limit: u32)
    -> Result<(u64, u64), StoreError>;

    /// Registers an endpoint with its secret; `None` when the organization has as many
    /// endpoints as it may.
    async fn create_webhook(
        &self,
        organization_id: Uuid,
        url: &str,
        events: Option<&[String]>,
        secret: &str,
    ) -> Result<Option<WebhookEndpoint>, StoreError>;
    async fn list_webhooks(
        &self,
        organization_id: Uuid,
    ) -> Result<Vec<WebhookEndpoint>, StoreError>;
    /// `false`: no such endpoint in this organization.
    async fn delete_webhook(&self, organization_id: Uuid, id: Uuid) -> Result<bool, StoreError>;
    /// Makes `secret` the endpoint's secret; the old one keeps signing for `overlap`.
    async fn rotate_webhook_secret(
        &self,
        organization_id: Uuid,
        id: Uuid,
        secret: &str,
        overlap: Duration,
    ) -> Result<Option<WebhookEndpoint>, StoreError>;
    /// The endpoint's recent attempts, newest first; `None`: no such endpoint.
    async fn list_webhook_attempts(
        &self,
        organization_id: Uuid,
        id: Uuid,
        limit: u32,
    ) -> Result<Option<Vec<WebhookAttemptView>>, StoreError>;
}
