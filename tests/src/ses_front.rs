//! An HTTP/1.1 front for SES v2 that the tests put between the real SDK and the local
//! stand-in (moto's server), for what moto does not do:
//!
//! - `GET /v2/email/account` (`GetAccount`): answered here, with the `SendQuota` the test
//!   set ([`SesFront::set_quota`]), in SES v2's REST-JSON shape (the API reference's
//!   "Response Syntax" for `GetAccount`); moto has no such route.
//! - `POST /v2/email/outbound-emails` (`SendEmail`): its arrival is recorded
//!   ([`SesFront::send_times`]), then it is forwarded to moto, or refused here as SES refuses
//!   it ([`SesFront::refuse_sends`]): a status, the code in `x-amzn-ErrorType` and
//!   `{"message": …}`, which is where the SDK's REST-JSON error parser reads them
//!   (`json_errors::parse_error_metadata` in aws-sdk-sesv2: the header first, then the
//!   body's `code`/`__type`; the message from `message`).
//! - Everything else: forwarded to moto unchanged.
//!
//! The SDK's hyper client keeps its connections open and sends several requests on each
//! (each with a `Content-Length` body), so each client connection is served request after
//! request. Each forwarded request goes on a fresh upstream connection with
//! `Connection: close`; the whole answer is read and relayed with a `Content-Length`, the
//! client's connection kept open.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// `GetAccount`'s route.
pub const GET_ACCOUNT: (&str, &str) = ("GET", "/v2/email/account");
/// `SendEmail`'s route.
pub const SEND_EMAIL: (&str, &str) = ("POST", "/v2/email/outbound-emails");

/// How SES refuses a call: HTTP status, error code, message.
type Refusal = (u16, String, String);

/// The account's `SendQuota`, as `GetAccount` answers it.
#[derive(Debug, Clone, Copy)]
struct SendQuota {
    max_send_rate: f64,
    max_24_hour_send: f64,
    sent_last_24_hours: f64,
}

struct State {
    /// moto's `host:port`.
    upstream: String,
    quota: Mutex<SendQuota>,
    account_refusal: Mutex<Option<Refusal>>,
    send_refusal: Mutex<Option<Refusal>>,
    account_calls: AtomicU64,
    send_times: Mutex<Vec<Instant>>,
    sends_forwarded: AtomicU64,
    connections: AtomicU64,
}

/// A running front; it stops (every connection closed) when dropped.
pub struct SesFront {
    port: u16,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl SesFront {
    /// A front on a fresh local port before `upstream` (moto's base URL, `AWS_ENDPOINT_URL`:
    /// `http://host:port`), with a production account's quota (14/s, 50,000 a day, none
    /// sent) and every send forwarded.
    pub async fn start(upstream: &str) -> Self {
        let authority = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        assert!(
            !authority.contains('/') && !upstream.starts_with("https://"),
            "the upstream must be http://host:port, not {upstream}"
        );
        let state = Arc::new(State {
            upstream: authority,
            quota: Mutex::new(SendQuota {
                max_send_rate: 14.0,
                max_24_hour_send: 50_000.0,
                sent_last_24_hours: 0.0,
            }),
            account_refusal: Mutex::default(),
            send_refusal: Mutex::default(),
            account_calls: AtomicU64::new(0),
            send_times: Mutex::default(),
            sends_forwarded: AtomicU64::new(0),
            connections: AtomicU64::new(0),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let port = listener.local_addr().expect("an address").port();
        let task = tokio::spawn(accept(listener, state.clone()));
        Self { port, state, task }
    }

    /// `http://127.0.0.1:PORT`: the endpoint to give the SDK instead of moto's.
    pub fn endpoint_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// aws-config's defaults, as the worker loads them, with this front as the endpoint
    /// (the region from `AWS_REGION`, else us-east-1; credentials moto accepts).
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".to_owned());
        aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
            .endpoint_url(self.endpoint_url())
            .region(aws_config::Region::new(region))
            .credentials_provider(aws_sdk_sesv2::config::Credentials::new(
                "testing", "testing", None, None, "test",
            ))
            .load()
            .await
    }

    /// The `SendQuota` every `GetAccount` answers from now on.
    pub fn set_quota(&self, max_send_rate: f64, max_24_hour_send: f64, sent_last_24_hours: f64) {
        *lock(&self.state.quota) = SendQuota {
            max_send_rate,
            max_24_hour_send,
            sent_last_24_hours,
        };
    }

    /// From now on answers `GetAccount` with `(status, code, message)` instead of the
    /// quota; `None`: the quota again.
    pub fn refuse_account(&self, refusal: Option<(u16, &str, &str)>) {
        *lock(&self.state.account_refusal) = refusal.map(owned);
    }

    /// From now on answers every `SendEmail` with `(status, code, message)`, never
    /// forwarding it, e.g. `(400, "ThrottlingException", "Daily message quota exceeded.")`;
    /// `None`: forwards them again.
    pub fn refuse_sends(&self, refusal: Option<(u16, &str, &str)>) {
        *lock(&self.state.send_refusal) = refusal.map(owned);
    }

    /// How many `GetAccount` calls reached the front (answered or refused).
    pub fn account_calls(&self) -> u64 {
        self.state.account_calls.load(Ordering::SeqCst)
    }

    /// When each `SendEmail` reached the front (refused or forwarded), in arrival order.
    pub fn send_times(&self) -> Vec<Instant> {
        lock(&self.state.send_times).clone()
    }

    /// How many `SendEmail` calls were forwarded to moto.
    pub fn sends_forwarded(&self) -> u64 {
        self.state.sends_forwarded.load(Ordering::SeqCst)
    }

    /// How many client connections the front accepted: fewer than requests when the
    /// client kept them open.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }
}

impl Drop for SesFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn owned((status, code, message): (u16, &str, &str)) -> Refusal {
    (status, code.to_owned(), message.to_owned())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

async fn accept(listener: TcpListener, state: Arc<State>) {
    // connections live in this task's JoinSet: aborting the task drops them all
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        state.connections.fetch_add(1, Ordering::SeqCst);
        connections.spawn(serve(stream, state.clone()));
        while connections.try_join_next().is_some() {}
    }
}

/// One HTTP/1.1 request as read off a connection.
struct Request {
    method: String,
    /// The request target without its query.
    path: String,
    /// The request line and headers, as sent, without the blank line that ends them.
    head: String,
    body: Vec<u8>,
}

/// Serves the requests of one client connection, one after another, until it closes.
async fn serve(mut stream: TcpStream, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    let mut pending = Vec::new();
    loop {
        let request = match read_request(&mut stream, &mut pending).await {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(response) => {
                let _ = stream.write_all(&response).await;
                return;
            }
        };
        let response = answer(&state, request).await;
        if stream.write_all(&response).await.is_err() {
            return;
        }
    }
}

async fn answer(state: &State, request: Request) -> Vec<u8> {
    let route = (request.method.as_str(), request.path.as_str());
    if route == GET_ACCOUNT {
        state.account_calls.fetch_add(1, Ordering::SeqCst);
        if let Some((status, code, message)) = lock(&state.account_refusal).clone() {
            return error_response(status, &code, &message);
        }
        let quota = *lock(&state.quota);
        return json_response(200, &account(quota));
    }
    if route == SEND_EMAIL {
        lock(&state.send_times).push(Instant::now());
        if let Some((status, code, message)) = lock(&state.send_refusal).clone() {
            return error_response(status, &code, &message);
        }
        state.sends_forwarded.fetch_add(1, Ordering::SeqCst);
    }
    match forward(&state.upstream, &request).await {
        Ok(response) => response,
        Err(err) => error_response(
            502,
            "BadGateway",
            &format!("the front could not reach {}: {err}", state.upstream),
        ),
    }
}

/// `GetAccount`'s answer for a production account in good standing with `quota`.
fn account(quota: SendQuota) -> serde_json::Value {
    json!({
        "DedicatedIpAutoWarmupEnabled": false,
        "EnforcementStatus": "HEALTHY",
        "ProductionAccessEnabled": true,
        "SendQuota": {
            "Max24HourSend": quota.max_24_hour_send,
            "MaxSendRate": quota.max_send_rate,
            "SentLast24Hours": quota.sent_last_24_hours,
        },
        "SendingEnabled": true,
        "SuppressionAttributes": {"SuppressedReasons": ["BOUNCE", "COMPLAINT"]},
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn response(status: u16, extra_headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nx-amzn-RequestId: {}\r\n{extra_headers}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        reason(status),
        uuid::Uuid::new_v4(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn json_response(status: u16, body: &serde_json::Value) -> Vec<u8> {
    response(status, "", body.to_string().as_bytes())
}

/// An SES v2 (REST-JSON) error: the code in `x-amzn-ErrorType`, the message in the body.
fn error_response(status: u16, code: &str, message: &str) -> Vec<u8> {
    let body = json!({ "message": message }).to_string();
    response(
        status,
        &format!("x-amzn-ErrorType: {code}\r\n"),
        body.as_bytes(),
    )
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// Reads the next request off the connection (what is read beyond it stays in `pending`).
/// `Ok(None)` when the client closed; `Err` with the response to close with when the
/// request is not one the front can read.
async fn read_request(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
) -> Result<Option<Request>, Vec<u8>> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&pending[..head_end - 4]).into_owned();
    let mut request_line = head.split("\r\n").next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default().to_owned();
    if header(&head, "transfer-encoding").is_some() {
        return Err(error_response(
            501,
            "NotImplemented",
            "the SES front reads Content-Length bodies only",
        ));
    }
    let length: usize = match header(&head, "content-length").map(str::parse) {
        None => 0,
        Some(Ok(length)) => length,
        Some(Err(_)) => return Err(error_response(400, "BadRequest", "bad Content-Length")),
    };
    while pending.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    }
    let body = pending[head_end..head_end + length].to_vec();
    pending.drain(..head_end + length);
    Ok(Some(Request {
        method,
        path,
        head,
        body,
    }))
}

/// Sends `request` to `upstream` on a connection of its own (`Connection: close`), reads
/// the whole answer, and frames it again for the client's keep-alive connection.
async fn forward(upstream: &str, request: &Request) -> std::io::Result<Vec<u8>> {
    let mut head: Vec<&str> = request
        .head
        .split("\r\n")
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(key, _)| key.trim().eq_ignore_ascii_case("connection"))
        })
        .collect();
    head.push("Connection: close");
    let mut out = head.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&request.body);

    let mut upstream = TcpStream::connect(upstream).await?;
    upstream.write_all(&out).await?;
    let mut raw = Vec::new();
    upstream.read_to_end(&mut raw).await?;
    reframe(&raw, request.method == "HEAD")
}

/// An upstream answer (read to its end) as a response with a `Content-Length` and without
/// `Connection: close`, so the client keeps its connection.
fn reframe(raw: &[u8], head_only: bool) -> std::io::Result<Vec<u8>> {
    let bad = |what: &str| std::io::Error::other(format!("upstream answer: {what}"));
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of head"))?;
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let rest = &raw[head_end + 4..];
    let chunked = header(&head, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if head_only {
        Vec::new()
    } else if chunked {
        dechunk(rest).ok_or_else(|| bad("bad chunked body"))?
    } else {
        match header(&head, "content-length").map(str::parse::<usize>) {
            Some(Ok(length)) => rest
                .get(..length)
                .ok_or_else(|| bad("short body"))?
                .to_vec(),
            Some(Err(_)) => return Err(bad("bad Content-Length")),
            None => rest.to_vec(),
        }
    };
    let mut lines: Vec<String> = head
        .split("\r\n")
        .filter(|line| {
            !line.split_once(':').is_some_and(|(key, _)| {
                let key = key.trim();
                ["connection", "transfer-encoding"]
                    .iter()
                    .any(|k| key.eq_ignore_ascii_case(k))
                    || (!head_only && key.eq_ignore_ascii_case("content-length"))
            })
        })
        .map(str::to_owned)
        .collect();
    if !head_only {
        lines.push(format!("Content-Length: {}", body.len()));
    }
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&body);
    Ok(out)
}

/// A `Transfer-Encoding: chunked` body, decoded (trailers dropped).
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_answers_are_framed_for_a_kept_connection() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 5\r\n\
                    Connection: close\r\n\r\nhello";
        let out = String::from_utf8(reframe(raw, false).unwrap()).unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 5\r\n\r\nhello"
        );
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n";
        let out = String::from_utf8(reframe(raw, false).unwrap()).unwrap();
        assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        let raw = b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nuntil close";
        let out = String::from_utf8(reframe(raw, false).unwrap()).unwrap();
        assert_eq!(
            out,
            "HTTP/1.0 200 OK\r\nServer: x\r\nContent-Length: 11\r\n\r\nuntil close"
        );
    }

    #[test]
    fn refusals_carry_the_code_in_the_header_and_the_message_in_the_body() {
        let out = String::from_utf8(error_response(
            400,
            "ThrottlingException",
            "Maximum sending rate exceeded.",
        ))
        .unwrap();
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
        assert!(out.contains("\r\nx-amzn-ErrorType: ThrottlingException\r\n"));
        assert!(out.ends_with("\r\n\r\n{\"message\":\"Maximum sending rate exceeded.\"}"));
    }
}
