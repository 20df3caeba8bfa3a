//! What every function does at cold start besides building its clients.

use crate::config::{self, ConfigError};
use crate::db::{ConnectError, DbConfig};
use crate::migrate::{self, MigrateError};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot migrate the database")]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Migrate(#[from] MigrateError),
}

/// Applies pending migrations when `MIGRATE_ON_START` is true (the default). Safe when
/// several cold starts run at once: the runner holds an advisory lock.
pub async fn migrate_if_enabled(db: &DbConfig) -> Result<(), StartupError> {
    if !config::flag("MIGRATE_ON_START", true)? {
        return Ok(());
    }
    let mut client = db.connect().await?;
    let report = migrate::run(&mut client).await?;
    if !report.applied.is_empty() {
        tracing::info!(applied = ?report.applied, "migrations applied at cold start");
    }
    Ok(())
}

/// Stops a function that cannot start, with one line naming the problem.
pub fn fail(function: &str, message: &str) -> ! {
    tracing::error!(function, error = message, "cannot start");
    eprintln!("{function}: cannot start: {message}");
    std::process::exit(1)
}
