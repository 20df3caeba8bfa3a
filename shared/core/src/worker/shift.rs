//! One worker invocation's shift: join the fleet, deliver while jobs flow ([`super::run_in`]),
//! and beside the deliveries, publish and post the status events they record, so a caller
//! hears of a change within about [`DISPATCH_EVERY`] however long the worker lingers; then a
//! last dispatch in the time the deliveries left it, and leave.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::{WorkerConfig, WorkerSummary};
use crate::delivery::Deliverer;
use crate::events::{
    DispatchSummary, EventBus, EventStore, EventsConfig, WebhookSender, dispatch::dispatch_round,
};
use crate::fleet::{Crew, CrewSummary, FleetConfig, FleetStore, Invoker};
use crate::store::{JobStore, StoreError};

/// How often the events recorded meanwhile are dispatched while the worker delivers.
pub const DISPATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// What a shift uses: the stores (one adapter usually implements all three), the deliverer,
/// the events' outlets, the settings, and the invoker that starts other workers (`None`: this
/// one starts none).
pub struct Shift<'a> {
    pub jobs: &'a dyn JobStore,
    pub fleet: &'a dyn FleetStore,
    pub events: &'a dyn EventStore,
    pub deliverer: &'a dyn Deliverer,
    pub bus: Option<&'a dyn EventBus>,
    pub hooks: &'a dyn WebhookSender,
    pub worker: &'a WorkerConfig,
    pub fleet_config: &'a FleetConfig,
    pub events_config: &'a EventsConfig,
    pub invoker: Option<Arc<dyn Invoker>>,
}

/// What a shift did: the deliveries' summary, the events', and the fleet's.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ShiftSummary {
    #[serde(flatten)]
    pub work: WorkerSummary,
    pub events: DispatchSummary,
    pub fleet: CrewSummary,
}

impl Shift<'_> {
    /// Runs the shift of an invocation whose event is `payload` (a wake's or the schedule's),
    /// to `deadline`; `webhooks`: some organization has a webhook endpoint (the last dispatch
    /// keeps time for a round of calls). A store error fails it (what it had done is logged).
    pub async fn run(
        &self,
        payload: &serde_json::Value,
        deadline: Instant,
        webhooks: bool,
    ) -> Result<ShiftSummary, StoreError> {
        let delivery_deadline = self.events_config.delivery_deadline(deadline, webhooks);
        let crew = Crew::join(
            self.fleet,
            self.invoker.clone(),
            self.fleet_config,
            payload,
            delivery_deadline,
        )
        .await?;
        let Some(mut crew) = crew else {
            // the fleet is full: the workers holding the slots deliver and dispatch
            return Ok(ShiftSummary {
                work: WorkerSummary::default(),
                events: DispatchSummary::default(),
                fleet: CrewSummary::default(),
            });
        };
        let done = tokio::sync::Notify::new();
        let delivering = async {
            let summary = super::run_in(
                self.jobs,
                self.deliverer,
                self.worker,
                delivery_deadline,
                &mut crew,
            )
            .await;
            done.notify_one();
            summary
        };
        let dispatching = async {
            let mut events = DispatchSummary::default();
            loop {
                tokio::select! {
                    () = done.notified() => break,
                    () = tokio::time::sleep(DISPATCH_EVERY) => {}
                }
                events.add(self.dispatch(delivery_deadline).await?);
            }
            Ok::<_, StoreError>(events)
        };
        let (work, events) = tokio::join!(delivering, dispatching);
        let fleet = crew.finish().await;
        let work = work?;
        let mut events = events?;
        events.add(self.dispatch(deadline).await?);
        println!(
            "{}",
            events.metric_line(chrono::Utc::now().timestamp_millis())
        );
        Ok(ShiftSummary {
            work,
            events,
            fleet,
        })
    }

    async fn dispatch(&self, deadline: Instant) -> Result<DispatchSummary, StoreError> {
        dispatch_round(
            self.events,
            self.bus,
            self.hooks,
            self.events_config,
            deadline,
        )
        .await
    }
}
