//! The ingest function: API Gateway (HTTP API v2 or REST v1) → validated, persisted job.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use notify_api::{Ingest, IngestConfig, event};
use notify_core::config::Vars;
use notify_core::error::report;
use notify_core::fleet::{FleetConfig, Waker};
use notify_lambda::LambdaInvoker;
use notify_postgres::startup;
use serde_json::Value;

/// A caller waits on ingest: past this, a statement is cancelled and the answer is 503.
const INGEST_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[tokio::main]
async fn main() -> Result<(), Error> {
    notify_core::telemetry::logs::init();
    let ingest = match cold_start().await {
        Ok(ingest) => Arc::new(ingest),
        Err(err) => startup::fail("ingest", &report(err.as_ref())),
    };
    // the raw event, not lambda_http::run: an event lambda_http cannot read is answered 400
    // by handle_event instead of failing the invocation (which API Gateway turns into 502)
    run(service_fn(move |event: LambdaEvent<Value>| {
        let ingest = ingest.clone();
        async move {
            let (payload, context) = event.into_parts();
            Ok::<_, Error>(event::handle_event(&ingest, payload, context).await)
        }
    }))
    .await
}

async fn cold_start() -> Result<Ingest, Box<dyn std::error::Error>> {
    let config = IngestConfig::from_env()?;
    let fleet = FleetConfig::from_lookup(&Vars::process())?;
    // the AWS SDK's settings once, for the Lambda client and the database's secret or token
    let sdk = match fleet.function_name.is_some() || startup::database_needs_aws()? {
        true => Some(startup::aws_config().await),
        false => None,
    };
    // the database's side (a secret, the connection: a database outage at cold start is not
    // fatal, requests answer 503 until it is back) beside the Lambda client
    let (store, invoker) = tokio::join!(
        startup::warm_store(sdk.as_ref(), INGEST_STATEMENT_TIMEOUT),
        async {
            let (sdk, function) = (sdk.as_ref()?, fleet.function_name.as_deref()?);
            Some(startup::timed_now("Lambda client", || {
                LambdaInvoker::new(sdk, function)
            }))
        }
    );
    let store = Arc::new(store?);
    let ingest = Ingest::new(store.clone(), config);
    Ok(match invoker {
        Some(invoker) => ingest.with_waker(Waker::new(store, Arc::new(invoker))),
        None => ingest,
    })
}
