//! HttpSender against tiny local HTTP servers: what reaches them, and what never does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use notify_core::events::{WebhookRequest, WebhookSender};
use notify_core::webhooks::{new_secret, sign};
use notify_webhooks::HttpSender;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use uuid::Uuid;

const BODY: &str = r#"{"id":"e","type":"notification.delivered","timestamp":"t","data":{}}"#;

/// One request as the server read it: lowercased header names.
#[derive(Debug)]
struct Received {
    method: String,
    headers: HashMap<String, String>,
    body: String,
}

/// How the server answers each connection.
#[derive(Clone)]
enum Reply {
    /// A status line with these extra header lines and a body.
    Status(u16, Vec<String>, &'static str),
    /// Reads the request, then holds the connection open without a word.
    Never,
}

struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: mpsc::UnboundedReceiver<Received>,
}

impl Server {
    async fn start(reply: Reply) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let (tx, requests) = mpsc::unbounded_channel();
        let counter = connections.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer(stream, reply.clone(), tx.clone()));
            }
        });
        Server {
            addr,
            connections,
            requests,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn answer(mut stream: TcpStream, reply: Reply, tx: mpsc::UnboundedSender<Received>) {
    let Some(received) = read_request(&mut stream).await else {
        return;
    };
    let _ = tx.send(received);
    match reply {
        Reply::Status(code, headers, body) => {
            let mut head = format!(
                "HTTP/1.1 {code} Test\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for line in headers {
                head.push_str(&line);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Reply::Never => {
            // until the client gives up and closes
            let mut sink = [0u8; 1024];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    }
}

/// A request with a content-length body (all the sender sends), or None if the client left.
async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let method = lines.next()?.split(' ').next()?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .map_or(0, |v| v.parse().unwrap());
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received {
        method,
        headers,
        body: String::from_utf8(body).ok()?,
    })
}

fn request<'a>(url: &'a str, secrets: &'a [String]) -> WebhookRequest<'a> {
    WebhookRequest {
        url,
        event_id: Uuid::new_v4(),
        body: BODY,
        secrets,
    }
}

#[tokio::test]
async fn a_delivery_reaches_the_endpoint_signed_with_every_secret() {
    let mut server = Server::start(Reply::Status(204, vec![], "")).await;
    let sender = HttpSender::new(Duration::from_secs(5), true).unwrap();
    let secrets = vec![new_secret(), new_secret()];
    let url = format!("http://{}/hooks?token=abc", server.addr);
    let sent = request(&url, &secrets);

    let response = sender.send(&sent).await;
    assert_eq!(response.status, Some(204), "{response:?}");
    assert!(response.delivered());
    assert_eq!(response.error, None);

    let received = server.requests.recv().await.unwrap();
    assert_eq!(received.method, "POST");
    assert_eq!(received.body, BODY);
    let header = |name: &str| received.headers.get(name).cloned().unwrap_or_default();
    assert_eq!(header("content-type"), "application/json");
    assert!(
        header("user-agent").starts_with("notification-service-webhooks/"),
        "{}",
        header("user-agent")
    );
    let id = header("webhook-id");
    assert_eq!(id, sent.event_id.to_string());
    let timestamp: i64 = header("webhook-timestamp").parse().unwrap();
    let now = chrono::Utc::now().timestamp();
    assert!(
        (now - 60..=now).contains(&timestamp),
        "{timestamp} vs {now}"
    );
    let signatures: Vec<String> = header("webhook-signature")
        .split(' ')
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = secrets
        .iter()
        .map(|secret| sign(secret, &id, timestamp, &received.body).unwrap())
        .collect();
    assert_eq!(signatures, expected, "one signature per secret, in order");
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn an_error_status_is_an_answer_without_its_body() {
    let server = Server::start(Reply::Status(500, vec![], "stack trace with secrets")).await;
    let sender = HttpSender::new(Duration::from_secs(5), true).unwrap();
    let secrets = vec![new_secret()];
    let url = format!("http://{}/", server.addr);

    let response = sender.send(&request(&url, &secrets)).await;
    assert_eq!(response.status, Some(500));
    assert!(!response.delivered());
    assert_eq!(response.error.as_deref(), Some("HTTP 500"));
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_not_a_delivery() {
    let target = Server::start(Reply::Status(200, vec![], "")).await;
    let location = format!("location: http://{}/elsewhere", target.addr);
    let server = Server::start(Reply::Status(302, vec![location], "")).await;
    let sender = HttpSender::new(Duration::from_secs(5), true).unwrap();
    let secrets = vec![new_secret()];
    let url = format!("http://{}/", server.addr);

    let response = sender.send(&request(&url, &secrets)).await;
    assert_eq!(response.status, Some(302));
    assert!(!response.delivered());
    assert_eq!(response.error.as_deref(), Some("HTTP 302"));
    assert_eq!(server.connections(), 1);
    assert_eq!(target.connections(), 0, "the redirect was followed");
}

#[tokio::test]
async fn private_addresses_and_plain_http_are_refused_before_any_connection() {
    let server = Server::start(Reply::Status(200, vec![], "")).await;
    let sender = HttpSender::new(Duration::from_secs(5), false).unwrap();
    let secrets = vec![new_secret()];
    let port = server.addr.port();
    let cases = [
        (
            format!("http://127.0.0.1:{port}/"),
            "the URL must use https://",
        ),
        (
            format!("https://127.0.0.1:{port}/"),
            "the address 127.0.0.1 is not public",
        ),
        (
            format!("https://localhost:{port}/"),
            "the host localhost is this machine",
        ),
        (
            format!("https://[::ffff:127.0.0.1]:{port}/"),
            "is not public",
        ),
    ];
    for (url, why) in &cases {
        let response = sender.send(&request(url, &secrets)).await;
        assert_eq!(response.status, None, "{url}");
        let error = response.error.unwrap_or_default();
        assert!(
            error.starts_with(why) || error.contains(why),
            "{url}: {error}"
        );
    }
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn an_endpoint_that_never_answers_times_out() {
    let server = Server::start(Reply::Never).await;
    let sender = HttpSender::new(Duration::from_millis(300), true).unwrap();
    let secrets = vec![new_secret()];
    let url = format!("http://{}/", server.addr);

    let response = sender.send(&request(&url, &secrets)).await;
    assert_eq!(response.status, None);
    assert_eq!(response.error.as_deref(), Some("timed out after 300 ms"));
    assert!(
        response.latency >= Duration::from_millis(300) && response.latency < Duration::from_secs(3),
        "{:?}",
        response.latency
    );
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_refused_connection_has_no_status_and_says_why() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let sender = HttpSender::new(Duration::from_secs(5), true).unwrap();
    let secrets = vec![new_secret()];
    let url = format!("http://{addr}/hooks?token=abc");

    let response = sender.send(&request(&url, &secrets)).await;
    assert_eq!(response.status, None);
    let error = response.error.unwrap_or_default();
    assert!(error.to_lowercase().contains("connect"), "{error}");
    assert!(error.contains(": "), "the cause chain: {error}");
    assert!(!error.contains("token=abc"), "the URL is left out: {error}");
}

#[tokio::test]
async fn a_bad_secret_sends_nothing() {
    let server = Server::start(Reply::Status(200, vec![], "")).await;
    let sender = HttpSender::new(Duration::from_secs(5), true).unwrap();
    let url = format!("http://{}/", server.addr);
    for secrets in [vec![], vec!["not-a-secret".to_owned()]] {
        let response = sender.send(&request(&url, &secrets)).await;
        assert_eq!(response.status, None);
        assert!(
            response
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("secret"),
            "{response:?}"
        );
    }
    assert_eq!(server.connections(), 0);
}
