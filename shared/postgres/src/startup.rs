//! What every function does at cold start besides building its clients.

use std::time::Duration;

use crate::db::{ConnectError, DbConfig};
use crate::store::PgStore;
use notify_core::config::{ConfigError, Vars};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read the database settings")]
    Database(#[from] ConnectError),
}

/// The job store a function uses, from the environment:
/// - the database: `DATABASE_SECRET_ARN` (Secrets Manager, read now) or `DATABASE_URL`;
/// - `DATABASE_STATEMENT_TIMEOUT_MS`: how long one statement may take before it is
///   cancelled and the call answers "unavailable" (`default_timeout` when unset);
/// - `MIGRATE_ON_START` (default true, for local use; the template sets false and migrates
///   once per deploy): apply pending migrations on the first connection.
///
/// No connection is opened here: a database outage at cold start does not fail the start.
pub async fn store(default_timeout: Duration) -> Result<PgStore, StartupError> {
    let vars = Vars::process();
    let default_ms = u64::try_from(default_timeout.as_millis()).unwrap_or(u64::MAX);
    let timeout_ms = vars.parse_or("DATABASE_STATEMENT_TIMEOUT_MS", default_ms, 100..=900_000)?;
    let migrate = vars.flag("MIGRATE_ON_START", true)?;
    let db = DbConfig::from_env().await?;
    Ok(PgStore::new(db)
        .with_statement_timeout(Duration::from_millis(timeout_ms))
        .with_migrations(migrate))
}

/// Opens the store's connection during the cold start (Lambda gives init a full CPU), for at
/// most a few seconds; on failure the first call connects instead, and answers 503 while the
/// database is away.
pub async fn warm(store: &PgStore) {
    const WARM_UP: Duration = Duration::from_secs(3);
    match tokio::time::timeout(WARM_UP, store.ready()).await {
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

/// Stops a function that cannot start, with one line naming the problem.
pub fn fail(function: &str, message: &str) -> ! {
    tracing::error!(function, error = message, "cannot start");
    eprintln!("{function}: cannot start: {message}");
    std::process::exit(1)
}
