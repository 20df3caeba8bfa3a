//! The sweeper function: on a schedule, requeues jobs a lost worker left in processing.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, Error, LambdaEvent, run, service_fn};
use notify_core::error::report;
use notify_core::store::At;
use notify_core::sweeper::{self, SweeperConfig};
use notify_postgres::{PgStore, startup};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Error> {
    notify_core::telemetry::logs::init();
    let (store, config) = match cold_start().await {
        Ok(deps) => deps,
        Err(err) => startup::fail("sweeper", &report(err.as_ref())),
    };
    let store = Arc::new(store);
    run(service_fn(move |_event: LambdaEvent<Value>| {
        let (store, config) = (store.clone(), config.clone());
        async move {
            // a store error fails the invocation (errorType Unavailable or Database): the
            // next schedule tries again
            let summary = sweeper::run_once(store.as_ref(), &config, At::SERVER).await?;
            Ok::<_, Diagnostic>(json!(summary))
        }
    }))
    .await
}

async fn cold_start() -> Result<(PgStore, SweeperConfig), Box<dyn std::error::Error>> {
    let config = SweeperConfig::from_env()?;
    let store = startup::warm_store(None, notify_postgres::DEFAULT_STATEMENT_TIMEOUT).await?;
    Ok((store, config))
}
