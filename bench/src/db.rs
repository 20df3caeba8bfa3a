//! The benchmark's databases on the server `DATABASE_URL` names: `notif_bench` (migrated,
//! for our code and pgbench), `notif_bench_peer` (for the peer), both created fresh, and
//! `notif_bench_history` (migrated, for the claim with a full history) while 2 runs.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use notify_postgres::db::DbConfig;
use tokio_postgres::Client;

pub const DB: &str = "notif_bench";

/// A UUIDv7 made in SQL from the timestamp expression `t`, as ingest makes job ids
/// (`Uuid::now_v7`): 48 bits of Unix milliseconds (floored), the version, random bits with
/// the RFC 4122 variant. The schema refuses any other kind of job id, and finds a job by id in
/// the partitions of the days around the id's time only: `t` must be within a day of the
/// job's `created_at` (the fills pass `created_at` itself, or the clock of the statement that
/// sets it).
pub fn uuid_v7(t: &str) -> String {
    format!(
        "(lpad(to_hex(floor(extract(epoch FROM {t}) * 1000)::bigint), 12, '0') || '7'
          || substr(md5(random()::text), 1, 3) || to_hex(8 + floor(random() * 4)::int)
          || substr(md5(random()::text), 1, 15))::uuid"
    )
}
pub const PEER_DB: &str = "notif_bench_peer";
/// The claim-latency runs' second database, the one with the history (claim.rs).
pub const HISTORY_DB: &str = "notif_bench_history";

/// The tables a job is written to: its request, its queue row while open, its outcome row
/// once finished (with its last attempt), one attempt row per other attempt (the history's
/// three are partitioned by day: TRUNCATE and VACUUM reach every partition), and its
/// idempotency key when it came with one (kept as long as its day's history).
pub const JOB_TABLES: [&str; 5] = [
    "job_requests",
    "job_queue",
    "job_outcomes",
    "job_attempts",
    "idempotency_keys",
];

/// The organization every job of the benchmark belongs to.
pub const ORG: &str = "0b9d8c1e-0000-4000-8000-000000000001";

/// How long after its `send_at` a job expires when its request gives no `expires_at`, in
/// seconds: ingest's default (`JOB_MAX_AGE_SECS`), which the fills write as ingest does.
pub fn max_age_secs() -> i64 {
    notify_api::DEFAULT_MAX_AGE.as_secs() as i64
}

pub struct Bench {
    /// The database's name.
    pub db: String,
    /// The benchmark database, as a URL (for pgbench) and as a config (for our code).
    pub url: String,
    pub config: DbConfig,
    pub peer_url: String,
    admin: DbConfig,
    /// A connection for set-up, resets and checks (not used by what is measured).
    pub client: Client,
}

impl Bench {
    pub async fn setup(admin_url: &str) -> Result<Self> {
        let admin = DbConfig::new(admin_url, None).context("DATABASE_URL")?;
        let client = admin.connect().await.context("connect to DATABASE_URL")?;
        for db in [DB, PEER_DB] {
            recreate(&client, db).await?;
        }
        // left by an interrupted run
        drop_database(&client, HISTORY_DB).await;
        let peer_url = url_with_db(admin_url, PEER_DB)?;
        Self::open(admin, DB, admin_url, peer_url).await
    }

    /// Connects to `db` (existing) and brings it to the current schema.
    async fn open(admin: DbConfig, db: &str, admin_url: &str, peer_url: String) -> Result<Self> {
        // the statements prepared, as the template ships the functions on a direct connection
        let config = admin.with_dbname(db).with_prepared_statements(true);
        let mut client = config
            .connect()
            .await
            .with_context(|| format!("connect to {db}"))?;
        notify_postgres::migrate::run(&mut client)
            .await
            .with_context(|| format!("migrate {db}"))?;
        Ok(Self {
            db: db.to_owned(),
            url: url_with_db(admin_url, db)?,
            peer_url,
            config,
            admin,
            client,
        })
    }

    /// Whether what is measured prepares its statements (as the template ships it on a
    /// direct connection: [`Bench::open`] turns it on) or runs them unnamed.
    pub fn set_prepared_statements(&mut self, prepared: bool) {
        self.config = self.config.clone().with_prepared_statements(prepared);
    }

    /// The server's WAL counters (pg_stat_wal, cluster-wide): (bytes, full-page images).
    pub async fn wal_counters(&self) -> Result<(f64, f64)> {
        let row = self
            .client
            .query_one(
                "SELECT wal_bytes::float8, wal_fpi::float8 FROM pg_stat_wal",
                &[],
            )
            .await
            .context("read pg_stat_wal")?;
        Ok((row.get(0), row.get(1)))
    }

    /// Another benchmark database beside this one on the same server, created fresh and
    /// migrated; [`Bench::drop_sibling`] drops it.
    pub async fn sibling(&self, db: &str) -> Result<Bench> {
        let client = self
            .admin
            .connect()
            .await
            .context("connect to DATABASE_URL")?;
        recreate(&client, db).await?;
        Self::open(self.admin.clone(), db, &self.url, self.peer_url.clone()).await
    }

    /// Drops a database [`Bench::sibling`] made.
    pub async fn drop_sibling(self) {
        drop(self.client);
        if let Ok(client) = self.admin.connect().await {
            drop_database(&client, &self.db).await;
        }
    }

    /// Drops the databases.
    pub async fn teardown(self) {
        drop(self.client);
        if let Ok(client) = self.admin.connect().await {
            for db in [DB, PEER_DB, HISTORY_DB] {
                drop_database(&client, db).await;
            }
        }
    }

    /// An empty queue: no jobs, no attempt rows, no idempotency keys, and nothing that
    /// refers to a job (CASCADE: whatever names a job by foreign key). The history's day
    /// partitions stay (empty), and so do their rows in `history_days`.
    pub async fn truncate(&self) -> Result<()> {
        self.client
            .batch_execute(&format!("TRUNCATE {} CASCADE", JOB_TABLES.join(", ")))
            .await
            .context("truncate")?;
        Ok(())
    }

    /// Adds `n` due jobs (half SMS, half email) in one statement, written as ingest writes a
    /// request without `send_at`, `expires_at` or `max_attempts` (insert_jobs.sql): its
    /// request and its queue row, both with the statement's time as `created_at` (the queue
    /// row's `updated_at` too), due a second ago, expiring `JOB_MAX_AGE_SECS` after that, a
    /// UUIDv7 id of the moment it was made (time order, as ingest's), no idempotency key.
    pub async fn insert_due(&self, n: i64) -> Result<()> {
        self.client
            .execute(
                &format!(
                    "WITH jobs AS (
                 INSERT INTO job_requests (id, organization_id, created_at, channel, payload,
                                           max_attempts, send_at, expires_at)
                 SELECT {id}, '{ORG}'::uuid, now(),
                        CASE WHEN g % 2 = 0 THEN 'sms' ELSE 'email' END,
                        CASE WHEN g % 2 = 0
                             THEN jsonb_build_object('to', '+1555' || lpad(g::text, 7, '0'),
                                                     'message', 'Your invoice is paid')
                             ELSE jsonb_build_object('to', 'user' || g || '@example.com',
                                                     'subject', 'Invoice paid',
                                                     'text', 'Your invoice is paid')
                        END,
                        {max_attempts}, now() - interval '1 second',
                        now() - interval '1 second' + make_interval(secs => $2::bigint)
                 FROM generate_series(1, $1::bigint) AS g
                 RETURNING id, organization_id, channel, payload, send_at, expires_at,
                           max_attempts, created_at
                 )
                 INSERT INTO job_queue (id, organization_id, channel, payload, next_attempt_at,
                                        expires_at, max_attempts, created_at, updated_at)
                 -- the payload stored once, as ingest writes it (insert_jobs.sql)
                 SELECT id, organization_id, channel,
                        CASE WHEN (SELECT copies_payload FROM queue_settings) THEN payload END,
                        send_at, expires_at, max_attempts, created_at, created_at
                 FROM jobs",
                    id = uuid_v7("clock_timestamp()"),
                    max_attempts = notify_api::validate::DEFAULT_MAX_ATTEMPTS,
                ),
                &[&n, &max_age_secs()],
            )
            .await
            .context("insert due jobs")?;
        Ok(())
    }

    /// Statistics fresh, visibility map set, dirty pages flushed: every run starts alike.
    pub async fn settle(&self) -> Result<()> {
        for table in JOB_TABLES {
            self.client
                .batch_execute(&format!("VACUUM ANALYZE {table}"))
                .await
                .context("vacuum")?;
        }
        // needs superuser (the benchmark's own cluster); elsewhere the run is a bit noisier
        let _ = self.client.batch_execute("CHECKPOINT").await;
        Ok(())
    }

    /// Autovacuum on or off for every table of this database (the history's partitions one by
    /// one: a partitioned parent takes no storage parameter). Off, [`Bench::settle`] is what
    /// vacuums them. The setting goes with the database.
    pub async fn autovacuum(&self, on: bool) -> Result<()> {
        set_autovacuum(&self.client, "public", on)
            .await
            .with_context(|| format!("autovacuum {on} in {}", self.db))
    }

    /// TRUNCATE, `n` due jobs, settle.
    pub async fn reset(&self, n: i64) -> Result<()> {
        self.truncate().await?;
        self.insert_due(n).await?;
        self.settle().await
    }

    /// Jobs by status, and attempts recorded (job_attempt_history).
    pub async fn counts(&self) -> Result<Counts> {
        let row = self
            .client
            .query_one(
                "SELECT (SELECT count(*) FROM job_outcomes WHERE status = 'sent'),
                        (SELECT count(*) FROM job_queue),
                        (SELECT count(*) FROM job_attempt_history)",
                &[],
            )
            .await
            .context("count jobs")?;
        Ok(Counts {
            sent: row.get(0),
            open: row.get(1),
            deliveries: row.get(2),
        })
    }

    /// The server's WAL position, in bytes.
    pub async fn wal(&self) -> Result<i64> {
        let row = self
            .client
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
                &[],
            )
            .await
            .context("pg_current_wal_lsn")?;
        Ok(row.get(0))
    }

    /// The server's version and the settings that decide durability.
    pub async fn settings(&self) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for name in [
            "server_version",
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "wal_sync_method",
            "shared_buffers",
            "max_wal_size",
        ] {
            let row = self
                .client
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .with_context(|| format!("SHOW {name}"))?;
            out.insert(name.into(), row.get::<_, String>(0));
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub sent: i64,
    pub open: i64,
    pub deliveries: i64,
}

/// `postgres://user@host:port/db?params` with another database name.
/// `db`, empty: dropped if it exists (whoever is connected), then created.
async fn recreate(client: &Client, db: &str) -> Result<()> {
    // one statement each: a multi-statement string runs as one transaction
    for statement in [
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        format!("CREATE DATABASE {db}"),
    ] {
        client
            .batch_execute(&statement)
            .await
            .with_context(|| format!("create the database {db}"))?;
    }
    Ok(())
}

/// Drops `db` if it exists; a failure leaves it for the next run's set-up.
async fn drop_database(client: &Client, db: &str) {
    let _ = client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await;
}

/// Autovacuum on or off for every ordinary table of `schema`, in `client`'s database (the
/// setting goes with the tables).
pub async fn set_autovacuum(client: &Client, schema: &str, on: bool) -> Result<()> {
    client
        .batch_execute(&format!(
            "DO $$
                 DECLARE t regclass;
                 BEGIN
                     FOR t IN SELECT c.oid::regclass FROM pg_class c
                              JOIN pg_namespace n ON n.oid = c.relnamespace
                              WHERE c.relkind = 'r' AND n.nspname = {schema}
                     LOOP
                         EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = {on}, \
                                         toast.autovacuum_enabled = {on})', t);
                     END LOOP;
                 END $$",
            schema = quote_literal(schema)
        ))
        .await
        .with_context(|| format!("autovacuum {on} on the tables of {schema}"))?;
    Ok(())
}

/// A SQL string literal.
fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub fn url_with_db(url: &str, db: &str) -> Result<String> {
    notify_postgres::db::url_with_dbname(url, db).with_context(
        || "DATABASE_URL must be a postgres:// URL for the benchmark (pgbench and the peer use it)",
    )
}
