//! notification-service's core: what the functions decide, over ports the adapters implement.
//!
//! Modules, each importing only those listed before it:
//! - [`stats`], [`config`], [`error`], [`domain`]: the vocabulary (channels, job states,
//!   provider feedback), settings from the environment, error reports.
//! - [`telemetry`]: log lines and embedded-format metrics.
//! - [`store`]: the store port (jobs, suppressions, feedback, status events and webhook
//!   endpoints); `notify-postgres` implements it.
//! - [`delivery`]: the delivery port, its payloads and the error-class table; `notify-delivery`
//!   implements it with SNS and SES.
//! - [`pace`]: the providers' pace (shared send rates, quota holds) around the deliverer.
//! - [`fleet`]: the worker invocations at work: waking one on accept, lingering, starting more
//!   for a backlog; its store port and the port that starts an invocation (`notify-lambda`).
//! - [`webhooks`]: the Standard Webhooks signature and the policy on which URLs and addresses
//!   a webhook may reach (pure, but for a DNS lookup); `notify-webhooks` sends with them.
//! - [`events`]: the status events' ports (the bus, the webhook sender) and their dispatch.
//! - [`worker`], [`sweeper`], [`feedback`]: the three scheduled or event-driven loops over the
//!   ports.
//!
//! No AWS SDK and no HTTP: every function links this crate.

pub mod config;
pub mod delivery;
pub mod domain;
pub mod error;
pub mod events;
pub mod feedback;
pub mod fleet;
pub mod pace;
pub mod stats;
pub mod store;
pub mod sweeper;
pub mod telemetry;
pub mod webhooks;
pub mod worker;
