//! The 1.0 release at work, from a pinned copy of its statements (`tests/fixtures/release_1_0/`:
//! the files of 1.0's `shared/postgres/sql/` that these paths run, never edited): its ingest, its
//! worker's claim and completion, its sweeper's steps and its `GET`, run as its store runs
//! them. The online migration harness
//! (`tests/it/online_migration.rs`) keeps it working while each migration after 1.0 is
//! applied: a deploy rolls out while the previous release still serves, and a rollback runs it
//! on the newer schema.

use chrono::{DateTime, Utc};
use tokio_postgres::{Client, Row};
use uuid::Uuid;

/// The schema version 1.0 needs (its last migration's).
pub const SCHEMA_VERSION: i32 = 3;

macro_rules! statement {
    ($name:ident, $file:literal) => {
        pub const $name: &str = include_str!(concat!("../fixtures/release_1_0/", $file));
    };
}
statement!(INSERT_JOBS, "insert_jobs.sql");
statement!(CLAIM, "claim.sql");
statement!(COMPLETE, "complete.sql");
statement!(SWEEP, "sweep.sql");
statement!(EXPIRE, "expire.sql");
statement!(ADD_HISTORY_DAYS, "add_history_days.sql");
statement!(DROP_HISTORY_DAYS, "drop_history_days.sql");
statement!(GET_JOB, "get_job.sql");
statement!(LIST_DELIVERIES, "list_deliveries.sql");

/// The worker's statement: complete.sql with claim.sql in its `claimed` CTE, as 1.0's store
/// composes it.
pub fn complete_and_claim_statement() -> String {
    COMPLETE.replace("/* claim.sql */", CLAIM.trim())
}

/// A claimed job: id, claim token, try number, creation time.
pub type Claimed = (Uuid, Uuid, i32, DateTime<Utc>);

fn claimed(row: &Row) -> Claimed {
    (
        row.get("id"),
        row.get("claim_token"),
        row.get("tries"),
        row.get("created_at"),
    )
}

/// Its ingest of one SMS job to `to`: the new job's id.
pub async fn ingest(client: &Client, org: Uuid, to: &str) -> Result<Uuid, tokio_postgres::Error> {
    let id = Uuid::now_v7();
    let now = Utc::now();
    let rows = client
        .query(
            INSERT_JOBS,
            &[
                &vec![id],
                &vec![org],
                &vec!["sms".to_owned()],
                &vec![serde_json::json!({"to": to, "message": "hi"})],
                &vec![5_i32],
                &vec![now - chrono::Duration::seconds(1)],
                &vec![None::<String>],
                &vec![None::<String>],
                &vec![now + chrono::Duration::days(1)],
                &vec![None::<String>],
            ],
        )
        .await?;
    Ok(rows.first().map_or(id, |r| r.get("id")))
}

/// Its claim of up to `batch` due jobs.
pub async fn claim(client: &Client, batch: i64) -> Result<Vec<Claimed>, tokio_postgres::Error> {
    let rows = client
        .query(CLAIM, &[&batch, &None::<DateTime<Utc>>])
        .await?;
    Ok(rows.iter().map(claimed).collect())
}

/// Its worker's statement: completes `sent` as sent (provider message id `msg-<id>`) and
/// claims up to `batch` due jobs. Returns the ids whose completion applied, and the batch
/// claimed.
pub async fn complete_and_claim(
    client: &Client,
    sent: &[Claimed],
    batch: i64,
) -> Result<(Vec<Uuid>, Vec<Claimed>), tokio_postgres::Error> {
    let now = Utc::now();
    let n = sent.len();
    let ids: Vec<Uuid> = sent.iter().map(|c| c.0).collect();
    let tokens: Vec<Uuid> = sent.iter().map(|c| c.1).collect();
    let tries: Vec<i32> = sent.iter().map(|c| c.2).collect();
    let created: Vec<DateTime<Utc>> = sent.iter().map(|c| c.3).collect();
    let outcomes = vec!["sent".to_owned(); n];
    let no_times = vec![None::<DateTime<Utc>>; n];
    let providers = vec!["sns".to_owned(); n];
    let message_ids: Vec<Option<String>> =
        sent.iter().map(|c| Some(format!("msg-{}", c.0))).collect();
    let no_text = vec![None::<String>; n];
    let times = vec![now; n];
    let rows = client
        .query(
            &complete_and_claim_statement(),
            &[
                &batch,
                &None::<DateTime<Utc>>,
                &ids,
                &tokens,
                &tries,
                &outcomes,
                &no_times,
                &providers,
                &message_ids,
                &no_text,
                &no_text,
                &times,
                &times,
                &created,
            ],
        )
        .await?;
    let mut applied = Vec::new();
    let mut next = Vec::new();
    for row in &rows {
        match row.get::<_, Option<bool>>("applied") {
            Some(true) => applied.push(row.get("id")),
            Some(false) => {}
            None => next.push(claimed(row)),
        }
    }
    Ok((applied, next))
}

/// What one run of its sweeper did: days added, jobs requeued or buried, jobs expired, days
/// dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub added: i32,
    pub requeued: i64,
    pub dead: i64,
    pub expired: i64,
    pub dropped: i32,
}

/// One run of its sweeper's steps on the database's clock: the days ahead, the sweep (600 s
/// window), expiry, and retention (30 days, and the 72 h feedback window).
pub async fn sweep(client: &Client) -> Result<Swept, tokio_postgres::Error> {
    let now = None::<DateTime<Utc>>;
    let added: i32 = client.query_one(ADD_HISTORY_DAYS, &[&now]).await?.get(0);
    let swept = client
        .query_one(SWEEP, &[&600.0_f64, &1_000_i64, &now])
        .await?;
    let expired: i64 = client.query_one(EXPIRE, &[&1_000_i64, &now]).await?.get(0);
    let dropped: i32 = client
        .query_one(DROP_HISTORY_DAYS, &[&now, &(30.0 * 86_400.0_f64)])
        .await?
        .get(0);
    Ok(Swept {
        added,
        requeued: swept.get("requeued"),
        dead: swept.get("dead"),
        expired,
        dropped,
    })
}

/// Its `GET /notifications/{id}`: the job's status and how many attempts it lists, `None`
/// when the organization has no such job.
pub async fn get(
    client: &Client,
    org: Uuid,
    id: Uuid,
) -> Result<Option<(String, usize)>, tokio_postgres::Error> {
    let Some(job) = client.query_opt(GET_JOB, &[&id, &org]).await? else {
        return Ok(None);
    };
    let attempts = client.query(LIST_DELIVERIES, &[&id]).await?.len();
    Ok(Some((job.get("status"), attempts)))
}
