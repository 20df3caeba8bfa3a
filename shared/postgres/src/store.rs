//! The PostgreSQL adapter of the store port ([`JobStore`] and the others). Every statement
//! lives in `sql/`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use uuid::Uuid;

use crate::db::DbConfig;
use crate::migrate::MigrateError;
use notify_core::domain::{Channel, JobStatus, Priority};
use notify_core::store::{
    At, Claim, ClaimedJob, Complete, CompleteAndClaim, CompleteReport, Completion, CountIngest,
    Decision, DeliveryView, DropHistoryDays, DroppedDays, Expire, IngestWindow, Inserted, JobStore,
    JobSummary, JobView, ListCursor, NewJob, PruneFeedback, QueueDepth, Release, RequeueDead,
    StoreError, Sweep, SweepReport, Transition,
};

use crate::sql::{self, FromRow, Query};

mod events;
mod feedback;
mod fleet;
mod pace;

/// The job repository over one PostgreSQL connection per process.
///
/// The connection is opened on first use (or by [`PgStore::connect`] at cold start) and
/// re-opened on the next call after it closed, so a warm function outlives a database
/// restart. Every call is bounded by the statement timeout: past it, the statement is
/// cancelled, the connection dropped, and the call answers [`StoreError::Unavailable`].
///
/// Statements run unnamed by default (parsed and planned on every call, nothing left on the
/// server), which works through any pooler. When the settings allow it, each is prepared
/// once per connection and then only bound and executed: for a direct connection
/// ([`DbConfig::with_prepared_statements`],
/// docs/decisions/0014-prepared-statements-on-direct-connections.md).
pub struct PgStore {
    config: DbConfig,
    /// With a per-organization limit (jobs per minute), claims are fair and rate-limited.
    rate_limit_per_min: Option<u32>,
    statement_timeout: Duration,
    /// Apply pending migrations on the first connection (`MIGRATE_ON_START`, local use).
    migrate: bool,
    conn: Mutex<Option<Arc<Conn>>>,
}

/// One open connection and, when statements are prepared, those prepared on it: they live
/// and die with it (a reconnect prepares afresh).
struct Conn {
    client: Client,
    /// By [`key`]; `None`: statements run unnamed.
    prepared: Option<std::sync::Mutex<HashMap<usize, Statement>>>,
}

impl Conn {
    /// `query`'s statement on this connection, prepared now if it was not yet. Two callers
    /// that miss at once both prepare it; one keeps its copy, and the other's is closed on
    /// the server when dropped.
    async fn statement<R>(
        &self,
        cache: &std::sync::Mutex<HashMap<usize, Statement>>,
        query: &Query<R>,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = lock(cache).get(&key(query)) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare_typed(query.sql, query.params).await?;
        lock(cache).insert(key(query), statement.clone());
        Ok(statement)
    }

    /// Runs `query` prepared (its statement prepared once), or unnamed: its rows.
    async fn query<R>(
        &self,
        query: &Query<R>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        match &self.prepared {
            None => {
                self.client
                    .query_typed(query.sql, &query.typed(params))
                    .await
            }
            Some(cache) => {
                self.prepared(cache, query, |statement| async move {
                    self.client.query(&statement, params).await
                })
                .await
            }
        }
    }

    /// Runs `query` prepared, or unnamed: the number of rows it changed.
    async fn execute<R>(
        &self,
        query: &Query<R>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        match &self.prepared {
            None => {
                self.client
                    .execute_typed(query.sql, &query.typed(params))
                    .await
            }
            Some(cache) => {
                self.prepared(cache, query, |statement| async move {
                    self.client.execute(&statement, params).await
                })
                .await
            }
        }
    }

    /// `run` on `query`'s prepared statement. A migration may change what a statement
    /// prepared before it answers (a table it reads got another row type): the server
    /// refuses to run it, and it is prepared again and run once more.
    async fn prepared<R, T, F, Fut>(
        &self,
        cache: &std::sync::Mutex<HashMap<usize, Statement>>,
        query: &Query<R>,
        run: F,
    ) -> Result<T, tokio_postgres::Error>
    where
        F: Fn(Statement) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let statement = self.statement(cache, query).await?;
        match run(statement).await {
            Err(err) if stale_plan(&err) => {
                lock(cache).remove(&key(query));
                run(self.statement(cache, query).await?).await
            }
            done => done,
        }
    }
}

/// A statement's place in the cache: the address of its SQL (every [`Query`] is a static).
fn key<R>(query: &Query<R>) -> usize {
    query.sql.as_ptr() as usize
}

/// The cache's lock: no call panics while holding it, and a poisoned one is still a map.
fn lock(
    cache: &std::sync::Mutex<HashMap<usize, Statement>>,
) -> std::sync::MutexGuard<'_, HashMap<usize, Statement>> {
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// PostgreSQL refused a prepared statement whose plan a schema change made stale ("cached
/// plan must not change result type"), before running it.
fn stale_plan(err: &tokio_postgres::Error) -> bool {
    err.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::FEATURE_NOT_SUPPORTED
            && db
                .message()
                .starts_with("cached plan must not change result type")
    })
}

/// How many times ingest's statement runs when concurrent repeats of a key keep committing
/// it first (`insert_many`).
const KEY_RACE_TRIES: u32 = 5;

/// Whether `err` is a statement that lost a race for an idempotency key: a concurrent
/// repeat committed the key first (insert_jobs.sql).
fn lost_a_key_race(err: &StoreError) -> bool {
    let StoreError::Database(e) = err else {
        return false;
    };
    e.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::UNIQUE_VIOLATION && db.constraint() == Some("idempotency_keys_pkey")
    })
}

/// How long a store call may take before it is cancelled, unless configured otherwise.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a timed-out call waits for its cancel request to be delivered.
const CANCEL_WITHIN: Duration = Duration::from_secs(1);

/// A statement (or a connection attempt) ran past the statement timeout.
#[derive(Debug, thiserror::Error)]
#[error("the database did not answer within {0:?} (statement timeout)")]
pub struct TimedOut(pub Duration);

impl PgStore {
    /// A store that connects on first use.
    pub fn new(config: DbConfig) -> Self {
        Self {
            config,
            rate_limit_per_min: None,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            migrate: false,
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

    /// Each call (each statement, and opening the connection) is cancelled past `timeout`.
    pub fn with_statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Applies pending migrations when the first connection opens (local development; a
    /// deployed service migrates once per deploy instead).
    pub fn with_migrations(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
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

    /// The jobs `jobs` (ids and creation times) as they stand, in page order, read within
    /// their days only (jobs_within.sql).
    async fn jobs_within(
        &self,
        jobs: &[(Uuid, DateTime<Utc>)],
    ) -> Result<Vec<sql::JobRow>, StoreError> {
        let Some((from, to)) = window(jobs.iter().map(|(_, created_at)| *created_at)) else {
            return Ok(Vec::new());
        };
        let ids: Vec<Uuid> = jobs.iter().map(|(id, _)| *id).collect();
        self.query(&sql::JOBS_WITHIN, &[&ids, &from, &to]).await
    }

    /// Completions the completion statement did not apply (their token no longer holds the
    /// claim), told apart and recorded by record_late.sql: `(id, true)` for one recorded
    /// already (a repeat of a completion that committed), `(id, false)` for a late one (its
    /// claim was swept), now recorded against the sweeper's row.
    async fn record_late(&self, late: &[&Completion]) -> Result<Vec<(Uuid, bool)>, StoreError> {
        let Some((from, to)) = window(late.iter().map(|c| c.job_created_at)) else {
            return Ok(Vec::new());
        };
        let columns = Columns::of(late.iter().copied());
        let rows = self
            .query(
                &sql::RECORD_LATE,
                &[
                    &columns.ids,
                    &columns.calls,
                    &columns.outcomes,
                    &columns.providers,
                    &columns.message_ids,
                    &columns.error_codes,
                    &columns.error_messages,
                    &columns.started,
                    &columns.finished,
                    &columns.created,
                    &from,
                    &to,
                ],
            )
            .await?;
        Ok(rows.iter().map(|row| (row.id, row.recorded)).collect())
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
        // connecting has its own timeout; the schema check (or, locally, the migrations)
        // gets the statement timeout (a minute at least for migrations)
        let bound = crate::db::DEFAULT_CONNECT_TIMEOUT
            + if self.migrate {
                self.statement_timeout.max(Duration::from_secs(60))
            } else {
                self.statement_timeout
            };
        let client = tokio::time::timeout(bound, self.open())
            .await
            .map_err(|_| StoreError::Unavailable(Box::new(TimedOut(bound))))??;
        let conn = Arc::new(Conn {
            client,
            prepared: self.config.prepares().then(Default::default),
        });
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// A new connection, migrated when asked, whose schema is checked against the code.
    async fn open(&self) -> Result<Client, StoreError> {
        let mut client = self
            .config
            .connect()
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        if self.migrate {
            let report = crate::migrate::run(&mut client)
                .await
                .map_err(from_migrate)?;
            if !report.applied.is_empty() {
                tracing::info!(applied = ?report.applied, "migrations applied (MIGRATE_ON_START)");
            }
        } else if let Some(missing) = crate::migrate::first_missing(&client)
            .await
            .map_err(from_migrate)?
        {
            return Err(StoreError::SchemaBehind(missing));
        }
        Ok(client)
    }

    /// Runs one statement within the statement timeout; its rows, read as declared.
    pub(crate) async fn query<R: FromRow>(
        &self,
        query: &Query<R>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<R>, StoreError> {
        let rows = self.query_rows(query, params).await?;
        rows.iter().map(|row| read(query.name, row)).collect()
    }

    /// Runs one statement within the statement timeout; its rows as they came.
    async fn query_rows<R>(
        &self,
        query: &Query<R>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let conn = self.conn().await?;
        self.timed(&conn, conn.query(query, params)).await
    }

    /// Runs one statement within the statement timeout; the number of rows it changed.
    async fn execute(
        &self,
        query: &Query<sql::NoRows>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        self.timed(&conn, conn.execute(query, params)).await
    }

    /// `work` on `conn`, bounded by the statement timeout. Past it, the statement (which may
    /// still hold locks) is cancelled and the connection dropped: the next call starts afresh.
    async fn timed<T>(
        &self,
        conn: &Arc<Conn>,
        work: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.statement_timeout, work).await {
            Ok(result) => result.map_err(map_err),
            Err(_) => {
                // cancel before letting go of the connection: through a pooler, a client
                // that has left cannot cancel, and the statement would wait on
                let cancel = self.config.cancel(conn.client.cancel_token());
                if tokio::time::timeout(CANCEL_WITHIN, cancel).await.is_err() {
                    tracing::warn!("cannot cancel a statement past its timeout in time");
                }
                let mut current = self.conn.lock().await;
                if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
                    *current = None;
                }
                Err(StoreError::Unavailable(Box::new(TimedOut(
                    self.statement_timeout,
                ))))
            }
        }
    }

    pub(crate) async fn query_opt<R: FromRow>(
        &self,
        query: &Query<R>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<R>, StoreError> {
        let mut rows = self.query(query, params).await?;
        if rows.len() > 1 {
            return Err(StoreError::Corrupt(format!(
                "a statement meant to answer one row answered {}",
                rows.len()
            )));
        }
        Ok(rows.pop())
    }

    pub(crate) async fn query_one<R: FromRow>(
        &self,
        query: &Query<R>,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<R, StoreError> {
        self.query_opt(query, params)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a statement answered no row".into()))
    }

    /// Runs a cancel or requeue statement; when it changes nothing, tells why.
    async fn transition(
        &self,
        statement: &Query<sql::SummaryRow>,
        organization_id: Uuid,
        id: Uuid,
    ) -> Result<Transition, StoreError> {
        let params: [&(dyn ToSql + Sync); 2] = [&id, &organization_id];
        if let Some(row) = self.query_opt(statement, &params).await? {
            return Ok(Transition::Done(summary(
                row.id,
                &row.status,
                row.next_attempt_at,
            )?));
        }
        match self.query_opt(&sql::JOB_STATUS, &params).await? {
            None => Ok(Transition::NotFound),
            Some(row) => Ok(Transition::Refused(status(&row.status)?)),
        }
    }
}

/// The window `[from, to)` of creation times that holds every one of `times` (the days whose
/// partitions a statement is planned over); `None` for none.
fn window(
    times: impl Iterator<Item = DateTime<Utc>> + Clone,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let (from, last) = (times.clone().min()?, times.max()?);
    Some((from, last + chrono::TimeDelta::seconds(1)))
}

/// A row read as its statement declares it: a column missing or of another type is a
/// schema mismatch, reported, never a panic.
fn read<R: FromRow>(statement: &str, row: &Row) -> Result<R, StoreError> {
    R::read(row).map_err(|err| StoreError::Corrupt(format!("{statement}: {err}")))
}

/// The parameters paired with their declared types.
/// A failed migration or schema check: "try again later" when the connection is what failed.
fn from_migrate(err: MigrateError) -> StoreError {
    match err {
        MigrateError::Database(source) if is_connection_lost(&source) => {
            StoreError::Unavailable(Box::new(source))
        }
        other => StoreError::Migrate(Box::new(other)),
    }
}

/// The connection is gone or the server is not accepting work (shutting down, starting,
/// full): a condition that passes, not a fault of the statement.
pub(crate) fn is_connection_lost(err: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    let lost_connection =
        err.is_closed() || std::error::Error::source(err).is_some_and(|s| s.is::<std::io::Error>());
    let server_unavailable = err.code().is_some_and(|code| {
        code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::TOO_MANY_CONNECTIONS
            || *code == SqlState::QUERY_CANCELED
    });
    lost_connection || server_unavailable
}

/// Sorts a driver error into "try again later" or "something is wrong".
fn map_err(err: tokio_postgres::Error) -> StoreError {
    if is_connection_lost(&err) {
        StoreError::Unavailable(Box::new(err))
    } else {
        StoreError::Database(err)
    }
}

fn status(text: &str) -> Result<JobStatus, StoreError> {
    JobStatus::parse(text).ok_or_else(|| StoreError::Corrupt(format!("job status {text:?}")))
}

fn channel(text: &str) -> Result<Channel, StoreError> {
    Channel::parse(text).ok_or_else(|| StoreError::Corrupt(format!("channel {text:?}")))
}

fn priority(text: &str) -> Result<Priority, StoreError> {
    Priority::parse(text).ok_or_else(|| StoreError::Corrupt(format!("job priority {text:?}")))
}

/// A job from a row of get_job.sql or jobs_within.sql (no delivery attempts).
fn job_view(row: sql::JobRow) -> Result<JobView, StoreError> {
    Ok(JobView {
        id: row.id,
        channel: channel(&row.channel)?,
        to: row.recipient.unwrap_or_default(),
        status: status(&row.status)?,
        attempts: row.attempts,
        max_attempts: row.max_attempts,
        next_attempt_at: row.next_attempt_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
        last_error: row.last_error,
        priority: priority(&row.priority)?,
        deliveries: None,
    })
}

/// A claimed job from a row of claim.sql (or of the claim part of complete.sql).
fn claimed_job(row: sql::ClaimRow) -> Result<ClaimedJob, StoreError> {
    Ok(ClaimedJob {
        id: row.id,
        organization_id: row.organization_id,
        channel: channel(&row.channel)?,
        payload: row.payload,
        attempt: row.attempts,
        max_attempts: row.max_attempts,
        call: row.tries,
        claim_token: row.claim_token,
        claimed_at: row.claimed_at,
        created_at: row.created_at,
        suppressed: row.suppressed,
        trace_header: row.trace_header,
    })
}

fn summary(
    id: Uuid,
    status_text: &str,
    next_attempt_at: DateTime<Utc>,
) -> Result<JobSummary, StoreError> {
    Ok(JobSummary {
        id,
        status: status(status_text)?,
        next_attempt_at,
    })
}

/// Completions as the statements take them: one array per column.
#[derive(Default)]
struct Columns<'a> {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    calls: Vec<i32>,
    outcomes: Vec<&'static str>,
    retry_at: Vec<Option<DateTime<Utc>>>,
    providers: Vec<&'static str>,
    message_ids: Vec<Option<&'a str>>,
    error_codes: Vec<Option<&'a str>>,
    error_messages: Vec<Option<&'a str>>,
    started: Vec<DateTime<Utc>>,
    finished: Vec<DateTime<Utc>>,
    created: Vec<DateTime<Utc>>,
}

impl<'a> Columns<'a> {
    fn of(completions: impl IntoIterator<Item = &'a Completion>) -> Self {
        let mut columns = Columns::default();
        for c in completions {
            columns.ids.push(c.job_id);
            columns.tokens.push(c.claim_token);
            columns.calls.push(c.call);
            columns.outcomes.push(c.decision.as_str());
            columns.retry_at.push(match c.decision {
                Decision::Retry { at } | Decision::Hold { at } => Some(at),
                _ => None,
            });
            columns.providers.push(c.channel.provider());
            columns.message_ids.push(c.provider_message_id.as_deref());
            columns.error_codes.push(c.error_code.as_deref());
            columns.error_messages.push(c.error_message.as_deref());
            columns.started.push(c.started_at);
            columns.finished.push(c.finished_at);
            columns.created.push(c.job_created_at);
        }
        columns
    }
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
        // Time-ordered ids (UUIDv7): each index keyed by id is written at its right-hand
        // edge, where the pages are hot, instead of anywhere in 30 days of history.
        let ids: Vec<Uuid> = jobs.iter().map(|_| Uuid::now_v7()).collect();
        let orgs: Vec<Uuid> = jobs.iter().map(|j| j.organization_id).collect();
        let channels: Vec<&str> = jobs.iter().map(|j| j.channel.as_str()).collect();
        let payloads: Vec<&serde_json::Value> = jobs.iter().map(|j| &j.payload).collect();
        let max_attempts: Vec<i32> = jobs.iter().map(|j| j.max_attempts).collect();
        let due: Vec<DateTime<Utc>> = jobs.iter().map(|j| j.next_attempt_at).collect();
        let expires: Vec<DateTime<Utc>> = jobs.iter().map(|j| j.expires_at).collect();
        let keys: Vec<Option<&str>> = jobs
            .iter()
            .map(|j| j.idempotency.as_ref().map(|i| i.key.as_str()))
            .collect();
        let hashes: Vec<Option<&str>> = jobs
            .iter()
            .map(|j| j.idempotency.as_ref().map(|i| i.request_hash.as_str()))
            .collect();
        let traces: Vec<Option<&str>> = jobs.iter().map(|j| j.trace_header.as_deref()).collect();
        let priorities: Vec<&str> = jobs.iter().map(|j| j.priority.as_str()).collect();
        let params: [&(dyn ToSql + Sync); 11] = [
            &ids,
            &orgs,
            &channels,
            &payloads,
            &max_attempts,
            &due,
            &keys,
            &hashes,
            &expires,
            &traces,
            &priorities,
        ];
        // A repeat of one of these keys that committed while the statement ran fails it on
        // the key (insert_jobs.sql inserts keys with no ON CONFLICT); nothing was written, and
        // run again the statement finds the key. Each further failure needs yet another
        // repeat committed in between: a few tries end any real race.
        let mut tries = 1;
        let rows = loop {
            match self.query(&sql::INSERT_JOBS, &params).await {
                Err(e) if tries < KEY_RACE_TRIES && lost_a_key_race(&e) => tries += 1,
                rows => break rows?,
            }
        };
        let mut created = std::collections::HashMap::with_capacity(rows.len());
        let mut suppressed = std::collections::HashSet::new();
        for row in &rows {
            if row.suppressed {
                suppressed.insert(row.id);
                continue;
            }
            let (Some(status), Some(next_attempt_at)) = (&row.status, row.next_attempt_at) else {
                return Err(StoreError::Corrupt(
                    "INSERT_JOBS: a written job without its status".into(),
                ));
            };
            let summary = summary(row.id, status, next_attempt_at)?;
            created.insert(summary.id, summary);
        }
        // Only a key already held inserts nothing; the job holding it has committed (the
        // statement saw its row, or waited for it and ran again), so this read sees it. Keys
        // are per organization.
        let mut existing = std::collections::HashMap::new();
        let missing: Vec<(Uuid, &str)> = jobs
            .iter()
            .zip(&ids)
            .filter(|(_, id)| !created.contains_key(*id) && !suppressed.contains(*id))
            .filter_map(|(job, _)| {
                Some((job.organization_id, job.idempotency.as_ref()?.key.as_str()))
            })
            .collect();
        let mut by_org: std::collections::BTreeMap<Uuid, Vec<&str>> = Default::default();
        for (org, key) in missing {
            by_org.entry(org).or_default().push(key);
        }
        for (org, keys) in by_org {
            // the keys' jobs and their days first, then the jobs within those days only
            let held = self
                .query(&sql::IDEMPOTENCY_KEY_JOBS, &[&org, &keys])
                .await?;
            let jobs: Vec<(Uuid, DateTime<Utc>)> = held
                .iter()
                .map(|row| (row.job_id, row.job_created_at))
                .collect();
            for row in self.jobs_within(&jobs).await? {
                let (key, hash) = (row.idempotency_key.clone(), row.request_hash.clone());
                let job = job_view(row)?;
                let (Some(key), Some(hash)) = (key, hash) else {
                    return Err(StoreError::Corrupt("a key's job without its key".into()));
                };
                let summary = JobSummary {
                    id: job.id,
                    status: job.status,
                    next_attempt_at: job.next_attempt_at,
                };
                existing.insert((org, key), (summary, hash));
            }
        }
        jobs.iter()
            .zip(&ids)
            .map(|(job, id)| {
                if let Some(summary) = created.get(id) {
                    return Ok(Inserted::Created(summary.clone()));
                }
                if suppressed.contains(id) {
                    return Ok(Inserted::Suppressed);
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
        let job_params: [&(dyn ToSql + Sync); 2] = [&id, &organization_id];
        let delivery_params: [&(dyn ToSql + Sync); 1] = [&id];
        // pipelined: both queries travel in one round trip
        let (job, deliveries) = futures::try_join!(
            self.query_opt(&sql::GET_JOB, &job_params),
            self.query(&sql::LIST_DELIVERIES, &delivery_params),
        )?;
        let Some(row) = job else {
            return Ok(None);
        };
        let deliveries = deliveries
            .into_iter()
            .map(|d| DeliveryView {
                attempt: d.attempt,
                provider: d.provider,
                provider_message_id: d.provider_message_id,
                error_code: d.error_code,
                error_message: d.error_message,
                outcome: d.outcome,
                fenced: d.fenced,
                started_at: d.started_at,
                finished_at: d.finished_at,
                feedback: d.feedback.0,
            })
            .collect();
        Ok(Some(JobView {
            deliveries: Some(deliveries),
            ..job_view(row)?
        }))
    }

    async fn cancel(&self, organization_id: Uuid, id: Uuid) -> Result<Transition, StoreError> {
        self.transition(&sql::CANCEL, organization_id, id).await
    }

    async fn requeue(&self, organization_id: Uuid, id: Uuid) -> Result<Transition, StoreError> {
        self.transition(&sql::REQUEUE, organization_id, id).await
    }

    async fn requeue_dead(&self, p: RequeueDead<'_>) -> Result<u64, StoreError> {
        let row = self
            .query_one(
                &sql::REQUEUE_DEAD,
                &[
                    &p.organization_id,
                    &p.since,
                    &p.until,
                    &p.error_code,
                    &i64::from(p.limit),
                ],
            )
            .await?;
        Ok(row.requeued.max(0) as u64)
    }

    async fn list(
        &self,
        organization_id: Uuid,
        status: Option<JobStatus>,
        after: Option<ListCursor>,
        limit: u32,
    ) -> Result<Vec<JobView>, StoreError> {
        // the page's ids and days, then the jobs within those days only (jobs_within.sql)
        let page_of = || async {
            let page = self
                .query(
                    &sql::LIST_JOBS,
                    &[
                        &organization_id,
                        &status.map(JobStatus::as_str),
                        &after.map(|c| c.created_at),
                        &after.map(|c| c.id),
                        &i64::from(limit),
                    ],
                )
                .await?;
            let page: Vec<(Uuid, DateTime<Utc>)> =
                page.iter().map(|row| (row.id, row.created_at)).collect();
            let jobs = self.jobs_within(&page).await?;
            Ok::<_, StoreError>((page.len(), jobs))
        };
        let (listed, jobs) = page_of().await?;
        // A job of the page that the second read misses was removed in between (its day
        // dropped by retention): a short page would end the caller's paging, so the page is
        // read again, without it.
        let jobs = if jobs.len() < listed {
            page_of().await?.1
        } else {
            jobs
        };
        jobs.into_iter().map(job_view).collect()
    }

    async fn claim(&self, Claim { batch_size, now }: Claim) -> Result<Vec<ClaimedJob>, StoreError> {
        let batch = i64::from(batch_size);
        let rows = match self.rate_limit_per_min {
            None => self.query(&sql::CLAIM, &[&batch, &now]).await?,
            Some(per_minute) => {
                let per_minute = i32::try_from(per_minute).unwrap_or(i32::MAX);
                self.query(&sql::CLAIM_FAIR, &[&batch, &now, &per_minute])
                    .await?
            }
        };
        rows.into_iter().map(claimed_job).collect()
    }

    async fn complete(
        &self,
        Complete { completions, now }: Complete<'_>,
    ) -> Result<CompleteReport, StoreError> {
        if completions.is_empty() {
            return Ok(CompleteReport::default());
        }
        Ok(self
            .complete_and_claim(CompleteAndClaim {
                completions,
                next_batch: 0,
                now,
            })
            .await?
            .0)
    }

    async fn complete_and_claim(
        &self,
        CompleteAndClaim {
            completions,
            next_batch,
            now,
        }: CompleteAndClaim<'_>,
    ) -> Result<(CompleteReport, Vec<ClaimedJob>), StoreError> {
        if self.rate_limit_per_min.is_some() && next_batch > 0 {
            // the fair claim cannot be nested in the completion statement (it writes in a
            // CTE of its own): complete, then claim
            let report = self
                .complete_and_claim(CompleteAndClaim {
                    completions,
                    next_batch: 0,
                    now,
                })
                .await?
                .0;
            return Ok((
                report,
                self.claim(Claim {
                    batch_size: next_batch,
                    now,
                })
                .await?,
            ));
        }
        let columns = Columns::of(completions);
        let rows = self
            .query_rows(
                &sql::COMPLETE_AND_CLAIM,
                &[
                    &i64::from(next_batch),
                    &now,
                    &columns.ids,
                    &columns.tokens,
                    &columns.calls,
                    &columns.outcomes,
                    &columns.retry_at,
                    &columns.providers,
                    &columns.message_ids,
                    &columns.error_codes,
                    &columns.error_messages,
                    &columns.started,
                    &columns.finished,
                    &columns.created,
                ],
            )
            .await?;
        let mut report = CompleteReport::default();
        let mut claimed = Vec::new();
        let mut not_applied = std::collections::HashSet::new();
        let name = sql::COMPLETE_AND_CLAIM.name;
        for row in &rows {
            let completion: sql::CompletionRow = read(name, row)?;
            match completion.applied {
                Some(true) => report.applied.push(completion.id),
                Some(false) => {
                    not_applied.insert(completion.id);
                }
                None => claimed.push(claimed_job(read(name, row)?)?),
            }
        }
        if !not_applied.is_empty() {
            let late: Vec<&Completion> = completions
                .iter()
                .filter(|c| not_applied.contains(&c.job_id))
                .collect();
            for (id, recorded) in self.record_late(&late).await? {
                if recorded {
                    report.applied.push(id);
                } else {
                    report.fenced.push(id);
                }
            }
        }
        Ok((report, claimed))
    }

    async fn release(
        &self,
        Release { claims, due, now }: Release<'_>,
    ) -> Result<Vec<Uuid>, StoreError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = claims.iter().map(|(id, _)| *id).collect();
        let tokens: Vec<Uuid> = claims.iter().map(|(_, token)| *token).collect();
        let rows = self
            .query(&sql::RELEASE, &[&ids, &tokens, &now, &due])
            .await?;
        Ok(rows.into_iter().map(|row| row.id).collect())
    }

    async fn expire(&self, Expire { limit, now }: Expire) -> Result<u64, StoreError> {
        let row = self
            .query_one(&sql::EXPIRE, &[&i64::from(limit), &now])
            .await?;
        Ok(row.expired.max(0) as u64)
    }

    async fn sweep(
        &self,
        Sweep {
            stuck_after,
            limit,
            now,
        }: Sweep,
    ) -> Result<SweepReport, StoreError> {
        let row = self
            .query_one(
                &sql::SWEEP,
                &[&stuck_after.as_secs_f64(), &i64::from(limit), &now],
            )
            .await?;
        Ok(SweepReport {
            requeued: row.requeued.max(0) as u64,
            dead: row.dead.max(0) as u64,
        })
    }

    async fn prune_feedback(
        &self,
        PruneFeedback {
            older_than_days,
            limit,
            now,
        }: PruneFeedback,
    ) -> Result<u64, StoreError> {
        let days = i32::try_from(older_than_days).unwrap_or(i32::MAX);
        let row = self
            .query_one(&sql::PRUNE_FEEDBACK, &[&days, &i64::from(limit), &now])
            .await?;
        Ok(row.pruned.max(0) as u64)
    }

    async fn add_history_days(&self, At { now }: At) -> Result<u32, StoreError> {
        let row = self.query_one(&sql::ADD_HISTORY_DAYS, &[&now]).await?;
        Ok(row.added.max(0) as u32)
    }

    async fn drop_history_days(
        &self,
        DropHistoryDays { keep, now }: DropHistoryDays,
    ) -> Result<DroppedDays, StoreError> {
        let row = self
            .query_one(&sql::DROP_HISTORY_DAYS, &[&now, &keep.as_secs_f64()])
            .await?;
        Ok(DroppedDays {
            dropped: row.dropped.max(0) as u32,
            dropped_days: row.dropped_days,
        })
    }

    async fn count_ingest(
        &self,
        CountIngest {
            organization_id,
            requests,
            now,
        }: CountIngest,
    ) -> Result<IngestWindow, StoreError> {
        let requests = i32::try_from(requests).unwrap_or(i32::MAX);
        let row = self
            .query_one(&sql::COUNT_INGEST, &[&organization_id, &requests, &now])
            .await?;
        Ok(IngestWindow {
            used: row.requests.max(0) as u32,
            resets_in_secs: row.resets_in_secs.max(0) as u32,
        })
    }

    async fn prune_rate_windows(&self, At { now }: At) -> Result<u64, StoreError> {
        self.execute(&sql::PRUNE_COUNTERS, &[&now]).await
    }

    async fn queue_depth(&self, At { now }: At) -> Result<QueueDepth, StoreError> {
        let row = self.query_one(&sql::QUEUE_DEPTH, &[&now]).await?;
        let count = |n: i64| n.max(0) as u64;
        Ok(QueueDepth {
            backlog_age_secs: row.age.max(0.0),
            due: count(row.due),
            processing: count(row.processing),
            held: count(row.held),
            scheduled: count(row.scheduled),
        })
    }
}
