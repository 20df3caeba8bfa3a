//! The migrator function: the handler of the template's `Migrations` custom resource.
//! CloudFormation invokes it when a deploy creates or changes that resource; it applies the
//! migrations and answers at the request's `ResponseURL` (see `shared::custom_resource`).

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::custom_resource::{self, Invocation, Responder};
use shared::{db::DbConfig, error::report, startup};

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::config::init_tracing();
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
            let migrate = |give_up_at| async move {
                custom_resource::apply_migrations(DbConfig::from_env().await, give_up_at).await
            };
            let response =
                custom_resource::handle(event.payload, &invocation, &responder, migrate).await?;
            Ok::<_, Error>(serde_json::to_value(response)?)
        }
    }))
    .await
}
