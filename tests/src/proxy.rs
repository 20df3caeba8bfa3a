//! A TCP forwarder, the one the integration tests and the fault suite share.
//!
//! Between a client and PostgreSQL, a test cuts the database off (every connection dropped,
//! the port closed) and brings it back on the same port, without disturbing other tests that
//! share the server. In front of the AWS stand-in, the fault suite also holds every chunk for
//! a while on its way there and on its way back ([`Proxy::set_delay`]), so provider calls are
//! in flight long enough for a kill to land inside one, and cuts it for a provider outage.
//! Or it answers every HTTP request itself with a canned response ([`Proxy::answer_with`]):
//! a provider's real error, on the wire, to the real SDK.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub port: u16,
    upstream: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    /// When set, every request is answered with this instead of being forwarded.
    answer: Option<Arc<Vec<u8>>>,
    /// How many requests were answered so ([`Proxy::answered`]).
    answered: Arc<AtomicU64>,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding a fresh local port to `upstream`, without delay.
    pub async fn start(upstream: SocketAddr) -> Self {
        Self::with_delay(upstream, Duration::ZERO).await
    }

    /// Starts forwarding, holding every chunk `delay` each way.
    pub async fn with_delay(upstream: SocketAddr, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local address").port();
        let delay_ms = Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let answered = Arc::new(AtomicU64::new(0));
        let task = Some(tokio::spawn(serve(
            listener,
            upstream,
            delay_ms.clone(),
            None,
            answered.clone(),
        )));
        Self {
            port,
            upstream,
            delay_ms,
            answer: None,
            answered,
            task,
        }
    }

    /// `http://127.0.0.1:{port}`: the endpoint to give a client instead of the upstream's.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How long each chunk is held from now on (open connections too).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// A proxy that answers every request with `response`: its upstream is never reached.
    pub async fn answering(response: Vec<u8>) -> Self {
        let nowhere: SocketAddr = "127.0.0.1:9".parse().expect("an address");
        let mut proxy = Self::start(nowhere).await;
        proxy.answer_with(Some(response)).await;
        proxy
    }

    /// From now on answers every HTTP request with `response` (a whole HTTP/1.1 response),
    /// or forwards again with `None`. Open connections are closed, so a client's pooled ones
    /// cannot slip past the switch.
    pub async fn answer_with(&mut self, response: Option<Vec<u8>>) {
        self.answer = response.map(Arc::new);
        self.cut();
        self.restore().await;
    }

    /// How many requests [`Proxy::answer_with`]'s response has answered so far: the requests
    /// a client really sent, its SDK's own retries included.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::SeqCst)
    }

    /// Closes the port and every forwarded connection.
    pub fn cut(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Listens again on the same port (nothing when it is not cut).
    pub async fn restore(&mut self) {
        if self.task.is_some() {
            return;
        }
        // the aborted listener's socket may take a moment to be released
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(listener) => break listener,
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("listen again on port {}: {e}", self.port),
            }
        };
        self.task = Some(tokio::spawn(serve(
            listener,
            self.upstream,
            self.delay_ms.clone(),
            self.answer.clone(),
            self.answered.clone(),
        )));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    answer: Option<Arc<Vec<u8>>>,
    answered: Arc<AtomicU64>,
) {
    // connections live in this task's JoinSet: aborting the task drops them all
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        match &answer {
            Some(response) => {
                connections.spawn(answer_all(inbound, response.clone(), answered.clone()))
            }
            None => connections.spawn(forward(inbound, upstream, delay_ms.clone())),
        };
        while connections.try_join_next().is_some() {}
    }
}

/// Reads each HTTP/1.1 request on the connection (head, then `Content-Length` bytes of body)
/// and answers it with `response`, until the client closes.
async fn answer_all(mut inbound: TcpStream, response: Arc<Vec<u8>>, answered: Arc<AtomicU64>) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let head_end = loop {
            if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match inbound.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        };
        let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
        let body_len: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while pending.len() < head_end + body_len {
            match inbound.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        }
        pending.drain(..head_end + body_len);
        answered.fetch_add(1, Ordering::SeqCst);
        if inbound.write_all(&response).await.is_err() {
            return;
        }
    }
}

/// Both directions of one connection; when either ends, both are dropped.
async fn forward(inbound: TcpStream, upstream: SocketAddr, delay_ms: Arc<AtomicU64>) {
    let Ok(outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (from_client, to_client) = inbound.into_split();
    let (from_server, to_server) = outbound.into_split();
    tokio::select! {
        _ = pump(from_client, to_server, delay_ms.clone()) => {}
        _ = pump(from_server, to_client, delay_ms) => {}
    }
}

async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    delay_ms: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay = delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
