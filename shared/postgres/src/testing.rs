//! For tests only (the `test-support` feature): jobs arranged in any state through the
//! store's own statements (`sql/test_*.sql`), so the table layout is known in one place and
//! the statement check covers these too. The tests' factory (tests/src/factory.rs) builds
//! [`TestJob`]s; time in a test is set, never waited for.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;
use tokio_postgres::Client;
use tokio_postgres::types::{Json, ToSql};
use uuid::Uuid;

use crate::sql::{self, FromRow, Query};
use notify_core::domain::{Channel, JobStatus};

/// One job to insert, as it stands.
#[derive(Debug, Clone)]
pub struct TestJob {
    pub organization_id: Uuid,
    pub channel: Channel,
    pub payload: Value,
    pub status: JobStatus,
    /// Attempts spent (and provider calls made: the same here).
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    /// In processing since then, under a fresh claim token; `None`: not claimed.
    pub claimed_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// The last attempt's error (a `failed` job without one gets a throttling error).
    pub last_error: Option<String>,
}

impl TestJob {
    /// A pending job of `organization_id`, due a second ago, created now, 5 attempts.
    pub fn due(organization_id: Uuid, channel: Channel, payload: Value) -> Self {
        let now = Utc::now();
        Self {
            organization_id,
            channel,
            payload,
            status: JobStatus::Pending,
            attempts: 0,
            max_attempts: 5,
            next_attempt_at: now - chrono::TimeDelta::seconds(1),
            claimed_at: None,
            created_at: now,
            updated_at: now,
            expires_at: None,
            last_error: None,
        }
    }
}

async fn run<R: FromRow>(
    client: &Client,
    query: &Query<R>,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<R>, tokio_postgres::Error> {
    let rows = client.query_typed(query.sql, &query.typed(params)).await?;
    rows.iter().map(R::read).collect()
}

/// Inserts `jobs` (making their days' partitions first); their ids, in order.
pub async fn insert_jobs(
    client: &Client,
    jobs: &[TestJob],
) -> Result<Vec<Uuid>, tokio_postgres::Error> {
    let mut days: Vec<NaiveDate> = jobs.iter().map(|j| j.created_at.date_naive()).collect();
    days.sort_unstable();
    days.dedup();
    run(client, &sql::TEST_HISTORY_DAYS, &[&days]).await?;
    let column = |f: fn(&TestJob) -> DateTime<Utc>| jobs.iter().map(f).collect::<Vec<_>>();
    let organizations: Vec<Uuid> = jobs.iter().map(|j| j.organization_id).collect();
    let channels: Vec<&str> = jobs.iter().map(|j| j.channel.as_str()).collect();
    let payloads: Vec<Json<&Value>> = jobs.iter().map(|j| Json(&j.payload)).collect();
    let statuses: Vec<&str> = jobs.iter().map(|j| j.status.as_str()).collect();
    let attempts: Vec<i32> = jobs.iter().map(|j| j.attempts).collect();
    let budgets: Vec<i32> = jobs.iter().map(|j| j.max_attempts).collect();
    let claimed: Vec<Option<DateTime<Utc>>> = jobs.iter().map(|j| j.claimed_at).collect();
    let expires: Vec<Option<DateTime<Utc>>> = jobs.iter().map(|j| j.expires_at).collect();
    let errors: Vec<Option<&str>> = jobs.iter().map(|j| j.last_error.as_deref()).collect();
    let rows = run(
        client,
        &sql::TEST_INSERT_JOBS,
        &[
            &organizations,
            &channels,
            &payloads,
            &statuses,
            &attempts,
            &budgets,
            &column(|j| j.next_attempt_at),
            &claimed,
            &column(|j| j.created_at),
            &column(|j| j.updated_at),
            &expires,
            &errors,
        ],
    )
    .await?;
    Ok(rows.into_iter().map(|row| row.id).collect())
}

/// Makes queued jobs due at `at` (a backoff skipped); how many changed.
pub async fn make_due(
    client: &Client,
    ids: &[Uuid],
    at: DateTime<Utc>,
) -> Result<u64, tokio_postgres::Error> {
    let rows = run(client, &sql::TEST_MAKE_DUE, &[&ids, &at]).await?;
    Ok(rows.len() as u64)
}

/// Takes a job's claim over, as another invocation would after a sweep; whether it was
/// queued.
pub async fn steal_claim(client: &Client, id: Uuid) -> Result<bool, tokio_postgres::Error> {
    let rows = run(client, &sql::TEST_STEAL_CLAIM, &[&id]).await?;
    Ok(!rows.is_empty())
}
