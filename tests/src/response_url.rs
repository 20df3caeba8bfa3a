//! A stand-in for the presigned S3 URL that CloudFormation hands a custom resource: a local
//! HTTP/1.1 server that records every request (method, target, headers, body) and answers
//! with the statuses it was given, then 200 — as S3 answers a valid presigned `PUT`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct Captured {
    pub method: String,
    /// The request target: path and query, as sent.
    pub target: String,
    /// Header names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Captured {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

pub struct ResponseUrlStandIn {
    port: u16,
    requests: mpsc::UnboundedReceiver<Captured>,
    task: JoinHandle<()>,
}

impl ResponseUrlStandIn {
    /// Answers 200 to every request.
    pub async fn start() -> Self {
        Self::answering(Vec::new()).await
    }

    /// Answers `statuses` in order, one per request, then 200.
    pub async fn answering(statuses: Vec<u16>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut statuses = statuses.into_iter();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let status = statuses.next().unwrap_or(200);
                if let Some(captured) = serve_one(stream, status).await {
                    let _ = tx.send(captured);
                }
            }
        });
        Self {
            port,
            requests,
            task,
        }
    }

    /// `url` sent here instead: its scheme and host replaced, its path and query kept.
    pub fn rewrite(&self, url: &str) -> String {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let target = rest.find('/').map_or("/", |i| &rest[i..]);
        format!("http://127.0.0.1:{}{target}", self.port)
    }

    /// The next request received (waits up to 10 s).
    pub async fn next(&mut self) -> Captured {
        tokio::time::timeout(Duration::from_secs(10), self.requests.recv())
            .await
            .expect("no request reached the ResponseURL stand-in within 10 s")
            .expect("the stand-in stopped")
    }

    /// Every request received so far and not yet taken.
    pub fn drain(&mut self) -> Vec<Captured> {
        std::iter::from_fn(|| self.requests.try_recv().ok()).collect()
    }
}

impl Drop for ResponseUrlStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request (headers, then `content-length` bytes of body) and answers `status`,
/// closing the connection.
async fn serve_one(mut stream: TcpStream, status: u16) -> Option<Captured> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let target = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let answer = format!(
        "HTTP/1.1 {status} {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        if status < 400 { "OK" } else { "Error" }
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    Some(Captured {
        method,
        target,
        headers,
        body,
    })
}
