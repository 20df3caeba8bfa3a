//! The feedback function: records what SES and SNS report after accepting a message
//! (delivered, bounced, complained) and keeps each organization's suppression list.
//!
//! It is subscribed to the SNS topic of the SES configuration set's event destination, and
//! to the SNS SMS delivery-status log groups (a CloudWatch Logs subscription filter).

use std::sync::Arc;

use lambda_runtime::{Diagnostic, Error, LambdaEvent, run, service_fn};
use notify_core::{error::report, feedback};
use notify_postgres::{PgStore, startup};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    notify_core::telemetry::logs::init();
    let store = match cold_start().await {
        Ok(store) => Arc::new(store),
        Err(err) => startup::fail("feedback", &report(err.as_ref())),
    };
    run(service_fn(move |event: LambdaEvent<Value>| {
        let store = store.clone();
        async move {
            // malformed or unknown events are counted, never an error (SNS would retry them
            // forever); a store error fails the invocation so the event is delivered again
            let summary = feedback::handle(store.as_ref(), &event.payload).await?;
            Ok::<_, Diagnostic>(json!(summary))
        }
    }))
    .await
}

async fn cold_start() -> Result<PgStore, Box<dyn std::error::Error>> {
    Ok(startup::warm_store(None, notify_postgres::DEFAULT_STATEMENT_TIMEOUT).await?)
}
