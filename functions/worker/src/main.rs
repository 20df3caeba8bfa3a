//! The worker function: on a schedule (or any JSON event), claims due jobs and delivers them
//! through SNS and SES v2, then publishes the status events to EventBridge and posts them to
//! the organizations' webhooks, and answers with a summary of what it did.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, Error, LambdaEvent, run, service_fn};
use notify_core::delivery::Router;
use notify_core::error::report;
use notify_core::events::{self, EventBus, EventStore, EventsConfig};
use notify_core::pace::{PaceConfig, Paced};
use notify_core::worker::{self, WorkerConfig};
use notify_delivery::aws_sender;
use notify_delivery::events::{EventBridgeBus, event_bus};
use notify_postgres::{PgStore, startup};
use notify_webhooks::HttpSender;
use serde_json::{Value, json};

struct Deps {
    store: Arc<PgStore>,
    /// SNS and SES at the providers' pace, shared with every other invocation
    deliverer: Paced<Router>,
    config: WorkerConfig,
    events: EventsConfig,
    bus: Option<EventBridgeBus>,
    hooks: HttpSender,
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
/// The deliveries stop early enough to leave the events their time.
async fn handle(event: LambdaEvent<Value>, deps: &Deps) -> Result<Value, Diagnostic> {
    let deadline = worker::deadline_from_epoch_ms(event.context.deadline);
    let webhooks = deps.store.any_webhook_endpoint().await?;
    // only a store error fails the invocation (errorType Unavailable or Database); delivery
    // failures are in the summary
    let summary = worker::run(
        &*deps.store,
        &deps.deliverer,
        &deps.config,
        deps.events.delivery_deadline(deadline, webhooks),
    )
    .await;
    // the pace's metrics, also when a store error stopped the deliveries
    println!("{}", deps.deliverer.metric_line());
    let summary = summary?;
    let bus = deps.bus.as_ref().map(|bus| bus as &dyn EventBus);
    let dispatched =
        events::dispatch(&*deps.store, bus, &deps.hooks, &deps.events, deadline).await?;
    let mut answer = json!(summary);
    answer["events"] = json!(dispatched);
    Ok(answer)
}

async fn cold_start() -> Result<Deps, Box<dyn std::error::Error>> {
    let config = WorkerConfig::from_env()?;
    let vars = notify_core::config::Vars::process();
    let events = EventsConfig::from_lookup(&vars)?;
    let pace = PaceConfig::from_lookup(&vars)?;
    let store = Arc::new(
        startup::store(notify_postgres::DEFAULT_STATEMENT_TIMEOUT)
            .await?
            .with_rate_limit(config.rate_limit_per_org_per_min),
    );
    startup::warm(&store).await;
    let (router, quota) = aws_sender(&config.delivery).await;
    let deliverer = Paced::new(router, store.clone(), Some(Box::new(quota)), pace);
    let bus = match &events.bus_name {
        Some(name) => Some(event_bus(name).await),
        None => None,
    };
    let hooks = HttpSender::new(events.webhook_timeout, events.allow_private)?;
    if events.allow_private {
        tracing::warn!(
            "WEBHOOK_ALLOW_PRIVATE_ADDRESSES is set: webhooks may go to http:// and private \
             addresses (for local use only)"
        );
    }
    Ok(Deps {
        store,
        deliverer,
        config,
        events,
        bus,
        hooks,
    })
}
