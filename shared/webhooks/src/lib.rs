//! The webhook adapter: [`HttpSender`] implements [`WebhookSender`] with one reqwest client.
//!
//! Each delivery is one POST, signed per Standard Webhooks (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature`: [`notify_core::webhooks::signature_header`]), that
//! - goes only where [`notify_core::webhooks::check_url`] allows: `https://`, no literal
//!   address that is not public, no `localhost`;
//! - connects only to addresses [`notify_core::webhooks::ip_allowed`] accepts: the client's
//!   resolver drops every other address the host resolves to, at each call, and the connector
//!   dials only the addresses the resolver returned, so a DNS answer that changes between the
//!   check and the connection (rebinding) cannot reach an internal address;
//! - never follows a redirect (a 3xx is an answer, and not a delivery) and never goes through
//!   a proxy (a proxy would connect to the address instead of us);
//! - ends within the sender's timeout.
//!
//! What a delivery met ([`WebhookResponse`]) never holds the response's body, nor the URL (it
//! may carry a token).

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use notify_core::error::report;
use notify_core::events::{WebhookRequest, WebhookResponse, WebhookSender};
use notify_core::webhooks::{check_url, ip_allowed, lookup, signature_header};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::CONTENT_TYPE;

/// The longest a connection (DNS lookup, TCP and TLS handshakes) may take, when the
/// sender's whole timeout is longer.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `user-agent` of every delivery.
pub const USER_AGENT: &str = concat!("notification-service-webhooks/", env!("CARGO_PKG_VERSION"));

/// Sends webhook deliveries with one HTTP client, built once (at cold start, or at the first
/// delivery: [`HttpSender::lazy`]) and reused, so connections to an endpoint are kept between
/// deliveries.
#[derive(Debug, Clone)]
pub struct HttpSender {
    client: ClientSlot,
    timeout: Duration,
    connect_timeout: Duration,
    allow_private: bool,
}

impl HttpSender {
    /// A sender whose every delivery ends within `timeout` (the service uses 10 s), whose
    /// connections are made within `min(timeout, 5 s)`, and which reaches private addresses,
    /// `localhost` and `http://` only when `allow_private` (local runs and tests: never in a
    /// deployment).
    pub fn new(timeout: Duration, allow_private: bool) -> Result<Self, reqwest::Error> {
        let client = build_client(timeout, allow_private)?;
        Ok(Self::with(
            ClientSlot::ready(client),
            timeout,
            allow_private,
        ))
    }

    /// [`HttpSender::new`], its client built when the first delivery needs it (on a blocking
    /// thread), not now: a cold start does not wait for it, nor share the CPU with it, and a
    /// worker whose organizations have no webhook never builds it. Building it is most of its
    /// cost: native-tls has OpenSSL read and parse the system's root certificates, tens of
    /// milliseconds with OpenSSL 3 (docs/performance.md, "Cold start"). A build that fails
    /// makes each delivery fail with the reason, until one succeeds.
    pub fn lazy(timeout: Duration, allow_private: bool) -> Self {
        Self::with(ClientSlot::lazy(), timeout, allow_private)
    }

    fn with(client: ClientSlot, timeout: Duration, allow_private: bool) -> Self {
        Self {
            client,
            timeout,
            connect_timeout: timeout.min(MAX_CONNECT_TIMEOUT),
            allow_private,
        }
    }

    /// The client, once built.
    async fn client(&self) -> Result<&reqwest::Client, String> {
        self.client.get(self.timeout, self.allow_private).await
    }

    /// The POST itself, once the URL is checked: the status of any answer, or the error that
    /// kept the endpoint from answering.
    async fn post(
        &self,
        url: reqwest::Url,
        request: &WebhookRequest<'_>,
    ) -> Result<reqwest::StatusCode, String> {
        let msg_id = request.event_id.to_string();
        let timestamp = chrono::Utc::now().timestamp();
        let signature = signature_header(request.secrets, &msg_id, timestamp, request.body)
            .map_err(|err| report(&err))?;
        let sent = self
            .client()
            .await?
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header("webhook-id", msg_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(request.body.to_owned())
            .send()
            .await;
        match sent {
            // the body is never read: dropping the response closes its connection if the
            // body was not all received, so a huge or endless body costs nothing
            Ok(response) => Ok(response.status()),
            Err(err) => Err(self.describe(err)),
        }
    }

    /// A failed request in one line: a timeout by the limit it hit, anything else by its
    /// cause chain (without the URL).
    fn describe(&self, err: reqwest::Error) -> String {
        if err.is_timeout() {
            let limit = if err.is_connect() {
                self.connect_timeout
            } else {
                self.timeout
            };
            return format!("timed out after {}", human(limit));
        }
        report(&err.without_url())
    }
}

#[async_trait]
impl WebhookSender for HttpSender {
    /// Checks the URL ([`check_url`]: a refusal is sent nowhere), then POSTs the signed body.
    /// Any HTTP answer has its status (a 3xx too: the redirect is not followed, and the
    /// delivery is not made); a non-2xx also has the error `HTTP <code>`. No answer has no
    /// status, and the error says why.
    async fn send(&self, request: &WebhookRequest<'_>) -> WebhookResponse {
        let started = Instant::now();
        let url = match check_url(request.url, self.allow_private) {
            Ok(checked) => checked.url,
            Err(refusal) => {
                return WebhookResponse {
                    status: None,
                    latency: started.elapsed(),
                    error: Some(refusal.to_string()),
                };
            }
        };
        let result = self.post(url, request).await;
        let latency = started.elapsed();
        match result {
            Ok(status) => WebhookResponse {
                status: Some(status.as_u16()),
                latency,
                error: (!status.is_success()).then(|| format!("HTTP {}", status.as_u16())),
            },
            Err(error) => WebhookResponse {
                status: None,
                latency,
                error: Some(error),
            },
        }
    }
}

/// The one reqwest client of a sender: never redirected, never proxied, HTTPS only unless
/// `allow_private`, within the timeouts, through [`PolicyResolver`].
fn build_client(timeout: Duration, allow_private: bool) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .https_only(!allow_private)
        .timeout(timeout)
        .connect_timeout(timeout.min(MAX_CONNECT_TIMEOUT))
        .user_agent(USER_AGENT)
        .dns_resolver(Arc::new(PolicyResolver { allow_private }))
        .build()
}

/// A sender's client: built, or to be built on first use ([`HttpSender::lazy`]).
#[derive(Clone)]
struct ClientSlot(Arc<tokio::sync::OnceCell<reqwest::Client>>);

impl ClientSlot {
    fn ready(client: reqwest::Client) -> Self {
        Self(Arc::new(tokio::sync::OnceCell::new_with(Some(client))))
    }

    fn lazy() -> Self {
        Self(Arc::new(tokio::sync::OnceCell::new()))
    }

    /// The client, built now if it was not (on a blocking thread; concurrent callers wait for
    /// the one build).
    async fn get(
        &self,
        timeout: Duration,
        allow_private: bool,
    ) -> Result<&reqwest::Client, String> {
        self.0
            .get_or_try_init(|| async {
                let built =
                    tokio::task::spawn_blocking(move || build_client(timeout, allow_private))
                        .await
                        .map_err(|err| format!("the webhook client's build stopped: {err}"))?;
                built.map_err(|err| format!("cannot build the webhook client: {}", report(&err)))
            })
            .await
    }
}

impl fmt::Debug for ClientSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.0.initialized() {
            "ready"
        } else {
            "not built yet"
        };
        f.debug_tuple("ClientSlot").field(&state).finish()
    }
}

/// `10 s`, or `300 ms` for a limit that is not whole seconds.
fn human(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// The client's resolver: the system's lookup ([`lookup`], within its own time limit), then,
/// unless private addresses are allowed, only the addresses [`ip_allowed`] accepts. A host
/// left with none fails to resolve ([`NoReachableAddress`]), and nothing is dialed.
///
/// reqwest calls it for every connection it opens to a named host (a literal address is
/// dialed without it: [`check_url`] judges those), and dials only what it returns.
struct PolicyResolver {
    allow_private: bool,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str();
            // port 0: the connector puts the URL's port in
            let found = lookup(host, 0).await?;
            let (allowed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = found
                .into_iter()
                .partition(|address| allow_private || ip_allowed(address.ip()));
            if allowed.is_empty() {
                return Err(Box::new(NoReachableAddress {
                    host: host.to_owned(),
                    refused: refused.iter().map(SocketAddr::ip).collect(),
                }) as Box<dyn Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// A host whose every address is one webhooks may not reach.
#[derive(Debug)]
struct NoReachableAddress {
    host: String,
    refused: Vec<IpAddr>,
}

impl fmt::Display for NoReachableAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let refused: Vec<String> = self.refused.iter().map(IpAddr::to_string).collect();
        write!(
            f,
            "the host {} resolves only to addresses webhooks may not reach ({})",
            self.host,
            refused.join(", ")
        )
    }
}

impl Error for NoReachableAddress {}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::TcpListener;

    #[test]
    fn limits_read_as_seconds_or_milliseconds() {
        assert_eq!(human(Duration::from_secs(10)), "10 s");
        assert_eq!(human(Duration::from_millis(300)), "300 ms");
        assert_eq!(human(Duration::from_millis(1500)), "1500 ms");
    }

    #[tokio::test]
    async fn the_resolver_drops_loopback_unless_private_addresses_are_allowed() {
        let name = |host: &str| host.parse::<Name>().expect("a valid name");
        let strict = PolicyResolver {
            allow_private: false,
        };
        let err = match strict.resolve(name("localhost")).await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(err) => err,
        };
        assert!(
            err.to_string().starts_with(
                "the host localhost resolves only to addresses webhooks may not reach"
            ),
            "{err}"
        );
        let lenient = PolicyResolver {
            allow_private: true,
        };
        let addresses: Vec<SocketAddr> =
            lenient.resolve(name("localhost")).await.unwrap().collect();
        assert!(!addresses.is_empty());
        assert!(
            addresses.iter().all(|a| a.ip().is_loopback()),
            "{addresses:?}"
        );
    }

    /// The check after DNS, on its own: the URL check refuses `localhost` by name, so this
    /// goes around it, straight to the client, as a host that resolves to loopback would; with
    /// the client built at once and built on first use alike.
    #[tokio::test]
    async fn the_client_never_dials_a_host_that_resolves_to_loopback() {
        for lazy in [false, true] {
            never_dials_loopback(lazy).await;
        }
    }

    async fn never_dials_loopback(lazy: bool) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while listener.accept().await.is_ok() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        let sender = if lazy {
            let sender = HttpSender::lazy(Duration::from_secs(2), false);
            assert!(
                format!("{sender:?}").contains("not built yet"),
                "{sender:?}"
            );
            sender
        } else {
            HttpSender::new(Duration::from_secs(2), false).unwrap()
        };
        let url: reqwest::Url = format!("https://localhost:{port}/").parse().unwrap();
        let client = sender.client().await.unwrap();
        assert!(format!("{sender:?}").contains("\"ready\""), "{sender:?}");
        let err = client.post(url).send().await.unwrap_err();
        let message = sender.describe(err);
        assert!(
            message
                .contains("the host localhost resolves only to addresses webhooks may not reach"),
            "{message}"
        );
        assert!(
            !message.contains(&port.to_string()),
            "the URL is left out: {message}"
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 0);
    }
}
