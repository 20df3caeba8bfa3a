//! notification-service's PostgreSQL adapter.
//!
//! - [`db`]: connecting from `DATABASE_URL`, or from the RDS secret (Secrets Manager) and
//!   `DB_HOST`, with TLS; one connection per function instance.
//! - [`migrate`]: applying the embedded `migrations/` and checking a database has them.
//! - [`store`]: [`PgStore`], the store port over the statements of `sql/`.
//! - [`startup`]: a function's cold start (connect, migrate if asked, warm up).
//! - [`custom_resource`]: the template's `Migrations` custom resource.

pub mod custom_resource;
pub mod db;
pub mod migrate;
pub mod startup;
pub mod store;

pub use store::{sql, PgStore, TimedOut, DEFAULT_STATEMENT_TIMEOUT};
