//! The worker function: on a schedule (or any JSON event), claims due jobs and delivers them
//! through SNS and SES v2, then answers with a summary of what it did.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, Error, LambdaEvent, run, service_fn};
use notify_core::delivery::Router;
use notify_core::error::report;
use notify_core::worker::{self, WorkerConfig};
use notify_delivery::aws_deliverer;
use notify_postgres::{PgStore, startup};
use serde_json::{Value, json};

struct Deps {
    store: PgStore,
    deliverer: Router,
    config: WorkerConfig,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    notify_core::telemetry::logs::init();
    let deps = match cold_start().await {
        Ok(deps) => Arc::new(deps),
        Err(err) => startup::fail("worker", &report(err.as_ref())),
    };
    run(service_fn(move |event: LambdaEvent<Value>| {
        let deps = deps.clone();
        async move { handle(event, &deps).await }
    }))
    .await
}

/// The event's content is ignored: an EventBridge schedule, or `{}` from `cargo lambda invoke`.
async fn handle(event: LambdaEvent<Value>, deps: &Deps) -> Result<Value, Diagnostic> {
    // only a store error fails the invocation (errorType Unavailable or Database); delivery
    // failures are in the summary
    let summary = worker::handle(event, &deps.store, &deps.deliverer, &deps.config).await?;
    Ok(json!(summary))
}

async fn cold_start() -> Result<Deps, Box<dyn std::error::Error>> {
    let config = WorkerConfig::from_env()?;
    let store = startup::store(notify_postgres::DEFAULT_STATEMENT_TIMEOUT)
        .await?
        .with_rate_limit(config.rate_limit_per_org_per_min);
    startup::warm(&store).await;
    let deliverer = aws_deliverer(&config.delivery).await;
    Ok(Deps {
        store,
        deliverer,
        config,
    })
}
