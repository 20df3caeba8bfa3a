//! The worker fleet (`worker_slots`): its statements under concurrency, on real connections,
//! and the worker's loop in it (linger, the race of leaving, fan-out, hand-off), with an
//! invoker that starts each "invocation" in-process as Lambda would start it.
//!
//! - A burst of wakes takes one slot; no wake while a worker holds a slot; a lost wake blocks
//!   the next for `JOIN_WITHIN` only.
//! - Joins and fan-out never hold more than `WORKER_MAX_INVOCATIONS` slots; one census a turn.
//! - A job accepted just as a worker leaves is claimed by it or wakes another: never neither.
//! - A woken worker lingers for jobs that arrive, then leaves; a backlog starts more workers,
//!   each job sent once; a worker stopping at its deadline with jobs due hands over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use integration_tests::{TestDb, insert_due_jobs};
use notify_core::delivery::{Deliverer, DeliveryConfig, DeliveryError};
use notify_core::fleet::{
    self, Crew, FleetConfig, FleetStore, Grow, InvokeError, Invoker, Join, Leave, TakeCensus,
    TakeWake, Wake, WakeEvent, WakeReason, Waker,
};
use notify_core::store::ClaimedJob;
use notify_core::worker::{self, WorkerConfig};
use notify_postgres::PgStore;
use uuid::Uuid;

fn take_wake() -> TakeWake {
    TakeWake {
        join_within: fleet::JOIN_WITHIN,
        only_if_due: false,
        now: None,
    }
}

fn join(lease: Option<Uuid>, max: u32) -> Join {
    Join {
        lease,
        until: Utc::now() + chrono::Duration::seconds(60),
        max,
        now: None,
    }
}

async fn stores(db: &TestDb, n: usize) -> Vec<Arc<PgStore>> {
    let mut stores = Vec::with_capacity(n);
    for _ in 0..n {
        stores.push(Arc::new(db.store().await));
    }
    stores
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_wakes_takes_one_slot_and_none_while_it_is_held() {
    let db = TestDb::new().await;
    let stores = stores(&db, 40).await;
    let wakes = futures::future::join_all(stores.iter().map(|s| s.wake(take_wake()))).await;
    let leases: Vec<Uuid> = wakes.into_iter().filter_map(|w| w.unwrap()).collect();
    assert_eq!(leases.len(), 1, "40 wakes at once start one worker");
    let store = &stores[0];
    assert_eq!(store.wake(take_wake()).await.unwrap(), None);

    // a lost wake (its invocation never joined) blocks the next for JOIN_WITHIN only
    let later = |secs: i64| Some(Utc::now() + chrono::Duration::seconds(secs));
    let at = |secs| TakeWake {
        now: later(secs),
        ..take_wake()
    };
    assert_eq!(store.wake(at(9)).await.unwrap(), None);
    assert!(store.wake(at(11)).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wake_while_a_worker_holds_a_slot_and_one_after_it_leaves() {
    let db = TestDb::new().await;
    let store = db.store().await;
    // a worker the schedule started: no lease
    let member = store.join(join(None, 4)).await.unwrap().expect("a slot");
    assert_eq!(member.slot, 1);
    assert_eq!(store.wake(take_wake()).await.unwrap(), None);
    // another slot than the wake's is held: still no wake
    let second = store.join(join(None, 4)).await.unwrap().expect("a slot");
    assert_eq!(second.slot, 2);
    store.leave(Leave { member, now: None }).await.unwrap();
    assert_eq!(store.wake(take_wake()).await.unwrap(), None);
    store
        .leave(Leave {
            member: second,
            now: None,
        })
        .await
        .unwrap();
    assert!(store.wake(take_wake()).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_worker_takes_over_the_slot_its_wake_took() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let lease = store.wake(take_wake()).await.unwrap().expect("a wake");
    // a scheduled worker joining meanwhile takes another slot
    let scheduled = store.join(join(None, 4)).await.unwrap().unwrap();
    assert_eq!(scheduled.slot, 2);
    let woken = store.join(join(Some(lease), 4)).await.unwrap().unwrap();
    assert_eq!((woken.slot, woken.lease), (1, lease));
    let client = db.client().await;
    let starting: bool = client
        .query_one("SELECT starting FROM worker_slots WHERE slot = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!starting, "joined");
    // a stale leave (a lease that no longer holds the slot) frees nothing
    store
        .leave(Leave {
            member: fleet::Member {
                slot: 1,
                lease: Uuid::new_v4(),
            },
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(store.wake(take_wake()).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joins_and_fan_out_never_hold_more_than_the_max() {
    let db = TestDb::new().await;
    let stores = stores(&db, 12).await;
    let joined = futures::future::join_all(stores.iter().map(|s| s.join(join(None, 4)))).await;
    let members: Vec<_> = joined.into_iter().filter_map(|j| j.unwrap()).collect();
    assert_eq!(members.len(), 4, "12 joins at once, 4 slots");
    let mut slots: Vec<i32> = members.iter().map(|m| m.slot).collect();
    slots.sort();
    assert_eq!(slots, [1, 2, 3, 4]);
    let store = &stores[0];
    let grow = |count| Grow {
        count,
        max: 4,
        join_within: fleet::JOIN_WITHIN,
        now: None,
    };
    assert!(store.grow(grow(3)).await.unwrap().is_empty());
    store
        .leave(Leave {
            member: members[0],
            now: None,
        })
        .await
        .unwrap();
    // two decide at once: one free slot between them
    let grown = futures::future::join_all(stores[..2].iter().map(|s| s.grow(grow(3)))).await;
    assert_eq!(
        grown.into_iter().map(|g| g.unwrap().len()).sum::<usize>(),
        1
    );
    // a larger max lets it grow further
    let more = store.grow(Grow { max: 6, ..grow(5) }).await.unwrap();
    assert_eq!(more.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_census_a_turn_fleet_wide() {
    let db = TestDb::new().await;
    let client = db.client().await;
    insert_due_jobs(&client, 30).await;
    let stores = stores(&db, 10).await;
    let census = |now| TakeCensus {
        every: Duration::from_secs(1),
        count_up_to: 20,
        now,
    };
    let taken = futures::future::join_all(stores.iter().map(|s| s.census(census(None)))).await;
    let turns: Vec<_> = taken.into_iter().filter_map(|c| c.unwrap()).collect();
    assert_eq!(turns.len(), 1, "ten at once, one turn");
    assert_eq!((turns[0].held, turns[0].due), (0, 20), "counted up to 20");
    let next = Some(Utc::now() + chrono::Duration::seconds(2));
    assert!(stores[0].census(census(next)).await.unwrap().is_some());
}

/// Delivers at once (or after `delay`), remembering which jobs it got and how many times.
#[derive(Default)]
struct Counting {
    delay: Duration,
    calls: Mutex<HashMap<Uuid, u32>>,
}

#[async_trait]
impl Deliverer for Counting {
    async fn deliver(&self, job: &ClaimedJob) -> Result<String, DeliveryError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        *self.calls.lock().unwrap().entry(job.id).or_default() += 1;
        Ok(format!("m-{}", job.id))
    }
}

impl Counting {
    fn delivered(&self) -> HashMap<Uuid, u32> {
        self.calls.lock().unwrap().clone()
    }
}

/// Records the wakes, and starts nothing.
#[derive(Default)]
struct Recorded {
    events: Mutex<Vec<WakeEvent>>,
}

#[async_trait]
impl Invoker for Recorded {
    async fn invoke(&self, event: &WakeEvent) -> Result<(), InvokeError> {
        self.events.lock().unwrap().push(*event);
        Ok(())
    }
}

fn worker_config(batch: u32, concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        batch_size: batch,
        concurrency,
        provider_timeout: Duration::from_millis(500),
        ..WorkerConfig::new(DeliveryConfig::new("noreply@example.com"))
    }
}

/// The race of leaving, many times over: a worker with nothing to do leaves while a job is
/// accepted and its wake checked (ingest's order: insert, commit, then wake). Every job must
/// be claimed by the leaving worker's last claim or find no worker and wake one: neither
/// would leave it for the next minute's schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_accepted_as_the_worker_leaves_is_claimed_by_it_or_wakes_another() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let worker_store = db.store().await;
    let ingest_store = Arc::new(db.store().await);
    let deliverer = Counting::default();
    let invoker = Arc::new(Recorded::default());
    let waker = Waker::new(ingest_store.clone(), invoker.clone());
    let cfg = worker_config(10, 4);
    let fleet_cfg = FleetConfig {
        idle: Duration::ZERO,
        ..FleetConfig::default()
    };
    let rounds = 300;
    let (mut by_worker, mut by_wake) = (0, 0);
    for round in 0..rounds {
        let mut crew = Crew::join(
            &worker_store,
            None,
            &fleet_cfg,
            &serde_json::json!({}),
            Instant::now() + Duration::from_secs(30),
        )
        .await
        .unwrap()
        .expect("a slot");
        // spread the two sides over each other's millisecond or two: either may start first,
        // by up to 1.5 ms
        let skew = (round as i64 * 53 % 3_000) - 1_500;
        let (worker_after, ingest_after) = (
            Duration::from_micros(skew.max(0) as u64),
            Duration::from_micros((-skew).max(0) as u64),
        );
        let leaving = async {
            tokio::time::sleep(worker_after).await;
            worker::run_in(
                &worker_store,
                &deliverer,
                &cfg,
                Instant::now() + Duration::from_secs(30),
                &mut crew,
            )
            .await
            .unwrap()
        };
        let accepting = async {
            tokio::time::sleep(ingest_after).await;
            let id = insert_due_jobs(&client, 1).await[0];
            let wake = waker.wake(WakeReason::Accepted).await;
            (id, wake)
        };
        let (_, (id, wake)) = tokio::join!(leaving, accepting);
        crew.finish().await;
        let claimed = deliverer.delivered().contains_key(&id);
        let woke = matches!(wake, Wake::Started(_));
        assert!(
            claimed || woke,
            "round {round}: the job was neither claimed by the leaving worker nor woke one"
        );
        by_worker += usize::from(claimed);
        by_wake += usize::from(woke);
        if !claimed {
            // the woken worker's part, so the next round starts with the job gone and the
            // wake's slot free
            let lease = invoker.events.lock().unwrap().last().unwrap().lease;
            let mut woken = Crew::join(
                &worker_store,
                None,
                &fleet_cfg,
                &WakeEvent {
                    lease,
                    reason: WakeReason::Accepted,
                }
                .payload(),
                Instant::now() + Duration::from_secs(30),
            )
            .await
            .unwrap()
            .expect("its slot");
            worker::run_in(
                &worker_store,
                &deliverer,
                &cfg,
                Instant::now() + Duration::from_secs(30),
                &mut woken,
            )
            .await
            .unwrap();
            woken.finish().await;
        } else if woke {
            // both: the wake's slot is free again once its worker would have joined and left
            let lease = invoker.events.lock().unwrap().last().unwrap().lease;
            worker_store
                .leave(Leave {
                    member: fleet::Member { slot: 1, lease },
                    now: None,
                })
                .await
                .unwrap();
        }
    }
    let delivered = deliverer.delivered();
    assert_eq!(delivered.len(), rounds);
    assert!(delivered.values().all(|n| *n == 1), "each job sent once");
    eprintln!("{rounds} rounds: {by_worker} claimed by the leaving worker, {by_wake} woke one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_worker_lingers_for_jobs_that_arrive_then_leaves() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let deliverer = Counting::default();
    let fleet_cfg = FleetConfig {
        idle: Duration::from_millis(600),
        ..FleetConfig::default()
    };
    // the job whose accept woke it
    insert_due_jobs(&client, 1).await;
    let lease = store.wake(take_wake()).await.unwrap().expect("a wake");
    let payload = WakeEvent {
        lease,
        reason: WakeReason::Accepted,
    }
    .payload();
    let started = Instant::now();
    let mut crew = Crew::join(
        &store,
        None,
        &fleet_cfg,
        &payload,
        started + Duration::from_secs(30),
    )
    .await
    .unwrap()
    .unwrap();
    let arriving = async {
        for gap in [400, 400] {
            tokio::time::sleep(Duration::from_millis(gap)).await;
            insert_due_jobs(&client, 1).await;
        }
    };
    let cfg = worker_config(10, 4);
    let (summary, ()) = tokio::join!(
        worker::run_in(
            &store,
            &deliverer,
            &cfg,
            started + Duration::from_secs(30),
            &mut crew
        ),
        arriving
    );
    let summary = summary.unwrap();
    let fleet = crew.finish().await;
    assert_eq!(
        summary.sent, 3,
        "its job, and the two that came while it lingered"
    );
    assert!((fleet.slot, fleet.woken) == (1, true), "{fleet:?}");
    let stayed = started.elapsed();
    assert!(
        stayed >= Duration::from_millis(1_400) && stayed < Duration::from_secs(5),
        "left about 600 ms after the last job: {stayed:?}"
    );
    assert!(
        store.wake(take_wake()).await.unwrap().is_some(),
        "its slot is free once it left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_worker_with_nothing_due_leaves_at_once_and_starts_no_other() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let invoker = Arc::new(Recorded::default());
    let fleet_cfg = FleetConfig::default();
    let scheduled = serde_json::json!({"detail-type": "Scheduled Event", "detail": {}});
    let mut crew = Crew::join(
        &store,
        Some(invoker.clone()),
        &fleet_cfg,
        &scheduled,
        Instant::now() + Duration::from_secs(30),
    )
    .await
    .unwrap()
    .unwrap();
    let summary = worker::run_in(
        &store,
        &Counting::default(),
        &worker_config(10, 4),
        Instant::now() + Duration::from_secs(30),
        &mut crew,
    )
    .await
    .unwrap();
    let fleet = crew.finish().await;
    assert_eq!((summary.claimed, fleet.started, fleet.woken), (0, 0, false));
    assert!(invoker.events.lock().unwrap().is_empty());
    // nothing came: it does not linger the idle time (2 s) on every tick
    assert!(summary.elapsed_ms < 1_000, "{summary:?}");
}

/// Starts each invocation in-process, as Lambda would: a worker on a store of its own joins
/// with the wake's event and runs to its deadline, starting others through a clone of this.
#[derive(Clone)]
struct InProcess(Arc<Lambda>);

struct Lambda {
    stores: Vec<Arc<PgStore>>,
    deliverer: Arc<Counting>,
    cfg: WorkerConfig,
    fleet_cfg: FleetConfig,
    started: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

#[async_trait]
impl Invoker for InProcess {
    async fn invoke(&self, event: &WakeEvent) -> Result<(), InvokeError> {
        let lambda = self.0.clone();
        let invoker: Arc<dyn Invoker> = Arc::new(self.clone());
        let payload = event.payload();
        let mut started = self.0.started.lock().unwrap();
        let store = self.0.stores[started.len() % self.0.stores.len()].clone();
        started.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut crew = Crew::join(
                &*store,
                Some(invoker),
                &lambda.fleet_cfg,
                &payload,
                deadline,
            )
            .await
            .unwrap()
            .expect("the slot taken for it");
            worker::run_in(
                &*store,
                &*lambda.deliverer,
                &lambda.cfg,
                deadline,
                &mut crew,
            )
            .await
            .unwrap();
            crew.finish().await;
        }));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_starts_more_workers_up_to_the_max_and_each_job_is_sent_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let jobs = 600;
    let ids = insert_due_jobs(&client, jobs).await;
    // 4 calls in flight at 50 ms: 80 jobs/s a worker; the backlog, 600, is more than one
    // sends within the (shortened) horizon of a second
    let deliverer = Arc::new(Counting {
        delay: Duration::from_millis(50),
        ..Counting::default()
    });
    let fleet_cfg = FleetConfig {
        idle: Duration::from_millis(300),
        max_invocations: 4,
        horizon: Duration::from_secs(1),
        ..FleetConfig::default()
    };
    let lambda = Arc::new(Lambda {
        stores: stores(&db, 4).await,
        deliverer: deliverer.clone(),
        cfg: worker_config(8, 4),
        fleet_cfg,
        started: Mutex::new(Vec::new()),
    });
    let invoker = Arc::new(InProcess(lambda.clone()));
    let ingest_store = Arc::new(db.store().await);
    // the wake ingest would send for the first job: it starts the first worker
    let waker = Waker::new(ingest_store, invoker.clone());
    assert_eq!(
        waker.wake(WakeReason::Accepted).await,
        Wake::Started(fleet::Started::Accepted)
    );
    let started = Instant::now();
    // every worker leaves once the queue is empty; the first started the others
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let all = lambda
            .started
            .lock()
            .unwrap()
            .iter()
            .all(|t| t.is_finished());
        if all && deliverer.delivered().len() == ids.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the backlog was not sent in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    let invocations = lambda.started.lock().unwrap().len();
    let delivered = deliverer.delivered();
    assert!(delivered.values().all(|n| *n == 1), "each job sent once");
    assert_eq!(invocations, 4, "the first and three more: the max");
    // one worker alone would take 600 / 80 = 7.5 s
    assert!(
        took < Duration::from_secs(5),
        "the fleet sent it in {took:?}"
    );
    let held = integration_tests::count(
        &client,
        "SELECT count(*) FROM worker_slots WHERE until > now()",
    )
    .await;
    assert_eq!(held, 0, "every worker freed its slot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopping_at_its_deadline_with_jobs_due_hands_over() {
    let db = TestDb::new().await;
    let client = db.client().await;
    insert_due_jobs(&client, 40).await;
    let store = db.store().await;
    let invoker = Arc::new(Recorded::default());
    // a fleet of one: no fan-out takes the slots a successor would need
    let fleet_cfg = FleetConfig {
        max_invocations: 1,
        ..FleetConfig::default()
    };
    // 2.4 s past the 3 s margin: room for a few batches of 300 ms calls, however slowly
    // the join goes on a loaded machine, but not for all 40 jobs (ten batches, 3 s)
    let deadline = Instant::now() + Duration::from_millis(5_400);
    let mut crew = Crew::join(
        &store,
        Some(invoker.clone()),
        &fleet_cfg,
        &serde_json::json!({}),
        deadline,
    )
    .await
    .unwrap()
    .unwrap();
    let deliverer = Counting {
        delay: Duration::from_millis(300),
        ..Counting::default()
    };
    let summary = worker::run_in(
        &store,
        &deliverer,
        &worker_config(4, 4),
        deadline,
        &mut crew,
    )
    .await
    .unwrap();
    let fleet = crew.finish().await;
    assert!(summary.sent > 0 && summary.sent < 40, "{summary:?}");
    assert!(fleet.handed_off, "{fleet:?}");
    let events = invoker.events.lock().unwrap().clone();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, WakeReason::HandOff);
    // the successor's slot is the wake's, held for it
    let successor = store
        .join(join(Some(events[0].lease), 4))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(successor.slot, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_finding_the_fleet_full_claims_nothing() {
    let db = TestDb::new().await;
    let client = db.client().await;
    insert_due_jobs(&client, 5).await;
    let store = db.store().await;
    let fleet_cfg = FleetConfig {
        max_invocations: 1,
        ..FleetConfig::default()
    };
    store.join(join(None, 1)).await.unwrap().unwrap();
    let crew = Crew::join(
        &store,
        None,
        &fleet_cfg,
        &serde_json::json!({}),
        Instant::now() + Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(crew.is_none());
    let due = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_queue WHERE claim_token IS NULL",
    )
    .await;
    assert_eq!(due, 5);
}
