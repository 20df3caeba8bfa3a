//! A woken worker as it leaves and as it lingers (invariants 15 and 1): ingest wakes the
//! worker through the Invoke API after each accept, the worker lingers while jobs arrive
//! (`WORKER_IDLE_MS` 400) and leaves after the idle window. No schedule runs: every job must
//! reach a worker through a wake.
//!
//! **Leaving.** A job accepted while a worker leaves must not wait for the schedule. Its wake
//! sees the leaving worker's slot still held and sends nothing, so the worker frees its slot
//! first and then claims once more: that claim takes the job, or (at its deadline) the worker
//! hands the job to a successor it starts. A gate the scenario installs on `worker_slots`
//! holds each worker's leave (the statement that frees its slot) on an advisory lock the
//! scenario holds; once a worker waits there, the scenario posts a job, then lets the leave
//! commit. Each such job must be claimed within [`CLAIM_WITHIN`]. A worker that claimed last
//! and freed its slot after would leave every one of them waiting.
//!
//! **Killed mid-linger.** Requests keep arriving every 150–350 ms while woken workers are
//! SIGKILLed as they linger (they delivered jobs and hold none). The killed worker's slot
//! stays held to its deadline, so no wake is sent meanwhile and the jobs accepted then wait;
//! at the deadline the slot is free, the next request's wake starts a worker, and it claims
//! them: each within [`CLAIM_WITHIN`] of the killed worker's deadline. Then sweeps and healthy
//! runs until every job is final; nothing may be lost or claimed twice.

use std::cell::Cell;
use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Client;
use uuid::Uuid;

use super::fleet::{
    CLAIM_WITHIN, FirstClaim, Posted, first_claim, first_claims, holding, poll, post,
    random_between, secs_between, unclaimed, woken_by,
};
use super::{Mutant, Scenario};
use crate::TestDb;
use crate::faults::endgame::{drain, settle};
use crate::faults::process::Function;
use crate::faults::runtime::{InvokeApi, Ledger, Span};
use crate::faults::suite::{WORKER_FUNCTION, WORKER_TIMEOUT, wake_env};
use crate::faults::{Row, Suite, claims};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "woken worker: leaving as jobs arrive, killed mid-linger",
    run: |s| Box::pin(run(s, true)),
};

/// The leaving half, with workers that claim once more *before* freeing their slot
/// (tests/mutants/leave-after-last-claim.patch): a job accepted between that claim and the
/// slot's release finds a worker still there, wakes none, and waits for the schedule.
pub const LEAVE_AFTER_LAST_CLAIM: Mutant = Mutant {
    title: "a worker that frees its slot after its last claim",
    patch: Some("leave-after-last-claim"),
    run: |s| Box::pin(run(s, false)),
    caught_by: LEFT_WAITING,
};

/// The leaving check's words: a worker that leaves in the wrong order must fail it.
const LEFT_WAITING: &str = "jobs accepted while a worker was leaving, each claimed within 3 s";

/// The advisory lock the leave gate waits on.
const GATE: i64 = 4_300_001;
/// A worker leaves after this long without a job.
const IDLE_MS: u64 = 400;
/// With the 6 s timeout and its 3 s safety margin, a woken worker claims for 2.4 s.
const PROVIDER_TIMEOUT_MS: u64 = 600;
const WORKERS: usize = 2;

/// Holds every worker's leave (an update that frees a held slot, from a worker's session)
/// on the shared side of [`GATE`] while the scenario holds it: the leave has taken its row
/// and waits there, uncommitted, as a slow leave would.
const LEAVE_GATE: &str = "
    CREATE FUNCTION faults_leave_gate() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.until > now() AND NEW.until <= now()
           AND current_setting('application_name') LIKE 'worker-%' THEN
            PERFORM pg_advisory_xact_lock_shared(4300001);
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER faults_leave_gate BEFORE UPDATE ON worker_slots
        FOR EACH ROW EXECUTE FUNCTION faults_leave_gate();";

/// What the scenario runs in: its database, the Invoke API, ingest and the worker.
struct Setup {
    db: TestDb,
    client: Client,
    lambda: InvokeApi,
    ingest: Function,
    worker: Function,
    org: Uuid,
}

/// One job accepted while a worker's leave waited at the gate.
struct Race {
    /// The worker found leaving; `None` when none reached its leave in time.
    leaving: Option<String>,
    posted: Option<Posted>,
    /// Seconds from its acceptance to its first claim, if claimed within [`CLAIM_WITHIN`].
    waited: Option<f64>,
}

/// One kill: the woken invocation, and when its slot was free again (its deadline).
struct Kill {
    process: String,
    picked: DateTime<Utc>,
    slot_end: DateTime<Utc>,
}

/// The whole scenario, or (`kills` false) its leaving half only.
async fn run(s: &mut Suite, kills: bool) -> Row {
    let mut row = Row::default();
    let tries = if s.quick { 2 } else { 8 };
    let rounds = if s.quick { 1 } else { 3 };
    let recipients = Recipients::new();
    let setup = start(s).await;
    row.note(format!(
        "ingest wakes the worker through the Invoke API; the worker (timeout {} s, \
         WORKER_IDLE_MS {IDLE_MS}) lingers and leaves; no schedule",
        WORKER_TIMEOUT.as_secs()
    ));
    let race_bodies: Vec<Value> = (0..tries * 2).map(|i| s.job_body(&recipients, i)).collect();
    let races = leaving(&setup, &race_bodies, &mut row).await;
    let mut posted: Vec<Posted> = Vec::new();
    let mut dead_holds = Vec::new();
    if kills {
        // more requests than the rounds can use: one every 250 ms for 10 s a round
        let bodies: Vec<Value> = (0..rounds * 40 + 20)
            .map(|i| s.job_body(&recipients, i))
            .collect();
        let (streamed, done) = mid_linger(&setup, &s.launcher.ledger, &bodies, rounds).await;
        // the last worker claims what is left a batch at a time: wait for it before judging
        // how long each job waited (each job's first claim is judged, not this wait)
        let ids: Vec<Uuid> = streamed.iter().filter_map(|p| p.id).collect();
        let (client, ids) = (&setup.client, &ids);
        poll(
            CLAIM_WITHIN * 2,
            Duration::from_millis(100),
            || async move { (unclaimed(client, ids).await == 0).then_some(()) },
        )
        .await;
        row.runs += done.len() as u64;
        check_kills(&setup, &s.launcher.ledger, &done, rounds, &mut row).await;
        posted = streamed;
        dead_holds = done;
    }
    posted.extend(races.iter().filter_map(|r| r.posted.clone()));
    let accepted: Vec<Uuid> = posted.iter().filter_map(|p| p.id).collect();
    row.accepted = accepted.len() as u64;
    row.runs += posted.len() as u64;
    row.check(
        accepted.len() == posted.len(),
        format!(
            "every request answered 202: {} of {}",
            accepted.len(),
            posted.len()
        ),
    );
    check_races(&races, &mut row);
    if kills {
        check_waits(&setup, &posted, &races, &dead_holds, &mut row).await;
    }
    check_woken(&setup, &s.launcher.ledger, &accepted, &mut row).await;
    let settled = setup.lambda.settled(WORKER_TIMEOUT * 2).await;
    row.check(
        settled,
        "every woken invocation ended (answered, or killed)",
    );
    let sweeper = s.sweeper(&setup.db).await;
    let healthy = s.worker(&setup.db, 1).await;
    drain(&setup.client, &healthy, &sweeper, &mut row).await;
    settle(
        &setup.client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &recipients,
    )
    .await;
    row
}

async fn start(s: &Suite) -> Setup {
    let db = TestDb::new().await;
    let client = db.client().await;
    claims::install(&client).await;
    client
        .batch_execute(LEAVE_GATE)
        .await
        .expect("install the leave gate");
    let lambda = InvokeApi::start(s.launcher.ledger.clone());
    let mut env = s.worker_env(&db, 8, 4);
    env.retain(|(k, _)| *k != "PROVIDER_TIMEOUT_MS");
    env.push(("PROVIDER_TIMEOUT_MS", PROVIDER_TIMEOUT_MS.to_string()));
    env.push(("WORKER_IDLE_MS", IDLE_MS.to_string()));
    env.extend(wake_env(&lambda));
    let worker = Function::start(&s.launcher, "worker", env, WORKERS).await;
    lambda.register(WORKER_FUNCTION, &worker, WORKER_TIMEOUT);
    let ingest = s.waking_ingest(&db, 1, &lambda).await;
    Setup {
        db,
        client,
        lambda,
        ingest,
        worker,
        org: Uuid::new_v4(),
    }
}

/// A worker session whose leave waits at the gate.
async fn leave_waiting(client: &Client) -> Option<String> {
    client
        .query_opt(
            "SELECT application_name FROM pg_stat_activity
             WHERE datname = current_database() AND application_name LIKE 'worker-%'
               AND wait_event_type = 'Lock' AND wait_event = 'advisory'
             LIMIT 1",
            &[],
        )
        .await
        .expect("read pg_stat_activity")
        .map(|r| r.get(0))
}

/// `tries` rounds: with the gate closed, a job brings (or keeps) a worker; once that
/// worker's leave waits at the gate, another job is accepted, the gate opens, and the
/// scenario waits up to [`CLAIM_WITHIN`] for the second job's claim.
async fn leaving(setup: &Setup, bodies: &[Value], row: &mut Row) -> Vec<Race> {
    let gate = setup.db.client().await;
    let mut races = Vec::new();
    let mut brought = Vec::new();
    for pair in bodies.chunks(2) {
        let [bring, race] = pair else { break };
        gate.execute("SELECT pg_advisory_lock($1)", &[&GATE])
            .await
            .expect("close the gate");
        brought.push(post(&setup.ingest, bring, setup.org, CLAIM_WITHIN).await);
        let leaving = poll(Duration::from_secs(10), Duration::from_millis(20), || {
            leave_waiting(&setup.client)
        })
        .await;
        let posted = match &leaving {
            Some(_) => Some(post(&setup.ingest, race, setup.org, CLAIM_WITHIN).await),
            None => None,
        };
        gate.execute("SELECT pg_advisory_unlock($1)", &[&GATE])
            .await
            .expect("open the gate");
        let waited = match posted
            .as_ref()
            .and_then(|p| p.id.map(|id| (id, p.answered)))
        {
            Some((id, answered)) => poll(CLAIM_WITHIN, Duration::from_millis(20), || {
                first_claim(&setup.client, id)
            })
            .await
            .map(|c| secs_between(answered, c.at)),
            None => None,
        };
        races.push(Race {
            leaving,
            posted,
            waited,
        });
    }
    let reached = races.iter().filter(|r| r.leaving.is_some()).count();
    row.check(
        reached == races.len() && !races.is_empty(),
        format!(
            "each try caught a worker leaving (its leave waiting at the gate): {reached} of {}",
            races.len()
        ),
    );
    races.extend(brought.into_iter().map(|p| Race {
        leaving: None,
        posted: Some(p),
        waited: None,
    }));
    races
}

fn check_races(races: &[Race], row: &mut Row) {
    let raced: Vec<&Race> = races.iter().filter(|r| r.leaving.is_some()).collect();
    let in_time = raced.iter().filter(|r| r.waited.is_some()).count();
    let longest = raced.iter().filter_map(|r| r.waited).fold(0.0f64, f64::max);
    row.check(
        in_time == raced.len() && !raced.is_empty(),
        format!(
            "{LEFT_WAITING}: {in_time} of {} (longest {longest:.2} s); left waiting for the \
             schedule: {}",
            raced.len(),
            raced.len() - in_time
        ),
    );
}

/// Requests every 150–350 ms while `rounds` woken workers are killed mid-linger; what was
/// posted and the kills.
async fn mid_linger(
    setup: &Setup,
    ledger: &Ledger,
    bodies: &[Value],
    rounds: usize,
) -> (Vec<Posted>, Vec<Kill>) {
    let stop = Cell::new(false);
    let requests = async {
        let mut posted = Vec::new();
        for body in bodies {
            if stop.get() {
                break;
            }
            posted.push(post(&setup.ingest, body, setup.org, CLAIM_WITHIN).await);
            tokio::time::sleep(random_between(
                Duration::from_millis(150),
                Duration::from_millis(350),
            ))
            .await;
        }
        posted
    };
    let kills = async {
        let kills = kill_rounds(setup, ledger, rounds).await;
        stop.set(true);
        kills
    };
    tokio::join!(requests, kills)
}

/// A running woken invocation of the worker, picked after `after`, that has delivered jobs
/// and holds none now: it lingers.
async fn lingering(setup: &Setup, ledger: &Ledger, after: DateTime<Utc>) -> Option<Span> {
    let names = setup.worker.process_names();
    let running: Vec<Span> = ledger
        .spans()
        .into_iter()
        .filter(|s| {
            s.ended.is_none()
                && s.picked > after
                && names.contains(&s.process)
                && ledger.wake_reason(&s.invocation).is_some()
        })
        .collect();
    for span in running {
        let held = holding(&setup.client, &span.process, span.picked).await;
        let quiet = held
            .last_completed
            .is_some_and(|at| Utc::now() - at >= chrono::Duration::milliseconds(50));
        if held.completed > 0 && held.open == 0 && quiet {
            return Some(span);
        }
    }
    None
}

/// A woken invocation picked after `after` has delivered a job.
async fn taken_over(setup: &Setup, ledger: &Ledger, after: DateTime<Utc>) -> Option<()> {
    for span in ledger.spans() {
        if span.picked > after && ledger.wake_reason(&span.invocation).is_some() {
            let held = holding(&setup.client, &span.process, span.picked).await;
            if held.completed > 0 {
                return Some(());
            }
        }
    }
    None
}

/// Each round: a woken worker found lingering is SIGKILLed (a fresh process takes its place
/// for later invocations, as Lambda starts another environment), then the round waits for a
/// woken worker started after the killed one's deadline to deliver.
async fn kill_rounds(setup: &Setup, ledger: &Ledger, rounds: usize) -> Vec<Kill> {
    let mut kills = Vec::new();
    let mut after = Utc::now();
    for _ in 0..rounds {
        let found = poll(Duration::from_secs(15), Duration::from_millis(50), || {
            lingering(setup, ledger, after)
        })
        .await;
        let Some(span) = found else { break };
        setup.worker.kill(&span.process).await;
        setup.worker.add_process();
        let timeout = chrono::Duration::from_std(WORKER_TIMEOUT).expect("a timeout");
        let kill = Kill {
            process: span.process.clone(),
            picked: span.picked,
            slot_end: span.picked + timeout,
        };
        let wait = (kill.slot_end - Utc::now()).to_std().unwrap_or_default() + CLAIM_WITHIN;
        poll(wait, Duration::from_millis(100), || {
            taken_over(setup, ledger, kill.slot_end)
        })
        .await;
        after = Utc::now();
        kills.push(kill);
    }
    kills
}

async fn check_kills(setup: &Setup, ledger: &Ledger, kills: &[Kill], rounds: usize, row: &mut Row) {
    let held = claims::held_at_kills(&claims::load(&setup.client).await, &ledger.spans());
    let mut delivered = 0;
    for kill in kills {
        if holding(&setup.client, &kill.process, kill.picked)
            .await
            .completed
            > 0
        {
            delivered += 1;
        }
    }
    let lingering = kills
        .iter()
        .filter(|k| held.get(&k.process).is_none_or(Vec::is_empty))
        .count();
    row.check(
        kills.len() == rounds && lingering == kills.len() && delivered == kills.len(),
        format!(
            "every kill landed mid-linger: {lingering} of {} kills (of {rounds} rounds) hit a \
             woken worker that had delivered jobs ({delivered}) and held none",
            kills.len()
        ),
    );
    let wakes_meanwhile = setup
        .lambda
        .requests()
        .iter()
        .filter(|r| kills.iter().any(|k| k.picked < r.at && r.at < k.slot_end))
        .count();
    row.note(format!(
        "wakes sent while a killed worker's slot was still held: {wakes_meanwhile} (its \
         slot is free at its deadline, then the next request wakes a worker)"
    ));
}

/// Every job but the leaving ones reached a worker within [`CLAIM_WITHIN`]: of its
/// acceptance, or of the deadline of a killed worker whose slot was still held then.
async fn check_waits(
    setup: &Setup,
    posted: &[Posted],
    races: &[Race],
    kills: &[Kill],
    row: &mut Row,
) {
    let first = first_claims(&setup.client).await;
    let raced: Vec<Uuid> = races
        .iter()
        .filter(|r| r.leaving.is_some())
        .filter_map(|r| r.posted.as_ref().and_then(|p| p.id))
        .collect();
    let limit = CLAIM_WITHIN.as_secs_f64();
    // (jobs, in time, longest wait past the bound's start) for: accepted while a killed
    // worker's slot was held, and all the others
    let mut behind = (0, 0, 0.0f64);
    let mut others = (0, 0, 0.0f64);
    for p in posted {
        let Some(id) = p.id.filter(|id| !raced.contains(id)) else {
            continue;
        };
        let hold = kills
            .iter()
            .find(|k| k.picked <= p.answered && p.answered < k.slot_end);
        let from = hold.map_or(p.answered, |k| k.slot_end.max(p.answered));
        let waited = first.get(&id).map(|c| secs_between(from, c.at));
        let tally = if hold.is_some() {
            &mut behind
        } else {
            &mut others
        };
        tally.0 += 1;
        if let Some(w) = waited {
            tally.1 += u64::from(w <= limit);
            tally.2 = tally.2.max(w);
        }
    }
    row.check(
        behind.0 > 0 && behind.1 == behind.0,
        format!(
            "jobs accepted while a killed worker's slot was still held, each claimed within \
             3 s of that worker's deadline by the next woken worker: {} of {} (the longest \
             {:.2} s after it)",
            behind.1, behind.0, behind.2
        ),
    );
    row.check(
        others.1 == others.0,
        format!(
            "jobs accepted while a worker ran or a wake could start one, each claimed within \
             3 s: {} of {} (longest {:.2} s)",
            others.1, others.0, others.2
        ),
    );
}

/// Every job's first claim was made by an invocation a wake started: nothing else runs.
async fn check_woken(setup: &Setup, ledger: &Ledger, accepted: &[Uuid], row: &mut Row) {
    let first: HashMap<Uuid, FirstClaim> = first_claims(&setup.client).await;
    let spans = ledger.spans();
    let mut reasons: HashMap<String, u64> = HashMap::new();
    let mut unclaimed = 0;
    for id in accepted {
        match first.get(id) {
            Some(claim) => {
                let reason = woken_by(ledger, &spans, claim).unwrap_or_else(|| "none".into());
                *reasons.entry(reason).or_insert(0) += 1;
            }
            None => unclaimed += 1,
        }
    }
    let woken: u64 = reasons
        .iter()
        .filter(|(r, _)| *r != "none")
        .map(|(_, n)| n)
        .sum();
    let mut by_reason: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
    by_reason.sort();
    row.check(
        woken == accepted.len() as u64,
        format!(
            "every job first claimed by a woken worker: {woken} of {} (by the wake's reason: \
             {}; not yet claimed: {unclaimed})",
            accepted.len(),
            by_reason.join(", ")
        ),
    );
}
