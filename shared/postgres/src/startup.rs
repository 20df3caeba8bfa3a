//! What every function does at cold start besides building its clients.
//!
//! A cold start is on the path of the request (ingest) or the first message (a woken worker)
//! that caused it, so its parts run side by side where they can: the database's side (the
//! secret's read, then the connection and the schema check) waits on the network, while the
//! AWS SDK's clients, the TLS connectors and the webhook client are built on the CPU. The AWS
//! SDK's settings are loaded once ([`aws_config`]) and shared by every AWS client of the
//! function: one HTTPS client, one credentials cache.
//!
//! Each step logs its time at `debug` (target `notify_postgres::startup`: `step`, `ms`, and
//! `at_ms`, since the first step), to break an init down as deployed
//! (`RUST_LOG=notify_postgres::startup=debug`).

use std::future::Future;
use std::time::Duration;

use crate::db::{ConnectError, DbConfig, steps};
use crate::store::PgStore;
use notify_core::config::{ConfigError, Vars};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read the database settings")]
    Database(#[from] ConnectError),
}

/// The AWS SDK's settings from the environment (region, credentials, `AWS_ENDPOINT_URL`), under
/// the dated behaviour version every adapter pins (the SDK's defaults change only when this
/// line does). Load it once per cold start and hand it to every client: each load builds its
/// own HTTPS client and credentials chain. Nothing is called here: credentials are resolved
/// at a client's first call (a signed IAM token's first connection).
pub async fn aws_config() -> aws_config::SdkConfig {
    crate::db::load_aws_config().await
}

/// The job store a function uses, from the environment:
/// - the database: `DATABASE_SECRET_ARN` (Secrets Manager, read now), `DATABASE_IAM_AUTH`
///   (RDS IAM authentication) or `DATABASE_URL` (see [`crate::db`]);
/// - `DATABASE_STATEMENT_TIMEOUT_MS`: how long one statement may take before it is
///   cancelled and the call answers "unavailable" (`default_timeout` when unset);
/// - `MIGRATE_ON_START` (default true, for local use; the template sets false and migrates
///   once per deploy): apply pending migrations on the first connection.
///
/// The AWS SDK's settings are loaded here only if the database needs them; a function with
/// other AWS clients passes its own to [`store_with`].
///
/// No connection is opened here: a database outage at cold start does not fail the start.
pub async fn store(default_timeout: Duration) -> Result<PgStore, StartupError> {
    store_with(None, default_timeout).await
}

/// [`store`] on the function's one `SdkConfig` (`None`: loaded here if needed).
pub async fn store_with(
    sdk: Option<&aws_config::SdkConfig>,
    default_timeout: Duration,
) -> Result<PgStore, StartupError> {
    let vars = Vars::process();
    let default_ms = u64::try_from(default_timeout.as_millis()).unwrap_or(u64::MAX);
    let timeout_ms = vars.parse_or("DATABASE_STATEMENT_TIMEOUT_MS", default_ms, 100..=900_000)?;
    let migrate = vars.flag("MIGRATE_ON_START", true)?;
    let db = timed("database settings", DbConfig::from_lookup_with(&vars, sdk)).await?;
    Ok(PgStore::new(db)
        .with_statement_timeout(Duration::from_millis(timeout_ms))
        .with_migrations(migrate))
}

/// [`store_with`], then [`warm`]: the database's whole side of a cold start, to run beside
/// the rest of it (`tokio::join!`).
pub async fn warm_store(
    sdk: Option<&aws_config::SdkConfig>,
    default_timeout: Duration,
) -> Result<PgStore, StartupError> {
    let store = store_with(sdk, default_timeout).await?;
    warm(&store).await;
    Ok(store)
}

/// Whether the function's database settings need the AWS SDK (a secret, IAM tokens): a
/// function with no other AWS client loads it only then.
pub fn database_needs_aws() -> Result<bool, StartupError> {
    Ok(DbConfig::needs_aws(&Vars::process())?)
}

/// Opens the store's connection during the cold start (Lambda gives init a full CPU), for at
/// most a few seconds; on failure the first call connects instead, and answers 503 while the
/// database is away.
pub async fn warm(store: &PgStore) {
    const WARM_UP: Duration = Duration::from_secs(3);
    match timed(
        "database connection and schema check",
        tokio::time::timeout(WARM_UP, store.ready()),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(
            error = %notify_core::error::report(&err),
            "database not ready at cold start; the first call will connect"
        ),
        Err(_) => tracing::warn!(
            after = ?WARM_UP,
            "database not ready at cold start; the first call will connect"
        ),
    }
}

/// Runs `work` (CPU-bound set-up: a client whose TLS stack parses trusted roots) on a blocking
/// thread, so the cold start's other parts go on meanwhile. A panic in `work` is resumed here.
pub async fn beside<T: Send + 'static>(
    step: &'static str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    steps::beside(step, work).await
}

/// Awaits `work`, logging its time at `debug` as the cold-start step `step`.
pub async fn timed<T>(step: &'static str, work: impl Future<Output = T>) -> T {
    steps::timed(step, work).await
}

/// Runs `work` now, logging its time at `debug` as the cold-start step `step`.
pub fn timed_now<T>(step: &'static str, work: impl FnOnce() -> T) -> T {
    steps::timed_now(step, work)
}

/// Stops a function that cannot start, with one line naming the problem.
pub fn fail(function: &str, message: &str) -> ! {
    tracing::error!(function, error = message, "cannot start");
    eprintln!("{function}: cannot start: {message}");
    std::process::exit(1)
}
