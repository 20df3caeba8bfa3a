//! The migrator function: the handler of the template's `Migrations` custom resource.
//! CloudFormation invokes it when a deploy creates or changes that resource; it applies the
//! migrations and answers at the request's `ResponseURL` (see `notify_postgres::custom_resource`).

use std::future::Future;
use std::pin::Pin;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use notify_core::error::report;
use notify_postgres::custom_resource::{self, Invocation, Responder};
use notify_postgres::{db::DbConfig, startup};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    notify_core::telemetry::logs::init();
    let responder = match Responder::new() {
        Ok(responder) => responder,
        Err(err) => startup::fail("migrator", &report(&err)),
    };
    run(service_fn(move |event: LambdaEvent<Value>| {
        let responder = responder.clone();
        async move {
            let invocation = Invocation::from_context(&event.context);
            // The settings are read per request, not at cold start: a bad one must become a
            // FAILED answer, never a function that cannot start while CloudFormation waits.
            // Boxed: unboxed, the futures nest deep enough (the SDK's config loader inside
            // `from_env`, in the handler, in the runtime) to overflow rustc's query depth when
            // the binary is built for tests (`cargo clippy --all-targets`).
            let migrate = |to, give_up_at| -> Pin<Box<dyn Future<Output = _> + Send>> {
                Box::pin(async move {
                    let db = DbConfig::from_env().await;
                    custom_resource::apply_migrations(db, to, give_up_at).await
                })
            };
            let response =
                custom_resource::handle(event.payload, &invocation, &responder, migrate).await?;
            Ok::<_, Error>(serde_json::to_value(response)?)
        }
    }))
    .await
}
