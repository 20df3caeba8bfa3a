//! Connecting to PostgreSQL, from `DATABASE_URL` or from a Secrets Manager secret.
//!
//! - **TLS.** `sslmode=disable` connects in plain text and `sslmode=require` through native-tls,
//!   trusting every certificate in `DATABASE_CA_FILE` when it is set (the RDS bundle holds
//!   many). native-tls verifies the server's certificate and host name, so `require` with the
//!   RDS bundle is as strict as libpq's `verify-full`. With no `sslmode`, a local host
//!   (`localhost`, `127.0.0.1`, `::1`, a socket) connects in plain text and any other host
//!   requires TLS. `sslmode=prefer`, which falls back to plain text without a word, is refused.
//! - **Time limits.** `connect_timeout` defaults to 5 s (the whole start-up, TLS included);
//!   TCP keepalives probe an idle connection after 30 s, so a vanished server is noticed.
//! - **Credentials that rotate.** With `DATABASE_SECRET_ARN`, the secret is read at cold start
//!   and read again when the server refuses the password, so a rotated password reaches a warm
//!   function at its next connection. It may hold `{"url": "postgres://…"}` or the RDS shape
//!   (`username`, `password`, and optionally `host`, `port`, `dbname`); what it lacks comes from
//!   `DATABASE_URL`, or from `DATABASE_HOST`, `DATABASE_PORT` and `DATABASE_NAME`.
//!
//! Nothing here keeps session state or names a prepared statement: every connection works
//! through a transaction-pooling PgBouncer or RDS Proxy.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use native_tls::{Certificate, TlsConnector};
use postgres_native_tls::MakeTlsConnector;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::{CancelToken, Client, Config, NoTls};

/// The default `connect_timeout`: a blackholed address fails in seconds, not at the Lambda
/// timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;

/// Why a database connection could not be made. Each message names the problem in one line.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "DATABASE_URL is not set (or set DATABASE_SECRET_ARN to read the credentials from Secrets Manager)"
    )]
    MissingUrl,
    #[error("DATABASE_URL is not a valid PostgreSQL connection string")]
    InvalidUrl(#[source] tokio_postgres::Error),
    #[error(
        "sslmode=prefer is refused: it falls back to plain text without a word; \
         use sslmode=require (or sslmode=disable for a local server)"
    )]
    PreferRefused,
    #[error("{name}={value:?} is invalid: {reason}")]
    InvalidSetting {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("cannot read the CA bundle DATABASE_CA_FILE={path}")]
    CaFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the CA bundle DATABASE_CA_FILE={path} holds no valid PEM certificate")]
    CaCertificates {
        path: PathBuf,
        #[source]
        source: native_tls::Error,
    },
    #[error("cannot set up TLS for the database connection")]
    Tls(#[source] native_tls::Error),
    #[error("cannot read the database secret {arn}")]
    SecretRead {
        arn: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the database secret {arn} cannot be used: {reason}")]
    SecretShape { arn: String, reason: String },
    #[error("cannot connect to the database at {target}")]
    Connect {
        target: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("cannot connect to the database at {target}: no answer within {after:?}")]
    TimedOut { target: String, after: Duration },
}

impl ConnectError {
    /// The server refused the credentials (wrong password, unknown role).
    pub fn is_auth_failure(&self) -> bool {
        match self {
            ConnectError::Connect { source, .. } => source.code().is_some_and(|code| {
                *code == SqlState::INVALID_PASSWORD
                    || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            }),
            _ => false,
        }
    }
}

/// Where and how to connect: the parsed settings, the TLS set-up they need, and the secret
/// the credentials come from, if any.
#[derive(Clone)]
pub struct DbConfig {
    /// `DATABASE_URL` (or `DATABASE_HOST`/`PORT`/`NAME`), its TLS decision made; with a
    /// secret, the fallback for what the secret lacks.
    base: Base,
    tls: Option<MakeTlsConnector>,
    secret: Option<Arc<Secret>>,
}

#[derive(Clone)]
struct Base {
    config: Config,
    /// Whether the text named an `sslmode` (unset means "decide by the host").
    sslmode_given: bool,
    /// Its host, port and database win over a secret's (`DATABASE_HOST`/`PORT`/`NAME`: an
    /// RDS Proxy endpoint in front of the instance the secret names); otherwise they only
    /// fill in what the secret lacks.
    pinned: bool,
}

/// A Secrets Manager secret and the settings last read from it.
struct Secret {
    arn: String,
    client: aws_sdk_secretsmanager::Client,
    current: tokio::sync::Mutex<Config>,
}

impl std::fmt::Debug for DbConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never print the password
        f.debug_struct("DbConfig")
            .field("target", &describe_target(&self.base.config))
            .field("tls", &self.tls.is_some())
            .field("secret", &self.secret.as_ref().map(|s| &s.arn))
            .finish()
    }
}

impl DbConfig {
    /// Reads `DATABASE_SECRET_ARN` (then the secret, now) or `DATABASE_URL`, and the optional
    /// `DATABASE_CA_FILE`.
    pub async fn from_env() -> Result<Self, ConnectError> {
        Self::from_lookup(&notify_core::config::Vars::process()).await
    }

    /// [`DbConfig::from_env`] over any lookup.
    pub async fn from_lookup(vars: &notify_core::config::Vars<'_>) -> Result<Self, ConnectError> {
        let var = |name: &'static str| vars.optional(name);
        let ca = var("DATABASE_CA_FILE").map(PathBuf::from);
        let Some(arn) = var("DATABASE_SECRET_ARN") else {
            let url = var("DATABASE_URL").ok_or(ConnectError::MissingUrl)?;
            return Self::new(&url, ca.as_deref());
        };
        let (base, pinned) = match var("DATABASE_URL") {
            Some(url) => (url, false),
            None => {
                let mut parts = Vec::new();
                for (key, name) in [
                    ("host", "DATABASE_HOST"),
                    ("port", "DATABASE_PORT"),
                    ("dbname", "DATABASE_NAME"),
                ] {
                    if let Some(value) = var(name) {
                        if value.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\') {
                            return Err(ConnectError::InvalidSetting {
                                name,
                                value,
                                reason: "must not contain spaces, quotes or backslashes",
                            });
                        }
                        parts.push(format!("{key}={value}"));
                    }
                }
                (parts.join(" "), true)
            }
        };
        // a dated behaviour version, as the delivery adapters': the SDK's defaults change
        // only when this line does
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
            .load()
            .await;
        let client = aws_sdk_secretsmanager::Client::new(&sdk);
        let base = Base {
            pinned,
            ..Base::parse(&base)?
        };
        Self::with_secret(client, &arn, base, ca.as_deref()).await
    }

    /// Settings from a connection string (URL or `key=value` form).
    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<Self, ConnectError> {
        let base = Base::parse(url)?;
        let tls = match base.config.get_ssl_mode() {
            SslMode::Disable => None,
            _ => Some(tls_connector(ca_file)?),
        };
        Ok(Self {
            base,
            tls,
            secret: None,
        })
    }

    /// Credentials (and whatever else it holds) from a Secrets Manager secret, read now;
    /// `base` (a connection string, possibly empty) supplies what the secret lacks.
    pub async fn from_secret(
        client: aws_sdk_secretsmanager::Client,
        arn: &str,
        base: &str,
        ca_file: Option<&Path>,
    ) -> Result<Self, ConnectError> {
        Self::with_secret(client, arn, Base::parse(base)?, ca_file).await
    }

    async fn with_secret(
        client: aws_sdk_secretsmanager::Client,
        arn: &str,
        base: Base,
        ca_file: Option<&Path>,
    ) -> Result<Self, ConnectError> {
        let mut secret = Secret {
            arn: arn.to_owned(),
            client,
            current: tokio::sync::Mutex::new(base.config.clone()),
        };
        *secret.current.get_mut() = secret.read(&base).await?;
        Ok(Self {
            base,
            tls: Some(tls_connector(ca_file)?),
            secret: Some(Arc::new(secret)),
        })
    }

    /// The same server with another database name (the tests clone databases).
    pub fn with_dbname(&self, dbname: &str) -> Self {
        let mut other = self.clone();
        other.base.config.dbname(dbname);
        other
    }

    /// The same database through another host and port (tests route through a proxy or a
    /// pooler).
    pub fn with_host_port(&self, host: &str, port: u16) -> Self {
        let mut other = self.clone();
        other.base.config = rehost(&self.base.config, Some(host), Some(port));
        other
    }

    /// The first host and port, as text.
    pub fn host_port(&self) -> (String, u16) {
        let config = &self.base.config;
        let host = config
            .get_hosts()
            .first()
            .map_or_else(|| "localhost".into(), host_text);
        (host, config.get_ports().first().copied().unwrap_or(5432))
    }

    pub fn dbname(&self) -> Option<&str> {
        self.base.config.get_dbname()
    }

    /// Opens a new connection and drives it on a background task. With a secret, a refused
    /// password reads the secret again and tries once more (the password was rotated).
    pub async fn connect(&self) -> Result<Client, ConnectError> {
        let Some(secret) = &self.secret else {
            return self.connect_to(&self.base.config).await;
        };
        let config = secret.current.lock().await.clone();
        match self.connect_to(&config).await {
            Err(err) if err.is_auth_failure() => {
                tracing::warn!(
                    secret = %secret.arn,
                    "the database refused the credentials; reading the secret again"
                );
                let fresh = secret.read(&self.base).await?;
                *secret.current.lock().await = fresh.clone();
                self.connect_to(&fresh).await
            }
            other => other,
        }
    }

    async fn connect_to(&self, config: &Config) -> Result<Client, ConnectError> {
        let target = describe_target(config);
        let after = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let attempt = async {
            match (config.get_ssl_mode(), &self.tls) {
                (SslMode::Disable, _) | (_, None) => {
                    let (client, connection) = config.connect(NoTls).await?;
                    tokio::spawn(drive(connection));
                    Ok(client)
                }
                (_, Some(tls)) => {
                    let (client, connection) = config.connect(tls.clone()).await?;
                    tokio::spawn(drive(connection));
                    Ok(client)
                }
            }
        };
        match tokio::time::timeout(after, attempt).await {
            Ok(result) => result.map_err(|source| ConnectError::Connect { target, source }),
            Err(_) => Err(ConnectError::TimedOut { target, after }),
        }
    }

    /// Asks the server to cancel what a connection is running (a statement past its time).
    /// Best effort: errors are logged, not returned.
    ///
    /// The request is sent on a connection of its own that stays open until the other side
    /// closes it. tokio-postgres closes at once after writing, and PgBouncer (1.18) drops a
    /// cancel request whose client has gone before it was forwarded; libpq waits, and so do we.
    pub async fn cancel(&self, token: CancelToken) {
        let config = match &self.secret {
            Some(secret) => secret.current.lock().await.clone(),
            None => self.base.config.clone(),
        };
        if let Err(err) = self.send_cancel(&config, token).await {
            tracing::warn!(error = %notify_core::error::report(err.as_ref()), "cannot cancel a statement");
        }
    }

    async fn send_cancel(
        &self,
        config: &Config,
        token: CancelToken,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let host = match config.get_hosts().first() {
            Some(Host::Tcp(name)) => name.clone(),
            // a socket: nothing in between to lose the request
            _ => return Ok(token.cancel_query(NoTls).await?),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map(UntilClosed)?;
        match &self.tls {
            Some(tls) => {
                let connect = <MakeTlsConnector as tokio_postgres::tls::MakeTlsConnect<
                    UntilClosed,
                >>::make_tls_connect(&mut tls.clone(), &host)?;
                Ok(token.cancel_query_raw(stream, connect).await?)
            }
            None => Ok(token.cancel_query_raw(stream, NoTls).await?),
        }
    }
}

/// A TCP stream whose shutdown waits for the peer to close (read until end of stream).
struct UntilClosed(tokio::net::TcpStream);

impl tokio::io::AsyncRead for UntilClosed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for UntilClosed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let mut scratch = [0_u8; 64];
        loop {
            let mut buf = tokio::io::ReadBuf::new(&mut scratch);
            match tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut self.0), cx, &mut buf) {
                std::task::Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                    return std::task::Poll::Ready(Ok(()));
                }
                std::task::Poll::Ready(Ok(())) => continue,
                std::task::Poll::Ready(Err(err)) => return std::task::Poll::Ready(Err(err)),
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
    }
}

impl Base {
    fn parse(text: &str) -> Result<Self, ConnectError> {
        let sslmode_given = names_sslmode(text);
        let config = if text.trim().is_empty() {
            Config::new()
        } else {
            Config::from_str(text).map_err(ConnectError::InvalidUrl)?
        };
        Ok(Self {
            config: finish(config, sslmode_given)?,
            sslmode_given,
            pinned: false,
        })
    }
}

impl Secret {
    /// Reads the secret and combines it with `base`.
    async fn read(&self, base: &Base) -> Result<Config, ConnectError> {
        let output = self
            .client
            .get_secret_value()
            .secret_id(&self.arn)
            .send()
            .await
            .map_err(|source| ConnectError::SecretRead {
                arn: self.arn.clone(),
                source: Box::new(source),
            })?;
        let text = output
            .secret_string()
            .ok_or_else(|| self.shape("it holds no SecretString"))?;
        self.settings(text, base)
    }

    fn shape(&self, reason: &str) -> ConnectError {
        ConnectError::SecretShape {
            arn: self.arn.clone(),
            reason: reason.to_owned(),
        }
    }

    /// The settings a secret's JSON gives: its `url`, or its RDS fields over `base`.
    /// Errors never quote the secret.
    fn settings(&self, text: &str, base: &Base) -> Result<Config, ConnectError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|_| self.shape("it is not a JSON object"))?;
        if let Some(url) = value.get("url").and_then(serde_json::Value::as_str) {
            let parsed = Config::from_str(url)
                .map_err(|_| self.shape("its `url` is not a valid connection string"))?;
            return finish(parsed, names_sslmode(url));
        }
        let field = |name: &str| value.get(name).and_then(serde_json::Value::as_str);
        let user =
            field("username").ok_or_else(|| self.shape("it holds neither `url` nor `username`"))?;
        let password = field("password").ok_or_else(|| self.shape("it holds no `password`"))?;
        let port = match value.get("port") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(n)) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
            Some(serde_json::Value::String(s)) => s.parse().ok(),
            Some(_) => None,
        };
        if value.get("port").is_some_and(|p| !p.is_null()) && port.is_none() {
            return Err(self.shape("its `port` is not a port number"));
        }
        let pinned = |given: bool| base.pinned && given;
        let host = field("host").filter(|_| !pinned(!base.config.get_hosts().is_empty()));
        let port = port.filter(|_| !pinned(!base.config.get_ports().is_empty()));
        let mut config = rehost(&base.config, host, port);
        config.user(user).password(password);
        if let Some(dbname) =
            field("dbname").filter(|_| !pinned(base.config.get_dbname().is_some()))
        {
            config.dbname(dbname);
        }
        if config.get_hosts().is_empty() {
            return Err(
                self.shape("it holds no `host`; add one, or set DATABASE_HOST (or DATABASE_URL)")
            );
        }
        finish(config, base.sslmode_given)
    }
}

/// Whether a connection string names an `sslmode` (URL query or `key=value` form).
fn names_sslmode(text: &str) -> bool {
    let text = text.trim();
    let pairs: Vec<&str> = if text.contains("://") {
        text.split_once('?')
            .map(|(_, query)| query.split('&').collect())
            .unwrap_or_default()
    } else {
        text.split_whitespace().collect()
    };
    pairs
        .iter()
        .any(|pair| pair.split('=').next().map(str::trim) == Some("sslmode"))
}

/// The TLS decision, the connect timeout and the keepalives, on parsed settings.
fn finish(mut config: Config, sslmode_given: bool) -> Result<Config, ConnectError> {
    let mode = if sslmode_given {
        config.get_ssl_mode()
    } else if is_local(&config) {
        SslMode::Disable
    } else {
        SslMode::Require
    };
    if mode == SslMode::Prefer {
        return Err(ConnectError::PreferRefused);
    }
    config.ssl_mode(mode);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    config.keepalives(true);
    if config.get_keepalives_idle() == Config::new().get_keepalives_idle() {
        config.keepalives_idle(KEEPALIVE_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVE_RETRIES);
    }
    Ok(config)
}

/// Every host is this machine (or there is none yet, as in a key=value string without one).
fn is_local(config: &Config) -> bool {
    config.get_hosts().iter().all(|host| match host {
        Host::Tcp(name) => {
            let name = name.trim_start_matches('[').trim_end_matches(']');
            name == "localhost"
                || name == "::1"
                || name
                    .parse::<std::net::Ipv4Addr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        #[cfg(unix)]
        Host::Unix(_) => true,
    })
}

/// The same settings with another host and port (either kept when `None`). Config can
/// only add hosts, so the settings are copied into a new one.
fn rehost(config: &Config, host: Option<&str>, port: Option<u16>) -> Config {
    let mut other = Config::new();
    if let Some(user) = config.get_user() {
        other.user(user);
    }
    if let Some(password) = config.get_password() {
        other.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        other.dbname(dbname);
    }
    if let Some(name) = config.get_application_name() {
        other.application_name(name);
    }
    if let Some(options) = config.get_options() {
        other.options(options);
    }
    other.ssl_mode(config.get_ssl_mode());
    if let Some(timeout) = config.get_connect_timeout() {
        other.connect_timeout(*timeout);
    }
    other.keepalives(config.get_keepalives());
    other.keepalives_idle(config.get_keepalives_idle());
    if let Some(interval) = config.get_keepalives_interval() {
        other.keepalives_interval(interval);
    }
    if let Some(retries) = config.get_keepalives_retries() {
        other.keepalives_retries(retries);
    }
    match host {
        Some(host) => {
            other.host(host);
        }
        None => {
            for host in config.get_hosts() {
                match host {
                    Host::Tcp(name) => other.host(name),
                    #[cfg(unix)]
                    Host::Unix(path) => other.host_path(path),
                };
            }
        }
    }
    match port {
        Some(port) => {
            other.port(port);
        }
        None => {
            for port in config.get_ports() {
                other.port(*port);
            }
        }
    }
    other
}

async fn drive<S, T>(connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if let Err(err) = connection.await {
        tracing::warn!(error = %notify_core::error::report(&err), "database connection closed");
    }
}

fn tls_connector(ca_file: Option<&Path>) -> Result<MakeTlsConnector, ConnectError> {
    let mut builder = TlsConnector::builder();
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|source| ConnectError::CaFile {
            path: path.to_owned(),
            source,
        })?;
        let certs =
            Certificate::stack_from_pem(&pem).map_err(|source| ConnectError::CaCertificates {
                path: path.to_owned(),
                source,
            })?;
        for cert in certs {
            builder.add_root_certificate(cert);
        }
    }
    let connector = builder.build().map_err(ConnectError::Tls)?;
    Ok(MakeTlsConnector::new(connector))
}

fn host_text(host: &Host) -> String {
    match host {
        Host::Tcp(name) => name.clone(),
        #[cfg(unix)]
        Host::Unix(path) => path.display().to_string(),
    }
}

/// `host:port/dbname`, never the user or password.
fn describe_target(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map_or_else(|| "localhost".into(), host_text);
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("(default)");
    format!("{host}:{port}/{db}")
}

/// A `postgres://` (or `postgresql://`) URL with another database name, its user, host and
/// query kept; `None` for a key=value connection string. Tools that hand a URL to other
/// programs (pgbench, a child process) need the text, not a parsed config.
pub fn url_with_dbname(url: &str, dbname: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let authority = main.split_once('/').map_or(main, |(a, _)| a);
    Some(match query {
        Some(q) => format!("{scheme}://{authority}/{dbname}?{q}"),
        None => format!("{scheme}://{authority}/{dbname}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Result<SslMode, ConnectError> {
        Base::parse(url).map(|b| b.config.get_ssl_mode())
    }

    #[test]
    fn sslmode_unset_means_require_for_any_host_but_this_machine() {
        assert_eq!(
            mode("postgres://u@db.example.com/x").unwrap(),
            SslMode::Require
        );
        assert_eq!(mode("host=10.0.0.5 user=u").unwrap(), SslMode::Require);
        assert_eq!(mode("postgres://u@localhost/x").unwrap(), SslMode::Disable);
        assert_eq!(
            mode("postgres://u@127.0.0.1:5433/x").unwrap(),
            SslMode::Disable
        );
        assert_eq!(mode("postgres://u@[::1]/x").unwrap(), SslMode::Disable);
        assert_eq!(
            mode("host=/run/postgresql user=u").unwrap(),
            SslMode::Disable
        );
        // what the text says wins
        assert_eq!(
            mode("postgres://u@localhost/x?sslmode=require").unwrap(),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://u@db.example.com/x?application_name=a&sslmode=disable").unwrap(),
            SslMode::Disable
        );
    }

    #[test]
    fn sslmode_prefer_is_refused_with_a_clear_error() {
        for url in [
            "postgres://u@db.example.com/x?sslmode=prefer",
            "host=localhost sslmode=prefer",
        ] {
            let err = mode(url).unwrap_err();
            assert!(matches!(err, ConnectError::PreferRefused), "{url}");
            assert!(err.to_string().contains("sslmode=require"), "{err}");
        }
    }

    #[test]
    fn connections_get_a_connect_timeout_and_keepalives() {
        let base = Base::parse("postgres://u@db.example.com/x").unwrap();
        assert_eq!(
            base.config.get_connect_timeout(),
            Some(&DEFAULT_CONNECT_TIMEOUT)
        );
        assert_eq!(base.config.get_keepalives_idle(), KEEPALIVE_IDLE);
        let base = Base::parse("postgres://u@db.example.com/x?connect_timeout=2").unwrap();
        assert_eq!(
            base.config.get_connect_timeout(),
            Some(&Duration::from_secs(2))
        );
    }

    fn secret() -> Secret {
        let conf = aws_sdk_secretsmanager::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
            .region(aws_config::Region::new("us-east-1"))
            .build();
        Secret {
            arn: "arn:aws:secretsmanager:us-east-1:123456789012:secret:db".into(),
            client: aws_sdk_secretsmanager::Client::from_conf(conf),
            current: tokio::sync::Mutex::new(Config::new()),
        }
    }

    #[test]
    fn the_rds_secret_shape_fills_in_over_the_fallback() {
        let base = Base::parse("host=db.internal port=5432 dbname=notify").unwrap();
        let config = secret()
            .settings(
                r#"{"username":"app","password":"s3cret","engine":"postgres"}"#,
                &base,
            )
            .unwrap();
        assert_eq!(config.get_user(), Some("app"));
        assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(describe_target(&config), "db.internal:5432/notify");
        assert_eq!(config.get_ssl_mode(), SslMode::Require);

        let full = r#"{"username":"app","password":"p","host":"rds.example.com","port":6432,"dbname":"other"}"#;
        let config = secret().settings(full, &base).unwrap();
        assert_eq!(describe_target(&config), "rds.example.com:6432/other");

        // DATABASE_HOST/PORT/NAME (an RDS Proxy endpoint) win over the secret's own
        let pinned = Base {
            pinned: true,
            ..Base::parse("host=proxy.internal").unwrap()
        };
        let config = secret().settings(full, &pinned).unwrap();
        assert_eq!(describe_target(&config), "proxy.internal:6432/other");
        assert_eq!(config.get_user(), Some("app"));

        let config = secret()
            .settings(
                r#"{"url":"postgres://a:b@127.0.0.1:5999/z?sslmode=disable"}"#,
                &base,
            )
            .unwrap();
        assert_eq!(describe_target(&config), "127.0.0.1:5999/z");
        assert_eq!(config.get_ssl_mode(), SslMode::Disable);
    }

    #[test]
    fn a_secret_that_cannot_be_used_is_named_without_quoting_it() {
        let empty = Base::parse("").unwrap();
        for (text, reason) in [
            ("not json s3cret", "not a JSON object"),
            (r#"{"password":"s3cret"}"#, "neither `url` nor `username`"),
            (r#"{"username":"app"}"#, "no `password`"),
            (r#"{"username":"app","password":"s3cret"}"#, "no `host`"),
            (
                r#"{"username":"app","password":"s3cret","host":"h","port":"x"}"#,
                "not a port number",
            ),
        ] {
            let err = secret().settings(text, &empty).unwrap_err().to_string();
            assert!(err.contains(reason), "{err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn urls_get_another_database() {
        assert_eq!(
            url_with_dbname(
                "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
                "b"
            )
            .as_deref(),
            Some("postgres://postgres@127.0.0.1:5432/b?sslmode=disable")
        );
        assert_eq!(
            url_with_dbname("postgresql://u:p@h", "b").as_deref(),
            Some("postgresql://u:p@h/b")
        );
        assert_eq!(url_with_dbname("host=h dbname=x", "b"), None);
    }
}
