//! Schema migrations: the numbered SQL files in `migrations/`, embedded at build time.
//!
//! Each file is applied once, in order, in its own transaction, and recorded in
//! `schema_migrations` with its SHA-256. The whole run holds a PostgreSQL advisory lock,
//! so several cold starts migrating at once are safe: one applies, the others wait and
//! then find nothing left to do. A file edited after it was applied is refused.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

/// Every migration file: (file name, contents), in file-name order.
pub const MIGRATIONS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// Taken for the whole run; an arbitrary constant unique to this service.
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

fn parse(files: &[(&'static str, &'static str)]) -> Result<Vec<Migration<'static>>, MigrateError> {
    files
        .iter()
        .map(|&(name, sql)| {
            let version = name
                .split('_')
                .next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| MigrateError::BadName(name.to_owned()))?;
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

/// Applies the given migration files (the tests pass edited sets).
pub async fn run_files(
    client: &mut Client,
    files: &[(&'static str, &'static str)],
) -> Result<MigrateReport, MigrateError> {
    let migrations = parse(files)?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY])
        .await
        .map_err(MigrateError::Database)?;
    let result = apply_all(client, &migrations).await;
    // Released even on failure; a closed connection releases it anyway.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK_KEY])
        .await;
    result
}

async fn apply_all(
    client: &mut Client,
    migrations: &[Migration<'_>],
) -> Result<MigrateReport, MigrateError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version    int PRIMARY KEY,
                 name       text NOT NULL,
                 checksum   text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(MigrateError::Database)?;
    let applied: std::collections::HashMap<i32, String> = client
        .query("SELECT version, checksum FROM schema_migrations", &[])
        .await
        .map_err(MigrateError::Database)?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();

    let mut report = MigrateReport::default();
    for m in migrations {
        if let Some(checksum) = applied.get(&m.version) {
            if *checksum != m.checksum {
                return Err(MigrateError::Edited {
                    name: m.name.to_owned(),
                    applied: checksum.clone(),
                    file: m.checksum.clone(),
                });
            }
            report.already_applied += 1;
            continue;
        }
        let err = |source| MigrateError::Apply {
            name: m.name.to_owned(),
            source,
        };
        let tx = client.transaction().await.map_err(err)?;
        tx.batch_execute(m.sql).await.map_err(err)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &m.checksum],
        )
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)?;
        tracing::info!(migration = m.name, "applied migration");
        report.applied.push(m.name.to_owned());
    }
    Ok(report)
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
