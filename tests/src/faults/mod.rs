//! The fault suite (`make faults`): the real function binaries, driven through a Lambda
//! Runtime API emulator ([`runtime`], [`process`]), against a real PostgreSQL and the AWS
//! stand-in behind a delaying proxy ([`crate::proxy`]). `src/bin/faults.rs` walks
//! [`scenarios::ALL`]: one file per scenario, each returning its [`Row`] of the table.
//!
//! The checks every scenario that delivers shares are in [`endgame`]: no job lost, no job
//! claimed while an earlier holder's invocation still held it ([`claims`]), no message the
//! attempts cannot account for ([`sends`]), a delivery row per attempt.

pub mod api;
pub mod claims;
pub mod db;
pub mod endgame;
pub mod logs;
pub mod pg;
pub mod process;
pub mod row;
pub mod runtime;
pub mod scenarios;
pub mod sends;
pub mod suite;

pub use row::{Row, table};
pub use suite::Suite;
