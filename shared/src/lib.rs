//! notification-service: everything the three functions run.
//!
//! - [`domain`]: channels, job states and the rules about them.
//! - [`store`]: the job repository port and its PostgreSQL adapter (all SQL is in `sql/`).
//! - [`db`] and [`migrate`]: connecting from `DATABASE_URL` and applying `migrations/`.

pub mod db;
pub mod domain;
pub mod error;
pub mod migrate;
pub mod store;
