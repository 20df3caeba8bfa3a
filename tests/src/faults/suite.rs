//! What every scenario shares: the binaries' launcher, the proxy in front of the stand-in,
//! the admin connection, and the secrets sent so far (searched for in the logs at the end).

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use uuid::Uuid;

use super::api::{self, Answer};
use super::logs::SECRET_MARKER;
use super::process::{Function, Launcher, default_bin_dir, default_mutant_dir};
use super::row::{Row, statuses_text};
use super::runtime::{InvokeApi, Ledger};
use crate::TestDb;
use crate::apigw::{ApiRequest, Version};
use crate::proxy::Proxy;
use crate::stand_in::Recipients;

/// The worker's invocation timeout in the suite (its Lambda `Timeout`).
pub const WORKER_TIMEOUT: Duration = Duration::from_secs(6);
/// The sweep window: longer than the worker's timeout, as the sweeper demands.
pub const STUCK_AFTER_SECS: u64 = 7;

/// The worker's function name in the suite's [`InvokeApi`] (`WORKER_FUNCTION_NAME`).
pub const WORKER_FUNCTION: &str = "worker";

/// What makes a function start workers through `lambda`, as ingest and the worker do on AWS:
/// `WORKER_FUNCTION_NAME` and the Lambda endpoint (`AWS_ENDPOINT_URL_LAMBDA`; every other
/// service stays behind the suite's proxy). The worker must be registered there under
/// [`WORKER_FUNCTION`].
pub fn wake_env(lambda: &InvokeApi) -> Vec<(&'static str, String)> {
    vec![
        ("WORKER_FUNCTION_NAME", WORKER_FUNCTION.to_owned()),
        ("AWS_ENDPOINT_URL_LAMBDA", lambda.endpoint()),
    ]
}

pub struct Suite {
    pub launcher: Launcher,
    pub admin_url: String,
    /// Between the functions and the stand-in: delays provider calls, or cuts them off.
    pub proxy: Proxy,
    /// Message bodies and full recipients sent: none may appear in a log.
    pub secrets: Vec<String>,
    pub quick: bool,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

fn var_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_owned())
}

/// The stand-in's address, with `example.com` a verified SES sender.
pub(crate) async fn stand_in() -> SocketAddr {
    let moto = crate::stand_in::endpoint();
    crate::stand_in::verify_sender("example.com").await;
    moto.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_socket_addrs()
        .expect("AWS_ENDPOINT_URL host:port")
        .next()
        .expect("AWS_ENDPOINT_URL resolves")
}

impl Suite {
    /// From the environment `tests/scripts/faults.sh` sets: `DATABASE_URL` (the suite's own
    /// cluster), `AWS_ENDPOINT_URL`, `FAULTS_LOG_DIR`, `FAULTS_BIN_DIR`, `FAULTS_RUST_LOG`.
    pub async fn start(quick: bool) -> Self {
        let admin_url =
            std::env::var("DATABASE_URL").expect("DATABASE_URL (run tests/scripts/faults.sh)");
        let proxy = Proxy::start(stand_in().await).await;
        let log_dir = std::env::var_os("FAULTS_LOG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target/faults-logs"));
        let _ = std::fs::remove_dir_all(&log_dir);
        std::fs::create_dir_all(&log_dir).expect("create the log directory");
        let base_env = [
            ("AWS_ENDPOINT_URL", proxy.endpoint()),
            ("AWS_REGION", var_or("AWS_REGION", "us-east-1")),
            ("AWS_ACCESS_KEY_ID", var_or("AWS_ACCESS_KEY_ID", "testing")),
            (
                "AWS_SECRET_ACCESS_KEY",
                var_or("AWS_SECRET_ACCESS_KEY", "testing"),
            ),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("EMAIL_FROM", "noreply@example.com".into()),
            ("MIGRATE_ON_START", "true".into()),
            // straight to the server: statements prepared, as the template ships them
            ("DATABASE_PREPARED_STATEMENTS", "true".into()),
            ("RUST_LOG", var_or("FAULTS_RUST_LOG", "info")),
        ];
        let launcher = Launcher {
            bin_dir: default_bin_dir(&root()),
            mutant_bin_dir: None,
            mutant_dir: default_mutant_dir(&root()),
            log_dir,
            base_env: base_env.map(|(k, v)| (k.to_owned(), v)).to_vec(),
            ledger: Ledger::default(),
        };
        for bin in ["ingest", "worker", "sweeper"] {
            let path = launcher.bin_dir.join(bin);
            assert!(
                path.exists(),
                "{} is missing: cargo build --bin ingest --bin worker --bin sweeper",
                path.display()
            );
        }
        Self {
            launcher,
            admin_url,
            proxy,
            secrets: Vec::new(),
            quick,
        }
    }

    pub fn url(&self, db: &TestDb) -> String {
        super::db::url_with_db(&self.admin_url, &db.name)
    }

    pub async fn ingest(&self, db: &TestDb, processes: usize, allow_header: bool) -> Function {
        let env = vec![
            ("DATABASE_URL", self.url(db)),
            ("ALLOW_ORG_HEADER", allow_header.to_string()),
        ];
        Function::start(&self.launcher, "ingest", env, processes).await
    }

    /// An ingest that wakes the worker through `lambda` after each accept, as on AWS
    /// ([`wake_env`]); the organization header allowed.
    pub async fn waking_ingest(
        &self,
        db: &TestDb,
        processes: usize,
        lambda: &InvokeApi,
    ) -> Function {
        let mut env = vec![
            ("DATABASE_URL", self.url(db)),
            ("ALLOW_ORG_HEADER", "true".to_owned()),
        ];
        env.extend(wake_env(lambda));
        Function::start(&self.launcher, "ingest", env, processes).await
    }

    pub fn worker_env(
        &self,
        db: &TestDb,
        batch: u32,
        concurrency: u32,
    ) -> Vec<(&'static str, String)> {
        vec![
            ("DATABASE_URL", self.url(db)),
            ("WORKER_BATCH_SIZE", batch.to_string()),
            ("WORKER_CONCURRENCY", concurrency.to_string()),
            ("PROVIDER_TIMEOUT_MS", "1000".into()),
            // every slot the schema has: a killed worker holds its slot until its deadline,
            // and a scenario that kills many (kill -9, a restart) is not about the fleet's
            // bound, which scenario 12 holds with its own (a later entry wins)
            (
                "WORKER_MAX_INVOCATIONS",
                notify_core::fleet::MAX_SLOTS.to_string(),
            ),
        ]
    }

    /// Workers as most scenarios run them: batches of 8, 4 in flight.
    pub async fn worker(&self, db: &TestDb, processes: usize) -> Function {
        let env = self.worker_env(db, 8, 4);
        Function::start(&self.launcher, "worker", env, processes).await
    }

    /// The sweeper with the suite's window and worker timeout.
    pub async fn sweeper(&self, db: &TestDb) -> Function {
        self.sweeper_with(db, STUCK_AFTER_SECS, WORKER_TIMEOUT.as_secs())
            .await
    }

    /// A sweeper told `STUCK_AFTER_SECS` and `WORKER_TIMEOUT_SECS`.
    pub async fn sweeper_with(
        &self,
        db: &TestDb,
        stuck_after: u64,
        worker_timeout: u64,
    ) -> Function {
        let env = vec![
            ("DATABASE_URL", self.url(db)),
            ("STUCK_AFTER_SECS", stuck_after.to_string()),
            ("WORKER_TIMEOUT_SECS", worker_timeout.to_string()),
        ];
        Function::start(&self.launcher, "sweeper", env, 1).await
    }

    /// A send request with a secret body and a fresh recipient; remembers both.
    pub fn job_body(&mut self, recipients: &Recipients, n: usize) -> Value {
        let secret = format!("{SECRET_MARKER}{}", Uuid::new_v4().simple());
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
    pub async fn post_jobs(
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
        let answers: Vec<Answer> = futures::stream::iter(requests.iter())
            .map(|r| api::send(api, r))
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let mut ids = Vec::new();
        let mut statuses = HashMap::new();
        for a in &answers {
            *statuses.entry(a.status).or_insert(0) += 1;
            if a.status == 202 {
                ids.extend(a.id());
            }
        }
        (ids, statuses)
    }

    /// Posts `n` jobs of one organization through a fresh ingest process, 8 at a time, and
    /// checks every one was accepted; the accepted ids.
    pub async fn accept_jobs(
        &mut self,
        db: &TestDb,
        recipients: &Recipients,
        n: usize,
        row: &mut Row,
    ) -> Vec<Uuid> {
        let mut api = self.ingest(db, 1, true).await;
        let (accepted, statuses) = self.post_jobs(&api, Uuid::new_v4(), recipients, n, 8).await;
        api.kill_all().await;
        row.accepted = accepted.len() as u64;
        row.check(
            accepted.len() == n,
            format!("{n} requests → {}", statuses_text(&statuses)),
        );
        accepted
    }
}
