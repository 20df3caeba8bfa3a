//! notification-service's delivery adapters: the AWS side of the delivery port
//! (`notify_core::delivery::Deliverer`) and of the event bus port
//! (`notify_core::events::EventBus`).
//!
//! - [`SnsSms`] and [`SesEmail`]: SMS through SNS `Publish`, email through SES v2 `SendEmail`,
//!   built once at cold start by [`aws_deliverer`] from aws-config's defaults (so
//!   `AWS_ENDPOINT_URL` points them at a local stand-in).
//! - [`sdk_errors`]: the SDKs' typed errors (`PublishError`, `SendEmailError`) classed variant
//!   by variant, in agreement with the core's code table (`notify_core::delivery::classify`).
//! - [`EventBridgeBus`]: the status events' bus (`notify_core::events::EventBus`) through
//!   EventBridge `PutEvents`, built once at cold start by [`event_bus`].
//!
//! Only the worker links this crate, and with it the SNS, SES and EventBridge SDKs.

mod aws;
pub mod events;
pub mod sdk_errors;

pub use aws::*;
pub use events::{EventBridgeBus, event_bus, event_bus_from};
