//! A bad DATABASE_URL gives a one-line error naming the problem, never a panic.

use integration_tests::TestDb;
use notify_core::error::report;
use notify_postgres::db::DbConfig;

fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let line = report(err);
    assert!(!line.contains('\n'), "one line: {line}");
    line
}

#[test]
fn an_unparseable_url_is_named() {
    let err = DbConfig::new("postgres://user@host:notaport/db", None).unwrap_err();
    let line = one_line(&err);
    assert!(line.contains("DATABASE_URL is not a valid"), "{line}");
}

#[tokio::test]
async fn an_unreachable_host_is_named() {
    // a port nothing listens on
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = DbConfig::new(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable&connect_timeout=2"),
        None,
    )
    .unwrap();
    let err = config.connect().await.unwrap_err();
    let line = one_line(&err);
    assert!(
        line.contains(&format!(
            "cannot connect to the database at 127.0.0.1:{port}"
        )),
        "{line}"
    );
    assert!(line.to_lowercase().contains("refused"), "{line}");
}

#[tokio::test]
async fn a_wrong_password_is_named() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let role = format!("pw_{}", &db.name[db.name.len() - 8..]);
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'right-password'"
        ))
        .await
        .unwrap();
    let url = std::env::var("DATABASE_URL").unwrap();
    let wrong = url.replacen(
        "postgres://postgres@",
        &format!("postgres://{role}:wrong@"),
        1,
    );
    assert_ne!(
        wrong, url,
        "DATABASE_URL has the form postgres://postgres@host:port/db"
    );
    let err = DbConfig::new(&wrong, None)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    let line = one_line(&err);
    assert!(line.contains("password authentication failed"), "{line}");
    client
        .batch_execute(&format!("DROP ROLE {role}"))
        .await
        .unwrap();
}

#[test]
fn a_missing_ca_file_is_named() {
    let err = DbConfig::new(
        "postgres://u@localhost/db?sslmode=require",
        Some(std::path::Path::new("/nonexistent/rds-bundle.pem")),
    )
    .unwrap_err();
    let line = one_line(&err);
    assert!(line.contains("/nonexistent/rds-bundle.pem"), "{line}");
}

#[tokio::test]
async fn iam_authentication_without_tls_or_a_user_is_named() {
    use notify_core::config::{Vars, pairs};
    for (settings, expected) in [
        (
            // a local host with no sslmode is plain text: RDS takes a token over TLS only
            [
                ("DATABASE_IAM_AUTH", "true"),
                ("DATABASE_URL", "postgres://app@127.0.0.1/db"),
            ],
            "DATABASE_IAM_AUTH=true needs TLS",
        ),
        (
            [
                ("DATABASE_IAM_AUTH", "true"),
                ("DATABASE_HOST", "db.example.com"),
            ],
            "set DATABASE_USER",
        ),
    ] {
        let lookup = pairs(&settings);
        let err = DbConfig::from_lookup(&Vars::new(&lookup))
            .await
            .unwrap_err();
        let line = one_line(&err);
        assert!(line.contains(expected), "{line}");
    }
}
