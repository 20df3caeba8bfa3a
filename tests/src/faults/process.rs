//! Function binaries as child processes, each polling an [`Emulator`] at an address of its
//! own and connecting to PostgreSQL under its own `application_name` (its log name), with
//! stdout and stderr appended to a log file the suite greps afterwards. The process name
//! ties a claim the database logged to the invocation the [`Ledger`] says ran it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::runtime::{Emulator, Ledger, Outcome};

/// Where the binaries are and what every process gets in its environment.
#[derive(Clone, Debug)]
pub struct Launcher {
    pub bin_dir: PathBuf,
    /// The worker to run instead of `bin_dir`'s while a code mutant runs (see
    /// [`crate::faults::scenarios::Mutant`]).
    pub mutant_worker: Option<PathBuf>,
    /// Where the mutants' workers are, one folder per patch ([`default_mutant_dir`]).
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
    /// Where `binary` is run from: the mutant's worker while one runs, else `bin_dir`.
    pub fn path_of(&self, binary: &str) -> PathBuf {
        match &self.mutant_worker {
            Some(path) if binary == "worker" => path.clone(),
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
    processes: std::sync::Mutex<Vec<Process>>,
    spawned: std::sync::atomic::AtomicUsize,
    env: Vec<(&'static str, String)>,
    launcher: Launcher,
}

impl Function {
    pub async fn start(
        launcher: &Launcher,
        binary: &str,
        env: Vec<(&'static str, String)>,
        processes: usize,
    ) -> Self {
        let emulator = Emulator::start(launcher.ledger.clone());
        let mut f = Self {
            binary: binary.to_owned(),
            emulator,
            processes: std::sync::Mutex::new(Vec::new()),
            spawned: std::sync::atomic::AtomicUsize::new(0),
            env,
            launcher: launcher.clone(),
        };
        for _ in 0..processes {
            f.add_process();
        }
        f.wait_ready(processes).await;
        f
    }

    /// Processes started so far, replacements for killed ones included.
    pub fn spawned(&self) -> usize {
        self.spawned.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The names of the processes running now.
    pub fn process_names(&self) -> Vec<String> {
        let processes = self.processes.lock().unwrap();
        processes.iter().map(|p| p.name.clone()).collect()
    }

    /// One more process (a cold start), named `{binary}-{sequence}`: its log file, its
    /// runtime API address and its database `application_name`.
    pub fn add_process(&self) {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        self.spawned
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{}-{seq:04}", self.binary);
        let runtime_api = self.emulator.endpoint_for(&name);
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
        let inv = self.emulator.invoke(event, timeout);
        let id = inv.id.clone();
        if let Ok(Ok(outcome)) = tokio::time::timeout(timeout + DEADLINE_GRACE, inv.done).await {
            return Some(outcome);
        }
        self.emulator.forget(&id);
        if let Some(name) = self.launcher.ledger.running(&id) {
            self.launcher.ledger.timed_out(&id);
            let killed = {
                let mut processes = self.processes.lock().unwrap();
                let at = processes.iter().position(|p| p.name == name);
                at.map(|i| processes.remove(i))
            };
            if let Some(mut process) = killed {
                process.kill_now();
                self.add_process();
            }
        }
        None
    }

    pub async fn kill_all(&mut self) {
        let processes: Vec<Process> = self.processes.get_mut().unwrap().drain(..).collect();
        for mut p in processes {
            p.kill9().await;
        }
    }

    pub fn alive(&mut self) -> usize {
        let mut n = 0;
        for p in self.processes.get_mut().unwrap().iter_mut() {
            if p.alive() {
                n += 1;
            }
        }
        n
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
