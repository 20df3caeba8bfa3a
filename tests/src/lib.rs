//! Test harness: each test gets its own fresh database, cloned from a migrated template.
//!
//! `DATABASE_URL` names the server (set by `make test`, which starts a throwaway cluster
//! when it is unset). The template is built once per set of migrations, under an advisory
//! lock, so test binaries running at once share it; each clone is dropped when its
//! [`TestDb`] goes out of scope.
//!
//! With `TEST_POOLER_URL` set (`make test` sets it for its second pass, naming a PgBouncer in
//! transaction pooling mode), the code under test reaches each test database through the
//! pooler, its statements unnamed; the test's own set-up and assertions ([`TestDb::client`])
//! stay direct. Without it, the code under test prepares its statements, as the template
//! ships it on a direct connection (`DATABASE_PREPARED_STATEMENTS`).

pub mod apigw;
pub mod contract;
pub mod factory;
pub mod faults;
pub mod proxy;
pub mod readme;
pub mod receiver;
pub mod release_1_0;
pub mod response_url;
pub mod ses_front;
pub mod stand_in;
pub mod watch;

use std::sync::atomic::{AtomicU64, Ordering};

use notify_postgres::PgStore;
use notify_postgres::db::DbConfig;
use sha2::{Digest, Sha256};
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

/// `direct` as the code under test should reach it: through the pooler with statements
/// unnamed, else straight with statements prepared.
fn routed(direct: &DbConfig) -> DbConfig {
    match pooler() {
        Some((host, port)) => direct
            .with_host_port(&host, port)
            .with_prepared_statements(false),
        None => direct.clone().with_prepared_statements(true),
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
        Self::cloned_from(admin, &template).await
    }

    /// A fresh database cloned from `template` (a migrated database nobody is connected to),
    /// with the history's days around today.
    pub async fn cloned_from(admin: DbConfig, template: &str) -> Self {
        let name = unique_name("notif_test");
        let client = admin
            .connect()
            .await
            .expect("connect to the admin database");
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
            .expect("clone the template database");
        let db = Self::named(admin, name);
        db.history_days_around_today().await;
        db
    }

    /// The history's partitions from yesterday to a week ahead, as the sweeper keeps them. The
    /// template was migrated once, perhaps days ago (a server kept up across days): its
    /// partitions are those of the day it was built, so each database cloned from it gets
    /// today's here.
    pub async fn history_days_around_today(&self) {
        self.client()
            .await
            .batch_execute("SELECT history_add_days((now() AT TIME ZONE 'UTC')::date - 1, 9)")
            .await
            .expect("make the history's days around today");
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
    let all: String = notify_postgres::migrate::MIGRATIONS
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
            notify_postgres::migrate::run(&mut tpl)
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

/// Waits (2 s at most) until a session of the server sleeps in `pg_sleep`: a test that slows
/// a statement down with a sleeping trigger knows that statement has reached it.
pub async fn until_a_statement_sleeps(client: &Client) {
    for _ in 0..200 {
        let sleeping = count(
            client,
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'",
        )
        .await;
        if sleeping > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A migration for the tests only (never shipped, never embedded), numbered after the
/// embedded ones: the online migration harness applies it while the 1.0 release works, and
/// the custom resource's tests deploy to it and roll back from it.
pub fn test_migration() -> (&'static str, &'static str) {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let name = NAME.get_or_init(|| {
        format!(
            "{:04}_online_test.sql",
            notify_postgres::migrate::latest_version() + 1
        )
    });
    (name, include_str!("../fixtures/migrations/online_test.sql"))
}

/// The embedded migrations and [`test_migration`] after them.
pub fn with_test_migration() -> Vec<(&'static str, &'static str)> {
    let mut files = notify_postgres::migrate::MIGRATIONS.to_vec();
    files.push(test_migration());
    files
}

/// Every migration up to `version` (e.g. `3`): a database as a release that needs that
/// schema version leaves it.
pub fn migrations_through(version: i32) -> Vec<(&'static str, &'static str)> {
    notify_postgres::migrate::MIGRATIONS
        .iter()
        .copied()
        .filter(|(name, _)| {
            name.split('_')
                .next()
                .and_then(|v| v.parse::<i32>().ok())
                .is_some_and(|v| v <= version)
        })
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
    job: &notify_core::store::ClaimedJob,
    decision: notify_core::store::Decision,
    provider_message_id: Option<&str>,
) -> notify_core::store::Completion {
    let now = chrono::Utc::now();
    notify_core::store::Completion {
        job_id: job.id,
        claim_token: job.claim_token,
        call: job.call,
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
