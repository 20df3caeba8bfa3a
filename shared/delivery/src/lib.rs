//! notification-service's delivery adapters: the AWS side of the delivery port
//! (`notify_core::delivery::Deliverer`).
//!
//! - [`SnsSms`] and [`SesEmail`]: SMS through SNS `Publish`, email through SES v2 `SendEmail`,
//!   built once at cold start by [`aws_deliverer`] from aws-config's defaults (so
//!   `AWS_ENDPOINT_URL` points them at a local stand-in).
//! - [`sdk_errors`]: the SDKs' typed errors (`PublishError`, `SendEmailError`) classed variant
//!   by variant, in agreement with the core's code table (`notify_core::delivery::classify`).
//!
//! Only the worker links this crate, and with it the SNS and SES SDKs.

mod aws;
pub mod sdk_errors;

pub use aws::*;
