//! The functions served by the real `cargo lambda watch`, as a user runs them: started either
//! straight (`cargo lambda watch --env-file …`) or through `make watch`, driven over HTTP
//! (its function-URL emulation, `/lambda-url/<function>/…`) and with `cargo lambda invoke`.
//!
//! cargo-lambda comes from PyPI into `.venv-tools` (`make test` installs it:
//! `tests/scripts/tools.sh`, `tools_install cargo-lambda`); a test that needs it and cannot
//! find it fails and says so. `cargo lambda watch` compiles a function on its first call with
//! `cargo run --bin <function>` over the whole workspace; [`prebuild`] builds the five
//! binaries the same way first, so that call only checks they are fresh.
//!
//! Each [`Watch`] runs in a process group of its own; dropping it (also when the test
//! panics) stops that group and every process it started (the function processes run in
//! groups of their own, so they are found by parentage before anything is stopped).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Instances of each function a waking watch runs at once ([`Watch::start_waking`]), as
/// `make watch` runs them (`WATCH_CONCURRENCY`).
pub const WAKING_CONCURRENCY: u32 = 2;

/// The first call of each function may compile it.
pub const FIRST_CALL: Duration = Duration::from_secs(600);
/// Any later call.
pub const CALL: Duration = Duration::from_secs(120);

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// The cargo-lambda executable: `bin/cargo-lambda` in `TOOLS_VENV` (as in
/// `tests/scripts/tools.sh`; default `.venv-tools`), else one on `PATH`. Panics (the test
/// fails) when there is none.
pub fn cargo_lambda() -> PathBuf {
    let venv = std::env::var_os("TOOLS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-tools"));
    let local = venv.join("bin/cargo-lambda");
    if local.is_file() {
        return local;
    }
    if let Some(found) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("cargo-lambda"))
            .find(|candidate| candidate.is_file())
    }) {
        return found;
    }
    panic!(
        "cargo-lambda is not installed, and this test runs the functions under the real \
         `cargo lambda watch`. `make test` installs it into .venv-tools; by hand: \
         `. tests/scripts/tools.sh && tools_install cargo-lambda` (from PyPI)"
    );
}

/// `PATH` with cargo-lambda's folder first (cargo finds the `lambda` subcommand there).
fn path_with_tools() -> std::ffi::OsString {
    let tools = cargo_lambda()
        .parent()
        .expect("cargo-lambda is in a folder")
        .to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(tools).chain(std::env::split_paths(&rest)))
        .expect("a valid PATH")
}

/// Builds ingest, worker, sweeper and feedback as `cargo lambda watch` will (`cargo run --bin …`
/// in the workspace, so with the same features), once per test binary.
pub fn prebuild() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let started = Instant::now();
        let status = std::process::Command::new(cargo)
            .current_dir(root())
            .args([
                "build", "--bin", "ingest", "--bin", "worker", "--bin", "sweeper", "--bin",
                "feedback", "--bin", "token",
            ])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build of the functions failed");
        eprintln!(
            "watch: functions built in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    });
}

/// A free local port (bound and released: another process could take it first, rarely).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// What `cargo lambda invoke` printed, and whether the invocation succeeded.
#[derive(Debug)]
pub struct Invoked {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// A running `cargo lambda watch` (started straight or by `make watch`).
pub struct Watch {
    pub port: u16,
    /// The folder with its log (`watch.log`) and settings.
    pub dir: PathBuf,
    child: std::process::Child,
    /// Runs when the watch is stopped, after its processes (e.g. `make stand-in/down`).
    on_stop: Option<std::process::Command>,
}

impl Watch {
    /// `cargo lambda watch` on 127.0.0.1 and a free port, with `env` (and nothing of this
    /// process's database or AWS settings) passed to the functions in an `--env-file`.
    pub async fn start(env: &[(&str, String)]) -> Self {
        Self::start_with(env, false).await
    }

    /// [`Watch::start`] with ingest waking the worker through watch's own invoke API, as
    /// `make watch` sets it up: `WORKER_FUNCTION_NAME=worker`, `AWS_ENDPOINT_URL_LAMBDA` this
    /// watch's address, and two instances a function (`--concurrency 2`, the fleet's
    /// `WORKER_MAX_INVOCATIONS`).
    pub async fn start_waking(env: &[(&str, String)]) -> Self {
        Self::start_with(env, true).await
    }

    async fn start_with(env: &[(&str, String)], wake: bool) -> Self {
        let cargo_lambda = cargo_lambda();
        prebuild();
        let port = free_port();
        let mut env = env.to_vec();
        if wake {
            env.extend([
                ("WORKER_FUNCTION_NAME", "worker".to_owned()),
                (
                    "AWS_ENDPOINT_URL_LAMBDA",
                    format!("http://127.0.0.1:{port}"),
                ),
                ("WORKER_MAX_INVOCATIONS", WAKING_CONCURRENCY.to_string()),
            ]);
        }
        let dir = scratch_dir("watch");
        let env_file = dir.join("watch.env");
        let text: String = env
            .iter()
            .map(|(k, v)| {
                assert!(
                    !v.contains('\''),
                    "{k}: a value with a ' cannot go in the env file"
                );
                format!("{k}='{v}'\n")
            })
            .collect();
        std::fs::write(&env_file, text).unwrap();
        let mut cmd = std::process::Command::new(cargo_lambda);
        cmd.arg("lambda")
            .arg("watch")
            .args(["--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &port.to_string()])
            .arg("--ignore-changes")
            .args([
                "--concurrency",
                &if wake { WAKING_CONCURRENCY } else { 1 }.to_string(),
            ])
            .arg("--env-file")
            .arg(&env_file);
        for var in INHERITED_SETTINGS {
            cmd.env_remove(var);
        }
        Self::spawn(cmd, port, dir, None).await
    }

    /// `make watch` with `env` on top of this process's environment less `remove` (`env`
    /// names `WATCH_PORT`). Its state (`NOTIF_STATE`) is a folder of its own; when the watch
    /// is stopped, `make stand-in/down db/down` stops what it started there.
    pub async fn make(env: &[(&str, String)], remove: &[&str]) -> Self {
        cargo_lambda();
        prebuild();
        let port: u16 = env
            .iter()
            .find(|(k, _)| *k == "WATCH_PORT")
            .map(|(_, v)| v.parse().expect("WATCH_PORT is a port"))
            .expect("make watch needs WATCH_PORT");
        let dir = scratch_dir("make-watch");
        let state = dir.join("state");
        let mut cmd = std::process::Command::new("make");
        cmd.arg("--no-print-directory").arg("watch");
        for var in remove.iter().chain(OUTER_MAKE) {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.env("NOTIF_STATE", &state);
        let mut down = std::process::Command::new("make");
        for var in OUTER_MAKE {
            down.env_remove(var);
        }
        down.args(["--no-print-directory", "stand-in/down", "db/down"])
            .env("NOTIF_STATE", &state)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Self::spawn(cmd, port, dir, Some(down)).await
    }

    /// Starts `cmd` (from the workspace root, in a process group of its own, output to
    /// `dir/watch.log`) and waits until `port` accepts connections.
    async fn spawn(
        mut cmd: std::process::Command,
        port: u16,
        dir: PathBuf,
        on_stop: Option<std::process::Command>,
    ) -> Self {
        use std::os::unix::process::CommandExt;
        let log = std::fs::File::create(dir.join("watch.log")).unwrap();
        cmd.current_dir(root())
            .env("PATH", path_with_tools())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        let mut watch = Self {
            port,
            dir,
            child,
            on_stop,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                break;
            }
            if let Ok(Some(status)) = watch.child.try_wait() {
                panic!(
                    "cargo lambda watch exited ({status}) before serving; its log:\n{}",
                    watch.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "cargo lambda watch did not listen on 127.0.0.1:{port} within 120 s; its log:\n{}",
                watch.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        watch
    }

    /// Everything watch (and the functions) printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("watch.log")).unwrap_or_default()
    }

    /// The last `n` lines of the log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// An HTTP request to the function URL of `function` (`path` starts with `/`). Every
    /// answer of `ingest` is checked against the API contract
    /// ([`crate::contract::assert_reply_conforms`]).
    pub async fn request(
        &self,
        method: &str,
        function: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
        timeout: Duration,
    ) -> Reply {
        let target = format!("/lambda-url/{function}{path}");
        match tokio::time::timeout(
            timeout,
            http(self.port, method, &target, headers, body.unwrap_or("")),
        )
        .await
        {
            Ok(Ok(reply)) => {
                if function == "ingest" {
                    crate::contract::assert_reply_conforms(method, path, &reply);
                }
                reply
            }
            Ok(Err(e)) => panic!("{method} {target}: {e}; watch log:\n{}", self.log_tail(40)),
            Err(_) => panic!(
                "{method} {target}: no answer within {timeout:?}; watch log:\n{}",
                self.log_tail(40)
            ),
        }
    }

    /// `cargo lambda invoke FUNCTION --invoke-address 127.0.0.1 --invoke-port PORT
    /// --data-file DATA_FILE` (relative to the workspace root): the function's JSON answer.
    pub async fn invoke(&self, function: &str, data_file: &str, timeout: Duration) -> Value {
        let output = self.invoke_raw(function, data_file, timeout).await;
        assert!(
            output.success,
            "cargo lambda invoke {function} failed: {output:?}; watch log:\n{}",
            self.log_tail(40)
        );
        serde_json::from_str(output.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "cargo lambda invoke {function}: not JSON ({e}): {}",
                output.stdout
            )
        })
    }

    /// The same, whatever the function answers: a failed invocation too.
    pub async fn invoke_raw(&self, function: &str, data_file: &str, timeout: Duration) -> Invoked {
        let mut cmd = tokio::process::Command::new(cargo_lambda());
        cmd.current_dir(root())
            .env("PATH", path_with_tools())
            .args(["lambda", "invoke", function])
            .args(["--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &self.port.to_string()])
            .args(["--data-file", data_file])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let output = match tokio::time::timeout(timeout, cmd.output()).await {
            Ok(output) => output.expect("run cargo lambda invoke"),
            Err(_) => panic!(
                "cargo lambda invoke {function}: no answer within {timeout:?}; watch log:\n{}",
                self.log_tail(40)
            ),
        };
        Invoked {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Stops watch and every process it started; runs `on_stop`.
    fn stop(&mut self) {
        let leader = self.child.id();
        let mut all = descendants(leader);
        all.push(leader);
        let _ = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{leader}")])
            .stderr(Stdio::null())
            .status();
        signal(&all, "-TERM");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && all.iter().any(|pid| alive(*pid)) {
            let _ = self.child.try_wait();
            std::thread::sleep(Duration::from_millis(100));
        }
        signal(&all, "-KILL");
        let _ = self.child.wait();
        if let Some(mut cmd) = self.on_stop.take() {
            let _ = cmd.current_dir(root()).status();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop();
        // how much watch had to build itself (the prebuild should leave it nothing)
        let log = self.log();
        let compiled: Vec<&str> = log
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Compiling "))
            .collect();
        eprintln!(
            "watch: stopped; it compiled {} crate(s){}",
            compiled.len(),
            if compiled.is_empty() {
                String::new()
            } else {
                format!(": {}", compiled.join(", "))
            }
        );
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("watch: log kept in {}", self.dir.display());
        }
    }
}

/// What an outer `make` (`make test`) leaves in the environment: a `make` run from a test
/// would say "Entering directory" and share its jobserver, unlike one run from a shell.
pub const OUTER_MAKE: &[&str] = &["MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"];

/// This process's settings a function must not pick up by accident: the test server's
/// admin database, the pooler of the second pass.
const INHERITED_SETTINGS: &[&str] = &["DATABASE_URL", "TEST_POOLER_URL", "DATABASE_CA_FILE"];

/// A new folder under the system's temp folder.
pub fn scratch_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "notif-{prefix}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every live process below `pid` (children, their children, …), from `/proc`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // "pid (comm) state ppid …": comm may hold spaces and parentheses
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(parent) = after
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<u32>().ok())
            {
                children.entry(parent).or_default().push(child);
            }
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(p) = queue.pop() {
        for c in children.get(&p).into_iter().flatten() {
            found.push(*c);
            queue.push(*c);
        }
    }
    found
}

fn alive(pid: u32) -> bool {
    // a zombie still has /proc/<pid>; its state letter says it is gone
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

fn signal(pids: &[u32], sig: &str) {
    let live: Vec<String> = pids
        .iter()
        .filter(|p| alive(**p))
        .map(u32::to_string)
        .collect();
    if !live.is_empty() {
        let _ = std::process::Command::new("kill")
            .arg(sig)
            .args(&live)
            .stderr(Stdio::null())
            .status();
    }
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics, showing it, when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// One HTTP/1.1 request on a connection of its own (`Connection: close`).
pub async fn http(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    parse_reply(&raw).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn parse_reply(raw: &[u8]) -> Result<Reply, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP answer: {}", String::from_utf8_lossy(raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line: {status_line}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk size line")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size {
            return Err("a short chunk".into());
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_parsed_plain_and_chunked() {
        let plain = parse_reply(
            b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nLocation: /n/1\r\n\r\n{\"a\":1}",
        )
        .unwrap();
        assert_eq!(plain.status, 202);
        assert_eq!(plain.header("location"), Some("/n/1"));
        assert_eq!(plain.json()["a"], 1);
        let chunked = parse_reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:2}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(chunked.body, "{\"a\":2}");
    }
}
