//! A webhook endpoint for the tests: a tiny HTTP/1.1 server on 127.0.0.1 that records every
//! request (its `webhook-*` headers and body, when it arrived) and answers as the test says,
//! per request: a status, after a delay.
//!
//! Signatures are checked by the tests that read [`Received`] (with `notify_core::webhooks`
//! here; under `cargo lambda watch` with the Python `standardwebhooks`,
//! `tests/scripts/webhook_receiver.py`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the receiver read it (header names in lower case).
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    pub at: Instant,
    /// The status the receiver answered it with.
    pub answered: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }
}

/// How to answer one request: given it and how many requests with its `webhook-id` came
/// before (0 for the first), a status and how long to wait before answering.
pub type Script = Arc<dyn Fn(&Received, usize) -> (u16, Duration) + Send + Sync>;

/// A running receiver; it stops with the test's runtime.
pub struct Receiver {
    pub port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Answers every request 204 at once.
    pub async fn ok() -> Self {
        Self::start(Arc::new(|_, _| (204, Duration::ZERO))).await
    }

    /// Answers the first `n` requests of each `webhook-id` 500, the others 204.
    pub async fn failing_first(n: usize) -> Self {
        Self::start(Arc::new(move |_, before| {
            (if before < n { 500 } else { 204 }, Duration::ZERO)
        }))
        .await
    }

    pub async fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let port = listener.local_addr().expect("an address").port();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let log = received.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, script.clone(), log.clone()));
            }
        });
        Self { port, received }
    }

    /// `http://127.0.0.1:PORT/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!(
            "http://127.0.0.1:{}/{}",
            self.port,
            path.trim_start_matches('/')
        )
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("not poisoned").clone()
    }
}

async fn serve(mut stream: TcpStream, script: Script, log: Arc<Mutex<Vec<Received>>>) {
    loop {
        let Some(request) = read_request(&mut stream).await else {
            return;
        };
        let (status, delay) = {
            let mut log = log.lock().expect("not poisoned");
            let id = request.header("webhook-id").to_owned();
            let before = log.iter().filter(|r| r.header("webhook-id") == id).count();
            let (status, delay) = script(&request, before);
            log.push(Received {
                answered: status,
                ..request
            });
            (status, delay)
        };
        tokio::time::sleep(delay).await;
        let head = format!("HTTP/1.1 {status} Scripted\r\ncontent-length: 0\r\n\r\n");
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()?
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received {
        path,
        headers,
        body: String::from_utf8_lossy(&body[..length]).into_owned(),
        at,
        answered: 0,
    })
}
