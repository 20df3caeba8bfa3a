//! notification-service: everything the three functions run.
//!
//! - [`domain`]: channels, job states and the rules about them.
//! - [`store`]: the job repository port and its PostgreSQL adapter (all SQL is in `sql/`).
//! - [`db`] and [`migrate`]: connecting from `DATABASE_URL` and applying `migrations/`.
//! - [`ingest`]: the HTTP API (validation, idempotency, tenant from the authorizer).
//! - [`delivery`] and [`worker`]: the delivery port, its SNS/SES adapters, and the claim loop.
//! - [`sweeper`]: rescuing jobs left in processing by a lost worker.
//! - [`stats`]: the one percentile (nearest rank) of the workspace's latency figures.
//! - [`telemetry`]: log lines, embedded-format metrics and the trace header.

pub mod config;
pub mod custom_resource;
pub mod db;
pub mod delivery;
pub mod domain;
pub mod error;
pub mod feedback;
pub mod ingest;
pub mod migrate;
pub mod startup;
pub mod stats;
pub mod store;
pub mod sweeper;
pub mod telemetry;
pub mod worker;
