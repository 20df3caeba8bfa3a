//! The PostgreSQL adapter of [`JobStore`]. Every statement lives in `shared/sql/`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::row::RowIndex;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use uuid::Uuid;

use super::{
    ClaimedJob, CompleteReport, Completion, DeliveryView, IngestWindow, Inserted, JobStore,
    JobSummary, JobView, ListCursor, NewJob, StoreError, SweepReport, Transition,
};
use crate::db::DbConfig;
use crate::domain::{Channel, JobStatus};

/// The named queries, embedded at build time (public so tests can derive variants).
pub mod sql {
    pub const CLAIM: &str = include_str!("../../sql/claim.sql");
    /// claim_fair.sql as written: it ends with a marker that [`claim_fair`] fills with the
    /// UPDATE of [`CLAIM`].
    pub const CLAIM_FAIR: &str = include_str!("../../sql/claim_fair.sql");
    pub const COUNT_INGEST: &str = include_str!("../../sql/count_ingest.sql");
    pub const PRUNE_COUNTERS: &str = include_str!("../../sql/prune_counters.sql");
    /// complete.sql as written: its `claimed` CTE is a marker that [`complete_and_claim`]
    /// fills with [`CLAIM`].
    pub const COMPLETE: &str = include_str!("../../sql/complete.sql");
    pub const INSERT_JOBS: &str = include_str!("../../sql/insert_jobs.sql");
    pub const FIND_BY_IDEMPOTENCY_KEYS: &str =
        include_str!("../../sql/find_by_idempotency_keys.sql");
    pub const GET_JOB: &str = include_str!("../../sql/get_job.sql");
    pub const LIST_DELIVERIES: &str = include_str!("../../sql/list_deliveries.sql");
    pub const SWEEP: &str = include_str!("../../sql/sweep.sql");
    pub const PRUNE: &str = include_str!("../../sql/prune.sql");
    pub const CANCEL: &str = include_str!("../../sql/cancel.sql");
    pub const REQUEUE: &str = include_str!("../../sql/requeue.sql");
    pub const JOB_STATUS: &str = include_str!("../../sql/job_status.sql");
    pub const LIST_JOBS: &str = include_str!("../../sql/list_jobs.sql");

    /// The fair, rate-limited claim: claim_fair.sql's choice of rows, claim.sql's UPDATE.
    pub fn claim_fair() -> String {
        let update = CLAIM
            .find("UPDATE notification_jobs AS j")
            .map_or(CLAIM, |at| &CLAIM[at..]);
        CLAIM_FAIR.replace("/* the UPDATE of claim.sql */", update.trim())
    }

    /// The statement the worker runs after each batch: complete.sql with claim.sql in its
    /// `claimed` CTE (one source for the claim), the batch size from `$12`.
    pub fn complete_and_claim() -> String {
        let claim = CLAIM.trim().replace("$1", "$12");
        COMPLETE.replace("/* claim.sql */", &claim)
    }
}

/// One open connection and its statements, prepared once when it opened.
struct Conn {
    client: Client,
    claim: Statement,
    complete: Statement,
    insert_jobs: Statement,
    find_by_idempotency_keys: Statement,
    get_job: Statement,
    list_deliveries: Statement,
    sweep: Statement,
    prune: Statement,
    cancel: Statement,
    requeue: Statement,
    job_status: Statement,
    list_jobs: Statement,
    count_ingest: Statement,
    prune_counters: Statement,
}

impl Conn {
    /// `fair`: claim with claim_fair.sql (rate-limited, round-robin) instead of claim.sql.
    async fn open(config: &DbConfig, fair: bool) -> Result<Self, StoreError> {
        let client = config
            .connect()
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        let complete = sql::complete_and_claim();
        let claim = if fair {
            sql::claim_fair()
        } else {
            sql::CLAIM.to_owned()
        };
        // prepared together: tokio-postgres pipelines them in one round trip
        let (
            claim,
            complete,
            insert_jobs,
            find_by_idempotency_keys,
            get_job,
            list_deliveries,
            sweep,
            prune,
            cancel,
            requeue,
            job_status,
            list_jobs,
            count_ingest,
            prune_counters,
        ) = futures::try_join!(
            client.prepare(&claim),
            client.prepare(&complete),
            client.prepare(sql::INSERT_JOBS),
            client.prepare(sql::FIND_BY_IDEMPOTENCY_KEYS),
            client.prepare(sql::GET_JOB),
            client.prepare(sql::LIST_DELIVERIES),
            client.prepare(sql::SWEEP),
            client.prepare(sql::PRUNE),
            client.prepare(sql::CANCEL),
            client.prepare(sql::REQUEUE),
            client.prepare(sql::JOB_STATUS),
            client.prepare(sql::LIST_JOBS),
            client.prepare(sql::COUNT_INGEST),
            client.prepare(sql::PRUNE_COUNTERS),
        )
        .map_err(map_err)?;
        Ok(Self {
            client,
            claim,
            complete,
            insert_jobs,
            find_by_idempotency_keys,
            get_job,
            list_deliveries,
            sweep,
            prune,
            cancel,
            requeue,
            job_status,
            list_jobs,
            count_ingest,
            prune_counters,
        })
    }

    /// Runs a cancel or requeue statement; when it changes nothing, tells why.
    async fn transition(
        &self,
        statement: &Statement,
        organization_id: Uuid,
        id: Uuid,
    ) -> Result<Transition, StoreError> {
        let params: [&(dyn ToSql + Sync); 2] = [&id, &organization_id];
        if let Some(row) = self
            .client
            .query_opt(statement, &params)
            .await
            .map_err(map_err)?
        {
            return Ok(Transition::Done(summary(&row)?));
        }
        match self
            .client
            .query_opt(&self.job_status, &params)
            .await
            .map_err(map_err)?
        {
            None => Ok(Transition::NotFound),
            Some(row) => Ok(Transition::Refused(status(&row, 0)?)),
        }
    }
}

/// The job repository over one PostgreSQL connection per process.
///
/// The connection is opened on first use (or by [`PgStore::connect`] at cold start) and
/// re-opened on the next call after it closed, so a warm function outlives a database
/// restart.
pub struct PgStore {
    config: DbConfig,
    /// With a per-organization limit (jobs per minute), claims are fair and rate-limited.
    rate_limit_per_min: Option<u32>,
    conn: Mutex<Option<Arc<Conn>>>,
}

impl PgStore {
    /// A store that connects on first use.
    pub fn new(config: DbConfig) -> Self {
        Self {
            config,
            rate_limit_per_min: None,
            conn: Mutex::new(None),
        }
    }

    /// Claims take at most `per_minute` jobs of an organization each minute (overrides in
    /// `organization_rate_limits`), round-robin across organizations. 0 leaves claims as
    /// they are.
    pub fn with_rate_limit(mut self, per_minute: u32) -> Self {
        self.rate_limit_per_min = (per_minute > 0).then_some(per_minute);
        self
    }

    /// A store whose connection is opened now (for a cold start that should fail fast).
    pub async fn connect(config: DbConfig) -> Result<Self, StoreError> {
        let store = Self::new(config);
        store.ready().await?;
        Ok(store)
    }

    /// Opens the connection now, if it is not open (for a cold start that should fail fast).
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.conn().await.map(|_| ())
    }

    async fn conn(&self) -> Result<Arc<Conn>, StoreError> {
        let mut current = self.conn.lock().await;
        if let Some(conn) = current.as_ref() {
            if !conn.client.is_closed() {
                return Ok(conn.clone());
            }
            tracing::info!("database connection closed; reconnecting");
        }
        *current = None;
        let conn = Arc::new(Conn::open(&self.config, self.rate_limit_per_min.is_some()).await?);
        *current = Some(conn.clone());
        Ok(conn)
    }
}

/// Sorts a driver error into "try again later" or "something is wrong".
fn map_err(err: tokio_postgres::Error) -> StoreError {
    let lost_connection = err.is_closed()
        || std::error::Error::source(&err).is_some_and(|s| s.is::<std::io::Error>());
    let server_unavailable = err.code().is_some_and(|code| {
        code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::TOO_MANY_CONNECTIONS
    });
    if lost_connection || server_unavailable {
        StoreError::Unavailable(Box::new(err))
    } else {
        StoreError::Database(err)
    }
}

fn status(row: &Row, idx: usize) -> Result<JobStatus, StoreError> {
    let text: &str = row.get(idx);
    JobStatus::parse(text).ok_or_else(|| StoreError::Corrupt(format!("job status {text:?}")))
}

fn channel<I: RowIndex + std::fmt::Display>(row: &Row, idx: I) -> Result<Channel, StoreError> {
    let text: &str = row.get(idx);
    Channel::parse(text).ok_or_else(|| StoreError::Corrupt(format!("channel {text:?}")))
}

/// A job from a row of get_job.sql or list_jobs.sql (no delivery attempts).
fn job_view(row: &Row) -> Result<JobView, StoreError> {
    Ok(JobView {
        id: row.get(0),
        channel: channel(row, 1)?,
        to: row.get::<_, Option<String>>(2).unwrap_or_default(),
        status: status(row, 3)?,
        attempts: row.get(4),
        max_attempts: row.get(5),
        next_attempt_at: row.get(6),
        created_at: row.get(7),
        updated_at: row.get(8),
        last_error: row.get(9),
        deliveries: None,
    })
}

/// A claimed job from a row of claim.sql (or of the claim part of complete.sql).
fn claimed_job(row: &Row) -> Result<ClaimedJob, StoreError> {
    Ok(ClaimedJob {
        id: row.get("id"),
        organization_id: row.get("organization_id"),
        channel: channel(row, "channel")?,
        payload: row.get("payload"),
        attempt: row.get("attempts"),
        max_attempts: row.get("max_attempts"),
        claim_token: row.get("claim_token"),
        claimed_at: row.get("claimed_at"),
    })
}

fn summary(row: &Row) -> Result<JobSummary, StoreError> {
    Ok(JobSummary {
        id: row.get(0),
        status: status(row, 1)?,
        next_attempt_at: row.get(2),
    })
}

#[async_trait]
impl JobStore for PgStore {
    async fn insert(&self, job: &NewJob) -> Result<Inserted, StoreError> {
        let mut results = self.insert_many(std::slice::from_ref(job)).await?;
        results
            .pop()
            .ok_or_else(|| StoreError::Corrupt("insert returned no result".into()))
    }

    async fn insert_many(&self, jobs: &[NewJob]) -> Result<Vec<Inserted>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = jobs.iter().map(|_| Uuid::new_v4()).collect();
        let orgs: Vec<Uuid> = jobs.iter().map(|j| j.organization_id).collect();
        let channels: Vec<&str> = jobs.iter().map(|j| j.channel.as_str()).collect();
        let payloads: Vec<&serde_json::Value> = jobs.iter().map(|j| &j.payload).collect();
        let max_attempts: Vec<i32> = jobs.iter().map(|j| j.max_attempts).collect();
        let due: Vec<DateTime<Utc>> = jobs.iter().map(|j| j.next_attempt_at).collect();
        let keys: Vec<Option<&str>> = jobs
            .iter()
            .map(|j| j.idempotency.as_ref().map(|i| i.key.as_str()))
            .collect();
        let hashes: Vec<Option<&str>> = jobs
            .iter()
            .map(|j| j.idempotency.as_ref().map(|i| i.request_hash.as_str()))
            .collect();
        let conn = self.conn().await?;
        let rows = conn
            .client
            .query(
                &conn.insert_jobs,
                &[
                    &ids,
                    &orgs,
                    &channels,
                    &payloads,
                    &max_attempts,
                    &due,
                    &keys,
                    &hashes,
                ],
            )
            .await
            .map_err(map_err)?;
        let mut created = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let summary = summary(row)?;
            created.insert(summary.id, summary);
        }
        // Only a key conflict inserts nothing; the job holding the key has committed by now
        // (ON CONFLICT waited for it), so this read sees it. Keys are per organization.
        let mut existing = std::collections::HashMap::new();
        let missing: Vec<(Uuid, &str)> = jobs
            .iter()
            .zip(&ids)
            .filter(|(_, id)| !created.contains_key(*id))
            .filter_map(|(job, _)| {
                Some((job.organization_id, job.idempotency.as_ref()?.key.as_str()))
            })
            .collect();
        let mut by_org: std::collections::BTreeMap<Uuid, Vec<&str>> = Default::default();
        for (org, key) in missing {
            by_org.entry(org).or_default().push(key);
        }
        for (org, keys) in by_org {
            let rows = conn
                .client
                .query(&conn.find_by_idempotency_keys, &[&org, &keys])
                .await
                .map_err(map_err)?;
            for row in &rows {
                let hash: String = row.get(3);
                let key: String = row.get(4);
                existing.insert((org, key), (summary(row)?, hash));
            }
        }
        jobs.iter()
            .zip(&ids)
            .map(|(job, id)| {
                if let Some(summary) = created.get(id) {
                    return Ok(Inserted::Created(summary.clone()));
                }
                let idempotency = job.idempotency.as_ref().ok_or_else(|| {
                    StoreError::Corrupt("a job without a key was not inserted".into())
                })?;
                match existing.get(&(job.organization_id, idempotency.key.clone())) {
                    Some((summary, hash)) if *hash == idempotency.request_hash => {
                        Ok(Inserted::Existing(summary.clone()))
                    }
                    Some(_) => Ok(Inserted::KeyReused),
                    None => Err(StoreError::Corrupt(
                        "idempotency conflict without a row".into(),
                    )),
                }
            })
            .collect()
    }

    async fn get(&self, organization_id: Uuid, id: Uuid) -> Result<Option<JobView>, StoreError> {
        let conn = self.conn().await?;
        let job_params: [&(dyn ToSql + Sync); 2] = [&id, &organization_id];
        let delivery_params: [&(dyn ToSql + Sync); 1] = [&id];
        // pipelined: both queries travel in one round trip
        let (job, deliveries) = futures::try_join!(
            conn.client.query_opt(&conn.get_job, &job_params),
            conn.client.query(&conn.list_deliveries, &delivery_params),
        )
        .map_err(map_err)?;
        let Some(row) = job else {
            return Ok(None);
        };
        let deliveries = deliveries
            .iter()
            .map(|d| DeliveryView {
                attempt: d.get(0),
                provider: d.get(1),
                provider_message_id: d.get(2),
                error_code: d.get(3),
                error_message: d.get(4),
                outcome: d.get(5),
                fenced: d.get(6),
                started_at: d.get(7),
                finished_at: d.get(8),
            })
            .collect();
        Ok(Some(JobView {
            deliveries: Some(deliveries),
            ..job_view(&row)?
        }))
    }

    async fn cancel(&self, organization_id: Uuid, id: Uuid) -> Result<Transition, StoreError> {
        let conn = self.conn().await?;
        conn.transition(&conn.cancel, organization_id, id).await
    }

    async fn requeue(&self, organization_id: Uuid, id: Uuid) -> Result<Transition, StoreError> {
        let conn = self.conn().await?;
        conn.transition(&conn.requeue, organization_id, id).await
    }

    async fn list(
        &self,
        organization_id: Uuid,
        status: Option<JobStatus>,
        after: Option<ListCursor>,
        limit: u32,
    ) -> Result<Vec<JobView>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .client
            .query(
                &conn.list_jobs,
                &[
                    &organization_id,
                    &status.map(JobStatus::as_str),
                    &after.map(|c| c.created_at),
                    &after.map(|c| c.id),
                    &i64::from(limit),
                ],
            )
            .await
            .map_err(map_err)?;
        rows.iter().map(job_view).collect()
    }

    async fn claim(&self, batch_size: u32) -> Result<Vec<ClaimedJob>, StoreError> {
        let conn = self.conn().await?;
        let batch = i64::from(batch_size);
        let rows = match self.rate_limit_per_min {
            None => conn.client.query(&conn.claim, &[&batch]).await,
            Some(per_minute) => {
                let per_minute = i32::try_from(per_minute).unwrap_or(i32::MAX);
                conn.client.query(&conn.claim, &[&batch, &per_minute]).await
            }
        }
        .map_err(map_err)?;
        rows.iter().map(claimed_job).collect()
    }

    async fn complete(&self, completions: &[Completion]) -> Result<CompleteReport, StoreError> {
        if completions.is_empty() {
            return Ok(CompleteReport::default());
        }
        Ok(self.complete_and_claim(completions, 0).await?.0)
    }

    async fn complete_and_claim(
        &self,
        completions: &[Completion],
        next_batch: u32,
    ) -> Result<(CompleteReport, Vec<ClaimedJob>), StoreError> {
        if self.rate_limit_per_min.is_some() && next_batch > 0 {
            // the fair claim cannot be nested in the completion statement (it writes in a
            // CTE of its own): complete, then claim
            let report = self.complete_and_claim(completions, 0).await?.0;
            return Ok((report, self.claim(next_batch).await?));
        }
        let n = completions.len();
        let mut ids = Vec::with_capacity(n);
        let mut tokens = Vec::with_capacity(n);
        let mut attempts = Vec::with_capacity(n);
        let mut outcomes = Vec::with_capacity(n);
        let mut retry_at: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(n);
        let mut providers = Vec::with_capacity(n);
        let mut message_ids = Vec::with_capacity(n);
        let mut error_codes = Vec::with_capacity(n);
        let mut error_messages = Vec::with_capacity(n);
        let mut started = Vec::with_capacity(n);
        let mut finished = Vec::with_capacity(n);
        for c in completions {
            ids.push(c.job_id);
            tokens.push(c.claim_token);
            attempts.push(c.attempt);
            outcomes.push(c.decision.as_str());
            retry_at.push(match c.decision {
                super::Decision::Retry { at } => Some(at),
                _ => None,
            });
            providers.push(c.channel.provider());
            message_ids.push(c.provider_message_id.as_deref());
            error_codes.push(c.error_code.as_deref());
            error_messages.push(c.error_message.as_deref());
            started.push(c.started_at);
            finished.push(c.finished_at);
        }
        let conn = self.conn().await?;
        let rows = conn
            .client
            .query(
                &conn.complete,
                &[
                    &ids,
                    &tokens,
                    &attempts,
                    &outcomes,
                    &retry_at,
                    &providers,
                    &message_ids,
                    &error_codes,
                    &error_messages,
                    &started,
                    &finished,
                    &i64::from(next_batch),
                ],
            )
            .await
            .map_err(map_err)?;
        let mut report = CompleteReport::default();
        let mut claimed = Vec::new();
        for row in &rows {
            match row.get::<_, Option<bool>>("applied") {
                Some(true) => report.applied.push(row.get("id")),
                Some(false) => report.fenced.push(row.get("id")),
                None => claimed.push(claimed_job(row)?),
            }
        }
        Ok((report, claimed))
    }

    async fn sweep(&self, stuck_after: Duration, limit: u32) -> Result<SweepReport, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .client
            .query_one(
                &conn.sweep,
                &[&stuck_after.as_secs_f64(), &i64::from(limit)],
            )
            .await
            .map_err(map_err)?;
        let count = |idx| row.get::<_, i64>(idx).max(0) as u64;
        Ok(SweepReport {
            requeued: count(0),
            dead: count(1),
        })
    }

    async fn prune(&self, older_than_days: u32, limit: u32) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        let days = i32::try_from(older_than_days).unwrap_or(i32::MAX);
        conn.client
            .execute(&conn.prune, &[&days, &i64::from(limit)])
            .await
            .map_err(map_err)
    }

    async fn count_ingest(
        &self,
        organization_id: Uuid,
        requests: u32,
    ) -> Result<IngestWindow, StoreError> {
        let conn = self.conn().await?;
        let requests = i32::try_from(requests).unwrap_or(i32::MAX);
        let row = conn
            .client
            .query_one(&conn.count_ingest, &[&organization_id, &requests])
            .await
            .map_err(map_err)?;
        Ok(IngestWindow {
            used: row.get::<_, i32>(0).max(0) as u32,
            resets_in_secs: row.get::<_, i32>(1).max(0) as u32,
        })
    }

    async fn prune_rate_windows(&self) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        conn.client
            .execute(&conn.prune_counters, &[])
            .await
            .map_err(map_err)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fair_claim_ends_with_the_update_of_claim_sql() {
        let statement = super::sql::claim_fair();
        assert!(
            !statement.contains("/* the UPDATE of claim.sql */"),
            "marker replaced"
        );
        assert!(statement
            .trim_end()
            .ends_with("j.claim_token, j.claimed_at"));
        assert_eq!(
            statement.matches("UPDATE notification_jobs AS j").count(),
            1
        );
        assert!(statement.contains("WITH RECURSIVE"));
    }

    #[test]
    fn the_combined_statement_embeds_the_claim() {
        let statement = super::sql::complete_and_claim();
        assert!(!statement.contains("/* claim.sql */"), "marker replaced");
        assert!(statement.contains("LIMIT $12"), "the claim's size is $12");
        assert!(statement.contains("FOR UPDATE SKIP LOCKED"));
    }
}
