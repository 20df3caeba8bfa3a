//! Connecting to PostgreSQL, from `DATABASE_URL`, from a Secrets Manager secret, or with RDS
//! IAM authentication.
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
//! - **RDS IAM authentication.** With `DATABASE_IAM_AUTH=true` the password is an
//!   authentication token signed locally (SigV4, service `rds-db`, valid 15 minutes) from the
//!   function's own AWS credentials, afresh for each new connection: no secret is read, and
//!   nothing crosses the network before the database's own handshake. The user is
//!   `DATABASE_USER`, else `DATABASE_URL`'s; host, port and database as for a secret
//!   (`DATABASE_HOST`/`PORT`/`NAME` or `DATABASE_URL`). It needs TLS (RDS takes a token over
//!   TLS only), the role `rds_iam` granted to the user, and `rds-db:connect` on it in the
//!   function's policy. `DATABASE_SECRET_ARN` is then not read.
//! - **Cold start.** The TLS connector (OpenSSL reads and parses the system's trusted roots and
//!   the CA bundle: milliseconds of CPU) is built on a blocking thread while the secret is
//!   read, so neither waits for the other; [`DbConfig::from_lookup_with`] takes the function's
//!   one `SdkConfig`, shared by its other AWS clients.
//!
//! - **Prepared statements.** `DATABASE_PREPARED_STATEMENTS=true` has the store prepare each
//!   statement once per connection ([`DbConfig::with_prepared_statements`]): for a direct
//!   connection only.
//!
//! Nothing else here keeps session state: with prepared statements off (the default), every
//! connection works through a transaction-pooling PgBouncer or RDS Proxy.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use native_tls::{Certificate, TlsConnector};
use notify_core::config::{ConfigError, Vars};
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
/// How long an IAM authentication token is valid: RDS checks it when a connection opens only,
/// and 15 minutes is the most it accepts.
pub const IAM_TOKEN_VALIDITY: Duration = Duration::from_secs(900);

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
    #[error(transparent)]
    Setting(#[from] ConfigError),
    #[error(
        "DATABASE_IAM_AUTH=true needs TLS (RDS takes an IAM token over TLS only): \
         use sslmode=require, not sslmode=disable"
    )]
    IamWithoutTls,
    #[error(
        "DATABASE_IAM_AUTH=true needs the database user: set DATABASE_USER (or name the user in DATABASE_URL)"
    )]
    IamWithoutUser,
    #[error("DATABASE_IAM_AUTH=true needs {0} (the AWS SDK's settings found none)")]
    IamWithoutAws(&'static str),
    #[error("cannot sign an IAM authentication token for the database user {user}")]
    IamToken {
        user: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
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

/// Where and how to connect: the parsed settings, the TLS set-up they need, and where the
/// credentials come from.
#[derive(Clone)]
pub struct DbConfig {
    /// `DATABASE_URL` (or `DATABASE_HOST`/`PORT`/`NAME`), its TLS decision made; with a
    /// secret, the fallback for what the secret lacks.
    base: Base,
    tls: Option<MakeTlsConnector>,
    auth: Auth,
    /// Statements are prepared once per connection (`DATABASE_PREPARED_STATEMENTS`).
    prepared: bool,
}

/// Where the credentials come from.
#[derive(Clone)]
enum Auth {
    /// The connection string's own.
    Given,
    /// A Secrets Manager secret, read at cold start and again when the password is refused.
    Secret(Arc<Secret>),
    /// An RDS IAM authentication token, signed for each new connection.
    Iam(Arc<IamAuth>),
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

/// What signs an IAM authentication token: the user it is for, the region, and the
/// function's credentials (the SDK's provider, which refreshes them when they expire).
struct IamAuth {
    user: String,
    region: String,
    credentials: SharedCredentialsProvider,
}

impl std::fmt::Debug for DbConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never print the password
        let mut out = f.debug_struct("DbConfig");
        out.field("target", &describe_target(&self.base.config))
            .field("tls", &self.tls.is_some())
            .field("prepared_statements", &self.prepared);
        match &self.auth {
            Auth::Given => {}
            Auth::Secret(secret) => {
                out.field("secret", &secret.arn);
            }
            Auth::Iam(iam) => {
                out.field("iam_user", &iam.user);
            }
        }
        out.finish()
    }
}

impl DbConfig {
    /// Reads `DATABASE_SECRET_ARN` (then the secret, now), `DATABASE_IAM_AUTH` or
    /// `DATABASE_URL`, and the optional `DATABASE_CA_FILE` and `DATABASE_PREPARED_STATEMENTS`.
    pub async fn from_env() -> Result<Self, ConnectError> {
        Self::from_lookup(&Vars::process()).await
    }

    /// [`DbConfig::from_env`] over any lookup. The AWS SDK's settings are loaded here when the
    /// credentials need them (a secret, IAM authentication).
    pub async fn from_lookup(vars: &Vars<'_>) -> Result<Self, ConnectError> {
        Self::from_lookup_with(vars, None).await
    }

    /// Whether these settings reach AWS (a secret to read, IAM tokens to sign), so a function
    /// that has no other AWS client loads the SDK's settings only then.
    pub fn needs_aws(vars: &Vars<'_>) -> Result<bool, ConnectError> {
        Ok(
            vars.flag("DATABASE_IAM_AUTH", false)?
                || vars.optional("DATABASE_SECRET_ARN").is_some(),
        )
    }

    /// [`DbConfig::from_lookup`] on the function's own AWS SDK settings (`sdk`: loaded once per
    /// cold start and shared by all its AWS clients, so one HTTPS client and one set of
    /// credentials serve them all); `None` loads them here if needed. The TLS connector is
    /// built on a blocking thread meanwhile: beside the secret's read, or, with IAM
    /// authentication, beside whatever else the caller's cold start does.
    pub async fn from_lookup_with(
        vars: &Vars<'_>,
        sdk: Option<&aws_config::SdkConfig>,
    ) -> Result<Self, ConnectError> {
        let prepared = vars.flag("DATABASE_PREPARED_STATEMENTS", false)?;
        Ok(Self::reach_from(vars, sdk)
            .await?
            .with_prepared_statements(prepared))
    }

    /// Where the database is and how to authenticate to it: [`DbConfig::from_lookup_with`]
    /// but the statements' setting.
    async fn reach_from(
        vars: &Vars<'_>,
        sdk: Option<&aws_config::SdkConfig>,
    ) -> Result<Self, ConnectError> {
        let var = |name: &'static str| vars.optional(name);
        let ca = var("DATABASE_CA_FILE").map(PathBuf::from);
        let iam = vars.flag("DATABASE_IAM_AUTH", false)?;
        let arn = var("DATABASE_SECRET_ARN");
        if !iam && arn.is_none() {
            let url = var("DATABASE_URL").ok_or(ConnectError::MissingUrl)?;
            let base = Base::parse(&url)?;
            let tls = match base.config.get_ssl_mode() {
                SslMode::Disable => None,
                _ => Some(tls_connector_beside(ca).await?),
            };
            return Ok(Self {
                base,
                tls,
                auth: Auth::Given,
                prepared: false,
            });
        }
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
        let base = Base {
            pinned,
            ..Base::parse(&base)?
        };
        let loaded;
        let sdk = match sdk {
            Some(sdk) => sdk,
            None => {
                loaded = load_aws_config().await;
                &loaded
            }
        };
        if iam {
            let user = var("DATABASE_USER")
                .or_else(|| base.config.get_user().map(str::to_owned))
                .ok_or(ConnectError::IamWithoutUser)?;
            return Self::with_iam(sdk, user, base, ca).await;
        }
        let client = aws_sdk_secretsmanager::Client::new(sdk);
        let arn = arn.unwrap_or_default();
        Self::with_secret(client, &arn, base, ca).await
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
            auth: Auth::Given,
            prepared: false,
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
        Self::with_secret(client, arn, Base::parse(base)?, ca_file.map(Path::to_owned)).await
    }

    /// The secret read while the TLS connector is built.
    async fn with_secret(
        client: aws_sdk_secretsmanager::Client,
        arn: &str,
        base: Base,
        ca_file: Option<PathBuf>,
    ) -> Result<Self, ConnectError> {
        let mut secret = Secret {
            arn: arn.to_owned(),
            client,
            current: tokio::sync::Mutex::new(base.config.clone()),
        };
        let (tls, read) = tokio::join!(
            tls_connector_beside(ca_file),
            steps::timed("database secret", secret.read(&base))
        );
        *secret.current.get_mut() = read?;
        Ok(Self {
            base,
            tls: Some(tls?),
            auth: Auth::Secret(Arc::new(secret)),
            prepared: false,
        })
    }

    /// IAM authentication as `user`, with the region and credentials of `sdk`.
    async fn with_iam(
        sdk: &aws_config::SdkConfig,
        user: String,
        base: Base,
        ca_file: Option<PathBuf>,
    ) -> Result<Self, ConnectError> {
        if base.config.get_ssl_mode() == SslMode::Disable {
            return Err(ConnectError::IamWithoutTls);
        }
        let region = sdk
            .region()
            .ok_or(ConnectError::IamWithoutAws("a region (AWS_REGION)"))?
            .to_string();
        let credentials = sdk
            .credentials_provider()
            .ok_or(ConnectError::IamWithoutAws("credentials"))?;
        let tls = tls_connector_beside(ca_file).await?;
        Ok(Self {
            base,
            tls: Some(tls),
            auth: Auth::Iam(Arc::new(IamAuth {
                user,
                region,
                credentials,
            })),
            prepared: false,
        })
    }

    /// Whether the store prepares each statement once per connection and then only binds and
    /// executes it, instead of running it unnamed (parsed and planned on every call). Only
    /// for a connection that is the client's own for its whole life: a direct one, or a
    /// pooler that keeps each client's prepared statements apart (PgBouncer 1.21's
    /// `max_prepared_statements`). Through a transaction pooler without that, a statement
    /// prepared on one server connection is missing on the next, or another client's
    /// statement of the same name runs instead; RDS Proxy pins the session to one.
    /// `DATABASE_PREPARED_STATEMENTS` (default false; the template sets true unless the
    /// functions go through RDS Proxy).
    pub fn with_prepared_statements(mut self, prepared: bool) -> Self {
        self.prepared = prepared;
        self
    }

    /// See [`DbConfig::with_prepared_statements`].
    pub fn prepares(&self) -> bool {
        self.prepared
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
    /// With IAM authentication, each connection signs a token of its own.
    pub async fn connect(&self) -> Result<Client, ConnectError> {
        let secret = match &self.auth {
            Auth::Given => return self.connect_to(&self.base.config).await,
            Auth::Iam(iam) => {
                let (host, port) = self.host_port();
                let token = steps::timed("database IAM token", iam.token(&host, port)).await?;
                let mut config = self.base.config.clone();
                config.user(&iam.user).password(token);
                return self.connect_to(&config).await;
            }
            Auth::Secret(secret) => secret,
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
        let config = match &self.auth {
            Auth::Secret(secret) => secret.current.lock().await.clone(),
            Auth::Given | Auth::Iam(_) => self.base.config.clone(),
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

impl IamAuth {
    /// A token for `host:port`, signed now with the credentials as they are now.
    async fn token(&self, host: &str, port: u16) -> Result<String, ConnectError> {
        let failed = |source| ConnectError::IamToken {
            user: self.user.clone(),
            source,
        };
        let credentials = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|err| failed(Box::new(err)))?;
        iam_token(
            &credentials,
            &self.region,
            host,
            port,
            &self.user,
            std::time::SystemTime::now(),
        )
        .map_err(failed)
    }
}

/// An RDS IAM authentication token, the password of an IAM-authenticated connection: a
/// SigV4-presigned `GET https://host:port/?Action=connect&DBUser=user` for the service
/// `rds-db` in `region`, valid [`IAM_TOKEN_VALIDITY`] from `now`, written without its scheme
/// as the AWS SDKs' token generators write it:
/// `host:port/?Action=connect&DBUser=…&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=…&X-Amz-Date=…&X-Amz-Expires=900&X-Amz-SignedHeaders=host[&X-Amz-Security-Token=…]&X-Amz-Signature=…`.
/// Pure: no network, no clock but `now`.
pub fn iam_token(
    credentials: &aws_credential_types::Credentials,
    region: &str,
    host: &str,
    port: u16,
    user: &str,
    now: std::time::SystemTime,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    use aws_sigv4::http_request::{
        SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
    };
    let mut settings = SigningSettings::default();
    settings.expires_in = Some(IAM_TOKEN_VALIDITY);
    settings.signature_location = SignatureLocation::QueryParams;
    let identity: aws_smithy_runtime_api::client::identity::Identity = credentials.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("rds-db")
        .time(now)
        .settings(settings)
        .build()?
        .into();
    let action = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", "connect")
        .append_pair("DBUser", user)
        .finish();
    let url = format!("https://{host}:{port}/?{action}");
    let request = SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::empty())?;
    let (instructions, _signature) = sign(request, &params)?.into_parts();
    let mut query = url::form_urlencoded::Serializer::for_suffix(action, 0);
    for (name, value) in instructions.params() {
        query.append_pair(name, value);
    }
    Ok(format!("{host}:{port}/?{}", query.finish()))
}

/// The AWS SDK's settings from the environment (region, credentials, `AWS_ENDPOINT_URL`),
/// under the dated behaviour version every adapter pins: the SDK's defaults change only when
/// this line does. [`crate::startup::aws_config`] is the cold start's one load of it.
pub(crate) async fn load_aws_config() -> aws_config::SdkConfig {
    steps::timed(
        "aws_config",
        aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12()).load(),
    )
    .await
}

/// The cold start's breakdown: each set-up step's time at `debug` (`step`, `ms`, and `at_ms`
/// since the first step started), for [`crate::startup`] and this module's own steps (the
/// secret, the TLS connector, an IAM token). Here, not in `startup`, which builds on `db`.
pub(crate) mod steps {
    use std::future::Future;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// Awaits `work`, logging its time as the step `step`.
    pub(crate) async fn timed<T>(step: &'static str, work: impl Future<Output = T>) -> T {
        let started = now();
        let out = work.await;
        log(step, started);
        out
    }

    /// Runs `work` now, logging its time as the step `step`.
    pub(crate) fn timed_now<T>(step: &'static str, work: impl FnOnce() -> T) -> T {
        let started = now();
        let out = work();
        log(step, started);
        out
    }

    /// Runs `work` on a blocking thread (CPU-bound set-up), so the task that awaits it, and
    /// the cold start's other parts, go on meanwhile; a panic in `work` is resumed here.
    pub(crate) async fn beside<T: Send + 'static>(
        step: &'static str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        match tokio::task::spawn_blocking(move || timed_now(step, work)).await {
            Ok(out) => out,
            Err(err) => std::panic::resume_unwind(err.into_panic()),
        }
    }

    /// Now, the first step's start set if it was not.
    fn now() -> Instant {
        zero().max(Instant::now())
    }

    /// The instant the first step started: `at_ms` counts from it.
    fn zero() -> Instant {
        static ZERO: OnceLock<Instant> = OnceLock::new();
        *ZERO.get_or_init(Instant::now)
    }

    fn log(step: &'static str, started: Instant) {
        let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        // the target the docs name (`RUST_LOG=notify_postgres::startup=debug`), not this
        // module's path
        tracing::debug!(
            target: "notify_postgres::startup",
            step,
            ms = ms(started.elapsed()),
            at_ms = ms(started.duration_since(zero())),
            "set-up step"
        );
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

/// [`tls_connector`] on a blocking thread, so that the task that asked goes on meanwhile (a
/// secret's read, the other clients of a cold start). OpenSSL reads and parses the system's
/// trusted roots (and the CA bundle) here: milliseconds of CPU.
async fn tls_connector_beside(ca_file: Option<PathBuf>) -> Result<MakeTlsConnector, ConnectError> {
    steps::beside("database TLS connector", move || {
        tls_connector(ca_file.as_deref())
    })
    .await
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

    fn credentials(session_token: Option<&str>) -> aws_credential_types::Credentials {
        aws_credential_types::Credentials::new(
            "akid",
            "secret",
            session_token.map(str::to_owned),
            None,
            "test",
        )
    }

    #[test]
    fn an_iam_token_is_the_one_the_aws_sdk_signs() {
        // the vector of aws-sdk-rust's own token generator (sdk/rds/src/auth_token.rs)
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_724_709_600);
        let token = iam_token(
            &credentials(None),
            "us-east-1",
            "prod-instance.us-east-1.rds.amazonaws.com",
            3306,
            "peccy",
            now,
        )
        .unwrap();
        assert_eq!(
            token,
            "prod-instance.us-east-1.rds.amazonaws.com:3306/?Action=connect&DBUser=peccy\
             &X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=akid%2F20240826%2Fus-east-1%2Frds-db%2Faws4_request\
             &X-Amz-Date=20240826T220000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=dd0cba843009474347af724090233265628ace491ea17ce3eb3da098b983ad89"
        );
    }

    #[test]
    fn an_iam_token_has_the_documented_presigned_url_shape() {
        // AWS's form (RDS User Guide, IAM database authentication; `aws rds
        // generate-db-auth-token`): host:port/?Action=connect&DBUser=…&X-Amz-Algorithm=…
        // &X-Amz-Credential=…&X-Amz-Date=…&X-Amz-Expires=900&X-Amz-SignedHeaders=host
        // &X-Amz-Signature=…, with the session token of temporary credentials (a Lambda
        // function's) signed in
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_533_081_129);
        let token = iam_token(
            &credentials(Some("FwoG+session/token==")),
            "eu-west-1",
            "db.abc.eu-west-1.rds.amazonaws.com",
            5432,
            "notify_app",
            now,
        )
        .unwrap();
        let (target, query) = token.split_once("/?").unwrap();
        assert_eq!(target, "db.abc.eu-west-1.rds.amazonaws.com:5432");
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "Action",
                "DBUser",
                "X-Amz-Algorithm",
                "X-Amz-Credential",
                "X-Amz-Date",
                "X-Amz-Expires",
                "X-Amz-SignedHeaders",
                // signed in (SigV4 sorts the query before signing), written last, as the
                // SDK's signer writes it
                "X-Amz-Signature",
                "X-Amz-Security-Token"
            ]
        );
        let value = |name: &str| pairs.iter().find(|(k, _)| k == name).unwrap().1.as_str();
        assert_eq!(value("Action"), "connect");
        assert_eq!(value("DBUser"), "notify_app");
        assert_eq!(value("X-Amz-Algorithm"), "AWS4-HMAC-SHA256");
        assert_eq!(
            value("X-Amz-Credential"),
            "akid/20180731/eu-west-1/rds-db/aws4_request"
        );
        assert_eq!(value("X-Amz-Date"), "20180731T235209Z");
        assert_eq!(value("X-Amz-Expires"), "900");
        assert_eq!(value("X-Amz-SignedHeaders"), "host");
        assert_eq!(value("X-Amz-Security-Token"), "FwoG+session/token==");
        let signature = value("X-Amz-Signature");
        assert!(
            signature.len() == 64 && signature.bytes().all(|b| b.is_ascii_hexdigit()),
            "{signature}"
        );
        // percent-encoded as a URL query: `/` in the credential scope, `+`, `/` and `=` in
        // the session token
        assert!(
            query.contains("X-Amz-Credential=akid%2F20180731%2F"),
            "{query}"
        );
        assert!(
            query.contains("X-Amz-Security-Token=FwoG%2Bsession%2Ftoken%3D%3D"),
            "{query}"
        );
        // signed afresh: another instant, another signature
        let later = iam_token(
            &credentials(Some("FwoG+session/token==")),
            "eu-west-1",
            "db.abc.eu-west-1.rds.amazonaws.com",
            5432,
            "notify_app",
            now + Duration::from_secs(1),
        )
        .unwrap();
        assert_ne!(later, token);
    }

    fn sdk() -> aws_config::SdkConfig {
        aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(SharedCredentialsProvider::new(credentials(None)))
            .build()
    }

    async fn iam_settings(pairs: &[(&str, &str)]) -> Result<DbConfig, ConnectError> {
        let lookup = notify_core::config::pairs(pairs);
        DbConfig::from_lookup_with(&Vars::new(&lookup), Some(&sdk())).await
    }

    #[tokio::test]
    async fn iam_authentication_takes_the_user_and_never_reads_the_secret() {
        let config = iam_settings(&[
            ("DATABASE_IAM_AUTH", "true"),
            ("DATABASE_USER", "notify_app"),
            ("DATABASE_HOST", "db.internal"),
            ("DATABASE_NAME", "notify"),
            // set too (the template sets it for every function): not read
            (
                "DATABASE_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:1:secret:db",
            ),
        ])
        .await
        .unwrap();
        let debug = format!("{config:?}");
        assert!(debug.contains(r#"iam_user: "notify_app""#), "{debug}");
        assert!(!debug.contains("secret"), "{debug}");
        assert_eq!(config.host_port(), ("db.internal".to_owned(), 5432));
        assert_eq!(config.base.config.get_ssl_mode(), SslMode::Require);

        // the user from DATABASE_URL, when DATABASE_USER is unset
        let config = iam_settings(&[
            ("DATABASE_IAM_AUTH", "1"),
            ("DATABASE_URL", "postgres://app@db.internal:6432/notify"),
        ])
        .await
        .unwrap();
        assert!(format!("{config:?}").contains(r#"iam_user: "app""#));
    }

    #[tokio::test]
    async fn iam_authentication_without_tls_or_a_user_is_refused_by_name() {
        let err = iam_settings(&[
            ("DATABASE_IAM_AUTH", "true"),
            (
                "DATABASE_URL",
                "postgres://app@db.internal/notify?sslmode=disable",
            ),
        ])
        .await
        .unwrap_err();
        assert!(matches!(err, ConnectError::IamWithoutTls), "{err}");
        assert!(err.to_string().contains("sslmode=require"), "{err}");

        let err = iam_settings(&[
            ("DATABASE_IAM_AUTH", "true"),
            ("DATABASE_HOST", "db.internal"),
        ])
        .await
        .unwrap_err();
        assert!(matches!(err, ConnectError::IamWithoutUser), "{err}");
        assert!(err.to_string().contains("DATABASE_USER"), "{err}");

        let err = iam_settings(&[("DATABASE_IAM_AUTH", "maybe")])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("DATABASE_IAM_AUTH"), "{err}");
    }

    #[test]
    fn only_a_secret_or_iam_authentication_needs_aws() {
        let needs = |pairs: &[(&str, &str)]| {
            let lookup = notify_core::config::pairs(pairs);
            DbConfig::needs_aws(&Vars::new(&lookup)).unwrap()
        };
        assert!(!needs(&[("DATABASE_URL", "postgres://u@h/d")]));
        assert!(!needs(&[("DATABASE_IAM_AUTH", "false")]));
        assert!(needs(&[("DATABASE_IAM_AUTH", "true")]));
        assert!(needs(&[(
            "DATABASE_SECRET_ARN",
            "arn:aws:secretsmanager:x"
        )]));
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

    /// `DATABASE_PREPARED_STATEMENTS` reaches the settings whichever way the credentials come
    /// (a connection string, IAM), and is off unless set.
    #[tokio::test]
    async fn prepared_statements_are_off_unless_set() {
        for (prepared, expected) in [(None, false), (Some("false"), false), (Some("true"), true)] {
            let mut pairs = vec![(
                "DATABASE_URL",
                "postgres://app@127.0.0.1/notify?sslmode=disable",
            )];
            pairs.extend(prepared.map(|v| ("DATABASE_PREPARED_STATEMENTS", v)));
            let lookup = notify_core::config::pairs(&pairs);
            let direct = DbConfig::from_lookup(&Vars::new(&lookup)).await.unwrap();
            assert_eq!(direct.prepares(), expected, "{pairs:?}");
            let mut pairs = vec![
                ("DATABASE_IAM_AUTH", "true"),
                ("DATABASE_USER", "notify_app"),
                ("DATABASE_HOST", "db.internal"),
            ];
            pairs.extend(prepared.map(|v| ("DATABASE_PREPARED_STATEMENTS", v)));
            assert_eq!(
                iam_settings(&pairs).await.unwrap().prepares(),
                expected,
                "{pairs:?}"
            );
        }
        let lookup = notify_core::config::pairs(&[
            ("DATABASE_URL", "postgres://app@127.0.0.1/notify"),
            ("DATABASE_PREPARED_STATEMENTS", "maybe"),
        ]);
        assert!(
            DbConfig::from_lookup(&Vars::new(&lookup)).await.is_err(),
            "not a flag"
        );
    }
}
