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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

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

/// Every invocation of every emulator that shares it (the suite has one).
#[derive(Debug, Clone, Default)]
pub struct Ledger(Arc<Mutex<HashMap<String, Span>>>);

impl Ledger {
    fn picked(&self, invocation: &str, process: &str) {
        let span = Span {
            invocation: invocation.to_owned(),
            process: process.to_owned(),
            picked: Utc::now(),
            ended: None,
        };
        self.0.lock().unwrap().insert(invocation.to_owned(), span);
    }

    /// The event never reached the process (it died first): it is queued again.
    fn unpicked(&self, invocation: &str) {
        self.0.lock().unwrap().remove(invocation);
    }

    fn ended(&self, invocation: &str, how: Ending) {
        if let Some(span) = self.0.lock().unwrap().get_mut(invocation) {
            span.ended.get_or_insert((Utc::now(), how));
        }
    }

    /// Ends every running invocation of `process`: it was killed.
    pub fn process_died(&self, process: &str) {
        let now = Utc::now();
        for span in self.0.lock().unwrap().values_mut() {
            if span.process == process && span.ended.is_none() {
                span.ended = Some((now, Ending::Killed));
            }
        }
    }

    /// The process running `invocation`, while it runs.
    pub fn running(&self, invocation: &str) -> Option<String> {
        let spans = self.0.lock().unwrap();
        let span = spans.get(invocation)?;
        span.ended.is_none().then(|| span.process.clone())
    }

    /// Ends `invocation` as Lambda ends one that outlived its deadline: its process killed
    /// (SIGKILL) now.
    pub fn timed_out(&self, invocation: &str) {
        if let Some(span) = self.0.lock().unwrap().get_mut(invocation) {
            span.ended.get_or_insert((Utc::now(), Ending::TimedOut));
        }
    }

    /// Every invocation so far.
    pub fn spans(&self) -> Vec<Span> {
        self.0.lock().unwrap().values().cloned().collect()
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
}

/// One emulated function endpoint.
pub struct Emulator {
    inner: Arc<Inner>,
    /// One listener per process.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

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
        });
        Self {
            inner,
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// `AWS_LAMBDA_RUNTIME_API` for one process polling this emulator: an address of its
    /// own, so the invocations it takes are recorded as `process`'s.
    pub fn endpoint_for(&self, process: &str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("local address").port();
        let listener = TcpListener::from_std(listener).expect("register the listener");
        let task = tokio::spawn(accept(listener, self.inner.clone(), process.to_owned()));
        self.tasks.lock().unwrap().push(task);
        format!("127.0.0.1:{port}")
    }

    /// Queues one event with `timeout` as the invocation's deadline from now.
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
        self.inner
            .waiting
            .lock()
            .unwrap()
            .insert(id.clone(), done_tx);
        let _ = self.inner.tx.send(Queued {
            id: id.clone(),
            event: event.to_vec(),
            deadline_ms,
            picked: Some(picked_tx),
        });
        Invocation { id, picked, done }
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
        self.inner.waiting.lock().unwrap().remove(id);
    }

    /// How many `next` polls arrived so far (a process is ready once it polls).
    pub fn polls(&self) -> u64 {
        self.inner.polls.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` polls arrived, up to `wait`.
    pub async fn wait_polls(&self, n: u64, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.polled.notified();
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
        self.inner.init_errors.lock().unwrap().clone()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
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
    body: Vec<u8>,
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
    Some(HttpRequest { method, path, body })
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
