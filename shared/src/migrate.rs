//! Schema migrations: the numbered SQL files in `migrations/`, embedded at build time.
//!
//! Each file is applied once, in order, in its own transaction, and recorded in
//! `schema_migrations` with its SHA-256. Each transaction holds a PostgreSQL advisory lock,
//! so several runners at once are safe: one applies, the others wait and then find nothing
//! left to do. A file edited after it was applied is refused.
//!
//! Deployed, the runner runs once per deploy (the template's custom resource, or
//! `make migrate`), not at every cold start.

use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

/// Every migration file: (file name, contents), in file-name order.
pub const MIGRATIONS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// Taken by every migrating transaction; an arbitrary constant unique to this service.
const LOCK_KEY: i64 = 0x6e6f_7469_6679; // "notify"

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "migration {name} was edited after it was applied (applied checksum {applied}, \
         file checksum {file}); add a new migration instead of changing an applied one"
    )]
    Edited {
        name: String,
        applied: String,
        file: String,
    },
    #[error("migration file name {0} does not start with a version number (e.g. 0003_x.sql)")]
    BadName(String),
    #[error("migration {name} failed")]
    Apply {
        name: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("cannot read or lock the migration table")]
    Database(#[source] tokio_postgres::Error),
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    pub applied: Vec<String>,
    pub already_applied: usize,
}

struct Migration<'a> {
    version: i32,
    name: &'a str,
    sql: &'a str,
    checksum: String,
}

/// A file's version number, from its name (`0003_x.sql` → 3).
fn version(name: &str) -> Result<i32, MigrateError> {
    name.split('_')
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| MigrateError::BadName(name.to_owned()))
}

fn parse(files: &[(&'static str, &'static str)]) -> Result<Vec<Migration<'static>>, MigrateError> {
    files
        .iter()
        .map(|&(name, sql)| {
            let version = version(name)?;
            Ok(Migration {
                version,
                name,
                sql,
                checksum: hex::encode(Sha256::digest(sql.as_bytes())),
            })
        })
        .collect()
}

/// Applies the embedded migrations.
pub async fn run(client: &mut Client) -> Result<MigrateReport, MigrateError> {
    run_files(client, MIGRATIONS).await
}

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// Applies the given migration files (the tests pass edited sets).
///
/// Each pending file is applied in a transaction of its own that first takes a
/// transaction-scoped advisory lock and reads what is applied: the lock ends with the
/// transaction, so the runner works through a transaction-pooling PgBouncer or RDS Proxy
/// (a session lock would outlive the server connection it was taken on, or pin it).
pub async fn run_files(
    client: &mut Client,
    files: &[(&'static str, &'static str)],
) -> Result<MigrateReport, MigrateError> {
    let migrations = parse(files)?;
    let mut report = MigrateReport::default();
    loop {
        let tx = client.transaction().await.map_err(MigrateError::Database)?;
        tx.execute_typed(
            "SELECT pg_advisory_xact_lock($1)",
            &[(&LOCK_KEY, Type::INT8)],
        )
        .await
        .map_err(MigrateError::Database)?;
        tx.batch_execute(CREATE_TABLE)
            .await
            .map_err(MigrateError::Database)?;
        let applied: HashMap<i32, String> = tx
            .query_typed("SELECT version, checksum FROM schema_migrations", &[])
            .await
            .map_err(MigrateError::Database)?
            .iter()
            .map(|row| (row.get("version"), row.get("checksum")))
            .collect();
        let mut pending = None;
        for m in &migrations {
            match applied.get(&m.version) {
                Some(checksum) if *checksum != m.checksum => {
                    return Err(MigrateError::Edited {
                        name: m.name.to_owned(),
                        applied: checksum.clone(),
                        file: m.checksum.clone(),
                    })
                }
                Some(_) => {}
                None => {
                    pending = Some(m);
                    break;
                }
            }
        }
        let Some(m) = pending else {
            tx.commit().await.map_err(MigrateError::Database)?;
            report.already_applied = migrations.len() - report.applied.len();
            return Ok(report);
        };
        let err = |source| MigrateError::Apply {
            name: m.name.to_owned(),
            source,
        };
        tx.batch_execute(m.sql).await.map_err(err)?;
        tx.execute_typed(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[
                (&m.version, Type::INT4),
                (&m.name, Type::TEXT),
                (&m.checksum, Type::TEXT),
            ],
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        tracing::info!(migration = m.name, "applied migration");
        report.applied.push(m.name.to_owned());
    }
}

/// The first embedded migration the database has not applied, if any: a function whose
/// schema is older than its code refuses to serve instead of failing on a missing column.
pub async fn first_missing(client: &Client) -> Result<Option<&'static str>, MigrateError> {
    let applied: HashSet<i32> = match client
        .query_typed("SELECT version FROM schema_migrations", &[])
        .await
    {
        Ok(rows) => rows.iter().map(|row| row.get("version")).collect(),
        Err(err) if err.code() == Some(&SqlState::UNDEFINED_TABLE) => HashSet::new(),
        Err(err) => return Err(MigrateError::Database(err)),
    };
    // versions only: no checksum work on a function's connection
    for &(name, _) in MIGRATIONS {
        if !applied.contains(&version(name)?) {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_migrations_are_numbered_and_ordered() {
        let parsed = parse(MIGRATIONS).unwrap();
        assert!(parsed.len() >= 2);
        assert!(parsed.windows(2).all(|w| w[0].version < w[1].version));
    }

    #[test]
    fn a_file_without_a_version_is_refused() {
        let err = parse(&[("create_jobs.sql", "SELECT 1")]).err().unwrap();
        assert!(err.to_string().contains("create_jobs.sql"));
    }
}
