//! PostgreSQL restarted (`pg_ctl stop -m fast`, 2 s down, start) while 4 warm ingest
//! processes take requests back to back and 2 warm workers run back to back: ingest answers
//! 503 during the outage and 202 again after it, no process restarts, nothing answered 202
//! is lost; jobs whose completion was cut off are swept and sent again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::Scenario;
use crate::TestDb;
use crate::apigw::{ApiRequest, Version};
use crate::faults::api::{self, invoke_scheduled};
use crate::faults::endgame::{drain, settle};
use crate::faults::logs::SECRET_MARKER;
use crate::faults::pg::PgControl;
use crate::faults::process::Function;
use crate::faults::row::statuses_text;
use crate::faults::suite::WORKER_TIMEOUT;
use crate::faults::{Row, Suite, claims, db};
use crate::stand_in::Recipients;

pub const SCENARIO: Scenario = Scenario {
    title: "PostgreSQL restart under load",
    run: |s| Box::pin(run(s)),
};

const CALLERS: usize = 4;
const WORKERS: usize = 2;

/// The moment the database was back, once it is.
#[derive(Clone, Default)]
struct Restarted(Arc<Mutex<Option<Instant>>>);

impl Restarted {
    fn now(&self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }

    fn is_past(&self) -> bool {
        self.0.lock().unwrap().is_some_and(|t| Instant::now() > t)
    }
}

/// What the load saw, and when to stop it.
#[derive(Clone)]
struct Load {
    api: Arc<Function>,
    recipients: Arc<Recipients>,
    org: Uuid,
    stop: Arc<AtomicBool>,
    restarted: Restarted,
}

/// One ingest answer: status, id, whether after the restart, and the secrets it carried.
struct Seen {
    status: u16,
    id: Option<Uuid>,
    after: bool,
    secrets: [String; 2],
}

async fn run(s: &mut Suite) -> Row {
    let mut row = Row::default();
    let Some(pg) = PgControl::from_env() else {
        let what = "FAULTS_PG_DIR/FAULTS_PG_BINDIR not set: run through tests/scripts/faults.sh";
        row.check(false, what);
        return row;
    };
    let db = TestDb::new().await;
    claims::install(&db.client().await).await;
    s.proxy.set_delay(Duration::from_millis(5));
    let load = Load {
        api: Arc::new(s.ingest(&db, CALLERS, true).await),
        recipients: Arc::new(Recipients::new()),
        org: Uuid::new_v4(),
        stop: Arc::new(AtomicBool::new(false)),
        restarted: Restarted::default(),
    };
    let mut workers = s.worker(&db, WORKERS).await;
    let callers: Vec<JoinHandle<Vec<Seen>>> = (0..CALLERS)
        .map(|_| tokio::spawn(caller(load.clone())))
        .collect();
    let (worker_runs, ()) =
        tokio::join!(worker_runs(&workers, &load), restart(&pg, &load, &mut row));
    let accepted = check_ingest(s, &mut row, callers).await;
    check_workers(&mut row, &worker_runs);
    let Load { api, .. } = load;
    let mut api = Arc::try_unwrap(api).ok().expect("the callers are done");
    let (ingest_alive, workers_alive) = (api.alive(), workers.alive());
    row.check(
        ingest_alive == CALLERS
            && api.spawned() == CALLERS
            && workers_alive == WORKERS
            && workers.spawned() == WORKERS,
        format!(
            "no process restarted: ingest {ingest_alive} alive of {} started, workers \
             {workers_alive} of {}",
            api.spawned(),
            workers.spawned()
        ),
    );
    // the suite's own connection died with the server: a new one
    let client = db.client().await;
    let total = db::jobs(&client).await;
    row.note(format!(
        "rows: {total}; of them not answered 202 (committed as the connection was cut): {}",
        total.saturating_sub(accepted.len() as u64)
    ));
    let sweeper = s.sweeper(&db).await;
    drain(&client, &workers, &sweeper, &mut row).await;
    settle(
        &client,
        &s.launcher.ledger,
        &mut row,
        &accepted,
        &load.recipients,
    )
    .await;
    row
}

/// Posts back to back until told to stop.
async fn caller(load: Load) -> Vec<Seen> {
    let mut seen = Vec::new();
    while !load.stop.load(Ordering::Relaxed) && seen.len() < 20_000 {
        let secret = format!("{SECRET_MARKER}{}", Uuid::new_v4().simple());
        let to = load.recipients.phone();
        let body = json!({"channel": "sms", "to": to, "message": secret});
        let request = ApiRequest::post(Version::V2, &body).org(load.org);
        let a = api::send(&load.api, &request).await;
        if a.status == 503 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen.push(Seen {
            status: a.status,
            id: a.id(),
            after: load.restarted.is_past(),
            secrets: [to, secret],
        });
    }
    seen
}

/// Each warm worker invoked back to back until told to stop: (succeeded, after the restart).
async fn worker_runs(workers: &Function, load: &Load) -> Vec<(bool, bool)> {
    let one = || async move {
        let mut results = Vec::new();
        while !load.stop.load(Ordering::Relaxed) && results.len() < 1000 {
            let r = invoke_scheduled(workers, WORKER_TIMEOUT).await;
            results.push((r.is_ok(), load.restarted.is_past()));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        results
    };
    let runs = futures::future::join_all((0..WORKERS).map(|_| one())).await;
    runs.into_iter().flatten().collect()
}

/// 3 s of load, the restart (2 s down), 5 s of load, stop.
async fn restart(pg: &PgControl, load: &Load, row: &mut Row) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let began = Instant::now();
    let result = pg.restart(Duration::from_secs(2)).await;
    load.restarted.now();
    let outage = began.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    load.stop.store(true, Ordering::Relaxed);
    row.check(
        result.is_ok(),
        format!("pg_ctl stop -m fast, 2 s down, start: {result:?}"),
    );
    row.note(format!("database down for {:.1} s", outage.as_secs_f64()));
}

/// 503 during the outage, no other 5xx, 202 again after it; the accepted ids.
async fn check_ingest(
    s: &mut Suite,
    row: &mut Row,
    callers: Vec<JoinHandle<Vec<Seen>>>,
) -> Vec<Uuid> {
    let mut statuses: HashMap<u16, u64> = HashMap::new();
    let (mut accepted, mut after_202) = (Vec::new(), 0);
    for caller in callers {
        for seen in caller.await.expect("a caller") {
            *statuses.entry(seen.status).or_insert(0) += 1;
            if seen.status == 202 {
                accepted.extend(seen.id);
                after_202 += u64::from(seen.after);
            }
            s.secrets.extend(seen.secrets);
        }
    }
    row.accepted = accepted.len() as u64;
    row.runs += statuses.values().sum::<u64>();
    row.note(format!("ingest answers: {}", statuses_text(&statuses)));
    let other_5xx: u64 = statuses
        .iter()
        .filter(|(s, _)| **s >= 500 && **s != 503)
        .map(|(_, n)| n)
        .sum();
    row.check(
        statuses.get(&503).copied().unwrap_or(0) > 0,
        "ingest answered 503 during the outage",
    );
    row.check(
        other_5xx == 0,
        format!("ingest 5xx other than 503: {other_5xx}"),
    );
    row.check(
        after_202 > 0,
        format!("ingest accepted {after_202} requests after the restart"),
    );
    accepted
}

fn check_workers(row: &mut Row, runs: &[(bool, bool)]) {
    row.runs += runs.len() as u64;
    let ok_after = runs.iter().filter(|(ok, after)| *ok && *after).count();
    let failed = runs.iter().filter(|(ok, _)| !ok).count();
    row.note(format!(
        "worker invocations: {} ({failed} failed, during the outage; {ok_after} succeeded after it)",
        runs.len()
    ));
    row.check(ok_after > 0, "the warm workers ran again after the restart");
}
