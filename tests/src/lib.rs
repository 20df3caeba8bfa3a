//! Test harness: each test gets its own fresh database, cloned from a migrated template.
//!
//! `DATABASE_URL` names the server (set by `make test`, which starts a throwaway cluster
//! when it is unset). The template is built once per set of migrations, under an advisory
//! lock, so test binaries running at once share it; each clone is dropped when its
//! [`TestDb`] goes out of scope.
//!
//! With `TEST_POOLER_URL` set (`make test` sets it for its second pass, naming a PgBouncer in
//! transaction pooling mode), the code under test reaches each test database through the
//! pooler; the test's own set-up and assertions ([`TestDb::client`]) stay direct.

pub mod apigw;
pub mod contract;
pub mod factory;
pub mod faults;
pub mod proxy;
pub mod readme;
pub mod response_url;
pub mod stand_in;
pub mod watch;

use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use shared::db::DbConfig;
use shared::store::PgStore;
use tokio_postgres::Client;

/// A database of this test's own, migrated, empty, and dropped at the end.
pub struct TestDb {
    pub name: String,
    /// What the code under test connects with: through the pooler when there is one.
    pub config: DbConfig,
    /// Straight to the server, for the test's own queries.
    pub direct: DbConfig,
    admin: DbConfig,
}

/// The server's admin connection settings, from `DATABASE_URL`.
pub fn admin_config() -> DbConfig {
    let url = std::env::var("DATABASE_URL")
        .expect("DATABASE_URL is not set: run the tests with `make test`, which starts PostgreSQL");
    DbConfig::new(&url, None).expect("DATABASE_URL must be valid")
}

/// The pooler the code under test goes through, from `TEST_POOLER_URL`, if any.
pub fn pooler() -> Option<(String, u16)> {
    let url = std::env::var("TEST_POOLER_URL").ok()?;
    Some(
        DbConfig::new(&url, None)
            .expect("TEST_POOLER_URL must be valid")
            .host_port(),
    )
}

/// `direct` as the code under test should reach it.
fn routed(direct: &DbConfig) -> DbConfig {
    match pooler() {
        Some((host, port)) => direct.with_host_port(&host, port),
        None => direct.clone(),
    }
}

fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        uuid::Uuid::new_v4().simple().to_string().get(..8).unwrap()
    )
}

impl TestDb {
    /// A fresh, migrated database.
    pub async fn new() -> Self {
        let admin = admin_config();
        let template = ensure_template(&admin).await;
        let name = unique_name("notif_test");
        let client = admin
            .connect()
            .await
            .expect("connect to the admin database");
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
            .expect("clone the template database");
        Self::named(admin, name)
    }

    /// A fresh database with no schema at all (for migration tests).
    pub async fn empty() -> Self {
        let admin = admin_config();
        let name = unique_name("notif_empty");
        let client = admin
            .connect()
            .await
            .expect("connect to the admin database");
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create an empty database");
        Self::named(admin, name)
    }

    fn named(admin: DbConfig, name: String) -> Self {
        let direct = admin.with_dbname(&name);
        Self {
            config: routed(&direct),
            direct,
            name,
            admin,
        }
    }

    /// A new connection to this database, straight to the server (the test's own queries
    /// may use named statements, which a transaction pooler cannot carry).
    pub async fn client(&self) -> Client {
        self.direct
            .connect()
            .await
            .expect("connect to the test database")
    }

    /// A job store on its own connection.
    pub async fn store(&self) -> PgStore {
        PgStore::connect(self.config.clone())
            .await
            .expect("open a store on the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop is not async: drop the database from a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(client) = admin.connect().await {
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

const TEMPLATE_LOCK: i64 = 0x7465_6d70_6c74; // "templt"

/// Creates the migrated template for the current migrations once; returns its name.
async fn ensure_template(admin: &DbConfig) -> String {
    let all: String = shared::migrate::MIGRATIONS
        .iter()
        .map(|(name, sql)| format!("{name}\n{sql}\n"))
        .collect();
    let template = format!(
        "notif_tpl_{}",
        &hex::encode(Sha256::digest(all.as_bytes()))[..16]
    );
    let client = admin
        .connect()
        .await
        .expect("connect to the admin database");
    client
        .execute("SELECT pg_advisory_lock($1)", &[&TEMPLATE_LOCK])
        .await
        .unwrap();
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&template])
        .await
        .unwrap()
        .is_some();
    if !exists {
        let building = format!("{template}_building");
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"))
            .await
            .unwrap();
        client
            .batch_execute(&format!("CREATE DATABASE {building}"))
            .await
            .unwrap();
        {
            let mut tpl = admin.with_dbname(&building).connect().await.unwrap();
            shared::migrate::run(&mut tpl)
                .await
                .expect("migrate the template");
        }
        // the migrating connection must be gone before the rename
        client
            .batch_execute(&format!("ALTER DATABASE {building} RENAME TO {template}"))
            .await
            .unwrap_or_else(|e| panic!("rename template: {e:?}"));
    }
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&TEMPLATE_LOCK])
        .await
        .unwrap();
    template
}

/// The single number a `SELECT count(*) …` query answers.
pub async fn count(client: &Client, sql: &str) -> i64 {
    client
        .query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// The queue rows of the jobs a fixture just inserted, as ingest writes them beside each
/// record (insert_jobs.sql): a CTE to end a `WITH jobs AS (INSERT INTO job_requests …
/// RETURNING id, organization_id, channel, payload, next_attempt_at, max_attempts,
/// created_at)`.
pub const QUEUE_JOBS: &str = "
    INSERT INTO job_queue (id, organization_id, channel, payload, next_attempt_at, max_attempts,
                           created_at)
    SELECT id, organization_id, channel, payload, next_attempt_at, max_attempts, created_at
    FROM jobs";

/// Every migration before `version` (e.g. `"0011"`): a database as a deployed release left
/// it, for tests of the migration that follows.
pub fn migrations_before(version: &str) -> Vec<(&'static str, &'static str)> {
    shared::migrate::MIGRATIONS
        .iter()
        .copied()
        .filter(|(name, _)| name.as_bytes() < version.as_bytes())
        .collect()
}

/// Inserts `n` due jobs, each of its own organization (fast fixtures for the claim tests);
/// returns ids.
pub async fn insert_due_jobs(client: &Client, n: i64) -> Vec<uuid::Uuid> {
    factory::Job::new()
        .own_organizations()
        .insert_many(client, n)
        .await
}

/// One attempt's result for a claimed job, as a worker would report it.
pub fn completion(
    job: &shared::store::ClaimedJob,
    decision: shared::store::Decision,
    provider_message_id: Option<&str>,
) -> shared::store::Completion {
    let now = chrono::Utc::now();
    shared::store::Completion {
        job_id: job.id,
        claim_token: job.claim_token,
        attempt: job.tries,
        channel: job.channel,
        decision,
        provider_message_id: provider_message_id.map(str::to_owned),
        error_code: None,
        error_message: None,
        started_at: now,
        finished_at: now,
        job_created_at: job.created_at,
    }
}

/// The previous release's statements (0013, before the history was partitioned), verbatim:
/// its ingest, its claim, and its completion with the claim spliced in (as the store does),
/// for the tests of 0014 and 0015 with that release still running.
pub mod release_0013 {
    use chrono::{DateTime, Utc};
    use tokio_postgres::Client;
    use uuid::Uuid;

    pub const INSERT_JOBS: &str = include_str!("../fixtures/release_0013/insert_jobs.sql");
    pub const CLAIM: &str = include_str!("../fixtures/release_0013/claim.sql");

    pub fn complete() -> String {
        include_str!("../fixtures/release_0013/complete.sql").replace("/* claim.sql */", CLAIM)
    }

    /// Its ingest of one SMS job, keyed or not: `Some(id)` when inserted, `None` for a repeat.
    pub async fn ingest(
        client: &Client,
        org: Uuid,
        key: Option<&str>,
    ) -> Result<Option<Uuid>, tokio_postgres::Error> {
        ingest_with(client, INSERT_JOBS, org, key).await
    }

    /// The same with a release's insert_jobs.sql (its parameters have not changed since).
    pub async fn ingest_with(
        client: &Client,
        insert_jobs: &str,
        org: Uuid,
        key: Option<&str>,
    ) -> Result<Option<Uuid>, tokio_postgres::Error> {
        let id = Uuid::now_v7();
        let to = format!("+1555{:07}", id.as_u128() % 10_000_000);
        let rows = client
            .query(
                insert_jobs,
                &[
                    &vec![id],
                    &vec![org],
                    &vec!["sms".to_owned()],
                    &vec![serde_json::json!({"to": to, "message": "hi"})],
                    &vec![5_i32],
                    &vec![Utc::now() - chrono::Duration::seconds(1)],
                    &vec![key.map(str::to_owned)],
                    &vec![key.map(|k| format!("hash-{k}"))],
                    &vec![Utc::now() + chrono::Duration::days(1)],
                    &vec![None::<String>],
                    &vec![to.clone()],
                ],
            )
            .await?;
        Ok(rows.first().map(|r| r.get("id")))
    }

    /// A claimed job: id, claim token, try number.
    pub type Claimed = (Uuid, Uuid, i32);

    /// Its worker's statement: completes `sent` as sent (provider message id `msg-<id>`) and
    /// claims up to `batch` due jobs.
    pub async fn complete_and_claim(
        client: &Client,
        sent: &[Claimed],
        batch: i64,
    ) -> Result<Vec<Claimed>, tokio_postgres::Error> {
        let rows = sent_and_claim(client, &complete(), sent, batch, None).await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("id"), r.get("claim_token"), r.get("tries")))
            .collect())
    }

    /// A release's completion-and-claim statement (`sql`, the store's parameters up to
    /// $13, and $14 the jobs' creation times when `created` is given) completing `sent` as
    /// sent (provider message id `msg-<id>`) and claiming up to `batch` due jobs: the rows
    /// of the jobs claimed.
    pub(crate) async fn sent_and_claim(
        client: &Client,
        sql: &str,
        sent: &[Claimed],
        batch: i64,
        created: Option<Vec<DateTime<Utc>>>,
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let now = Utc::now();
        let n = sent.len();
        let ids: Vec<Uuid> = sent.iter().map(|c| c.0).collect();
        let tokens: Vec<Uuid> = sent.iter().map(|c| c.1).collect();
        let tries: Vec<i32> = sent.iter().map(|c| c.2).collect();
        let outcomes = vec!["sent".to_owned(); n];
        let no_times = vec![None::<DateTime<Utc>>; n];
        let providers = vec!["sns".to_owned(); n];
        let message_ids: Vec<Option<String>> =
            sent.iter().map(|c| Some(format!("msg-{}", c.0))).collect();
        let no_text = vec![None::<String>; n];
        let times = vec![now; n];
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
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
        ];
        if let Some(created) = &created {
            params.push(created);
        }
        let rows = client.query(sql, &params).await?;
        Ok(rows
            .into_iter()
            .filter(|r| r.get::<_, Option<bool>>("applied").is_none())
            .collect())
    }
}

/// The release before 0018 (its last attempts as rows of job_attempts), verbatim: its
/// claim, and its completion with the claim spliced in, for the test of 0018 with that
/// release still running. (Its ingest is today's: insert_jobs.sql has not changed since.)
pub mod release_0017 {
    use chrono::{DateTime, Utc};
    use tokio_postgres::Client;
    use uuid::Uuid;

    pub const CLAIM: &str = include_str!("../fixtures/release_0017/claim.sql");

    pub fn complete() -> String {
        include_str!("../fixtures/release_0017/complete.sql").replace("/* claim.sql */", CLAIM)
    }

    /// A claimed job: id, claim token, try number, creation time.
    pub type Claimed = (Uuid, Uuid, i32, DateTime<Utc>);

    /// Its worker's statement: completes `sent` as sent (provider message id `msg-<id>`) and
    /// claims up to `batch` due jobs.
    pub async fn complete_and_claim(
        client: &Client,
        sent: &[Claimed],
        batch: i64,
    ) -> Result<Vec<Claimed>, tokio_postgres::Error> {
        let plain: Vec<super::release_0013::Claimed> =
            sent.iter().map(|c| (c.0, c.1, c.2)).collect();
        let created = sent.iter().map(|c| c.3).collect();
        let rows =
            super::release_0013::sent_and_claim(client, &complete(), &plain, batch, Some(created))
                .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get("id"),
                    r.get("claim_token"),
                    r.get("tries"),
                    r.get("created_at"),
                )
            })
            .collect())
    }
}
