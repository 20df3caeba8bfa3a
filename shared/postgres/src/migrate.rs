//! Schema migrations: the numbered SQL files in `migrations/`, embedded at build time.
//!
//! Each file is applied once, in order, in its own transaction, and recorded in
//! `schema_migrations` with its SHA-256. Each transaction holds a PostgreSQL advisory lock,
//! so several runners at once are safe: one applies, the others wait and then find nothing
//! left to do. A file edited after it was applied is refused.
//!
//! A file whose first line is `-- migrate: no-transaction` holds statements that cannot
//! run in a transaction (`CREATE INDEX CONCURRENTLY`, which builds without blocking writes
//! on a deployed queue). Its statements run one at a time, each ending with `;` at the end
//! of a line, and must be idempotent (`IF NOT EXISTS`): two runners may both run them (a
//! concurrent index build waits for the other). A statement ending with `\gexec` instead of
//! `;` is a query whose rows are statements, each then run on its own, as psql's `\gexec`
//! runs them (an index built CONCURRENTLY on each partition of a table, whose list only
//! the database knows). Afterwards every index must be valid (an interrupted concurrent
//! build leaves an invalid one, which is named in the error), and the file is recorded
//! under the lock.
//!
//! Deployed, the runner runs once per deploy (the template's custom resource, or
//! `make migrate`), not at every cold start.

use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

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
    #[error(
        "index {index} is invalid (an interrupted CREATE INDEX CONCURRENTLY): \
         run DROP INDEX CONCURRENTLY {index}; then migrate again"
    )]
    InvalidIndex { index: String },
    #[error("cannot read or lock the migration table")]
    Database(#[source] tokio_postgres::Error),
    #[error(
        "schema version {target} was asked for, but this code has migrations up to version \
         {known} only (the template and the migrator's code disagree)"
    )]
    UnknownVersion { target: i32, known: i32 },
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    pub applied: Vec<String>,
    /// The files up to the target found applied already.
    pub already_applied: usize,
    /// The highest version the database had applied when the run ended: above the target
    /// when a later release migrated it (the run then undid nothing).
    pub schema_version: i32,
}

struct Migration<'a> {
    version: i32,
    name: &'a str,
    sql: &'a str,
    checksum: String,
}

/// The first line of a file that must run outside a transaction.
const NO_TRANSACTION: &str = "-- migrate: no-transaction";

/// Ends a statement of a no-transaction file whose result rows are the statements to run
/// (their first column), as in psql.
const GEXEC: &str = "\\gexec";

impl Migration<'_> {
    fn in_transaction(&self) -> bool {
        self.sql.lines().next().map(str::trim) != Some(NO_TRANSACTION)
    }

    /// The statements of a no-transaction file: each ends with `;` (or [`GEXEC`]) at the end
    /// of a line outside a `$$` block (a function body or a `DO` block is one statement).
    fn statements(&self) -> impl Iterator<Item = String> + '_ {
        let mut current = String::new();
        let mut lines = self.sql.lines();
        let mut in_dollar_block = false;
        std::iter::from_fn(move || {
            for line in lines.by_ref() {
                current.push_str(line);
                current.push('\n');
                if line.matches("$$").count() % 2 == 1 {
                    in_dollar_block = !in_dollar_block;
                }
                let end = line.trim_end();
                if !in_dollar_block && (end.ends_with(';') || end.ends_with(GEXEC)) {
                    return Some(std::mem::take(&mut current));
                }
            }
            let rest = std::mem::take(&mut current);
            let code = rest.lines().any(|l| {
                let l = l.trim();
                !l.is_empty() && !l.starts_with("--")
            });
            code.then_some(rest)
        })
    }
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

/// The schema version this code needs: its highest embedded migration's.
pub fn latest_version() -> i32 {
    parse(MIGRATIONS)
        .ok()
        .and_then(|m| m.last().map(|m| m.version))
        .unwrap_or(0)
}

/// Applies the embedded migrations up to `target` and no further. A database already past it
/// (a later release migrated it, and its deploy is being rolled back) is left as it is: a
/// migration is never undone, and each one keeps the release before it working.
pub async fn run_to(client: &mut Client, target: i32) -> Result<MigrateReport, MigrateError> {
    run_files_to(client, MIGRATIONS, target).await
}

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- a no-transaction file being applied by a runner (two concurrent index builds deadlock)
CREATE TABLE IF NOT EXISTS schema_migration_claims (
    version    int PRIMARY KEY,
    claimed_at timestamptz NOT NULL DEFAULT now()
)";

const RELEASE_CLAIM: &str = "DELETE FROM schema_migration_claims WHERE version = $1";

/// A claim on a no-transaction file older than this, with no index build running, was left
/// by a runner that died: another runner takes the file over.
const CLAIM_STALE_SECS: f64 = 60.0;

/// Applies the given migration files (the tests pass edited sets).
///
/// Each pending file is applied in a transaction of its own that first takes a
/// transaction-scoped advisory lock and reads what is applied: the lock ends with the
/// transaction, so the runner works through a transaction-pooling PgBouncer or RDS Proxy
/// (a session lock would outlive the server connection it was taken on, or pin it).
/// A no-transaction file is claimed under that lock instead, and applied after it.
pub async fn run_files(
    client: &mut Client,
    files: &[(&'static str, &'static str)],
) -> Result<MigrateReport, MigrateError> {
    run_files_to(client, files, i32::MAX).await
}

/// [`run_files`] up to version `target` (`i32::MAX`: every file). A target above the last
/// file's version is refused: the caller expects a schema this code cannot make.
pub async fn run_files_to(
    client: &mut Client,
    files: &[(&'static str, &'static str)],
    target: i32,
) -> Result<MigrateReport, MigrateError> {
    let mut migrations = parse(files)?;
    let known = migrations.last().map_or(0, |m| m.version);
    if target != i32::MAX && target > known {
        return Err(MigrateError::UnknownVersion { target, known });
    }
    migrations.retain(|m| m.version <= target);
    let mut report = MigrateReport::default();
    let mut lock_retries = 0;
    // the version this run started from: 0 on a fresh database, where no code of an earlier
    // release ever ran (a transactional file reads it: MIGRATING_FROM)
    let mut from = None;
    loop {
        let tx = locked(client).await?;
        let pending = next_pending(&tx, &migrations).await?;
        let from = match from {
            Some(version) => version,
            None => *from.insert(applied_version(&tx).await?),
        };
        let Some(m) = pending else {
            report.schema_version = applied_version(&tx).await?;
            tx.commit().await.map_err(MigrateError::Database)?;
            report.already_applied = migrations.len() - report.applied.len();
            return Ok(report);
        };
        let err = |source| MigrateError::Apply {
            name: m.name.to_owned(),
            source,
        };
        let recorded = if m.in_transaction() {
            tx.execute_typed(
                "SELECT set_config($1, $2, true)",
                &[
                    (&MIGRATING_FROM, Type::TEXT),
                    (&from.to_string(), Type::TEXT),
                ],
            )
            .await
            .map_err(MigrateError::Database)?;
            if let Err(e) = tx.batch_execute(m.sql).await {
                if lock_conflict(&e) && lock_retries < LOCK_RETRIES {
                    // a deadlock with a running statement, or its lock_timeout: nothing was
                    // applied (the transaction rolls back as it drops); try again shortly
                    lock_retries += 1;
                    tracing::warn!(migration = m.name, error = %notify_core::error::report(&e), attempt = lock_retries,
                                   "migration could not take its locks; retrying");
                    drop(tx);
                    tokio::time::sleep(LOCK_RETRY_PAUSE * lock_retries).await;
                    continue;
                }
                return Err(err(e));
            }
            let recorded = record(&tx, m).await?;
            tx.commit().await.map_err(err)?;
            recorded
        } else if claim(&tx, m).await? {
            tx.commit().await.map_err(MigrateError::Database)?;
            match apply_outside_transaction(client, m).await {
                Ok(recorded) => recorded,
                Err(err) => {
                    // a failed build leaves nothing to wait for: the next runner goes ahead
                    let _ = client
                        .execute_typed(RELEASE_CLAIM, &[(&m.version, Type::INT4)])
                        .await;
                    return Err(err);
                }
            }
        } else {
            // another runner is applying it: look again shortly
            tx.commit().await.map_err(MigrateError::Database)?;
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            continue;
        };
        // a file another runner recorded first is that runner's
        if recorded {
            tracing::info!(migration = m.name, "applied migration");
            report.applied.push(m.name.to_owned());
        }
    }
}

/// How often a migration that lost a deadlock, or gave up waiting for a lock (its own
/// `lock_timeout`), is tried again before the run fails; the pause grows by this much each
/// time.
const LOCK_RETRIES: u32 = 5;
const LOCK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// A migration statement that failed for its locks, not its content.
fn lock_conflict(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(&SqlState::T_R_DEADLOCK_DETECTED) | Some(&SqlState::LOCK_NOT_AVAILABLE)
    )
}

/// The setting a transactional migration reads for the schema version its run started from
/// (`current_setting('notify.migrating_from')`): `0` on a fresh database, so a file can tell
/// a first install, where no earlier release's code ever ran, from an upgrade.
pub const MIGRATING_FROM: &str = "notify.migrating_from";

/// The highest version applied (0: none).
async fn applied_version(tx: &tokio_postgres::Transaction<'_>) -> Result<i32, MigrateError> {
    Ok(tx
        .query_typed(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(MigrateError::Database)?
        .first()
        .map_or(0, |row| row.get(0)))
}

/// A transaction holding the migration lock (until it ends).
async fn locked(client: &mut Client) -> Result<tokio_postgres::Transaction<'_>, MigrateError> {
    let tx = client.transaction().await.map_err(MigrateError::Database)?;
    tx.execute_typed(
        "SELECT pg_advisory_xact_lock($1)",
        &[(&LOCK_KEY, Type::INT8)],
    )
    .await
    .map_err(MigrateError::Database)?;
    Ok(tx)
}

/// The first file not applied yet; an applied file whose text changed is refused.
async fn next_pending<'m>(
    tx: &tokio_postgres::Transaction<'_>,
    migrations: &'m [Migration<'static>],
) -> Result<Option<&'m Migration<'static>>, MigrateError> {
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
    for m in migrations {
        match applied.get(&m.version) {
            Some(checksum) if *checksum != m.checksum => {
                return Err(MigrateError::Edited {
                    name: m.name.to_owned(),
                    applied: checksum.clone(),
                    file: m.checksum.clone(),
                });
            }
            Some(_) => {}
            None => return Ok(Some(m)),
        }
    }
    Ok(None)
}

/// Claims a no-transaction file for this runner (under the lock): false while another
/// runner's claim is fresh or any index build is running in the database.
async fn claim(
    tx: &tokio_postgres::Transaction<'_>,
    m: &Migration<'_>,
) -> Result<bool, MigrateError> {
    let claimed = tx
        .query_typed(
            "WITH busy AS (
                 SELECT EXISTS (SELECT FROM schema_migration_claims
                                WHERE version = $1
                                  AND claimed_at > now() - make_interval(secs => $2))
                     OR EXISTS (SELECT FROM pg_stat_progress_create_index
                                WHERE datid = (SELECT oid FROM pg_database
                                               WHERE datname = current_database()))
                     AS busy
             )
             INSERT INTO schema_migration_claims AS c (version)
             SELECT $1 FROM busy WHERE NOT busy.busy
             ON CONFLICT (version) DO UPDATE SET claimed_at = now()
             RETURNING c.version",
            &[(&m.version, Type::INT4), (&CLAIM_STALE_SECS, Type::FLOAT8)],
        )
        .await
        .map_err(MigrateError::Database)?;
    Ok(!claimed.is_empty())
}

/// Records `m` as applied; false when it was already recorded.
async fn record(
    tx: &tokio_postgres::Transaction<'_>,
    m: &Migration<'_>,
) -> Result<bool, MigrateError> {
    tx.execute_typed(
        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)
         ON CONFLICT (version) DO NOTHING",
        &[
            (&m.version, Type::INT4),
            (&m.name, Type::TEXT),
            (&m.checksum, Type::TEXT),
        ],
    )
    .await
    .map(|rows| rows == 1)
    .map_err(|source| MigrateError::Apply {
        name: m.name.to_owned(),
        source,
    })
}

/// A no-transaction file: each statement on its own, then a check that no index was left
/// invalid, then the record under the lock (another runner may have recorded it already).
async fn apply_outside_transaction(
    client: &mut Client,
    m: &Migration<'_>,
) -> Result<bool, MigrateError> {
    let err = |source| MigrateError::Apply {
        name: m.name.to_owned(),
        source,
    };
    for statement in m.statements() {
        let Some(query) = statement.trim_end().strip_suffix(GEXEC) else {
            execute_idempotent(client, m, &statement).await?;
            continue;
        };
        // the statements are made when they are due: what they name is there now
        let generated: Vec<String> = client
            .simple_query(query)
            .await
            .map_err(err)?
            .iter()
            .filter_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .collect();
        for statement in generated {
            execute_idempotent(client, m, &statement).await?;
        }
    }
    if let Some(index) = invalid_index(client).await.map_err(err)? {
        return Err(MigrateError::InvalidIndex { index });
    }
    let tx = locked(client).await?;
    let recorded = record(&tx, m).await?;
    tx.execute_typed(RELEASE_CLAIM, &[(&m.version, Type::INT4)])
        .await
        .map_err(err)?;
    tx.commit().await.map_err(err)?;
    Ok(recorded)
}

/// Runs one idempotent statement of a no-transaction file: one that lost a deadlock or timed
/// out on a lock (its own lock_timeout) runs again, as a transactional file does.
async fn execute_idempotent(
    client: &Client,
    m: &Migration<'_>,
    statement: &str,
) -> Result<(), MigrateError> {
    let mut lock_retries = 0;
    loop {
        match client.batch_execute(statement).await {
            Ok(()) => return Ok(()),
            Err(e) if lock_conflict(&e) && lock_retries < LOCK_RETRIES => {
                lock_retries += 1;
                tracing::warn!(migration = m.name, error = %notify_core::error::report(&e), attempt = lock_retries,
                               "migration statement could not take its locks; retrying");
                tokio::time::sleep(LOCK_RETRY_PAUSE * lock_retries).await;
            }
            Err(source) => {
                return Err(MigrateError::Apply {
                    name: m.name.to_owned(),
                    source,
                });
            }
        }
    }
}

/// Waits out concurrent index builds of other runners (a build in progress is an invalid
/// index until it ends; `IF NOT EXISTS` does not wait for it), then fails with the name of
/// an invalid index no one is building, if any.
async fn invalid_index(client: &Client) -> Result<Option<String>, tokio_postgres::Error> {
    loop {
        let rows = client
            .query_typed(
                "SELECT i.indexrelid::regclass::text AS index,
                        EXISTS (SELECT FROM pg_stat_progress_create_index AS p
                                WHERE p.relid = i.indrelid AND p.pid <> pg_backend_pid())
                            AS building
                 FROM pg_index AS i
                 JOIN pg_class AS c ON c.oid = i.indexrelid
                 WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace
                 ORDER BY 2, 1",
                &[],
            )
            .await?;
        match rows.first() {
            None => return Ok(None),
            Some(row) if !row.get::<_, bool>("building") => return Ok(Some(row.get("index"))),
            Some(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
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
    fn a_no_transaction_file_runs_statement_by_statement() {
        let sql = "-- migrate: no-transaction\n-- why\nCREATE INDEX CONCURRENTLY a\n    ON t (x);\nCREATE INDEX CONCURRENTLY b ON t (y);\n-- trailing comment\n";
        let files = [
            ("0009_x.sql", sql),
            ("0010_y.sql", "-- just a comment\nSELECT 1;"),
        ];
        let parsed = parse(&files).unwrap();
        assert!(!parsed[0].in_transaction());
        assert!(parsed[1].in_transaction());
        let statements: Vec<String> = parsed[0].statements().collect();
        assert_eq!(statements.len(), 2, "{statements:?}");
        assert!(statements[0].contains("CREATE INDEX CONCURRENTLY a\n    ON t (x);"));
        assert!(statements[1].trim().ends_with("ON t (y);"));
        let unterminated = [("0011_z.sql", "-- migrate: no-transaction\nSELECT 1")];
        let parsed = parse(&unterminated).unwrap();
        assert_eq!(
            parsed[0].statements().count(),
            1,
            "an unterminated last statement still runs"
        );
    }

    #[test]
    fn a_dollar_quoted_block_is_one_statement_of_a_no_transaction_file() {
        let sql = "-- migrate: no-transaction\nDO $$\nBEGIN\n    SET LOCAL lock_timeout = '1s';\n    ALTER TABLE t ADD COLUMN c int;\nEND\n$$;\nCREATE FUNCTION f() RETURNS int\nLANGUAGE sql AS $$ SELECT 1; $$;\nSELECT 2;\n";
        let parsed = parse(&[("0009_x.sql", sql)]).unwrap();
        let statements: Vec<String> = parsed[0].statements().collect();
        assert_eq!(statements.len(), 3, "{statements:?}");
        assert!(statements[0].contains("DO $$\n") && statements[0].trim_end().ends_with("$$;"));
        assert!(statements[1].contains("SELECT 1; $$;"));
        assert_eq!(statements[2].trim(), "SELECT 2;");
    }

    #[test]
    fn a_gexec_query_ends_a_statement_of_a_no_transaction_file() {
        let sql = "-- migrate: no-transaction\nSELECT format('CREATE INDEX CONCURRENTLY ON %I (x)', c)\nFROM t\\gexec\nSELECT 2;\n";
        let parsed = parse(&[("0009_x.sql", sql)]).unwrap();
        let statements: Vec<String> = parsed[0].statements().collect();
        assert_eq!(statements.len(), 2, "{statements:?}");
        assert!(statements[0].trim_end().ends_with("FROM t\\gexec"));
        assert_eq!(statements[1].trim(), "SELECT 2;");
    }

    #[test]
    fn a_file_without_a_version_is_refused() {
        let err = parse(&[("create_jobs.sql", "SELECT 1")]).err().unwrap();
        assert!(err.to_string().contains("create_jobs.sql"));
    }
}
