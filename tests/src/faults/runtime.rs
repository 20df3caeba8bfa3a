//! A minimal Lambda Runtime API emulator: the HTTP server a function binary built on
//! lambda_runtime talks to (`AWS_LAMBDA_RUNTIME_API`). It hands out events on
//! `GET /2018-06-01/runtime/invocation/next` and collects what the function answers on
//! `…/invocation/{id}/response` and `…/invocation/{id}/error`.
//!
//! Any number of processes may poll one emulator: each takes the next queued event, as
//! concurrent execution environments of one function do in Lambda. A poll whose process
//! died (its socket closed) gives its event back. Each process polls an address of its own
//! ([`Emulator::endpoint_for`]), so the [`Ledger`] knows which process ran which
//! invocation, from when to when: the fault suite's record of who could hold a claim.
//!
//! Beside it, [`InvokeApi`] is Lambda's `Invoke` API (`POST /2015-03-31/functions/{name}/
//! invocations`), so the real binaries start workers as they do on AWS (ingest's wake, a
//! worker's fan-out and hand-off, through aws-sdk-lambda): an `Event` invocation is queued for
//! the named function's processes and answered 202 at once, and the ledger records it as a
//! wake's. Or, on the scenario's word, it fails as Lambda fails (500 `ServiceException`, 429
//! `TooManyRequestsException`), loses the wake (202, never queued), or never answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use super::process::{Caller, Function};

/// How an invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Response,
    Error,
    /// Its process was killed (SIGKILL) before it answered.
    Killed,
    /// It outlived its deadline, and its process was killed then, as Lambda does.
    TimedOut,
}

/// One invocation as one process ran it: from the moment the emulator handed the event over
/// (before the process could start on it) to the moment its answer arrived or its process
/// was killed (after the process could do anything more). `ended` is `None` while it runs.
#[derive(Debug, Clone)]
pub struct Span {
    pub invocation: String,
    pub process: String,
    pub picked: DateTime<Utc>,
    pub ended: Option<(DateTime<Utc>, Ending)>,
}

/// Every invocation of every emulator that shares it (the suite has one), and which of them
/// a wake started through the [`InvokeApi`].
#[derive(Debug, Clone, Default)]
pub struct Ledger(Arc<Mutex<Records>>);

#[derive(Debug, Default)]
struct Records {
    spans: HashMap<String, Span>,
    /// Invocation → the reason its wake gave (`accepted`, `backlog`, `hand_off`, …).
    woken: HashMap<String, String>,
}

impl Ledger {
    fn picked(&self, invocation: &str, process: &str) {
        let span = Span {
            invocation: invocation.to_owned(),
            process: process.to_owned(),
            picked: Utc::now(),
            ended: None,
        };
        self.0
            .lock()
            .unwrap()
            .spans
            .insert(invocation.to_owned(), span);
    }

    /// The event never reached the process (it died first): it is queued again.
    fn unpicked(&self, invocation: &str) {
        self.0.lock().unwrap().spans.remove(invocation);
    }

    fn ended(&self, invocation: &str, how: Ending) {
        if let Some(span) = self.0.lock().unwrap().spans.get_mut(invocation) {
            span.ended.get_or_insert((Utc::now(), how));
        }
    }

    /// `invocation` was started by a wake, for `reason`.
    fn woke(&self, invocation: &str, reason: &str) {
        self.0
            .lock()
            .unwrap()
            .woken
            .insert(invocation.to_owned(), reason.to_owned());
    }

    /// Ends every running invocation of `process`: it was killed.
    pub fn process_died(&self, process: &str) {
        let now = Utc::now();
        for span in self.0.lock().unwrap().spans.values_mut() {
            if span.process == process && span.ended.is_none() {
                span.ended = Some((now, Ending::Killed));
            }
        }
    }

    /// The process running `invocation`, while it runs.
    pub fn running(&self, invocation: &str) -> Option<String> {
        let records = self.0.lock().unwrap();
        let span = records.spans.get(invocation)?;
        span.ended.is_none().then(|| span.process.clone())
    }

    /// Ends `invocation` as Lambda ends one that outlived its deadline: its process killed
    /// (SIGKILL) now.
    pub fn timed_out(&self, invocation: &str) {
        if let Some(span) = self.0.lock().unwrap().spans.get_mut(invocation) {
            span.ended.get_or_insert((Utc::now(), Ending::TimedOut));
        }
    }

    /// Every invocation so far.
    pub fn spans(&self) -> Vec<Span> {
        self.0.lock().unwrap().spans.values().cloned().collect()
    }

    /// Why a wake started `invocation` (the reason in its event: `accepted`, `backlog`,
    /// `hand_off`, …); `None` for one the suite queued itself (the schedule's, a request).
    pub fn wake_reason(&self, invocation: &str) -> Option<String> {
        self.0.lock().unwrap().woken.get(invocation).cloned()
    }
}

/// What a function answered for one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `POST …/response`: the handler's result.
    Response(Vec<u8>),
    /// `POST …/error`: the handler failed (Lambda reports a function error).
    Error(Vec<u8>),
}

struct Queued {
    id: String,
    event: Vec<u8>,
    deadline_ms: u64,
    picked: Option<oneshot::Sender<()>>,
}

struct Inner {
    tx: mpsc::UnboundedSender<Queued>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Queued>>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    polls: AtomicU64,
    polled: Notify,
    init_errors: Mutex<Vec<String>>,
    ledger: Ledger,
    /// One listener per process.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The [`Emulator`] was dropped: no process is listened to any more.
    closed: AtomicBool,
}

/// One emulated function endpoint.
pub struct Emulator {
    handle: EmulatorHandle,
}

/// What may outlive a borrow of the [`Emulator`]: queueing events and listening to one more
/// process, for the invocations the [`InvokeApi`] starts and waits for in tasks of its own.
#[derive(Clone)]
pub struct EmulatorHandle(Arc<Inner>);

/// A queued invocation: learn when a process picked it up, then its outcome.
pub struct Invocation {
    pub id: String,
    pub picked: oneshot::Receiver<()>,
    pub done: oneshot::Receiver<Outcome>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Emulator {
    /// An emulator whose invocations are recorded in `ledger`.
    pub fn start(ledger: Ledger) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            tx,
            rx: tokio::sync::Mutex::new(rx),
            waiting: Mutex::new(HashMap::new()),
            polls: AtomicU64::new(0),
            polled: Notify::new(),
            init_errors: Mutex::new(Vec::new()),
            ledger,
            tasks: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        });
        Self {
            handle: EmulatorHandle(inner),
        }
    }

    /// A handle that queues events and listens to processes, for tasks that may outlive
    /// this borrow.
    pub fn handle(&self) -> EmulatorHandle {
        self.handle.clone()
    }

    /// `AWS_LAMBDA_RUNTIME_API` for one process polling this emulator: an address of its
    /// own, so the invocations it takes are recorded as `process`'s.
    pub fn endpoint_for(&self, process: &str) -> String {
        self.handle.endpoint_for(process)
    }

    /// Queues one event with `timeout` as the invocation's deadline from now.
    pub fn invoke(&self, event: &[u8], timeout: Duration) -> Invocation {
        self.handle.invoke(event, timeout)
    }

    /// Invokes and waits for the outcome; `None` when none came within `wait`.
    pub async fn call(&self, event: &[u8], timeout: Duration, wait: Duration) -> Option<Outcome> {
        let inv = self.invoke(event, timeout);
        let outcome = tokio::time::timeout(wait, inv.done).await.ok()?.ok();
        if outcome.is_none() {
            self.forget(&inv.id);
        }
        outcome
    }

    /// Stops waiting for an invocation (its process was killed).
    pub fn forget(&self, id: &str) {
        self.handle.forget(id);
    }

    /// How many `next` polls arrived so far (a process is ready once it polls).
    pub fn polls(&self) -> u64 {
        self.handle.0.polls.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` polls arrived, up to `wait`.
    pub async fn wait_polls(&self, n: u64, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.handle.0.polled.notified();
            if self.polls() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.polls() >= n;
            }
        }
    }

    /// Init errors the functions reported.
    pub fn init_errors(&self) -> Vec<String> {
        self.handle.0.init_errors.lock().unwrap().clone()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let inner = &self.handle.0;
        inner.closed.store(true, Ordering::SeqCst);
        for task in inner.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl EmulatorHandle {
    /// See [`Emulator::endpoint_for`]. Once the emulator is dropped, nothing listens there:
    /// a process started on it fails at its first poll.
    pub fn endpoint_for(&self, process: &str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("local address").port();
        if !self.0.closed.load(Ordering::SeqCst) {
            let listener = TcpListener::from_std(listener).expect("register the listener");
            let task = tokio::spawn(accept(listener, self.0.clone(), process.to_owned()));
            self.0.tasks.lock().unwrap().push(task);
        }
        format!("127.0.0.1:{port}")
    }

    /// See [`Emulator::invoke`].
    pub fn invoke(&self, event: &[u8], timeout: Duration) -> Invocation {
        let id = format!(
            "faults-{:08}-{}",
            NEXT_ID.fetch_add(1, Ordering::Relaxed),
            uuid::Uuid::new_v4().simple()
        );
        let deadline_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + timeout.as_millis() as u64;
        let (picked_tx, picked) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        self.0.waiting.lock().unwrap().insert(id.clone(), done_tx);
        let _ = self.0.tx.send(Queued {
            id: id.clone(),
            event: event.to_vec(),
            deadline_ms,
            picked: Some(picked_tx),
        });
        Invocation { id, picked, done }
    }

    /// See [`Emulator::forget`].
    pub fn forget(&self, id: &str) {
        self.0.waiting.lock().unwrap().remove(id);
    }
}

async fn accept(listener: TcpListener, inner: Arc<Inner>, process: String) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(serve(stream, inner.clone(), process.clone()));
        while connections.try_join_next().is_some() {}
    }
}

struct HttpRequest {
    method: String,
    path: String,
    /// Names in lower case.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpRequest {
    /// The first value of the header `name` (lower case).
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one HTTP/1.1 request (Content-Length or chunked body); `None` at end of stream.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<HttpRequest> {
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > 1 << 20 {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let mut length = 0usize;
    let mut chunked = false;
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            length = value.parse().ok()?;
        } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
        headers.push((name, value.to_owned()));
    }
    let body = if chunked {
        let mut body = Vec::new();
        loop {
            let line_end =
                fill_until(stream, buf, |b| b.windows(2).position(|w| w == b"\r\n")).await?;
            let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            buf.drain(..line_end + 2);
            fill_until(stream, buf, |b| (b.len() >= size + 2).then_some(size)).await?;
            body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
            if size == 0 {
                break body;
            }
        }
    } else {
        fill_until(stream, buf, |b| (b.len() >= length).then_some(length)).await?;
        buf.drain(..length).collect()
    };
    Some(HttpRequest {
        method,
        path,
        headers,
        body,
    })
}

async fn fill_until(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    done: impl Fn(&[u8]) -> Option<usize>,
) -> Option<usize> {
    loop {
        if let Some(v) = done(buf) {
            return Some(v);
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await
}

/// Resolves when the peer closed the connection (or sent something unexpected).
async fn closed(stream: &mut TcpStream) {
    let mut byte = [0u8; 1];
    let _ = stream.peek(&mut byte).await;
}

/// One process's connection: requests until it closes.
async fn serve(mut stream: TcpStream, inner: Arc<Inner>, process: String) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut stream, &mut buf).await {
        let path = req.path.trim_start_matches("/2018-06-01/runtime");
        let ok = if req.method == "GET" && path == "/invocation/next" {
            next_invocation(&mut stream, &inner, &process).await
        } else if req.method == "POST" && path.starts_with("/invocation/") {
            let rest = &path["/invocation/".len()..];
            let (id, kind) = rest.rsplit_once('/').unwrap_or((rest, ""));
            let outcome = match kind {
                "response" => Some(Outcome::Response(req.body)),
                "error" => Some(Outcome::Error(req.body)),
                _ => None,
            };
            match outcome {
                Some(outcome) => answered(&mut stream, &inner, id, outcome).await,
                None => not_found(&mut stream).await,
            }
        } else if req.method == "POST" && path == "/init/error" {
            inner
                .init_errors
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&req.body).into_owned());
            accepted(&mut stream).await
        } else {
            not_found(&mut stream).await
        };
        if !ok {
            return;
        }
    }
}

/// `GET …/invocation/next`: waits for the next queued event and hands it to `process`;
/// false when the process went away (the event is queued again).
async fn next_invocation(stream: &mut TcpStream, inner: &Inner, process: &str) -> bool {
    inner.polls.fetch_add(1, Ordering::SeqCst);
    inner.polled.notify_waiters();
    let mut rx = tokio::select! {
        rx = inner.rx.lock() => rx,
        _ = closed(stream) => return false,
    };
    let queued = tokio::select! {
        q = rx.recv() => q,
        _ = closed(stream) => return false,
    };
    drop(rx);
    let Some(mut queued) = queued else {
        return false;
    };
    let headers = [
        ("content-type", "application/json".to_owned()),
        ("lambda-runtime-aws-request-id", queued.id.clone()),
        ("lambda-runtime-deadline-ms", queued.deadline_ms.to_string()),
        (
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:123456789012:function:faults".to_owned(),
        ),
        (
            "lambda-runtime-trace-id",
            "Root=1-00000000-000000000000000000000000;Sampled=0".to_owned(),
        ),
    ];
    // recorded before the process can start on it
    inner.ledger.picked(&queued.id, process);
    if respond(stream, "200 OK", &headers, &queued.event)
        .await
        .is_err()
    {
        // the process is gone: give the event back
        inner.ledger.unpicked(&queued.id);
        let _ = inner.tx.send(queued);
        return false;
    }
    if let Some(picked) = queued.picked.take() {
        let _ = picked.send(());
    }
    true
}

/// `POST …/invocation/{id}/response` or `…/error`.
async fn answered(stream: &mut TcpStream, inner: &Inner, id: &str, outcome: Outcome) -> bool {
    let how = match outcome {
        Outcome::Response(_) => Ending::Response,
        Outcome::Error(_) => Ending::Error,
    };
    inner.ledger.ended(id, how);
    if let Some(tx) = inner.waiting.lock().unwrap().remove(id) {
        let _ = tx.send(outcome);
    }
    accepted(stream).await
}

async fn accepted(stream: &mut TcpStream) -> bool {
    respond(stream, "202 Accepted", &[], br#"{"status":"OK"}"#)
        .await
        .is_ok()
}

async fn not_found(stream: &mut TcpStream) -> bool {
    respond(stream, "404 Not Found", &[], b"{}").await.is_ok()
}

/// What the [`InvokeApi`] does with an `Event` invocation from now on
/// ([`InvokeApi::set_fault`]). Each event's fate is fixed by its first request, so the SDK's
/// retries of one wake get the answer its first try got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InvokeFault {
    /// As Lambda does: 202 at once, the event queued for the function's processes.
    None,
    /// 500 `ServiceException`: Lambda failed (the SDK tries again, then gives up).
    Fail,
    /// 429 `TooManyRequestsException`: the function's concurrency or the account's request
    /// rate is spent (the SDK backs off, tries again, then gives up).
    Throttle,
    /// 202, and the event is never queued: a lost wake (Lambda took it; it never ran).
    Lose,
    /// No answer at all: the request is held open until the API stops.
    Hang,
}

/// One request the [`InvokeApi`] received.
#[derive(Debug, Clone)]
pub struct InvokeRequest {
    pub at: DateTime<Utc>,
    pub function: String,
    /// The wake's lease and reason, from its event (`{"wake": {"lease", "reason"}}`).
    pub lease: Option<String>,
    pub reason: Option<String>,
    pub fault: InvokeFault,
    /// The HTTP status it was answered; `None` for one held open.
    pub status: Option<u16>,
    /// The invocation it queued.
    pub invocation: Option<String>,
}

struct ApiInner {
    /// Function name → the way to invoke it, and its timeout.
    functions: Mutex<HashMap<String, (Caller, Duration)>>,
    fault: Mutex<InvokeFault>,
    /// Each event's fate, by its bytes (a wake's lease makes each one unique).
    fates: Mutex<HashMap<Vec<u8>, InvokeFault>>,
    requests: Mutex<Vec<InvokeRequest>>,
    /// The invocations it started, each waited for (and ended at its deadline) in a task.
    calls: Mutex<JoinSet<()>>,
    in_flight: AtomicU64,
    settled: Notify,
    ledger: Ledger,
}

/// Lambda's `Invoke` API for the emulated functions: the endpoint the binaries' Lambda client
/// is given (`AWS_ENDPOINT_URL_LAMBDA`). An `Event` invocation of a registered function is
/// queued for its processes and answered 202 at once, as Lambda answers; the invocation gets
/// the function's timeout as its deadline and is ended there as [`Function::call`] ends one,
/// and the [`Ledger`] records it as started by a wake. `RequestResponse` is answered with the
/// function's result; `DryRun` with 204. Stopped (and every invocation it still waits for
/// let go) when dropped.
pub struct InvokeApi {
    inner: Arc<ApiInner>,
    port: u16,
    task: JoinHandle<()>,
}

impl InvokeApi {
    /// Listens on a free local port; invocations are recorded in `ledger`.
    pub fn start(ledger: Ledger) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("local address").port();
        let listener = TcpListener::from_std(listener).expect("register the listener");
        let inner = Arc::new(ApiInner {
            functions: Mutex::new(HashMap::new()),
            fault: Mutex::new(InvokeFault::None),
            fates: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            calls: Mutex::new(JoinSet::new()),
            in_flight: AtomicU64::new(0),
            settled: Notify::new(),
            ledger,
        });
        let task = tokio::spawn(accept_invokes(listener, inner.clone()));
        Self { inner, port, task }
    }

    /// `http://127.0.0.1:{port}`, for `AWS_ENDPOINT_URL_LAMBDA`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Invocations of `name` go to `function`'s processes, each with `timeout` (the
    /// function's Lambda `Timeout`) as its deadline.
    pub fn register(&self, name: &str, function: &Function, timeout: Duration) {
        self.inner
            .functions
            .lock()
            .unwrap()
            .insert(name.to_owned(), (function.caller(), timeout));
    }

    /// What becomes of the events that arrive from now on.
    pub fn set_fault(&self, fault: InvokeFault) {
        *self.inner.fault.lock().unwrap() = fault;
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<InvokeRequest> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// Invocations it started that have not ended yet (answered, killed, or timed out).
    pub fn in_flight(&self) -> u64 {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until every invocation it started has ended, up to `wait`; whether they did.
    pub async fn settled(&self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.settled.notified();
            if self.in_flight() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.in_flight() == 0;
            }
        }
    }
}

impl Drop for InvokeApi {
    fn drop(&mut self) {
        self.task.abort();
        self.inner.calls.lock().unwrap().abort_all();
    }
}

async fn accept_invokes(listener: TcpListener, inner: Arc<ApiInner>) {
    // dropped with this task when the API stops: the connections it holds open close
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        connections.spawn(serve_invokes(stream, inner.clone()));
        while connections.try_join_next().is_some() {}
    }
}

/// One client connection: requests until it closes (or one is held open for good).
async fn serve_invokes(mut stream: TcpStream, inner: Arc<ApiInner>) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut stream, &mut buf).await {
        let path = req.path.split('?').next().unwrap_or_default();
        let function = path
            .strip_prefix("/2015-03-31/functions/")
            .and_then(|rest| rest.strip_suffix("/invocations"));
        let answer = match function {
            Some(name) if req.method == "POST" => invoke(&inner, name, &req).await,
            _ => Some(lambda_error(
                "404 Not Found",
                "UnknownOperationException",
                "User",
                "not an operation of this API",
            )),
        };
        let Some((status, headers, body)) = answer else {
            // held open: never answered
            std::future::pending::<()>().await;
            return;
        };
        let mut headers = headers;
        headers.push(("x-amzn-requestid", uuid::Uuid::new_v4().to_string()));
        if respond(&mut stream, status, &headers, &body).await.is_err() {
            return;
        }
    }
}

type Answer = (&'static str, Vec<(&'static str, String)>, Vec<u8>);

/// Lambda's error answer: `x-amzn-ErrorType` and a JSON body, as the SDK reads them.
fn lambda_error(status: &'static str, code: &str, kind: &str, message: &str) -> Answer {
    let body = serde_json::json!({"Type": kind, "message": message});
    (
        status,
        vec![
            ("x-amzn-errortype", code.to_owned()),
            ("content-type", "application/json".to_owned()),
        ],
        body.to_string().into_bytes(),
    )
}

/// `POST /2015-03-31/functions/{name}/invocations`; `None`: held open, never answered.
async fn invoke(inner: &Arc<ApiInner>, name: &str, req: &HttpRequest) -> Option<Answer> {
    // a name, or an ARN (`…:function:{name}`), either with a `:{qualifier}` or not
    let name = name.replace("%3A", ":").replace("%3a", ":");
    let name = name
        .split_once(":function:")
        .map_or(name.as_str(), |(_, n)| n);
    let name = name.split(':').next().unwrap_or_default().to_owned();
    let target = inner.functions.lock().unwrap().get(&name).cloned();
    let Some((caller, timeout)) = target else {
        return Some(lambda_error(
            "404 Not Found",
            "ResourceNotFoundException",
            "User",
            &format!("Function not found: {name}"),
        ));
    };
    let kind = req
        .header("x-amz-invocation-type")
        .unwrap_or("RequestResponse")
        .to_owned();
    if kind == "DryRun" {
        return Some(("204 No Content", Vec::new(), Vec::new()));
    }
    let fault = {
        let current = *inner.fault.lock().unwrap();
        *inner
            .fates
            .lock()
            .unwrap()
            .entry(req.body.clone())
            .or_insert(current)
    };
    let wake: Option<Value> = serde_json::from_slice::<Value>(&req.body)
        .ok()
        .and_then(|event| event.get("wake").cloned());
    let field = |key: &str| {
        wake.as_ref()
            .and_then(|w| w.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut record = InvokeRequest {
        at: Utc::now(),
        function: name.clone(),
        lease: field("lease"),
        reason: field("reason"),
        fault,
        status: None,
        invocation: None,
    };
    let answer = match (fault, kind.as_str()) {
        (InvokeFault::Hang, _) => None,
        (InvokeFault::Fail, _) => Some(lambda_error(
            "500 Internal Server Error",
            "ServiceException",
            "Service",
            "An error occurred and the request cannot be processed.",
        )),
        (InvokeFault::Throttle, _) => Some(lambda_error(
            "429 Too Many Requests",
            "TooManyRequestsException",
            "User",
            "Rate Exceeded.",
        )),
        (InvokeFault::Lose, "Event") => Some(("202 Accepted", Vec::new(), Vec::new())),
        (_, "Event") => {
            let inv = caller.invoke(&req.body, timeout);
            let reason = record.reason.as_deref().unwrap_or("event");
            inner.ledger.woke(&inv.id, reason);
            record.invocation = Some(inv.id.clone());
            inner.in_flight.fetch_add(1, Ordering::SeqCst);
            let waiter = inner.clone();
            let mut calls = inner.calls.lock().unwrap();
            calls.spawn(async move {
                caller.finish(inv, timeout).await;
                waiter.in_flight.fetch_sub(1, Ordering::SeqCst);
                waiter.settled.notify_waiters();
            });
            while calls.try_join_next().is_some() {}
            Some(("202 Accepted", Vec::new(), Vec::new()))
        }
        (_, "RequestResponse") => {
            let inv = caller.invoke(&req.body, timeout);
            record.invocation = Some(inv.id.clone());
            record.status = Some(200);
            inner.requests.lock().unwrap().push(record.clone());
            return Some(match caller.finish(inv, timeout).await {
                Some(Outcome::Response(body)) => ("200 OK", Vec::new(), body),
                Some(Outcome::Error(body)) => (
                    "200 OK",
                    vec![("x-amz-function-error", "Unhandled".to_owned())],
                    body,
                ),
                None => lambda_error(
                    "500 Internal Server Error",
                    "ServiceException",
                    "Service",
                    "the invocation timed out",
                ),
            });
        }
        _ => Some(lambda_error(
            "400 Bad Request",
            "InvalidParameterValueException",
            "User",
            &format!("unknown X-Amz-Invocation-Type {kind:?}"),
        )),
    };
    record.status = answer
        .as_ref()
        .and_then(|(status, _, _)| status.split(' ').next().and_then(|code| code.parse().ok()));
    inner.requests.lock().unwrap().push(record);
    answer
}
