//! Function binaries as child processes, each polling an [`Emulator`] at an address of its
//! own and connecting to PostgreSQL under its own `application_name` (its log name), with
//! stdout and stderr appended to a log file the suite greps afterwards. The process name
//! ties a claim the database logged to the invocation the [`Ledger`] says ran it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::process::{Child, Command};

use super::runtime::{Emulator, EmulatorHandle, Invocation, Ledger, Outcome};

/// Where the binaries are and what every process gets in its environment.
#[derive(Clone, Debug)]
pub struct Launcher {
    pub bin_dir: PathBuf,
    /// While a code mutant runs, the folder of the binaries built from its patch (see
    /// [`crate::faults::scenarios::Mutant`]): those found there are run instead of
    /// `bin_dir`'s.
    pub mutant_bin_dir: Option<PathBuf>,
    /// Where the mutants' binaries are, one folder per patch ([`default_mutant_dir`]).
    pub mutant_dir: PathBuf,
    pub log_dir: PathBuf,
    pub base_env: Vec<(String, String)>,
    /// Where every emulator records its invocations.
    pub ledger: Ledger,
}

/// A running function process.
pub struct Process {
    pub name: String,
    child: Child,
    ledger: Ledger,
}

impl Launcher {
    /// Where `binary` is run from: the mutant's build of it while one runs, else `bin_dir`.
    pub fn path_of(&self, binary: &str) -> PathBuf {
        match &self.mutant_bin_dir {
            Some(dir) if dir.join(binary).exists() => dir.join(binary),
            _ => self.bin_dir.join(binary),
        }
    }

    /// Starts `binary` polling the runtime API at `runtime_api`, with `env` on top of the
    /// base environment, logging to `{log}.log`.
    pub fn spawn(
        &self,
        binary: &str,
        runtime_api: &str,
        env: &[(&str, String)],
        log: &str,
    ) -> Process {
        let log_path = self.log_dir.join(format!("{log}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("open {}: {e}", log_path.display()));
        let err = out.try_clone().unwrap();
        let path = self.path_of(binary);
        let mut cmd = Command::new(&path);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
            .env("AWS_LAMBDA_FUNCTION_NAME", binary)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "faults")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{binary}"));
        for (k, v) in &self.base_env {
            cmd.env(k, v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", path.display()));
        Process {
            name: log.to_owned(),
            child,
            ledger: self.ledger.clone(),
        }
    }

    /// Every log file written so far, concatenated.
    pub fn all_logs(&self) -> String {
        let mut all = String::new();
        if let Ok(entries) = std::fs::read_dir(&self.log_dir) {
            for entry in entries.flatten() {
                if let Ok(bytes) = std::fs::read(entry.path()) {
                    all.push_str(&String::from_utf8_lossy(&bytes));
                }
            }
        }
        all
    }

    pub fn log_path(&self, log: &str) -> PathBuf {
        self.log_dir.join(format!("{log}.log"))
    }
}

impl Process {
    /// SIGKILL, as when Lambda stops an environment or the host dies; the invocation it was
    /// running ends now.
    pub async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        self.ledger.process_died(&self.name);
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL without waiting for the exit (Lambda's timeout); the ledger already ended its
    /// invocation.
    fn kill_now(&mut self) {
        let _ = self.child.start_kill();
        self.ledger.process_died(&self.name);
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

impl Drop for Process {
    /// The child is killed on drop (`kill_on_drop`): so is its invocation.
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.start_kill();
            self.ledger.process_died(&self.name);
        }
    }
}

/// A function: one emulator and the processes polling it.
pub struct Function {
    pub binary: String,
    pub emulator: Emulator,
    pool: Arc<Pool>,
}

/// A function's processes, shared with its [`Caller`]s: a process that outlives its
/// invocation's deadline is killed and replaced by whoever waits for that invocation.
struct Pool {
    binary: String,
    runtime: EmulatorHandle,
    processes: Mutex<Vec<Process>>,
    spawned: AtomicUsize,
    env: Vec<(&'static str, String)>,
    launcher: Launcher,
    /// The function was dropped: no process is started any more.
    closed: AtomicBool,
}

/// Invokes a function as [`Function::call`] does, from a task that may outlive the borrow of
/// the function (the [`InvokeApi`](super::runtime::InvokeApi)'s).
#[derive(Clone)]
pub struct Caller(Arc<Pool>);

impl Function {
    pub async fn start(
        launcher: &Launcher,
        binary: &str,
        env: Vec<(&'static str, String)>,
        processes: usize,
    ) -> Self {
        let emulator = Emulator::start(launcher.ledger.clone());
        let pool = Arc::new(Pool {
            binary: binary.to_owned(),
            runtime: emulator.handle(),
            processes: Mutex::new(Vec::new()),
            spawned: AtomicUsize::new(0),
            env,
            launcher: launcher.clone(),
            closed: AtomicBool::new(false),
        });
        let mut f = Self {
            binary: binary.to_owned(),
            emulator,
            pool,
        };
        for _ in 0..processes {
            f.add_process();
        }
        f.wait_ready(processes).await;
        f
    }

    /// Processes started so far, replacements for killed ones included.
    pub fn spawned(&self) -> usize {
        self.pool.spawned.load(Ordering::SeqCst)
    }

    /// The names of the processes running now.
    pub fn process_names(&self) -> Vec<String> {
        let processes = self.pool.processes.lock().unwrap();
        processes.iter().map(|p| p.name.clone()).collect()
    }

    /// One more process (a cold start), named `{binary}-{sequence}`: its log file, its
    /// runtime API address and its database `application_name`.
    pub fn add_process(&self) {
        self.pool.add_process();
    }

    /// Waits until `n` processes polled at least once more than before (ready).
    pub async fn wait_ready(&mut self, n: usize) {
        let ok = self
            .emulator
            .wait_polls(n as u64, Duration::from_secs(60))
            .await;
        assert!(
            ok,
            "{}: {} processes did not come up within 60 s; init errors: {:?}",
            self.binary,
            n,
            self.emulator.init_errors()
        );
    }

    /// Invokes with `timeout` as the deadline, as Lambda does: an invocation that has not
    /// answered by then (with [`DEADLINE_GRACE`] for the emulator's own latency) is ended,
    /// its process killed whatever it was doing (a statement in flight, a completion half
    /// written), and a fresh process takes its place for the next invocation. `None` then.
    pub async fn call(&self, event: &[u8], timeout: Duration) -> Option<Outcome> {
        self.caller().call(event, timeout).await
    }

    /// What invokes this function from a task of its own.
    pub fn caller(&self) -> Caller {
        Caller(self.pool.clone())
    }

    /// SIGKILLs the process named `process` (as when Lambda loses an environment mid
    /// invocation) and forgets it; whether it was one of this function's. No process takes
    /// its place unless [`Function::add_process`] starts one.
    pub async fn kill(&self, process: &str) -> bool {
        let killed = {
            let mut processes = self.pool.processes.lock().unwrap();
            let at = processes.iter().position(|p| p.name == process);
            at.map(|i| processes.remove(i))
        };
        match killed {
            Some(mut p) => {
                p.kill9().await;
                true
            }
            None => false,
        }
    }

    pub async fn kill_all(&mut self) {
        let processes: Vec<Process> = self.pool.processes.lock().unwrap().drain(..).collect();
        for mut p in processes {
            p.kill9().await;
        }
    }

    pub fn alive(&mut self) -> usize {
        let mut n = 0;
        for p in self.pool.processes.lock().unwrap().iter_mut() {
            if p.alive() {
                n += 1;
            }
        }
        n
    }
}

impl Drop for Function {
    /// Its processes are killed now, also while a [`Caller`] still waits on one of them.
    fn drop(&mut self) {
        self.pool.closed.store(true, Ordering::SeqCst);
        let processes: Vec<Process> = self.pool.processes.lock().unwrap().drain(..).collect();
        drop(processes);
    }
}

impl Pool {
    fn add_process(&self) {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        self.spawned.fetch_add(1, Ordering::SeqCst);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-{seq:04}", self.binary);
        let runtime_api = self.runtime.endpoint_for(&name);
        let env: Vec<(&str, String)> = self
            .env
            .iter()
            .map(|(k, v)| match *k {
                "DATABASE_URL" => (*k, with_application_name(v, &name)),
                _ => (*k, v.clone()),
            })
            .collect();
        let p = self.launcher.spawn(&self.binary, &runtime_api, &env, &name);
        self.processes.lock().unwrap().push(p);
    }
}

impl Caller {
    /// Queues one event with `timeout` as its deadline from now (see [`Caller::finish`]).
    pub fn invoke(&self, event: &[u8], timeout: Duration) -> Invocation {
        self.0.runtime.invoke(event, timeout)
    }

    /// Waits for a queued invocation's outcome and ends it at its deadline, as
    /// [`Function::call`] does.
    pub async fn finish(&self, inv: Invocation, timeout: Duration) -> Option<Outcome> {
        let id = inv.id.clone();
        if let Ok(Ok(outcome)) = tokio::time::timeout(timeout + DEADLINE_GRACE, inv.done).await {
            return Some(outcome);
        }
        self.0.runtime.forget(&id);
        let ledger = &self.0.launcher.ledger;
        if let Some(name) = ledger.running(&id) {
            ledger.timed_out(&id);
            let killed = {
                let mut processes = self.0.processes.lock().unwrap();
                let at = processes.iter().position(|p| p.name == name);
                at.map(|i| processes.remove(i))
            };
            if let Some(mut process) = killed {
                process.kill_now();
                self.0.add_process();
            }
        }
        None
    }

    /// [`Function::call`].
    pub async fn call(&self, event: &[u8], timeout: Duration) -> Option<Outcome> {
        let inv = self.invoke(event, timeout);
        self.finish(inv, timeout).await
    }
}

/// How long after its deadline an invocation's answer is still taken: the emulator's own
/// latency (a process's answer crosses a local socket and a task or two).
pub const DEADLINE_GRACE: Duration = Duration::from_millis(250);

/// A `postgres://` URL whose sessions carry `name` as their `application_name`.
pub fn with_application_name(url: &str, name: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={name}")
}

/// Where tests/scripts/faults.sh puts the mutants' workers, one folder per patch:
/// `target/faults-mutants` beside the workspace, or `FAULTS_MUTANT_DIR`.
pub fn default_mutant_dir(root: &Path) -> PathBuf {
    std::env::var_os("FAULTS_MUTANT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/faults-mutants"))
}

/// `target/debug` beside the workspace, or `FAULTS_BIN_DIR`.
pub fn default_bin_dir(root: &Path) -> PathBuf {
    std::env::var_os("FAULTS_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/debug"))
}
