//! The status-event ports over PostgreSQL: the outbox the triggers of
//! `migrations/0004_status_events.sql` fill, and the webhook endpoints and queue.

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::PgStore;
use crate::sql;
use notify_core::events::{
    ClaimedEvent, ClaimedWebhook, DISABLE_AFTER, EventStore, MAX_ENDPOINTS, Published, StatusEvent,
    WebhookAttemptView, WebhookEndpoint, WebhookReport, WebhookResult,
};
use notify_core::store::{Now, StoreError};

fn endpoint(row: sql::WebhookEndpointRow) -> WebhookEndpoint {
    WebhookEndpoint {
        id: row.id,
        url: row.url,
        events: row.event_types,
        created_at: row.created_at,
        disabled: row.disabled_at.is_some(),
        disabled_at: row.disabled_at,
        disabled_reason: row.disabled_reason,
        failing_since: row.failing_since,
    }
}

/// The current time the statements take: `None`, the database's clock.
const NOW: Now = None;

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[async_trait]
impl EventStore for PgStore {
    async fn claim_events(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<ClaimedEvent>, StoreError> {
        let (limit, lease) = (i64::from(limit), lease.as_secs_f64());
        let rows = self
            .query(&sql::CLAIM_EVENTS, &[&limit, &NOW, &lease])
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| ClaimedEvent {
                event: StatusEvent {
                    id: row.id,
                    event_type: row.event_type,
                    timestamp: row.created_at,
                    organization_id: row.organization_id,
                    sequence: row.sequence,
                    data: row.data,
                },
                claim_token: row.claim_token,
                attempts: row.attempts,
            })
            .collect())
    }

    async fn complete_events(&self, done: &[Published]) -> Result<u64, StoreError> {
        if done.is_empty() {
            return Ok(0);
        }
        let ids: Vec<Uuid> = done.iter().map(|p| p.event_id).collect();
        let tokens: Vec<Uuid> = done.iter().map(|p| p.claim_token).collect();
        let retry: Vec<Option<chrono::DateTime<chrono::Utc>>> =
            done.iter().map(|p| p.retry_at).collect();
        let errors: Vec<Option<&str>> = done.iter().map(|p| p.error.as_deref()).collect();
        let rows = self
            .query(
                &sql::COMPLETE_EVENTS,
                &[&ids, &tokens, &retry, &errors, &NOW],
            )
            .await?;
        Ok(rows.len() as u64)
    }

    async fn claim_webhooks(
        &self,
        limit: u32,
        per_endpoint: u32,
    ) -> Result<Vec<ClaimedWebhook>, StoreError> {
        let (limit, per_endpoint) = (i64::from(limit), i64::from(per_endpoint));
        let rows = self
            .query(&sql::CLAIM_WEBHOOKS, &[&limit, &per_endpoint, &NOW])
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| ClaimedWebhook {
                delivery_id: row.delivery_id,
                claim_token: row.claim_token,
                endpoint_id: row.endpoint_id,
                url: row.url,
                secrets: std::iter::once(row.secret)
                    .chain(row.previous_secret)
                    .collect(),
                attempt: row.attempt,
                event: StatusEvent {
                    id: row.event_id,
                    event_type: row.event_type,
                    timestamp: row.created_at,
                    organization_id: row.organization_id,
                    sequence: row.sequence,
                    data: row.data,
                },
            })
            .collect())
    }

    async fn complete_webhooks(&self, done: &[WebhookResult]) -> Result<WebhookReport, StoreError> {
        if done.is_empty() {
            return Ok(WebhookReport::default());
        }
        let ids: Vec<i64> = done.iter().map(|r| r.delivery_id).collect();
        let tokens: Vec<Uuid> = done.iter().map(|r| r.claim_token).collect();
        let outcomes: Vec<&str> = done.iter().map(|r| r.outcome).collect();
        let retry: Vec<Option<chrono::DateTime<chrono::Utc>>> =
            done.iter().map(|r| r.retry_at).collect();
        let codes: Vec<Option<i32>> = done.iter().map(|r| r.status_code).collect();
        let latencies: Vec<i32> = done.iter().map(|r| r.latency_ms).collect();
        let errors: Vec<Option<&str>> = done.iter().map(|r| r.error.as_deref()).collect();
        let started: Vec<chrono::DateTime<chrono::Utc>> =
            done.iter().map(|r| r.started_at).collect();
        let disable_after = DISABLE_AFTER.as_secs_f64();
        let row = self
            .query_one(
                &sql::COMPLETE_WEBHOOKS,
                &[
                    &ids,
                    &tokens,
                    &outcomes,
                    &retry,
                    &codes,
                    &latencies,
                    &errors,
                    &started,
                    &NOW,
                    &disable_after,
                ],
            )
            .await?;
        Ok(WebhookReport {
            applied: count(row.applied),
            disabled: count(row.disabled),
        })
    }

    async fn any_webhook_endpoint(&self) -> Result<bool, StoreError> {
        Ok(self.query_one(&sql::ANY_WEBHOOK_ENDPOINT, &[]).await?.any)
    }

    async fn webhook_backlog_age(&self) -> Result<Duration, StoreError> {
        let row = self.query_one(&sql::WEBHOOK_BACKLOG, &[&NOW]).await?;
        Ok(Duration::try_from_secs_f64(row.age.max(0.0)).unwrap_or_default())
    }

    async fn sweep_dispatch(&self, older_than: Duration) -> Result<(u64, u64), StoreError> {
        let secs = older_than.as_secs_f64();
        let row = self.query_one(&sql::SWEEP_DISPATCH, &[&secs, &NOW]).await?;
        Ok((count(row.events), count(row.deliveries)))
    }

    async fn prune_events(
        &self,
        retention_days: u32,
        limit: u32,
    ) -> Result<(u64, u64), StoreError> {
        let days = i32::try_from(retention_days).unwrap_or(i32::MAX);
        let limit = i64::from(limit);
        let row = self
            .query_one(&sql::PRUNE_EVENTS, &[&days, &limit, &NOW])
            .await?;
        Ok((count(row.events), count(row.attempts)))
    }

    async fn create_webhook(
        &self,
        organization_id: Uuid,
        url: &str,
        events: Option<&[String]>,
        secret: &str,
    ) -> Result<Option<WebhookEndpoint>, StoreError> {
        let id = Uuid::now_v7();
        let max = i64::from(MAX_ENDPOINTS);
        let row = self
            .query_opt(
                &sql::CREATE_WEBHOOK,
                &[&id, &organization_id, &url, &events, &secret, &max],
            )
            .await?;
        Ok(row.map(endpoint))
    }

    async fn list_webhooks(
        &self,
        organization_id: Uuid,
    ) -> Result<Vec<WebhookEndpoint>, StoreError> {
        let rows = self.query(&sql::LIST_WEBHOOKS, &[&organization_id]).await?;
        Ok(rows.into_iter().map(endpoint).collect())
    }

    async fn delete_webhook(&self, organization_id: Uuid, id: Uuid) -> Result<bool, StoreError> {
        let rows = self
            .query(&sql::DELETE_WEBHOOK, &[&id, &organization_id])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn rotate_webhook_secret(
        &self,
        organization_id: Uuid,
        id: Uuid,
        secret: &str,
        overlap: Duration,
    ) -> Result<Option<WebhookEndpoint>, StoreError> {
        let overlap = overlap.as_secs_f64();
        let row = self
            .query_opt(
                &sql::ROTATE_WEBHOOK_SECRET,
                &[&id, &organization_id, &secret, &overlap],
            )
            .await?;
        Ok(row.map(endpoint))
    }

    async fn list_webhook_attempts(
        &self,
        organization_id: Uuid,
        id: Uuid,
        limit: u32,
    ) -> Result<Option<Vec<WebhookAttemptView>>, StoreError> {
        let limit = i64::from(limit);
        let rows = self
            .query(
                &sql::LIST_WEBHOOK_ATTEMPTS,
                &[&id, &organization_id, &limit],
            )
            .await?;
        if rows.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            rows.into_iter()
                .filter_map(|row| {
                    Some(WebhookAttemptView {
                        event_id: row.event_id?,
                        event_type: row.event_type?,
                        attempt: row.attempt?,
                        outcome: row.outcome?,
                        status_code: row.status_code,
                        latency_ms: row.latency_ms?,
                        error: row.error,
                        attempted_at: row.attempted_at?,
                        next_attempt_at: row.next_attempt_at,
                    })
                })
                .collect(),
        ))
    }
}
