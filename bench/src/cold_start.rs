//! 8: cold start. Each function's binary, built in the benchmark's own profile, is
//! started as Lambda starts it — a new process with a Lambda-like environment whose
//! `AWS_LAMBDA_RUNTIME_API` points at a listener here — and timed from spawn to its first
//! `GET /2018-06-01/runtime/invocation/next` (ready for the first event); then it is killed.
//!
//! Four settings:
//! - **migrations on**: each run gets a fresh empty database, so the migrations really apply;
//! - **migrations off**: the benchmark's migrated database (the first connection only checks
//!   the schema), reached by `DATABASE_URL` in plain text;
//! - **as deployed**: migrations off, the credentials read from Secrets Manager
//!   (`DATABASE_SECRET_ARN`, the RDS secret's shape; host, port, database and
//!   `sslmode=require` from `DATABASE_URL`) and the database reached over TLS, its certificate
//!   checked against `DATABASE_CA_FILE` (the server's own, from `BENCH_DB_CA_FILE`:
//!   tests/scripts/bench.sh makes one and starts the server with TLS on). The listener answers
//!   the one `GetSecretValue` in Secrets Manager's wire shape after [`SECRET_DELAY`], standing
//!   in for a first call from Lambda to the regional endpoint (its own TLS handshake included:
//!   the stand-in speaks plain HTTP). As the template sets them, ingest and the worker also get
//!   `WORKER_FUNCTION_NAME` (a Lambda client for the wakes) and the worker `EVENT_BUS_NAME`
//!   (an EventBridge client);
//! - **IAM auth**: as deployed, but the password is an RDS IAM authentication token signed
//!   locally (`DATABASE_IAM_AUTH=true`, `DATABASE_USER`), so no secret is read and nothing but
//!   the database is called. A local server cannot check an IAM token: the benchmark's server
//!   trusts its admin role from 127.0.0.1 (tests/scripts/services.sh), so the token is signed
//!   and sent nowhere (the server asks for no password); what is timed is everything the
//!   function does, but RDS's own check of the token.
//!
//! `AWS_ENDPOINT_URL` points at the same listener, so any other AWS call during init arrives
//! as a request other than the poll and fails the run, as a process that exits before polling
//! does.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use notify_postgres::db::DbConfig;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::db::{Bench, url_with_db};
use crate::stats::{Samples, round};

pub const FUNCTIONS: [&str; 3] = ["ingest", "worker", "sweeper"];
/// Ingest should be ready within this much of the database handshake.
pub const GOAL_MS: f64 = 50.0;
/// The database each migrations-on run creates afresh.
const FRESH_DB: &str = "notif_bench_cold";
const NEXT: &str = "GET /2018-06-01/runtime/invocation/next ";
/// A function that has not polled by then failed to start (init itself waits at most 3 s
/// for the database).
const READY_WITHIN: Duration = Duration::from_secs(30);
/// How long the Secrets Manager stand-in takes to answer: a first `GetSecretValue` from a
/// new Lambda environment opens a TLS connection to the regional endpoint (a few round
/// trips within the region) and waits for the service.
pub const SECRET_DELAY: Duration = Duration::from_millis(50);
const SECRET_ARN: &str = "arn:aws:secretsmanager:us-east-1:000000000000:secret:bench-db-AbCdEf";

/// How a run's function reaches its database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    #[default]
    MigrationsOn,
    MigrationsOff,
    AsDeployed,
    IamAuth,
}

impl Setting {
    const ALL: [Setting; 4] = [
        Setting::MigrationsOn,
        Setting::MigrationsOff,
        Setting::AsDeployed,
        Setting::IamAuth,
    ];

    fn label(self) -> &'static str {
        match self {
            Setting::MigrationsOn => "migrations on",
            Setting::MigrationsOff => "migrations off",
            Setting::AsDeployed => "as deployed",
            Setting::IamAuth => "IAM auth",
        }
    }

    /// Reached over TLS, as deployed (the secret's or an IAM token's credentials).
    fn deployed(self) -> bool {
        matches!(self, Setting::AsDeployed | Setting::IamAuth)
    }
}

/// The cold start the issue asks for, as deployed (TLS, and the secret or an IAM token):
/// medians within these, in ms.
pub const DEPLOYED_GOALS_MS: [(&str, f64); 2] = [("ingest", 40.0), ("worker", 50.0)];

/// The as-deployed setting's database: reached over TLS with these credentials, which the
/// Secrets Manager stand-in hands out.
#[derive(Debug, Clone)]
pub struct Deployed {
    ca_file: PathBuf,
    port: u16,
    dbname: String,
    user: String,
    password: Option<String>,
    /// The secret's `SecretString`, the RDS shape.
    secret: String,
}

impl Deployed {
    /// From `BENCH_DB_CA_FILE` and the benchmark's database, if its server speaks TLS.
    async fn from_env(bench: &Bench) -> std::result::Result<Self, String> {
        let ca_file = std::env::var_os("BENCH_DB_CA_FILE")
            .map(PathBuf::from)
            .ok_or("BENCH_DB_CA_FILE is not set (tests/scripts/bench.sh sets it when it starts the server with TLS)")?;
        let ssl: String = bench
            .client
            .query_one("SHOW ssl", &[])
            .await
            .map_err(|e| format!("SHOW ssl: {e}"))?
            .get(0);
        if ssl != "on" {
            return Err("the server does not offer TLS (ssl = off)".into());
        }
        let config: tokio_postgres::Config = bench
            .url
            .parse()
            .map_err(|e| format!("the benchmark's URL: {e}"))?;
        let user = config.get_user().unwrap_or("postgres").to_owned();
        let password = config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        let (_, port) = bench.config.host_port();
        let secret = serde_json::json!({"username": user,
                                        "password": password.as_deref().unwrap_or("unused-with-trust"),
                                        "engine": "postgres"})
        .to_string();
        Ok(Self {
            ca_file,
            port,
            dbname: bench.db.clone(),
            user,
            password,
            secret,
        })
    }

    /// `GetSecretValue`'s answer, as Secrets Manager's JSON protocol writes it.
    fn answer(&self) -> String {
        let body = serde_json::json!({
            "ARN": SECRET_ARN,
            "Name": "bench-db",
            "VersionId": "00000000-0000-4000-8000-000000000001",
            "SecretString": self.secret,
            "VersionStages": ["AWSCURRENT"],
            "CreatedDate": 1_767_225_600.0,
        })
        .to_string();
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.1\r\n\
             x-amzn-requestid: 00000000-0000-4000-8000-000000000002\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
    }
}

/// Median and maximum of some runs, in ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Spread {
    pub runs: usize,
    pub median_ms: f64,
    pub max_ms: f64,
}

impl Spread {
    fn of(samples: &Samples) -> Self {
        Self {
            runs: samples.len(),
            median_ms: round(samples.p50(), 3),
            max_ms: round(samples.quantile(1.0), 3),
        }
    }
}

/// One function's init in one migrations setting.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Init {
    pub function: &'static str,
    pub setting: Setting,
    pub migrate_on_start: bool,
    #[serde(flatten)]
    pub init: Spread,
    /// Runs whose database connection was open when the function first polled.
    pub connected_at_init: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ColdStart {
    /// The cargo profile's folder the binaries came from (`debug` is the dev profile).
    pub profile: String,
    /// `DbConfig::connect` to the migrated database, from this (warm) process.
    pub handshake: Spread,
    /// The same over TLS (`sslmode=require`, the certificate checked), when measured.
    pub tls_handshake: Option<Spread>,
    /// `measured`, or why the as-deployed setting was not.
    pub as_deployed: String,
    /// The Secrets Manager stand-in's delay, in ms.
    pub secret_delay_ms: f64,
    pub inits: Vec<Init>,
    /// The as-deployed inits broken down: each set-up step the function logs
    /// (`notify_postgres::startup`), medians over the runs.
    pub steps: Vec<StepTime>,
    /// The OpenSSL the functions were built with (the database's TLS goes through it).
    pub openssl: String,
    /// Ingest's median init (migrations off, as deployed) minus the median handshake.
    pub ingest_minus_handshake_ms: f64,
    pub goal_ms: f64,
    pub goal_met: bool,
    /// How long this part of the benchmark took, database creation included.
    pub secs: f64,
}

/// One set-up step of a function's init in one setting: its median time, and its median start
/// counted from the init's first step (steps that overlap ran side by side).
#[derive(Debug, Clone, Serialize)]
pub struct StepTime {
    pub function: &'static str,
    pub setting: Setting,
    pub step: String,
    pub median_ms: f64,
    pub median_at_ms: f64,
}

/// The OpenSSL of this build, which the functions built beside the bench share.
fn openssl_built_with() -> String {
    #[cfg(feature = "vendored-openssl")]
    return format!(
        "{} (vendored, as the Lambda build)",
        openssl::version::version()
    );
    #[cfg(not(feature = "vendored-openssl"))]
    "the system's (libssl-dev), not the Lambda build's: run tests/scripts/bench.sh".to_owned()
}

/// Each step's times and starts in ms, by (function, setting, step).
type StepSamples =
    std::collections::BTreeMap<(&'static str, Setting, String), (Vec<f64>, Vec<f64>)>;

/// The `set-up step` lines in a function's JSON log (`step`, `ms`, `at_ms`).
fn set_up_steps(stdout: &str) -> Vec<(String, f64, f64)> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["message"] == "set-up step")
        .filter_map(|v| {
            Some((
                v["step"].as_str()?.to_owned(),
                v["ms"].as_f64()?,
                v["at_ms"].as_f64()?,
            ))
        })
        .collect()
}

/// What to start: a program, its arguments and environment (the runtime API address and the
/// AWS endpoint are added per run).
pub struct Launch {
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Runs every function `runs` times in each setting, interleaved, with a handshake per round.
pub async fn measure(bench: &Bench, runs: usize) -> Result<ColdStart> {
    let started = Instant::now();
    let dir = bin_dir()?;
    let fresh_url = url_with_db(&bench.url, FRESH_DB)?;
    let deployed = Deployed::from_env(bench).await;
    let tls_url = tls_url(deployed.as_ref().ok());
    let mut handshake = Samples::new();
    let mut tls_handshake = Samples::new();
    let mut cells: Vec<(Init, Samples)> = Vec::new();
    let mut steps: StepSamples = std::collections::BTreeMap::new();
    let mut settings = vec![Setting::MigrationsOn, Setting::MigrationsOff];
    if deployed.is_ok() {
        settings.extend([Setting::AsDeployed, Setting::IamAuth]);
    }
    for setting in settings {
        for function in FUNCTIONS {
            let init = Init {
                function,
                setting,
                migrate_on_start: setting == Setting::MigrationsOn,
                init: Spread::of(&Samples::new()),
                connected_at_init: 0,
            };
            cells.push((init, Samples::new()));
        }
    }
    for pass in 0..runs {
        crate::step!("cold start: round {}/{runs}", pass + 1);
        handshake.push(time_handshake(&bench.config).await?);
        if let Some(tls) = &tls_url {
            tls_handshake.push(time_handshake(tls).await?);
        }
        for (init, samples) in &mut cells {
            let app = format!("cold-{}-{pass}", init.function);
            let (launch, secret) = match (init.setting, &deployed) {
                (Setting::AsDeployed, Ok(d)) => (Launch::deployed(&dir, init.function, d), Some(d)),
                (Setting::IamAuth, Ok(d)) => (Launch::iam(&dir, init.function, d), None),
                (Setting::MigrationsOn, _) => {
                    fresh_db(bench).await?;
                    let url = with_app(&fresh_url, &app);
                    (Launch::function(&dir, init.function, &url, init)?, None)
                }
                _ => {
                    let url = with_app(&bench.url, &app);
                    (Launch::function(&dir, init.function, &url, init)?, None)
                }
            };
            let (took, process) = first_poll_with(&launch, secret.map(Deployed::answer)).await?;
            let connected = if init.setting.deployed() {
                tls_connected(bench).await?
            } else {
                connected(bench, &app).await?
            };
            let (out, stdout) = process.stop_with_stdout().await;
            if init.setting.deployed() {
                for (step, ms, at_ms) in set_up_steps(&stdout) {
                    let times = steps
                        .entry((init.function, init.setting, step))
                        .or_default();
                    times.0.push(ms);
                    times.1.push(at_ms);
                }
            }
            // the deployed path (secret or token, TLS) is the one this setting measures: a
            // function that fell back to connecting on its first event did not take it
            if init.setting.deployed() && !connected {
                bail!(
                    "{}: no TLS connection to the database at init{out}",
                    launch.label
                );
            }
            if init.migrate_on_start && connected {
                check_migrated(&fresh_url, &launch.label).await?;
            }
            samples.push(took);
            init.connected_at_init += usize::from(connected);
        }
    }
    drop_fresh_db(bench).await;
    let mut cold = summarize(&dir, &handshake, cells, started.elapsed());
    cold.steps = steps
        .into_iter()
        .map(|((function, setting, step), (times, starts))| StepTime {
            function,
            setting,
            step,
            median_ms: Spread::of(&Samples::from_ms(times)).median_ms,
            median_at_ms: Spread::of(&Samples::from_ms(starts)).median_ms,
        })
        .collect();
    cold.tls_handshake = tls_url.is_some().then(|| Spread::of(&tls_handshake));
    cold.as_deployed = match deployed {
        Ok(_) => "measured".into(),
        Err(why) => format!("not measured: {why}"),
    };
    cold.secret_delay_ms = SECRET_DELAY.as_secs_f64() * 1000.0;
    Ok(cold)
}

/// The benchmark's database over TLS to `localhost` (the certificate's name), checked
/// against the CA file.
fn tls_url(deployed: Option<&Deployed>) -> Option<DbConfig> {
    let d = deployed?;
    let mut url = format!(
        "host=localhost port={} dbname={} user={} sslmode=require",
        d.port, d.dbname, d.user
    );
    if let Some(p) = &d.password {
        url.push_str(&format!(" password={p}"));
    }
    DbConfig::new(&url, Some(&d.ca_file)).ok()
}

/// Whether a TLS connection other than this process's own is open on the database now.
async fn tls_connected(bench: &Bench) -> Result<bool> {
    let row = bench
        .client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE s.ssl AND a.datname = current_database() AND a.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .context("cold start: pg_stat_ssl")?;
    Ok(row.get::<_, i64>(0) > 0)
}

fn summarize(
    dir: &Path,
    handshake: &Samples,
    cells: Vec<(Init, Samples)>,
    took: Duration,
) -> ColdStart {
    let inits: Vec<Init> = cells
        .into_iter()
        .map(|(init, samples)| Init {
            init: Spread::of(&samples),
            ..init
        })
        .collect();
    let handshake = Spread::of(handshake);
    let ingest = inits
        .iter()
        .find(|i| i.function == "ingest" && i.setting == Setting::MigrationsOff)
        .map_or(f64::NAN, |i| i.init.median_ms);
    // rounded as reported, so the verdict is the one the figure shows
    let over = round(ingest - handshake.median_ms, 3);
    ColdStart {
        profile: dir
            .file_name()
            .map_or("?".into(), |n| n.to_string_lossy().into_owned()),
        handshake,
        tls_handshake: None,
        as_deployed: String::new(),
        secret_delay_ms: 0.0,
        inits,
        steps: Vec::new(),
        openssl: openssl_built_with(),
        ingest_minus_handshake_ms: over,
        goal_ms: GOAL_MS,
        goal_met: over <= GOAL_MS,
        secs: round(took.as_secs_f64(), 1),
    }
}

impl ColdStart {
    pub fn render(&self) {
        let ms = crate::render::ms;
        let runs = self.handshake.runs;
        crate::say!(
            "8. cold start: spawn → first GET /2018-06-01/runtime/invocation/next, binaries of target/{} with a Lambda-like environment, killed at the poll; {runs} runs each, median / max",
            self.profile
        );
        crate::say!(
            "   database handshake alone (DbConfig::connect from this process): median {} max {}",
            ms(self.handshake.median_ms),
            ms(self.handshake.max_ms)
        );
        if let Some(tls) = &self.tls_handshake {
            crate::say!(
                "   the same over TLS (sslmode=require, the certificate checked): median {} max {}",
                ms(tls.median_ms),
                ms(tls.max_ms)
            );
        }
        crate::say!(
            "   {:<8} {:>26} {:>22} {:>22} {:>22}   connected at init (on, off, deployed, IAM)",
            "function",
            "migrations on (fresh db)",
            "migrations off",
            "as deployed",
            "IAM auth"
        );
        for function in FUNCTIONS {
            let cell = |setting: Setting| {
                self.inits
                    .iter()
                    .find(|i| i.function == function && i.setting == setting)
            };
            let cells = Setting::ALL.map(cell);
            let spread = |i: Option<&Init>| {
                i.map_or("-".into(), |i| {
                    format!("{} / {}", ms(i.init.median_ms), ms(i.init.max_ms))
                })
            };
            let connected = |i: Option<&Init>| {
                i.map_or("-".into(), |i| {
                    format!("{}/{}", i.connected_at_init, i.init.runs)
                })
            };
            crate::say!(
                "   {function:<8} {:>26} {:>22} {:>22} {:>22}   {}",
                spread(cells[0]),
                spread(cells[1]),
                spread(cells[2]),
                spread(cells[3]),
                cells.map(connected).join(", ")
            );
        }
        crate::say!(
            "   as deployed: {} (Secrets Manager stand-in answering after {} ms, TLS to the database; with the template's WORKER_FUNCTION_NAME and EVENT_BUS_NAME); IAM auth: the same with a locally signed RDS IAM token instead of the secret (the local server trusts the user: the token is not checked); TLS through {}",
            self.as_deployed,
            self.secret_delay_ms,
            self.openssl
        );
        for setting in [Setting::AsDeployed, Setting::IamAuth] {
            let verdicts: Vec<String> = DEPLOYED_GOALS_MS
                .iter()
                .filter_map(|&(function, goal)| {
                    let i = self.inits.iter().find(|i| {
                        i.function == function && i.setting == setting && i.init.runs > 0
                    })?;
                    let met = i.init.median_ms <= goal;
                    Some(format!(
                        "{function} {} (want ≤ {goal} ms: {})",
                        ms(i.init.median_ms),
                        if met { "met" } else { "NOT met" }
                    ))
                })
                .collect();
            if !verdicts.is_empty() {
                crate::say!(
                    "   {} cold start, medians: {}",
                    setting.label(),
                    verdicts.join(", ")
                );
            }
        }
        for setting in [Setting::AsDeployed, Setting::IamAuth] {
            for function in FUNCTIONS {
                let mut mine: Vec<&StepTime> = self
                    .steps
                    .iter()
                    .filter(|s| s.function == function && s.setting == setting)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                mine.sort_by(|a, b| a.median_at_ms.total_cmp(&b.median_at_ms));
                let parts: Vec<String> = mine
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} (from {})",
                            s.step,
                            ms(s.median_ms),
                            ms(s.median_at_ms)
                        )
                    })
                    .collect();
                crate::say!(
                    "   {function} ({}) steps, medians: {}",
                    setting.label(),
                    parts.join("; ")
                );
            }
        }
        for function in FUNCTIONS {
            let mine = || self.inits.iter().filter(|i| i.function == function);
            if mine().count() > 0 && mine().all(|i| i.connected_at_init == 0) {
                crate::say!(
                    "   {function} opened no database connection before polling: its first event connects (and migrates, when on)"
                );
            }
        }
        crate::say!(
            "   ingest init − handshake (medians, migrations off): {} (goal ≤ {GOAL_MS} ms: {}); this part took {:.1} s",
            ms(self.ingest_minus_handshake_ms),
            if self.goal_met { "met" } else { "NOT met" },
            self.secs
        );
    }
}

/// The folder of this benchmark's binary: the functions are built beside it, same profile.
fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("where the benchmark binary is")?;
    let dir = exe
        .parent()
        .context("the benchmark binary's folder")?
        .to_owned();
    for function in FUNCTIONS {
        let path = dir.join(function);
        if !path.is_file() {
            let profile = dir.file_name().unwrap_or_default().to_string_lossy();
            bail!(
                "cold start: {} not found; build the functions in the benchmark's profile \
                 (cargo build -p ingest -p worker -p sweeper --profile {}; bench.sh does)",
                path.display(),
                if profile == "debug" { "dev" } else { &profile }
            );
        }
    }
    Ok(dir)
}

impl Launch {
    /// A function binary with what Lambda and the function's own settings put in the
    /// environment; AWS credentials are dummies (the SDK reads them lazily, on a first call).
    fn function(dir: &Path, function: &str, db_url: &str, init: &Init) -> Result<Self> {
        let mut env: Vec<(String, String)> = [
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("TZ", ":UTC".into()),
            ("AWS_LAMBDA_FUNCTION_NAME", function.into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
            (
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{function}"),
            ),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "bench".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_DEFAULT_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "AKIDBENCHCOLDSTART".into()),
            ("AWS_SECRET_ACCESS_KEY", "bench-cold-start".into()),
            ("AWS_SESSION_TOKEN", "bench-cold-start".into()),
            ("DATABASE_URL", db_url.into()),
            ("MIGRATE_ON_START", init.migrate_on_start.to_string()),
            // each set-up step's time (a debug line of its own), for the breakdown
            ("RUST_LOG", "info,notify_postgres::startup=debug".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if function == "worker" {
            env.push(("EMAIL_FROM".into(), "noreply@example.com".into()));
        }
        Ok(Self {
            label: format!("{function} ({})", init.setting.label()),
            program: dir.join(function),
            args: Vec::new(),
            env,
        })
    }
}

impl Launch {
    /// A function as the template deploys it: migrations off, the credentials from Secrets
    /// Manager, the database over TLS.
    fn deployed(dir: &Path, function: &str, d: &Deployed) -> Self {
        let init = Init {
            function: "",
            setting: Setting::AsDeployed,
            migrate_on_start: false,
            init: Spread::default(),
            connected_at_init: 0,
        };
        // the URL's variable is replaced below: the deployed function has none
        let mut launch = Self::function(dir, function, "", &init)
            .unwrap_or_else(|_| unreachable!("function() does not fail"));
        // what the secret lacks, with `sslmode=require`: a deployed function's host is not
        // local, and only a local host may go without TLS (the server here is local)
        launch.env.retain(|(k, _)| k != "DATABASE_URL");
        launch.env.extend(
            [
                ("DATABASE_SECRET_ARN", SECRET_ARN.to_owned()),
                (
                    "DATABASE_URL",
                    format!(
                        "host=localhost port={} dbname={} sslmode=require",
                        d.port, d.dbname
                    ),
                ),
                ("DATABASE_CA_FILE", d.ca_file.display().to_string()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        // what the template gives these functions besides: the wakes' Lambda client (ingest,
        // the worker) and the status events' bus (the worker); neither is called at init
        if function != "sweeper" {
            launch
                .env
                .push(("WORKER_FUNCTION_NAME".into(), "notifications-worker".into()));
        }
        if function == "worker" {
            launch
                .env
                .push(("EVENT_BUS_NAME".into(), "notifications-events".into()));
        }
        launch.label = format!("{function} (as deployed)");
        launch
    }

    /// As deployed, with RDS IAM authentication instead of the secret: the user by
    /// `DATABASE_USER`, its token signed from the (dummy) credentials in the environment. The
    /// URL names the user too, so that a build without IAM authentication (bench/compare.sh's
    /// older side) still connects, over TLS without a secret.
    fn iam(dir: &Path, function: &str, d: &Deployed) -> Self {
        let mut launch = Self::deployed(dir, function, d);
        launch
            .env
            .retain(|(k, _)| k != "DATABASE_SECRET_ARN" && k != "DATABASE_URL");
        let url = format!(
            "host=localhost port={} dbname={} user={} sslmode=require",
            d.port, d.dbname, d.user
        );
        launch.env.extend(
            [
                ("DATABASE_IAM_AUTH", "true"),
                ("DATABASE_USER", &d.user),
                ("DATABASE_URL", &url),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        launch.label = format!("{function} (IAM auth)");
        launch
    }
}

/// `url` with an `application_name`, to find the function's connection in pg_stat_activity.
fn with_app(url: &str, app: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={app}")
}

async fn time_handshake(config: &DbConfig) -> Result<Duration> {
    let started = Instant::now();
    let client = config.connect().await.context("cold start: handshake")?;
    let took = started.elapsed();
    drop(client);
    Ok(took)
}

async fn fresh_db(bench: &Bench) -> Result<()> {
    for statement in [
        format!("DROP DATABASE IF EXISTS {FRESH_DB} WITH (FORCE)"),
        format!("CREATE DATABASE {FRESH_DB}"),
    ] {
        bench
            .client
            .batch_execute(&statement)
            .await
            .with_context(|| format!("cold start: {statement}"))?;
    }
    Ok(())
}

async fn drop_fresh_db(bench: &Bench) {
    let drop = format!("DROP DATABASE IF EXISTS {FRESH_DB} WITH (FORCE)");
    let _ = bench.client.batch_execute(&drop).await;
}

/// Whether a connection named `app` is open now.
async fn connected(bench: &Bench, app: &str) -> Result<bool> {
    let row = bench
        .client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .context("cold start: pg_stat_activity")?;
    Ok(row.get::<_, i64>(0) > 0)
}

/// A function that connected at init with MIGRATE_ON_START=true left the schema current.
async fn check_migrated(url: &str, label: &str) -> Result<()> {
    let client = DbConfig::new(url, None)?.connect().await?;
    if let Some(missing) = notify_postgres::migrate::first_missing(&client).await? {
        bail!(
            "{label}: connected at init with MIGRATE_ON_START=true, yet {missing} is not applied"
        );
    }
    Ok(())
}

/// A started process; its output is collected in the background, and its runtime API
/// connections are held open until it is stopped.
pub struct Process {
    child: Child,
    server: JoinHandle<()>,
    stdout: JoinHandle<Vec<u8>>,
    stderr: JoinHandle<Vec<u8>>,
}

impl Process {
    fn spawn(launch: &Launch, server: JoinHandle<()>, address: &str) -> Result<Self> {
        let mut child = Command::new(&launch.program)
            .args(&launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .env("AWS_LAMBDA_RUNTIME_API", address)
            .env("AWS_ENDPOINT_URL", format!("http://{address}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("{}: start {}", launch.label, launch.program.display()))?;
        let stdout = tokio::spawn(read_all(child.stdout.take()));
        let stderr = tokio::spawn(read_all(child.stderr.take()));
        Ok(Self {
            child,
            server,
            stdout,
            stderr,
        })
    }

    /// SIGKILL (if still running); its exit status and what it wrote, for an error message.
    pub async fn stop(self) -> String {
        self.stop_with_stdout().await.0
    }

    /// [`Process::stop`], and all it wrote on stdout.
    pub async fn stop_with_stdout(mut self) -> (String, String) {
        let _ = self.child.start_kill();
        let status = self.child.wait().await.ok();
        self.server.abort();
        let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).trim().to_owned();
        let wait = Duration::from_secs(2);
        let out = tokio::time::timeout(wait, self.stdout).await;
        let err = tokio::time::timeout(wait, self.stderr).await;
        let (out, err) = (
            out.ok().and_then(Result::ok).map(text).unwrap_or_default(),
            err.ok().and_then(Result::ok).map(text).unwrap_or_default(),
        );
        let tail: String = out.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        let summary = format!(
            "; status {}; stderr: {:?}; stdout (last lines, newest first): {:?}",
            status.map_or("?".into(), |s: ExitStatus| s.to_string()),
            err,
            tail
        );
        (summary, out)
    }
}

async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut bytes).await;
    }
    bytes
}

/// [`first_poll_with`], no AWS call answered.
#[cfg(test)]
async fn first_poll(launch: &Launch) -> Result<(Duration, Process)> {
    first_poll_with(launch, None).await
}

/// Starts `launch` and waits for its first request on the runtime API: the time from spawn
/// to a next-event poll, and the still-running process. Any other outcome is an error naming
/// the function, with its stderr. With `secret` (a whole HTTP response), the listener answers
/// a Secrets Manager `GetSecretValue` with it after [`SECRET_DELAY`].
async fn first_poll_with(launch: &Launch, secret: Option<String>) -> Result<(Duration, Process)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("cold start: bind the runtime API listener")?;
    let address = listener.local_addr()?.to_string();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let server = tokio::spawn(listen(listener, tx, secret.map(Arc::new)));
    let started = Instant::now();
    let mut process = Process::spawn(launch, server, &address)?;
    let label = &launch.label;
    tokio::select! {
        first = rx.recv() => match first {
            Some((at, line)) if line.starts_with(NEXT) => Ok((at - started, process)),
            Some((_, line)) => {
                let out = process.stop().await;
                bail!("{label}: its first request during init was {line:?}, not the runtime API's next-event poll (an AWS call or an init error){out}")
            }
            None => bail!("{label}: the runtime API listener stopped"),
        },
        _ = process.child.wait() => {
            let out = process.stop().await;
            bail!("{label}: exited before polling for its first event{out}")
        }
        _ = tokio::time::sleep(READY_WITHIN) => {
            let out = process.stop().await;
            bail!("{label}: did not poll for its first event within {READY_WITHIN:?}{out}")
        }
    }
}

/// Accepts connections; reports each one's request line with the instant it arrived, then
/// holds the connection open (no answer: the process is killed before it needs one). With
/// `secret`, a Secrets Manager `GetSecretValue` is answered with it instead, after
/// [`SECRET_DELAY`], and not reported.
async fn listen(
    listener: TcpListener,
    tx: mpsc::UnboundedSender<(Instant, String)>,
    secret: Option<Arc<String>>,
) {
    let mut held = JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        held.spawn(request_line(stream, tx.clone(), secret.clone()));
    }
}

const GET_SECRET: &str = "x-amz-target: secretsmanager.getsecretvalue";

async fn request_line(
    mut stream: TcpStream,
    tx: mpsc::UnboundedSender<(Instant, String)>,
    secret: Option<Arc<String>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // the request line, and with a secret to give, the headers too
    let until: &[u8] = if secret.is_some() {
        b"\r\n\r\n"
    } else {
        b"\r\n"
    };
    while !buf.windows(until.len()).any(|w| w == until) && buf.len() < 16 * 1024 {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let at = Instant::now();
    let text = String::from_utf8_lossy(&buf).to_lowercase();
    if let Some(answer) = secret.filter(|_| text.contains(GET_SECRET)) {
        tokio::time::sleep(SECRET_DELAY).await;
        let _ = stream.write_all(answer.as_bytes()).await;
    } else {
        let line = String::from_utf8_lossy(&buf)
            .split("\r\n")
            .next()
            .unwrap_or_default()
            .to_owned();
        let _ = tx.send((at, line));
    }
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash(label: &str, script: &str) -> Launch {
        Launch {
            label: label.into(),
            program: "bash".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())],
        }
    }

    /// Sends `request` to the runtime API address, then waits.
    fn requester(label: &str, request: &str) -> Launch {
        bash(
            label,
            &format!(
                "exec 3<>/dev/tcp/${{AWS_LAMBDA_RUNTIME_API%:*}}/${{AWS_LAMBDA_RUNTIME_API#*:}}; \
                 printf '{request} HTTP/1.1\\r\\nhost: x\\r\\n\\r\\n' >&3; sleep 20"
            ),
        )
    }

    #[test]
    fn the_deployed_settings_carry_the_templates_variables_and_iam_reads_no_secret() {
        let d = Deployed {
            ca_file: "/tmp/ca.pem".into(),
            port: 5433,
            dbname: "notif_bench".into(),
            user: "postgres".into(),
            password: None,
            secret: String::new(),
        };
        let var = |launch: &Launch, name: &str| {
            launch
                .env
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let dir = Path::new("/bin");
        let worker = Launch::deployed(dir, "worker", &d);
        assert_eq!(
            var(&worker, "DATABASE_SECRET_ARN").as_deref(),
            Some(SECRET_ARN)
        );
        assert!(var(&worker, "WORKER_FUNCTION_NAME").is_some());
        assert!(var(&worker, "EVENT_BUS_NAME").is_some());
        let sweeper = Launch::deployed(dir, "sweeper", &d);
        assert_eq!(var(&sweeper, "WORKER_FUNCTION_NAME"), None);

        let ingest = Launch::iam(dir, "ingest", &d);
        assert_eq!(ingest.label, "ingest (IAM auth)");
        assert_eq!(var(&ingest, "DATABASE_SECRET_ARN"), None);
        assert_eq!(var(&ingest, "DATABASE_IAM_AUTH").as_deref(), Some("true"));
        assert_eq!(var(&ingest, "DATABASE_USER").as_deref(), Some("postgres"));
        assert!(
            var(&ingest, "DATABASE_URL")
                .unwrap()
                .ends_with("sslmode=require")
        );
        assert_eq!(
            var(&ingest, "DATABASE_CA_FILE").as_deref(),
            Some("/tmp/ca.pem")
        );
        assert!(var(&ingest, "WORKER_FUNCTION_NAME").is_some());
        assert!(Setting::IamAuth.deployed() && !Setting::MigrationsOff.deployed());
    }

    #[test]
    fn set_up_steps_are_read_from_the_json_log_and_nothing_else() {
        let out = "{\"level\":\"DEBUG\",\"message\":\"set-up step\",\"step\":\"aws_config\",\"ms\":1.5,\"at_ms\":0.25}\n\
                   not json\n\
                   {\"level\":\"INFO\",\"message\":\"ready\",\"step\":\"x\",\"ms\":1,\"at_ms\":1}\n";
        assert_eq!(
            set_up_steps(out),
            vec![("aws_config".to_owned(), 1.5, 0.25)]
        );
    }

    #[tokio::test]
    async fn a_process_that_polls_is_timed_and_still_running() {
        let launch = requester("fake", "GET /2018-06-01/runtime/invocation/next");
        let (took, process) = first_poll(&launch).await.expect("a poll");
        assert!(took < READY_WITHIN);
        let out = process.stop().await;
        assert!(out.contains("signal: 9"), "{out}");
    }

    #[tokio::test]
    async fn a_process_that_exits_before_polling_is_an_error_with_its_stderr() {
        let launch = bash(
            "ingest (migrations off)",
            "echo 'ingest: cannot start: boom' >&2; exit 3",
        );
        let err = first_poll(&launch)
            .await
            .err()
            .expect("an error")
            .to_string();
        assert!(err.starts_with("ingest (migrations off): exited"), "{err}");
        assert!(
            err.contains("exit status: 3") && err.contains("cannot start: boom"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_secret_asked_for_is_answered_late_and_is_not_the_poll() {
        let connect = "/dev/tcp/${AWS_LAMBDA_RUNTIME_API%:*}/${AWS_LAMBDA_RUNTIME_API#*:}";
        let launch = bash(
            "secret",
            &format!(
                "exec 3<>{connect}; \
                 printf 'POST / HTTP/1.1\\r\\nhost: x\\r\\nX-Amz-Target: secretsmanager.GetSecretValue\\r\\n\\r\\n' >&3; \
                 head -c 15 <&3 | grep -q 'HTTP/1.1 200 OK' || exit 7; \
                 exec 4<>{connect}; \
                 printf 'GET /2018-06-01/runtime/invocation/next HTTP/1.1\\r\\nhost: x\\r\\n\\r\\n' >&4; sleep 20"
            ),
        );
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_owned();
        let (took, process) = first_poll_with(&launch, Some(answer))
            .await
            .expect("the secret answered, then the poll");
        assert!(took >= SECRET_DELAY, "{took:?}");
        process.stop().await;
    }

    #[tokio::test]
    async fn another_request_before_the_poll_is_an_error() {
        let launch = requester("worker (migrations on)", "POST /");
        let err = first_poll(&launch)
            .await
            .err()
            .expect("an error")
            .to_string();
        assert!(
            err.starts_with("worker (migrations on): its first request"),
            "{err}"
        );
        assert!(err.contains("\"POST / HTTP/1.1\""), "{err}");
    }
}
