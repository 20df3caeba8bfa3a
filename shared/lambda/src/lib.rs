//! notification-service's Lambda adapter: the fleet's [`Invoker`], which starts a worker
//! invocation with Lambda `Invoke` (`InvocationType=Event`, the event a [`WakeEvent`]'s
//! payload) and returns once Lambda has queued it (202), not when the worker is done.
//!
//! The endpoint is the SDK's own choice: `AWS_ENDPOINT_URL_LAMBDA`, else `AWS_ENDPOINT_URL`,
//! else the region's. Locally `make watch` points it at `cargo lambda watch`, whose invoke
//! API answers an event invocation only once the function returns; so a call may last as
//! long as a worker's run, and no timeout here cuts it short (a cut would drop the
//! invocation there). The callers wait for the answer only briefly and leave the call to
//! finish in its own task (`notify_core::fleet::start`).

use async_trait::async_trait;
use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use notify_core::fleet::{InvokeError, Invoker, WakeEvent};

/// How long opening a connection to the Lambda API may take (the SDK tries again, with its
/// standard retries, after a connection that could not be opened).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts invocations of one function (a name or an ARN).
#[derive(Debug, Clone)]
pub struct LambdaInvoker {
    client: aws_sdk_lambda::Client,
    function: String,
}

impl LambdaInvoker {
    /// The invoker on `sdk`'s settings (region, credentials, endpoint), for `function`.
    pub fn new(sdk: &aws_config::SdkConfig, function: &str) -> Self {
        let config = aws_sdk_lambda::config::Builder::from(sdk)
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .build(),
            )
            .build();
        Self {
            client: aws_sdk_lambda::Client::from_conf(config),
            function: function.to_owned(),
        }
    }

    /// The invoker for `function` on aws-config's defaults from the environment (region,
    /// credentials, `AWS_ENDPOINT_URL_LAMBDA` or `AWS_ENDPOINT_URL`), under the behaviour
    /// version the other adapters pin. Call once, at cold start.
    pub async fn from_env(function: &str) -> Self {
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
            .load()
            .await;
        Self::new(&sdk, function)
    }

    /// The function it starts.
    pub fn function(&self) -> &str {
        &self.function
    }
}

/// The code a failed call is counted and logged by: the service's error code, else what
/// failed on the way.
fn code<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> String {
    match err {
        SdkError::ServiceError(service) => {
            service.err().code().unwrap_or("ServiceError").to_owned()
        }
        SdkError::TimeoutError(_) => "timeout".to_owned(),
        SdkError::DispatchFailure(_) => "dispatch".to_owned(),
        SdkError::ResponseError(_) => "response".to_owned(),
        SdkError::ConstructionFailure(_) => "construction".to_owned(),
        _ => "unknown".to_owned(),
    }
}

#[async_trait]
impl Invoker for LambdaInvoker {
    async fn invoke(&self, event: &WakeEvent) -> Result<(), InvokeError> {
        let payload = serde_json::to_vec(&event.payload()).map_err(|err| InvokeError {
            code: "payload".to_owned(),
            source: Box::new(err),
        })?;
        self.client
            .invoke()
            .function_name(&self.function)
            .invocation_type(InvocationType::Event)
            .payload(Blob::new(payload))
            .send()
            .await
            .map_err(|err| InvokeError {
                code: code(&err),
                source: Box::new(err),
            })?;
        Ok(())
    }
}
