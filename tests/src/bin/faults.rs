//! `make faults`: the fault suite. Runs the real function binaries (target/debug/{ingest,
//! worker,sweeper}) through a Lambda Runtime API emulator against a real PostgreSQL and the
//! AWS stand-in (moto) behind a delaying proxy, and prints one table row per scenario:
//!
//! 1. kill -9 of a worker process mid-delivery, at random moments; then sweeps and healthy
//!    runs until every job is final.
//! 2. PostgreSQL restarted while ingest and workers run.
//! 3. Provider outage across several worker runs, then the provider returns.
//! 4. Load: ingest requests at concurrency 16.
//! 5. A hostile-input corpus through the ingest binary.
//! 6. Security: tenants kept apart; no message body or full recipient in any captured log.
//!
//! Started by `tests/scripts/faults.sh` (which provides PostgreSQL and moto); `--quick` is
//! the short version CI runs; `--only 1,3` runs some scenarios.

use std::collections::HashMap;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use integration_tests::apigw::{ApiRequest, Version};
use integration_tests::faults::process::{default_bin_dir, Function, Launcher};
use integration_tests::faults::proxy::DelayProxy;
use integration_tests::faults::{self, Row, SCHEDULED_EVENT};
use integration_tests::stand_in::Recipients;
use integration_tests::TestDb;
use serde_json::{json, Value};
use uuid::Uuid;

/// The worker's invocation timeout in the suite (its Lambda `Timeout`).
const WORKER_TIMEOUT: Duration = Duration::from_secs(6);
/// The sweep window: longer than the worker's timeout, as the sweeper demands.
const STUCK_AFTER_SECS: u64 = 7;
const PROVIDER_DELAY: Duration = Duration::from_millis(80);

struct Suite {
    launcher: Launcher,
    admin_url: String,
    proxy: DelayProxy,
    /// Message bodies and full recipients sent: none may appear in a log.
    secrets: Vec<String>,
    quick: bool,
}

fn random_u64() -> u64 {
    (Uuid::new_v4().as_u128() >> 64) as u64
}

impl Suite {
    fn url(&self, db: &TestDb) -> String {
        faults::url_with_db(&self.admin_url, &db.name)
    }

    async fn ingest(&self, db: &TestDb, processes: usize, allow_header: bool) -> Function {
        let env = vec![
            ("DATABASE_URL", self.url(db)),
            ("ALLOW_ORG_HEADER", allow_header.to_string()),
        ];
        Function::start(&self.launcher, "ingest", env, processes).await
    }

    fn worker_env(&self, db: &TestDb, batch: u32, concurrency: u32) -> Vec<(&'static str, String)> {
        vec![
            ("DATABASE_URL", self.url(db)),
            ("WORKER_BATCH_SIZE", batch.to_string()),
            ("WORKER_CONCURRENCY", concurrency.to_string()),
            ("PROVIDER_TIMEOUT_MS", "1000".into()),
        ]
    }

    async fn worker(&self, db: &TestDb, processes: usize) -> Function {
        Function::start(
            &self.launcher,
            "worker",
            self.worker_env(db, 8, 4),
            processes,
        )
        .await
    }

    async fn sweeper(&self, db: &TestDb) -> Function {
        let env = vec![
            ("DATABASE_URL", self.url(db)),
            ("STUCK_AFTER_SECS", STUCK_AFTER_SECS.to_string()),
            ("WORKER_TIMEOUT_SECS", WORKER_TIMEOUT.as_secs().to_string()),
        ];
        Function::start(&self.launcher, "sweeper", env, 1).await
    }

    /// A send request with a secret body and a fresh recipient; remembers both.
    fn job_body(&mut self, recipients: &Recipients, n: usize) -> Value {
        let secret = format!("faults-secret-{}", Uuid::new_v4().simple());
        let body = if n.is_multiple_of(2) {
            let to = recipients.phone();
            self.secrets.push(to.clone());
            json!({"channel": "sms", "to": to, "message": format!("{secret} code {n}")})
        } else {
            let to = recipients.email();
            self.secrets.push(to.clone());
            json!({"channel": "email", "to": to, "subject": format!("subject {secret}"),
                   "text": format!("text {secret}")})
        };
        self.secrets.push(secret);
        body
    }

    /// Posts `n` jobs for `org` at `concurrency`; the accepted ids and every status seen.
    async fn post_jobs(
        &mut self,
        api: &Function,
        org: Uuid,
        recipients: &Recipients,
        n: usize,
        concurrency: usize,
    ) -> (Vec<Uuid>, HashMap<u16, u64>) {
        let requests: Vec<ApiRequest> = (0..n)
            .map(|i| ApiRequest::post(Version::V2, &self.job_body(recipients, i)).org(org))
            .collect();
        let answers: Vec<faults::Answer> = futures::stream::iter(requests.iter())
            .map(|r| faults::send(api, r))
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let mut ids = Vec::new();
        let mut statuses = HashMap::new();
        for a in &answers {
            *statuses.entry(a.status).or_insert(0) += 1;
            if a.status == 202 {
                ids.extend(faults::answered_id(a));
            }
        }
        (ids, statuses)
    }
}

async fn invoke_worker(worker: &Function) -> Result<Value, String> {
    faults::invoke_scheduled(worker, WORKER_TIMEOUT).await
}

/// Runs sweeps (once the window has passed) and healthy worker runs until no job is open;
/// bounded in rounds and time. Returns how many retries were made due early.
async fn drain(
    client: &tokio_postgres::Client,
    worker: &Function,
    sweeper: &Function,
    row: &mut Row,
) -> u64 {
    let started = Instant::now();
    let mut moved = 0;
    for _ in 0..60 {
        if started.elapsed() > Duration::from_secs(180) {
            row.check(false, "drain finished within 180 s");
            break;
        }
        let st = faults::statuses(client).await;
        let open: u64 = ["pending", "failed", "processing"]
            .iter()
            .map(|s| st.get(*s).copied().unwrap_or(0))
            .sum();
        if open == 0 {
            break;
        }
        moved += faults::make_retries_due(client).await;
        if st.get("processing").copied().unwrap_or(0) > 0 {
            // wait until the oldest processing claim is past the sweep window, then sweep
            let age: f64 = client
                .query_one(
                    "SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(claimed_at))::float8, 0)
                     FROM notification_jobs WHERE status = 'processing'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            let wait = (STUCK_AFTER_SECS as f64 + 0.5 - age).clamp(0.0, 10.0);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            if let Err(e) = faults::invoke_scheduled(sweeper, Duration::from_secs(30)).await {
                row.note(format!("sweeper run failed: {e}"));
            }
            row.runs += 1;
        }
        if let Err(e) = invoke_worker(worker).await {
            row.note(format!("worker run failed: {e}"));
        }
        row.runs += 1;
    }
    moved
}

/// The common end-of-scenario counts and checks.
async fn settle(
    client: &tokio_postgres::Client,
    row: &mut Row,
    accepted: &[Uuid],
    recipients: &Recipients,
) {
    let st = faults::statuses(client).await;
    row.delivered = Some(st.get("sent").copied().unwrap_or(0));
    row.dead = Some(st.get("dead").copied().unwrap_or(0));
    row.lost = faults::lost(client, accepted).await;
    row.claimed_twice = Some(faults::double_claims(client).await);
    let counts = faults::sends_per_recipient(|to| recipients.owns(to)).await;
    row.duplicate_sends = Some(faults::duplicates(&counts));
    let windowed = faults::recipients_with_lost_attempts(client).await;
    let outside: Vec<&String> = counts
        .iter()
        .filter(|(to, c)| **c > 1 && !windowed.contains(*to))
        .map(|(to, _)| to)
        .collect();
    let sent_not_received: i64 = client
        .query_one(
            "SELECT count(*) FROM notification_jobs WHERE status = 'sent'
             AND NOT (payload->>'to' = ANY($1::text[]))",
            &[&counts.keys().cloned().collect::<Vec<_>>()],
        )
        .await
        .unwrap()
        .get(0);
    row.check(row.lost == 0, format!("lost jobs: {}", row.lost));
    row.check(
        row.claimed_twice == Some(0),
        format!(
            "claims of a job another invocation held: {} (of {} claims)",
            row.claimed_twice.unwrap_or(0),
            faults::claims(client).await
        ),
    );
    row.check(
        outside.is_empty(),
        format!(
            "duplicate sends only for jobs with an abandoned attempt (the at-least-once window): {} outside",
            outside.len()
        ),
    );
    row.check(
        sent_not_received == 0,
        format!("jobs marked sent that the provider never received: {sent_not_received}"),
    );
    let without = faults::attempts_without_rows(client).await;
    row.check(
        without == 0,
        format!("jobs whose attempts lack a delivery row: {without}"),
    );
}

fn statuses_text(statuses: &HashMap<u16, u64>) -> String {
    let mut v: Vec<_> = statuses.iter().collect();
    v.sort();
    v.iter()
        .map(|(s, n)| format!("{s}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------
// 1. kill -9 mid-delivery

async fn processing(client: &tokio_postgres::Client) -> u64 {
    faults::statuses(client)
        .await
        .get("processing")
        .copied()
        .unwrap_or(0)
}

async fn scenario_kill(s: &mut Suite) -> Row {
    let mut row = Row::new("1. worker kill -9 mid-delivery");
    let kills = if s.quick { 15 } else { 50 };
    let jobs = kills * 10;
    let db = TestDb::new().await;
    let client = db.client().await;
    faults::install_claim_log(&client).await;
    let api = s.ingest(&db, 2, true).await;
    let recipients = Recipients::new();
    let org = Uuid::new_v4();
    let (accepted, statuses) = s.post_jobs(&api, org, &recipients, jobs, 8).await;
    row.accepted = accepted.len() as u64;
    row.check(
        accepted.len() == jobs,
        format!("{jobs} requests → {}", statuses_text(&statuses)),
    );
    s.proxy.set_delay(PROVIDER_DELAY);
    row.note(format!(
        "provider calls delayed {} ms each way by the proxy; batch 8, 4 in flight",
        PROVIDER_DELAY.as_millis()
    ));
    let sweeper = s.sweeper(&db).await;
    let (mut landed, mut held) = (0u64, 0u64);
    for round in 0..kills {
        let mut worker = s.worker(&db, 1).await; // a cold start, as after a crash
        let before = processing(&client).await;
        let inv = worker
            .emulator
            .invoke(SCHEDULED_EVENT.as_bytes(), WORKER_TIMEOUT);
        let _ = tokio::time::timeout(Duration::from_secs(10), inv.picked).await;
        let moment = Duration::from_millis(30 + random_u64() % 900);
        tokio::time::sleep(moment).await;
        worker.kill_all().await;
        worker.emulator.forget(&inv.id);
        row.runs += 1;
        let held_now = processing(&client).await.saturating_sub(before);
        if held_now > 0 {
            landed += 1;
            held += held_now;
        }
        if (round + 1) % 10 == 0 {
            if let Err(e) = faults::invoke_scheduled(&sweeper, Duration::from_secs(30)).await {
                row.note(format!("sweeper run failed: {e}"));
            }
            row.runs += 1;
        }
    }
    row.note(format!(
        "{kills} kills at random moments 30–930 ms into an invocation; {landed} landed while the \
         killed worker held jobs ({held} jobs held at the kills, left for the sweeper)"
    ));
    let worker = s.worker(&db, 1).await;
    s.proxy.set_delay(Duration::from_millis(5));
    let moved = drain(&client, &worker, &sweeper, &mut row).await;
    if moved > 0 {
        row.note(format!(
            "{moved} retries made due early (next_attempt_at moved back in SQL)"
        ));
    }
    settle(&client, &mut row, &accepted, &recipients).await;
    row
}

// ---------------------------------------------------------------------------------------
// 2. PostgreSQL restart

struct PgControl {
    dir: PathBuf,
    bindir: PathBuf,
}

impl PgControl {
    fn from_env() -> Option<Self> {
        Some(Self {
            dir: PathBuf::from(std::env::var_os("FAULTS_PG_DIR")?),
            bindir: PathBuf::from(std::env::var_os("FAULTS_PG_BINDIR")?),
        })
    }

    async fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let pg_ctl = self.bindir.join("pg_ctl");
        let root = std::process::Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        let mut cmd = if root {
            let mut c = tokio::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            tokio::process::Command::new(&pg_ctl)
        };
        cmd.arg("-D").arg(self.dir.join("data")).args(args);
        let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
            .await
            .map_err(|_| "pg_ctl timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Stops the cluster (fast: sessions are cut), waits `outage`, starts it again with the
    /// options it ran with.
    async fn restart(&self, outage: Duration) -> Result<(), String> {
        let opts = std::fs::read_to_string(self.dir.join("data/postmaster.opts"))
            .map_err(|e| e.to_string())?;
        let opts = opts
            .trim()
            .split_once(' ')
            .map(|(_, o)| o)
            .unwrap_or("")
            .to_owned();
        self.pg_ctl(&["-m", "fast", "-w", "stop"]).await?;
        tokio::time::sleep(outage).await;
        let log = self.dir.join("server.log");
        let log = log.to_string_lossy();
        self.pg_ctl(&["-w", "-t", "60", "-l", &log, "-o", &opts, "start"])
            .await
    }
}

async fn scenario_pg_restart(s: &mut Suite) -> Row {
    let mut row = Row::new("2. PostgreSQL restart under load");
    let Some(pg) = PgControl::from_env() else {
        row.check(
            false,
            "FAULTS_PG_DIR/FAULTS_PG_BINDIR not set: run through tests/scripts/faults.sh",
        );
        return row;
    };
    let db = TestDb::new().await;
    {
        let client = db.client().await;
        faults::install_claim_log(&client).await;
    }
    let api = Arc::new(s.ingest(&db, 4, true).await);
    let mut workers = s.worker(&db, 2).await;
    let recipients = Arc::new(Recipients::new());
    let org = Uuid::new_v4();
    let stop = Arc::new(AtomicBool::new(false));
    let restarted_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    // four callers posting back to back
    let mut callers = Vec::new();
    for c in 0..4 {
        let (api, stop, restarted_at, recipients) = (
            api.clone(),
            stop.clone(),
            restarted_at.clone(),
            recipients.clone(),
        );
        callers.push(tokio::spawn(async move {
            let mut seen: Vec<(u16, Option<Uuid>, bool, String)> = Vec::new();
            let _ = c;
            while !stop.load(Ordering::Relaxed) && seen.len() < 20_000 {
                let secret = format!("faults-secret-{}", Uuid::new_v4().simple());
                let to = recipients.phone();
                let body = json!({"channel": "sms", "to": to, "message": secret});
                let a = faults::send(&api, &ApiRequest::post(Version::V2, &body).org(org)).await;
                let after = restarted_at
                    .lock()
                    .unwrap()
                    .is_some_and(|t| Instant::now() > t);
                seen.push((
                    a.status,
                    faults::answered_id(&a),
                    after,
                    format!("{to}\n{secret}"),
                ));
                if a.status == 503 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            seen
        }));
    }
    // the workers run back to back too (invocations of warm processes)
    let worker_runs = {
        let stop = stop.clone();
        let restarted_at = restarted_at.clone();
        let workers_ref = &workers;
        async move {
            let mut results = Vec::new();
            while !stop.load(Ordering::Relaxed) && results.len() < 1000 {
                let r = invoke_worker(workers_ref).await;
                let after = restarted_at
                    .lock()
                    .unwrap()
                    .is_some_and(|t| Instant::now() > t);
                results.push((r.is_ok(), after));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            results
        }
    };
    let restart = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let began = Instant::now();
        let r = pg.restart(Duration::from_secs(2)).await;
        *restarted_at.lock().unwrap() = Some(Instant::now());
        let outage = began.elapsed();
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.store(true, Ordering::Relaxed);
        (r, outage)
    };
    let (worker_results, (restart_result, outage)) = tokio::join!(worker_runs, restart);
    row.check(
        restart_result.is_ok(),
        format!("pg_ctl stop -m fast, 2 s down, start: {restart_result:?}"),
    );
    row.note(format!("database down for {:.1} s", outage.as_secs_f64()));
    let mut statuses: HashMap<u16, u64> = HashMap::new();
    let mut accepted = Vec::new();
    let mut after_202 = 0;
    for c in callers {
        for (status, id, after, secrets) in c.await.unwrap() {
            *statuses.entry(status).or_insert(0) += 1;
            if status == 202 {
                accepted.extend(id);
                if after {
                    after_202 += 1;
                }
            }
            s.secrets.extend(secrets.lines().map(str::to_owned));
        }
    }
    row.accepted = accepted.len() as u64;
    row.runs += statuses.values().sum::<u64>() + worker_results.len() as u64;
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
    let ok_after = worker_results
        .iter()
        .filter(|(ok, after)| *ok && *after)
        .count();
    let failed = worker_results.iter().filter(|(ok, _)| !ok).count();
    row.note(format!(
        "worker invocations: {} ({} failed, during the outage; {} succeeded after it)",
        worker_results.len(),
        failed,
        ok_after
    ));
    row.check(ok_after > 0, "the warm workers ran again after the restart");
    let mut api = Arc::try_unwrap(api).ok().expect("callers are done");
    row.check(
        api.alive() == 4 && api.spawned == 4 && workers.alive() == 2 && workers.spawned == 2,
        format!(
            "no process restarted: ingest {}/{} alive of {} started, workers {}/{} of {}",
            api.alive(),
            4,
            api.spawned,
            workers.alive(),
            2,
            workers.spawned
        ),
    );
    // the suite's own connection died with the server: a new one
    let client = db.client().await;
    let total: i64 = client
        .query_one("SELECT count(*) FROM notification_jobs", &[])
        .await
        .unwrap()
        .get(0);
    row.note(format!(
        "rows: {total}; of them not answered 202 (committed as the connection was cut): {}",
        total as u64 - accepted.len().min(total as usize) as u64
    ));
    let sweeper = s.sweeper(&db).await;
    s.proxy.set_delay(Duration::from_millis(5));
    let moved = drain(&client, &workers, &sweeper, &mut row).await;
    if moved > 0 {
        row.note(format!(
            "{moved} retries made due early (next_attempt_at moved back in SQL)"
        ));
    }
    settle(&client, &mut row, &accepted, &recipients).await;
    row
}

// ---------------------------------------------------------------------------------------
// 3. provider outage

async fn scenario_provider_outage(s: &mut Suite) -> Row {
    let mut row = Row::new("3. provider outage, then back");
    let jobs = if s.quick { 20 } else { 60 };
    let outage_runs = 3;
    let db = TestDb::new().await;
    let client = db.client().await;
    faults::install_claim_log(&client).await;
    let api = s.ingest(&db, 1, true).await;
    let recipients = Recipients::new();
    let (accepted, statuses) = s
        .post_jobs(&api, Uuid::new_v4(), &recipients, jobs, 8)
        .await;
    row.accepted = accepted.len() as u64;
    row.check(
        accepted.len() == jobs,
        format!("{jobs} requests → {}", statuses_text(&statuses)),
    );
    let env = s.worker_env(&db, 100, 32);
    let worker = Function::start(&s.launcher, "worker", env, 1).await;
    let timeout = Duration::from_secs(20);
    s.proxy.set_delay(Duration::ZERO);
    s.proxy.down();
    row.note("provider down: the proxy in front of the stand-in refuses connections");
    for run in 1..=outage_runs {
        if run > 1 {
            let moved = faults::make_retries_due(&client).await;
            row.note(format!(
                "run {run}: {moved} retries made due now (next_attempt_at moved back in SQL instead of waiting)"
            ));
        }
        let summary = faults::invoke_scheduled(&worker, timeout).await;
        row.runs += 1;
        row.note(format!("run {run} during the outage: {summary:?}"));
        let bad: i64 = client
            .query_one(
                "SELECT count(*) FROM notification_jobs
                 WHERE NOT (status = 'failed' AND attempts = $1)",
                &[&run],
            )
            .await
            .unwrap()
            .get(0);
        row.check(
            bad == 0,
            format!("after run {run}: every job failed with {run} attempt(s) ({bad} not)"),
        );
        let step = 60.0 * 2f64.powi(run - 1);
        let (lo, hi): (f64, f64) = {
            let r = client
                .query_one(
                    "SELECT min(EXTRACT(EPOCH FROM next_attempt_at - updated_at))::float8,
                            max(EXTRACT(EPOCH FROM next_attempt_at - updated_at))::float8
                     FROM notification_jobs",
                    &[],
                )
                .await
                .unwrap();
            (r.get(0), r.get(1))
        };
        row.check(
            lo >= step / 2.0 - 5.0 && hi <= step + 1.0,
            format!(
                "backoff after attempt {run}: {lo:.0}–{hi:.0} s (expected within {:.0}–{step:.0} s)",
                step / 2.0
            ),
        );
    }
    s.proxy.up().await;
    row.note("provider back");
    for _ in 0..5 {
        faults::make_retries_due(&client).await;
        let summary = faults::invoke_scheduled(&worker, timeout).await;
        row.runs += 1;
        row.note(format!("run after the outage: {summary:?}"));
        let st = faults::statuses(&client).await;
        if st.get("sent").copied().unwrap_or(0) + st.get("dead").copied().unwrap_or(0)
            == jobs as u64
        {
            break;
        }
    }
    let max_attempts: i32 = client
        .query_one(
            "SELECT COALESCE(max(attempts), 0) FROM notification_jobs",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    row.check(
        max_attempts <= 5,
        format!("attempts used: at most {max_attempts} of the budget of 5"),
    );
    settle(&client, &mut row, &accepted, &recipients).await;
    row.check(
        row.delivered == Some(jobs as u64),
        format!("all {jobs} delivered once the provider returned"),
    );
    row
}

// ---------------------------------------------------------------------------------------
// 4. load

async fn scenario_load(s: &mut Suite) -> Row {
    let mut row = Row::new("4. load, concurrency 16");
    let n = if s.quick { 2_000 } else { 10_000 };
    let concurrency = 16;
    let db = TestDb::new().await;
    let client = db.client().await;
    let api = s.ingest(&db, concurrency, true).await;
    let secret = format!("faults-secret-load-{}", Uuid::new_v4().simple());
    s.secrets.push(secret.clone());
    let org = Uuid::new_v4();
    let events: Vec<Value> = (0..n)
        .map(|i| {
            let to = format!("+1999{i:07}");
            let body = json!({"channel": "sms", "to": to, "message": secret});
            ApiRequest::post(Version::V2, &body).org(org).event()
        })
        .collect();
    s.secrets.extend((0..n).map(|i| format!("+1999{i:07}")));
    let started = Instant::now();
    let answers: Vec<faults::Answer> = futures::stream::iter(events.iter())
        .map(|e| faults::send_event(&api, e))
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let mut statuses = HashMap::new();
    let mut latencies: Vec<Duration> = Vec::with_capacity(n);
    let mut accepted = Vec::new();
    for a in &answers {
        *statuses.entry(a.status).or_insert(0u64) += 1;
        latencies.push(a.latency);
        if a.status == 202 {
            accepted.extend(faults::answered_id(a));
        }
    }
    latencies.sort();
    row.runs = n as u64;
    row.accepted = accepted.len() as u64;
    let rows: i64 = client
        .query_one("SELECT count(*) FROM notification_jobs", &[])
        .await
        .unwrap()
        .get(0);
    row.lost = faults::lost_rows(&client, &accepted).await;
    row.check(
        accepted.len() == n,
        format!("{n} requests → {}", statuses_text(&statuses)),
    );
    row.check(rows == n as i64, format!("rows in the table: {rows}"));
    row.check(row.lost == 0, format!("accepted but missing: {}", row.lost));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    row.note(format!(
        "{concurrency} ingest processes; latency through the runtime API: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; \
         {:.0} requests/s over {:.1} s (debug build, 2 cores shared with PostgreSQL)",
        ms(faults::percentile(&latencies, 50.0)),
        ms(faults::percentile(&latencies, 99.0)),
        ms(*latencies.last().unwrap_or(&Duration::ZERO)),
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    ));
    row
}

// ---------------------------------------------------------------------------------------
// 5. hostile input

fn hostile_corpus() -> Vec<(String, Value)> {
    let org = Uuid::new_v4().to_string();
    let valid = json!({"channel": "sms", "to": "+15555550100", "message": "hello"});
    let post = |body: &str| {
        ApiRequest::post(Version::V2, &valid)
            .org(&org)
            .body(body.to_owned())
    };
    let ok = || ApiRequest::post(Version::V2, &valid).org(&org);
    let mut cases: Vec<(String, Value)> = Vec::new();
    let mut add = |name: &str, event: Value| cases.push((name.to_owned(), event));

    // oversized headers (valid body otherwise: a header alone must not get it accepted,
    // so each is paired with a refused body)
    let refused = r#"{"channel":"sms","to":"not a number","message":"x"}"#;
    add(
        "one 64 KiB header",
        post(refused)
            .header("x-big", &"a".repeat(64 * 1024))
            .event(),
    );
    let mut many = post(refused);
    for i in 0..500 {
        many = many.header(&format!("x-h{i}"), &"b".repeat(1000));
    }
    add("500 headers of 1 KB", many.event());
    add(
        "64 KiB Idempotency-Key",
        ok().header("idempotency-key", &"k".repeat(64 * 1024))
            .event(),
    );
    add(
        "64 KiB Content-Type",
        ok().header(
            "content-type",
            &format!("application/json{}", " ".repeat(65536)),
        )
        .body(refused)
        .event(),
    );
    let mut e = ok().event();
    e["headers"]["x-nul"] = json!("a\u{0}b");
    e["body"] = json!(refused);
    add("NUL byte in a header value", e);
    let mut e = ok().event();
    e["headers"]["idempotency-key"] = json!("key\u{0}");
    add("NUL byte in Idempotency-Key", e);
    let mut e = ok().event();
    e["headers"]["bad header\r\nx"] = json!("v");
    e["body"] = json!(refused);
    add("CR LF in a header name", e);
    let mut e = ok().event();
    e["headers"]["content-type"] = json!("application/json\r\nx-injected: 1");
    add("CR LF in Content-Type", e);

    // deeply nested JSON
    add("100 000 nested arrays", post(&"[".repeat(100_000)).event());
    add(
        "10 000 nested objects",
        post(&format!(
            "{}1{}",
            "{\"a\":".repeat(10_000),
            "}".repeat(10_000)
        ))
        .event(),
    );
    add(
        "nested arrays in a field",
        post(&format!(
            r#"{{"channel":"sms","to":"+15555550100","message":{}1{}}}"#,
            "[".repeat(5_000),
            "]".repeat(5_000)
        ))
        .event(),
    );
    add(
        "nested object as max_attempts",
        post(&format!(
            r#"{{"channel":"sms","to":"+15555550100","message":"m","max_attempts":{}1{}}}"#,
            "{\"a\":".repeat(120),
            "}".repeat(120)
        ))
        .event(),
    );

    // NUL bytes
    add(
        "raw NUL in the body",
        post("{\"channel\":\"sms\",\"to\":\"+15555550100\",\"message\":\"a\u{0}b\"}").event(),
    );
    add(
        "escaped \\u0000 in the message",
        post(r#"{"channel":"sms","to":"+15555550100","message":"a\u0000b"}"#).event(),
    );
    add(
        "escaped \\u0000 in an email subject",
        post(r#"{"channel":"email","to":"a@example.com","subject":"s\u0000","text":"t"}"#).event(),
    );
    add(
        "escaped \\u0000 in an unknown field",
        post(r#"{"channel":"sms","to":"+15555550100","message":"m","x\u0000":"\u0000"}"#).event(),
    );
    add(
        "escaped \\u0000 in the recipient",
        post(r#"{"channel":"sms","to":"+1555555\u00000100","message":"m"}"#).event(),
    );
    add("only NUL bytes", post("\u{0}\u{0}\u{0}\u{0}").event());

    // overlong and invalid UTF-8 (binary bodies travel base64-encoded)
    for (name, bytes) in [
        ("overlong '/' (C0 AF)", vec![0xC0, 0xAF]),
        ("overlong '/' (E0 80 AF)", vec![0xE0, 0x80, 0xAF]),
        ("overlong '/' (F0 80 80 AF)", vec![0xF0, 0x80, 0x80, 0xAF]),
        ("overlong NUL (C0 80)", vec![0xC0, 0x80]),
        ("UTF-16 surrogate (ED A0 80)", vec![0xED, 0xA0, 0x80]),
        ("bytes FE FF", vec![0xFE, 0xFF]),
    ] {
        let mut body = br#"{"channel":"sms","to":"+15555550100","message":"x"#.to_vec();
        body.extend_from_slice(&bytes);
        body.extend_from_slice(br#""}"#);
        add(&format!("{name} in the message"), ok().body(body).event());
    }
    add(
        "lone surrogate escape",
        post(r#"{"channel":"sms","to":"+15555550100","message":"\ud800"}"#).event(),
    );
    add(
        "fullwidth digits in the number",
        post(r#"{"channel":"sms","to":"+１５５５５５５０１００","message":"m"}"#).event(),
    );
    add(
        "right-to-left override in an address",
        post("{\"channel\":\"email\",\"to\":\"a\u{202e}moc.elpmaxe@b\",\"subject\":\"s\",\"text\":\"t\"}")
            .event(),
    );
    let mut e = ok().event();
    e["isBase64Encoded"] = json!(true);
    e["body"] = json!("%%% not base64 %%%");
    add("invalid base64 body", e);

    // SQL-looking strings, in fields that are checked
    for (name, body) in [
        (
            "SQL in the recipient",
            r#"{"channel":"sms","to":"'; DROP TABLE notification_jobs; --","message":"m"}"#,
        ),
        (
            "SQL in the channel",
            r#"{"channel":"sms' OR '1'='1","to":"+15555550100","message":"m"}"#,
        ),
        (
            "SQL in send_at",
            r#"{"channel":"sms","to":"+15555550100","message":"m","send_at":"now()); DELETE FROM notification_jobs; --"}"#,
        ),
        (
            "SQL in max_attempts",
            r#"{"channel":"sms","to":"+15555550100","message":"m","max_attempts":"1; DROP TABLE x"}"#,
        ),
        (
            "SQL in an email address",
            r#"{"channel":"email","to":"x@example.com' OR 1=1 --","subject":"s","text":"t"}"#,
        ),
    ] {
        add(name, post(body).event());
    }
    add(
        "SQL in the Idempotency-Key (body refused)",
        post(refused)
            .header("idempotency-key", "'OR'1'='1';--")
            .event(),
    );
    add(
        "SQL in the path id",
        ApiRequest::get(Version::V2, "1'%20OR%20'1'='1")
            .org(&org)
            .event(),
    );
    add(
        "SQL in the organization claim",
        ok().org("' OR 1=1 --").event(),
    );
    add(
        "SQL in X-Organization-Id without a claim",
        ApiRequest::post(Version::V2, &valid)
            .header(
                "x-organization-id",
                "00000000-0000-0000-0000-000000000000' OR '1'='1",
            )
            .event(),
    );

    // wrong methods
    for method in [
        "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT", "FOO",
    ] {
        add(
            &format!("{method} /notifications"),
            ApiRequest::new(Version::V2, method, "/notifications")
                .org(&org)
                .body(valid.to_string())
                .event(),
        );
    }
    for method in ["POST", "PUT", "DELETE"] {
        add(
            &format!("{method} /notifications/{{id}}"),
            ApiRequest::new(
                Version::V2,
                method,
                &format!("/notifications/{}", Uuid::new_v4()),
            )
            .org(&org)
            .body(valid.to_string())
            .event(),
        );
    }
    let mut e = ok().event();
    e["requestContext"]["http"]["method"] = json!("GE T");
    add("a method with a space", e);
    add(
        "path traversal",
        ApiRequest::new(Version::V2, "POST", "/notifications/../admin")
            .org(&org)
            .body(valid.to_string())
            .event(),
    );
    add(
        "10 KB path",
        ApiRequest::new(
            Version::V2,
            "GET",
            &format!("/notifications/{}", "a".repeat(10_000)),
        )
        .org(&org)
        .event(),
    );

    // wrong content types, with a valid body
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/jsonx",
        "json",
        "",
    ] {
        add(
            &format!("Content-Type {ct:?}"),
            ok().header("content-type", ct).event(),
        );
    }
    add(
        "no Content-Type",
        ok().without_header("content-type").event(),
    );
    // a body that is not an object, or too large
    for body in ["", "null", "[]", "\"str\"", "1e999", "{", "{}"] {
        add(&format!("body {body:?}"), post(body).event());
    }
    add(
        "1 MiB body",
        post(&format!(
            r#"{{"channel":"sms","to":"+15555550100","message":"{}"}}"#,
            "m".repeat(1 << 20)
        ))
        .event(),
    );
    add(
        "huge max_attempts",
        post(r#"{"channel":"sms","to":"+15555550100","message":"m","max_attempts":1e400}"#).event(),
    );
    add(
        "send_at far in the future",
        post(r#"{"channel":"sms","to":"+15555550100","message":"m","send_at":"+275760-09-13T00:00:00Z"}"#)
            .event(),
    );
    cases
}

async fn scenario_hostile(s: &mut Suite) -> Row {
    let mut row = Row::new("5. hostile input corpus");
    let db = TestDb::new().await;
    let client = db.client().await;
    let mut api = s.ingest(&db, 2, true).await;
    let corpus = hostile_corpus();
    let mut statuses: HashMap<u16, u64> = HashMap::new();
    let mut bad = Vec::new();
    for (name, event) in &corpus {
        let a = faults::send_event(&api, event).await;
        *statuses.entry(a.status).or_insert(0) += 1;
        row.runs += 1;
        if a.status >= 500 || a.function_error || (200..300).contains(&a.status) {
            bad.push(format!("{name}: {} {}", a.status, a.body));
        }
        if a.status == 202 {
            row.accepted += 1;
        }
    }
    row.note(format!(
        "{} cases → {}",
        corpus.len(),
        statuses_text(&statuses)
    ));
    for b in &bad {
        row.note(format!("  {}", b.chars().take(300).collect::<String>()));
    }
    let fivexx: u64 = statuses
        .iter()
        .filter(|(s, _)| **s >= 500)
        .map(|(_, n)| n)
        .sum();
    row.check(
        fivexx == 0,
        format!("5xx answers or function errors: {fivexx}"),
    );
    row.check(
        bad.is_empty(),
        format!("cases not refused with a 4xx: {}", bad.len()),
    );
    let alive = api.alive();
    row.check(
        alive == 2 && api.spawned == 2,
        format!("ingest processes alive: {alive} of 2, none restarted"),
    );
    let logs = s.launcher.all_logs();
    let panics = logs.matches("panicked").count();
    row.check(panics == 0, format!("panics in the logs: {panics}"));
    let rows: i64 = client
        .query_one("SELECT count(*) FROM notification_jobs", &[])
        .await
        .unwrap()
        .get(0);
    row.check(rows == 0, format!("rows written: {rows}"));
    row.delivered = None;
    row.dead = None;
    api.kill_all().await;
    row
}

// ---------------------------------------------------------------------------------------
// 6. security

async fn scenario_security(s: &mut Suite) -> Row {
    let mut row = Row::new("6. tenants and logs");
    let db = TestDb::new().await;
    let client = db.client().await;
    let api = s.ingest(&db, 1, true).await;
    let strict = s.ingest(&db, 1, false).await;
    let recipients = Recipients::new();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let body_x = s.job_body(&recipients, 0);
    let body_y = s.job_body(&recipients, 1);
    let key = "order-42";
    let post = |org: Uuid, body: &Value| {
        ApiRequest::post(Version::V2, body)
            .org(org)
            .header("idempotency-key", key)
    };
    let a1 = faults::send(&api, &post(a, &body_x)).await;
    let id_a = faults::answered_id(&a1);
    row.check(
        a1.status == 202 && id_a.is_some(),
        format!("A posts with key {key}: {}", a1.status),
    );
    let b1 = faults::send(&api, &post(b, &body_x)).await;
    let id_b = faults::answered_id(&b1);
    row.check(
        b1.status == 202 && id_b.is_some() && id_b != id_a,
        format!("B, same key and body: {} with its own job", b1.status),
    );
    let a2 = faults::send(&api, &post(a, &body_x)).await;
    row.check(
        a2.status == 200 && faults::answered_id(&a2) == id_a,
        format!("A repeats: {} with A's first job", a2.status),
    );
    let b2 = faults::send(&api, &post(b, &body_y)).await;
    row.check(
        b2.status == 409,
        format!("B, same key, other body: {}", b2.status),
    );
    let a3 = faults::send(&api, &post(a, &body_y)).await;
    row.check(
        a3.status == 409,
        format!("A, same key, other body: {}", a3.status),
    );
    row.accepted = [&a1, &b1].iter().filter(|x| x.status == 202).count() as u64;
    row.runs = 5;
    if let (Some(id_a), Some(id_b)) = (id_a, id_b) {
        let get = |org: Uuid, id: Uuid| ApiRequest::get(Version::V2, &id.to_string()).org(org);
        for (who, org, id, want) in [
            ("A reads A's job", a, id_a, 200),
            ("B reads A's job", b, id_a, 404),
            ("A reads B's job", a, id_b, 404),
            ("B reads B's job", b, id_b, 200),
        ] {
            let r = faults::send(&api, &get(org, id)).await;
            row.runs += 1;
            row.check(
                r.status == want,
                format!("{who}: {} (want {want})", r.status),
            );
            if want == 404 {
                let leaked = r.body.to_string().contains(&id.to_string());
                row.check(!leaked, format!("{who}: the answer does not echo the job"));
            }
        }
        // the authorizer's organization wins over the local-only header
        let r = faults::send(
            &api,
            &get(b, id_a).header("x-organization-id", &a.to_string()),
        )
        .await;
        row.runs += 1;
        row.check(
            r.status == 404,
            format!(
                "B's token with X-Organization-Id of A reads A's job: {}",
                r.status
            ),
        );
        // with ALLOW_ORG_HEADER off (production), the header is not an identity
        let r = faults::send(
            &strict,
            &ApiRequest::get(Version::V2, &id_a.to_string())
                .header("x-organization-id", &a.to_string()),
        )
        .await;
        row.runs += 1;
        row.check(
            r.status == 401,
            format!(
                "X-Organization-Id alone, ALLOW_ORG_HEADER=false: {}",
                r.status
            ),
        );
    }
    let rows: i64 = client
        .query_one("SELECT count(*) FROM notification_jobs", &[])
        .await
        .unwrap()
        .get(0);
    row.check(rows == 2, format!("rows: {rows} (one per tenant)"));
    row.delivered = None;
    row.dead = None;
    row.claimed_twice = None;
    row.duplicate_sends = None;
    row
}

/// Every captured log line, searched for every body and full recipient the suite sent.
fn check_logs(s: &Suite, row: &mut Row) {
    let logs = s.launcher.all_logs();
    let lines = logs.lines().count();
    row.check(lines > 0, format!("captured log lines: {lines}"));
    // every body carries this marker: one scan finds any of them
    let bodies = logs.matches("faults-secret-").count();
    // recipients: every word of the logs (split where an address or number cannot go on),
    // and each word's tail from every '+', against the set of recipients sent
    let mut words = std::collections::HashSet::new();
    for word in logs.split(|c: char| !(c.is_alphanumeric() || "+@._-".contains(c))) {
        words.insert(word);
        for (i, _) in word.match_indices('+') {
            words.insert(&word[i..]);
        }
    }
    let leaked: Vec<&String> = s
        .secrets
        .iter()
        .filter(|x| !x.starts_with("faults-secret-") && words.contains(x.as_str()))
        .collect();
    row.check(
        bodies == 0,
        format!("message bodies in the logs: {bodies} (every body sent carries a marker)"),
    );
    row.check(
        leaked.is_empty(),
        format!(
            "full recipients in the logs: {} of {} searched{}",
            leaked.len(),
            s.secrets.len(),
            leaked
                .first()
                .map(|l| format!(" (first: {l})"))
                .unwrap_or_default()
        ),
    );
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only: Option<Vec<u32>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let wanted = |n: u32| only.as_ref().is_none_or(|o| o.contains(&n));

    let admin_url =
        std::env::var("DATABASE_URL").expect("DATABASE_URL (run tests/scripts/faults.sh)");
    let moto = integration_tests::stand_in::endpoint();
    let moto_addr = moto
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_socket_addrs()
        .expect("AWS_ENDPOINT_URL host:port")
        .next()
        .unwrap();
    let email_from = "noreply@example.com";
    integration_tests::stand_in::verify_sender("example.com").await;
    let proxy = DelayProxy::start(moto_addr, Duration::ZERO).await;
    let log_dir = std::env::var_os("FAULTS_LOG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/faults-logs"));
    let _ = std::fs::remove_dir_all(&log_dir);
    std::fs::create_dir_all(&log_dir).expect("create the log directory");
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let launcher = Launcher {
        bin_dir: default_bin_dir(&root()),
        log_dir: log_dir.clone(),
        base_env: vec![
            ("AWS_ENDPOINT_URL".into(), proxy.endpoint()),
            ("AWS_REGION".into(), env("AWS_REGION", "us-east-1")),
            (
                "AWS_ACCESS_KEY_ID".into(),
                env("AWS_ACCESS_KEY_ID", "testing"),
            ),
            (
                "AWS_SECRET_ACCESS_KEY".into(),
                env("AWS_SECRET_ACCESS_KEY", "testing"),
            ),
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
            ("EMAIL_FROM".into(), email_from.into()),
            ("MIGRATE_ON_START".into(), "true".into()),
            ("RUST_LOG".into(), env("FAULTS_RUST_LOG", "info")),
        ],
    };
    for bin in ["ingest", "worker", "sweeper"] {
        let path = launcher.bin_dir.join(bin);
        assert!(
            path.exists(),
            "{} is missing: cargo build -p ingest -p worker -p sweeper",
            path.display()
        );
    }
    let mut suite = Suite {
        launcher,
        admin_url,
        proxy,
        secrets: Vec::new(),
        quick,
    };
    println!(
        "fault suite ({}): binaries in {}, logs in {}",
        if quick { "quick" } else { "full" },
        suite.launcher.bin_dir.display(),
        log_dir.display()
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    let limit = Duration::from_secs(if quick { 240 } else { 420 });
    macro_rules! scenario {
        ($n:expr, $name:expr, $f:ident) => {
            if wanted($n) {
                println!("\n== {}", $name);
                let t = Instant::now();
                let row = match tokio::time::timeout(limit, $f(&mut suite)).await {
                    Ok(row) => row,
                    Err(_) => {
                        let mut row = Row::new($name);
                        row.check(false, format!("finished within {} s", limit.as_secs()));
                        row
                    }
                };
                println!("    ({:.1} s)", t.elapsed().as_secs_f64());
                rows.push(row);
            }
        };
    }
    scenario!(1, "1. worker kill -9 mid-delivery", scenario_kill);
    scenario!(2, "2. PostgreSQL restart under load", scenario_pg_restart);
    scenario!(3, "3. provider outage, then back", scenario_provider_outage);
    scenario!(4, "4. load, concurrency 16", scenario_load);
    scenario!(5, "5. hostile input corpus", scenario_hostile);
    scenario!(6, "6. tenants and logs", scenario_security);
    if let Some(row) = rows.last_mut().filter(|_| wanted(6)) {
        check_logs(&suite, row);
    }

    println!("\n{}", faults::table(&rows));
    let failures: Vec<(String, String)> = rows
        .iter()
        .flat_map(|r| r.failures.iter().map(|f| (r.scenario.clone(), f.clone())))
        .collect();
    println!(
        "{} scenario(s) in {:.0} s; {} failed check(s)",
        rows.len(),
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    for (scenario, f) in &failures {
        println!("  FAILED {scenario}: {f}");
    }
    if let Ok(path) = std::env::var("FAULTS_TABLE") {
        let _ = std::fs::write(path, faults::table(&rows));
    }
    std::process::exit(if failures.is_empty() { 0 } else { 1 });
}
