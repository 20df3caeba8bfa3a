//! The `token` function: the Cognito user pool's pre-token-generation trigger (event version
//! 3). It adds the organization of the app client that asks for a token, from
//! `CLIENT_ORGANIZATIONS`, to the access token as `org_id`, the claim the API reads; a client
//! with no organization gets an error, and so no token.

use lambda_runtime::{Diagnostic, Error, LambdaEvent, run, service_fn};
use notify_api::auth::{ClientOrganizations, add_org_claim};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    notify_core::telemetry::logs::init();
    // a map that cannot be read fails the cold start: every token request fails, loudly
    let organizations = ClientOrganizations::from_env()?;
    tracing::info!(clients = organizations.len(), "token: app clients mapped");
    let organizations = &organizations;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        match add_org_claim(event.payload, organizations) {
            Ok((answer, org)) => {
                tracing::info!(organization = %org, "token: org_id added");
                Ok(answer)
            }
            Err(err) => {
                tracing::warn!(error = %err, "token: refused");
                Err(Diagnostic {
                    error_type: "TokenRefused".into(),
                    error_message: err.to_string(),
                })
            }
        }
    }))
    .await
}
