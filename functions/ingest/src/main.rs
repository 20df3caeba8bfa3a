//! The ingest function: API Gateway (HTTP API v2 or REST v1) → validated, persisted job.

use std::sync::Arc;

use lambda_http::{run, service_fn, Error, Request};
use shared::ingest::{Ingest, IngestConfig};
use shared::{db::DbConfig, error::report, startup, store::PgStore};

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::config::init_tracing();
    let ingest = match cold_start().await {
        Ok(ingest) => Arc::new(ingest),
        Err(err) => startup::fail("ingest", &report(err.as_ref())),
    };
    run(service_fn(move |req: Request| {
        let ingest = ingest.clone();
        async move { Ok::<_, Error>(ingest.handle(req).await) }
    }))
    .await
}

async fn cold_start() -> Result<Ingest, Box<dyn std::error::Error>> {
    let config = IngestConfig::from_env()?;
    let db = DbConfig::from_env()?;
    startup::migrate_if_enabled(&db).await?;
    // connects lazily: a database outage answers 503 instead of failing the cold start
    let store = PgStore::new(db);
    Ok(Ingest::new(Arc::new(store), config))
}
