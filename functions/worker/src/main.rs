//! The worker function: on a wake (ingest's, or another worker's) or on the schedule, joins
//! the worker fleet, claims due jobs and delivers them through SNS and SES v2 while they
//! flow, publishing the status events to EventBridge and posting them to the organizations'
//! webhooks beside the deliveries, and answers with a summary of what it did.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, Error, LambdaEvent, run, service_fn};
use notify_core::delivery::Router;
use notify_core::error::report;
use notify_core::events::{EventBus, EventStore, EventsConfig};
use notify_core::fleet::{FleetConfig, Invoker};
use notify_core::pace::{PaceConfig, Paced};
use notify_core::worker::shift::Shift;
use notify_core::worker::{self, WorkerConfig};
use notify_delivery::events::{EventBridgeBus, event_bus_from};
use notify_delivery::sender_from;
use notify_lambda::LambdaInvoker;
use notify_postgres::{PgStore, startup};
use notify_webhooks::HttpSender;
use serde_json::{Value, json};

struct Deps {
    store: Arc<PgStore>,
    /// SNS and SES at the providers' pace, shared with every other invocation
    deliverer: Paced<Router>,
    config: WorkerConfig,
    fleet: FleetConfig,
    /// Starts more workers (fan-out, hand-off); `None` without `WORKER_FUNCTION_NAME`.
    invoker: Option<Arc<dyn Invoker>>,
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

/// The event is a wake (`{"wake": {"lease", "reason"}}`) or anything else (the schedule's,
/// `{}` from `cargo lambda invoke`). The deliveries stop early enough to leave the last
/// dispatch of events its time.
async fn handle(event: LambdaEvent<Value>, deps: &Deps) -> Result<Value, Diagnostic> {
    let deadline = worker::deadline_from_epoch_ms(event.context.deadline);
    let webhooks = deps.store.any_webhook_endpoint().await?;
    let shift = Shift {
        jobs: &*deps.store,
        fleet: &*deps.store,
        events: &*deps.store,
        deliverer: &deps.deliverer,
        bus: deps.bus.as_ref().map(|bus| bus as &dyn EventBus),
        hooks: &deps.hooks,
        worker: &deps.config,
        fleet_config: &deps.fleet,
        events_config: &deps.events,
        invoker: deps.invoker.clone(),
    };
    // only a store error fails the invocation (errorType Unavailable or Database); delivery
    // failures are in the summary
    let summary = shift.run(&event.payload, deadline, webhooks).await;
    // the pace's metrics, also when a store error stopped the deliveries
    println!("{}", deps.deliverer.metric_line());
    Ok(json!(summary?))
}

async fn cold_start() -> Result<Deps, Box<dyn std::error::Error>> {
    let config = WorkerConfig::from_env()?;
    let vars = notify_core::config::Vars::process();
    let events = EventsConfig::from_lookup(&vars)?;
    let pace = PaceConfig::from_lookup(&vars)?;
    let fleet = FleetConfig::from_lookup(&vars)?;
    // the AWS SDK's settings once, shared by SNS, SES, EventBridge, Lambda and the database's
    // secret; then the database's side (the secret, the connection) beside the clients
    let sdk = startup::aws_config().await;
    // built when the first webhook needs it, not at cold start
    let hooks = HttpSender::lazy(events.webhook_timeout, events.allow_private);
    let (store, ((router, quota), bus, invoker)) = tokio::join!(
        startup::warm_store(Some(&sdk), notify_postgres::DEFAULT_STATEMENT_TIMEOUT),
        async {
            startup::timed_now("AWS clients", || {
                let bus = events
                    .bus_name
                    .as_deref()
                    .map(|name| event_bus_from(&sdk, name));
                let invoker = fleet.function_name.as_deref().map(|function| {
                    Arc::new(LambdaInvoker::new(&sdk, function)) as Arc<dyn Invoker>
                });
                (sender_from(&sdk, &config.delivery), bus, invoker)
            })
        }
    );
    let store = Arc::new(store?.with_rate_limit(config.rate_limit_per_org_per_min));
    let deliverer = Paced::new(router, store.clone(), Some(Box::new(quota)), pace);
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
        fleet,
        invoker,
        events,
        bus,
        hooks,
    })
}
