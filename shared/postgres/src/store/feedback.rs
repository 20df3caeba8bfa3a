//! The feedback and suppression ports over PostgreSQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::PgStore;
use crate::sql;
use notify_core::domain::feedback::jobs_window;
use notify_core::store::{
    At, DropUnmatchedFeedback, FeedbackReport, FeedbackStore, Now, ON_ACCOUNT_SUPPRESSION_LIST,
    RecordFeedback, StoreError, Suppression, SuppressionStore,
};

fn suppression(row: sql::SuppressionRow) -> Suppression {
    Suppression {
        recipient: row.recipient,
        reason: row.reason,
        detail: row.detail,
        created_at: row.created_at,
    }
}

#[async_trait]
impl SuppressionStore for PgStore {
    async fn list_suppressions(
        &self,
        organization_id: Uuid,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Suppression>, StoreError> {
        let limit = i64::from(limit);
        let rows = self
            .query(&sql::LIST_SUPPRESSIONS, &[&organization_id, &after, &limit])
            .await?;
        Ok(rows.into_iter().map(suppression).collect())
    }

    async fn add_suppression(
        &self,
        organization_id: Uuid,
        recipient: &str,
        detail: Option<&str>,
    ) -> Result<(Suppression, bool), StoreError> {
        let row = self
            .query_one(
                &sql::ADD_SUPPRESSION,
                &[&organization_id, &recipient, &detail],
            )
            .await?;
        let entry = Suppression {
            recipient: row.recipient,
            reason: row.reason,
            detail: row.detail,
            created_at: row.created_at,
        };
        Ok((entry, row.created))
    }

    async fn remove_suppression(
        &self,
        organization_id: Uuid,
        recipient: &str,
    ) -> Result<bool, StoreError> {
        let removed = self
            .query(&sql::REMOVE_SUPPRESSION, &[&organization_id, &recipient])
            .await?;
        Ok(!removed.is_empty())
    }
}

#[async_trait]
impl FeedbackStore for PgStore {
    async fn record_feedback(
        &self,
        RecordFeedback { events, now }: RecordFeedback<'_>,
    ) -> Result<FeedbackReport, StoreError> {
        let mut report = FeedbackReport::default();
        if !events.is_empty() {
            let ids: Vec<&str> = events
                .iter()
                .map(|e| e.provider_message_id.as_str())
                .collect();
            let keys: Vec<&str> = events.iter().map(|e| e.key.as_str()).collect();
            let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
            let subtypes: Vec<Option<&str>> = events.iter().map(|e| e.subtype.as_deref()).collect();
            let diagnostics: Vec<Option<&str>> =
                events.iter().map(|e| e.diagnostic.as_deref()).collect();
            let suppresses: Vec<bool> = events.iter().map(|e| e.kind.suppresses()).collect();
            let occurred: Vec<_> = events.iter().map(|e| e.occurred_at).collect();
            let raw: Vec<Json<&serde_json::Value>> = events.iter().map(|e| Json(&e.raw)).collect();
            let channels: Vec<&str> = events.iter().map(|e| e.channel.as_str()).collect();
            let rows = self
                .query(
                    &sql::RECORD_FEEDBACK,
                    &[
                        &ids,
                        &keys,
                        &kinds,
                        &subtypes,
                        &diagnostics,
                        &suppresses,
                        &occurred,
                        &raw,
                        &now,
                        &channels,
                    ],
                )
                .await?;
            report.duplicates = (events.len() - rows.len()) as u64;
            for row in rows {
                if row.subtype.as_deref() == Some(ON_ACCOUNT_SUPPRESSION_LIST) {
                    report.account_suppressed_bounces += 1;
                }
                *report
                    .recorded
                    .entry(row.channel)
                    .or_default()
                    .entry(row.kind)
                    .or_default() += 1;
            }
        }
        // the days around these events, not every day kept (the sweeper's pass is unbounded)
        let window = jobs_window(events, now.unwrap_or_else(Utc::now));
        let applied = self.apply_feedback(Some(window), now).await?;
        Ok(FeedbackReport {
            applied: applied.applied,
            jobs_changed: applied.jobs_changed,
            suppressed: applied.suppressed,
            ..report
        })
    }

    async fn apply_waiting_feedback(&self, At { now }: At) -> Result<FeedbackReport, StoreError> {
        self.apply_feedback(None, now).await
    }

    async fn drop_unmatched_feedback(
        &self,
        DropUnmatchedFeedback {
            older_than_secs,
            limit,
            now,
        }: DropUnmatchedFeedback,
    ) -> Result<u64, StoreError> {
        let secs = f64::from(older_than_secs);
        let limit = i64::from(limit);
        let row = self
            .query_one(&sql::DROP_UNMATCHED_FEEDBACK, &[&secs, &limit, &now])
            .await?;
        Ok(row.dropped.max(0) as u64)
    }
}

impl PgStore {
    /// Applies the waiting events whose attempt is recorded, among the jobs accepted within
    /// `window` ([from, to); `None`: every day kept).
    async fn apply_feedback(
        &self,
        window: Option<(DateTime<Utc>, DateTime<Utc>)>,
        now: Now,
    ) -> Result<FeedbackReport, StoreError> {
        let (from, to) = (window.map(|w| w.0), window.map(|w| w.1));
        let rows = self
            .query(&sql::APPLY_FEEDBACK, &[&now, &from, &to])
            .await?;
        let first = rows.first();
        Ok(FeedbackReport {
            applied: rows.len() as u64,
            jobs_changed: first.map_or(0, |row| row.jobs_changed.max(0) as u64),
            suppressed: first.map_or(0, |row| row.suppressed.max(0) as u64),
            ..FeedbackReport::default()
        })
    }
}
