//! Status events: what callers hear of their notifications.
//!
//! Every change of a notification's status that a caller cares about is recorded as an
//! event by the database, in the transaction that makes the change (triggers on the history
//! tables, `migrations/0004_status_events.sql`): a change that does not commit has no event,
//! and a committed one always has one, whichever release's statement made it. The worker
//! then publishes each event to the EventBridge bus (`EVENT_BUS_NAME`) and posts it to each
//! of the organization's webhook endpoints that asked for its type, at least once each
//! ([`dispatch`]).
//!
//! The ports:
//! - [`EventBus`]: `PutEvents` (`notify-delivery`'s EventBridge adapter);
//! - [`WebhookSender`]: one signed HTTPS POST (`notify-webhooks`);
//! - [`EventStore`]: the outbox and the webhook queue (`notify-postgres`).

pub mod dispatch;

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

pub use crate::domain::status_event::{EVENT_DETAIL_TYPE, EVENT_SOURCE, EVENT_TYPES, StatusEvent};
pub use crate::store::events::*;
pub use dispatch::{DispatchSummary, EventsConfig, dispatch};

/// Why the bus did not take one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishError {
    pub code: String,
    pub message: String,
}

/// The EventBridge port.
#[async_trait]
pub trait EventBus: Send + Sync {
    /// Puts every event on the bus (in calls of at most 10 entries, the API's limit, entries
    /// the bus failed retried a few times); answers, per event in order, `None` when the bus
    /// took it, or why not.
    async fn publish(&self, events: &[StatusEvent]) -> Vec<Option<PublishError>>;
}

/// One webhook delivery to make.
#[derive(Debug, Clone)]
pub struct WebhookRequest<'a> {
    pub url: &'a str,
    /// The event's id: `webhook-id`, the same on every retry.
    pub event_id: Uuid,
    /// The envelope, exactly as signed and sent.
    pub body: &'a str,
    /// The endpoint's signing secrets (`whsec_…`): the current one first, then one being
    /// rotated out. One signature per secret.
    pub secrets: &'a [String],
}

/// What one delivery met: the status code when the endpoint answered, or why it could not
/// be asked (a refused address, a timeout, a refused connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    pub status: Option<u16>,
    pub latency: Duration,
    pub error: Option<String>,
}

impl WebhookResponse {
    /// Any 2xx is delivered; anything else is retried.
    pub fn delivered(&self) -> bool {
        matches!(self.status, Some(200..=299))
    }
}

/// The webhook port: one signed POST, never following a redirect, to an address the policy
/// allows once the host is resolved.
#[async_trait]
pub trait WebhookSender: Send + Sync {
    async fn send(&self, request: &WebhookRequest<'_>) -> WebhookResponse;
}
