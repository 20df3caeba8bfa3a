//! notification-service's PostgreSQL adapter.
//!
//! - [`db`]: connecting from `DATABASE_URL`, or from the RDS secret (Secrets Manager) and
//!   `DB_HOST`, with TLS; one connection per function instance.
//! - [`migrate`]: applying the embedded `migrations/` and checking a database has them.
//! - [`sql`]: every statement, its parameters' types and the rows it answers.
//! - [`store`]: [`PgStore`], the store port over those statements.
//! - [`report`]: the queue as an operator reads it (`make queue`).
//! - [`startup`]: a function's cold start (connect, migrate if asked, warm up).
//! - [`custom_resource`]: the template's `Migrations` custom resource.
//! - `testing` (feature `test-support`): jobs arranged in any state, for tests.

#[cfg(test)]
mod compose;
pub mod custom_resource;
pub mod db;
pub mod migrate;
pub mod report;
pub mod sql;
pub mod startup;
pub mod store;
#[cfg(feature = "test-support")]
pub mod testing;

pub use store::{DEFAULT_STATEMENT_TIMEOUT, PgStore, TimedOut};
