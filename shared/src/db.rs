//! Connecting to PostgreSQL from `DATABASE_URL`, and keeping one connection per process.
//!
//! `sslmode=disable` connects in plain text; any other mode (`prefer`, the libpq default, or
//! `require`) goes through native-tls, trusting every certificate in `DATABASE_CA_FILE` when
//! it is set (the RDS bundle holds many). native-tls verifies the server's certificate and
//! host name, so `require` with the RDS bundle is as strict as libpq's `verify-full`.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use native_tls::{Certificate, TlsConnector};
use postgres_native_tls::MakeTlsConnector;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, Config, NoTls};

/// Why a database connection could not be made. Each message names the problem in one line.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("DATABASE_URL is not set")]
    MissingUrl,
    #[error("DATABASE_URL is not a valid PostgreSQL connection string")]
    InvalidUrl(#[source] tokio_postgres::Error),
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
    #[error("cannot connect to the database at {target}")]
    Connect {
        target: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

/// Where and how to connect: the parsed URL plus the TLS set-up it asks for.
#[derive(Clone)]
pub struct DbConfig {
    config: Config,
    tls: Option<MakeTlsConnector>,
    target: String,
}

impl std::fmt::Debug for DbConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never print the password
        f.debug_struct("DbConfig")
            .field("target", &self.target)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl DbConfig {
    /// Reads `DATABASE_URL` and the optional `DATABASE_CA_FILE`.
    pub fn from_env() -> Result<Self, ConnectError> {
        let url = std::env::var("DATABASE_URL").map_err(|_| ConnectError::MissingUrl)?;
        let ca = std::env::var_os("DATABASE_CA_FILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Self::new(&url, ca.as_deref())
    }

    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<Self, ConnectError> {
        let config = Config::from_str(url).map_err(ConnectError::InvalidUrl)?;
        let tls = match config.get_ssl_mode() {
            SslMode::Disable => None,
            _ => Some(tls_connector(ca_file)?),
        };
        let target = describe_target(&config);
        Ok(Self {
            config,
            tls,
            target,
        })
    }

    /// The same server with another database name (the tests clone databases).
    pub fn with_dbname(&self, dbname: &str) -> Self {
        let mut other = self.clone();
        other.config.dbname(dbname);
        other.target = describe_target(&other.config);
        other
    }

    /// The same database through another host and port (tests route through a proxy).
    pub fn with_host_port(&self, host: &str, port: u16) -> Self {
        let mut other = self.clone();
        let mut config = Config::new();
        if let Some(user) = self.config.get_user() {
            config.user(user);
        }
        if let Some(password) = self.config.get_password() {
            config.password(password);
        }
        if let Some(dbname) = self.config.get_dbname() {
            config.dbname(dbname);
        }
        config.ssl_mode(self.config.get_ssl_mode());
        config.connect_timeout(std::time::Duration::from_secs(2));
        config.host(host).port(port);
        other.config = config;
        other.target = describe_target(&other.config);
        other
    }

    /// The first host and port, as text.
    pub fn host_port(&self) -> (String, u16) {
        let target = describe_target(&self.config);
        let host_port = target.split('/').next().unwrap_or_default();
        let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, "5432"));
        (host.to_owned(), port.parse().unwrap_or(5432))
    }

    pub fn dbname(&self) -> Option<&str> {
        self.config.get_dbname()
    }

    /// Opens a new connection and drives it on a background task.
    pub async fn connect(&self) -> Result<Client, ConnectError> {
        let err = |source| ConnectError::Connect {
            target: self.target.clone(),
            source,
        };
        match &self.tls {
            None => {
                let (client, connection) = self.config.connect(NoTls).await.map_err(err)?;
                tokio::spawn(drive(connection));
                Ok(client)
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await.map_err(err)?;
                tokio::spawn(drive(connection));
                Ok(client)
            }
        }
    }
}

async fn drive<S, T>(connection: tokio_postgres::Connection<S, T>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if let Err(err) = connection.await {
        tracing::warn!(error = %crate::error::report(&err), "database connection closed");
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

fn describe_target(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
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
    use super::url_with_dbname;

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
