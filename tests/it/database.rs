//! The database layer on the paths users take: through a transaction-pooling PgBouncer
//! (`make test` runs this file a second time through one), with a database that is down or
//! silent at cold start, a statement stuck behind a lock, a schema older than the code, and a
//! password rotated in Secrets Manager.

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::TestDb;
use integration_tests::apigw::{ApiRequest, Version, header, new_org, parts};
use integration_tests::proxy::Proxy;
use lambda_http::http::StatusCode;
use notify_postgres::db::{ConnectError, DbConfig};
use serde_json::json;
// every answer checked against the API contract (functions/ingest/openapi.yaml)
use integration_tests::contract::Ingest;
use notify_api::IngestConfig;
use notify_core::store::{JobStore, StoreError};
use notify_postgres::PgStore;

fn sms() -> serde_json::Value {
    json!({"channel": "sms", "to": "+15555550100", "message": "Your code is 123456"})
}

fn ingest(store: PgStore) -> Ingest {
    Ingest::new(Arc::new(store), IngestConfig::default())
}

async fn post(ingest: &Ingest, org: uuid::Uuid) -> (StatusCode, serde_json::Value, Option<String>) {
    let response = ingest
        .handle(ApiRequest::post(Version::V2, &sms()).org(org).build())
        .await;
    let (status, body) = parts(&response);
    let retry_after = header(&response, "retry-after").map(str::to_owned);
    (status, body, retry_after)
}

async fn job_count(db: &TestDb) -> i64 {
    integration_tests::count(&db.client().await, "SELECT count(*) FROM job_requests").await
}

/// Where the code under test reaches the server: the pooler when there is one.
fn server_socket() -> std::net::SocketAddr {
    let (host, port) = integration_tests::pooler()
        .unwrap_or_else(|| integration_tests::admin_config().host_port());
    format!("{host}:{port}").parse().expect("an IP host")
}

/// The second pass is only worth something if the pooler really is in transaction mode:
/// there, named prepared statements (what the store used before) break as soon as clients
/// outnumber server connections. Straight to the server they work.
#[tokio::test]
async fn named_prepared_statements_break_through_the_pooler_and_only_there() {
    let db = TestDb::new().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let config = db.config.clone();
        tasks.push(tokio::spawn(async move {
            let client = config.connect().await.expect("connect");
            let mut errors = Vec::new();
            for i in 0..20_i64 {
                let result = async {
                    let statement = client.prepare("SELECT $1::bigint + 1").await?;
                    client.query_one(&statement, &[&i]).await
                }
                .await;
                if let Err(err) = result {
                    errors.push(notify_core::error::report(&err));
                }
            }
            errors
        }));
    }
    let mut errors = Vec::new();
    for task in tasks {
        errors.extend(task.await.unwrap());
    }
    if integration_tests::pooler().is_some() {
        assert!(
            errors.iter().any(|e| e.contains("prepared statement")),
            "through a transaction pooler named statements collide or vanish: {errors:?}"
        );
    } else {
        assert!(
            errors.is_empty(),
            "straight to the server they work: {errors:?}"
        );
    }
}

#[tokio::test]
async fn ingest_cold_started_with_the_database_down_answers_503_then_serves() {
    let db = TestDb::new().await;
    let mut proxy = Proxy::start(server_socket()).await;
    proxy.cut();
    let store = PgStore::new(db.config.with_host_port("127.0.0.1", proxy.port))
        .with_statement_timeout(Duration::from_secs(2));
    // the cold start's warm-up fails quietly instead of failing the start
    notify_postgres::startup::warm(&store).await;
    let ingest = ingest(store);
    let org = new_org();
    let (status, body, retry_after) = post(&ingest, org).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "unavailable");
    assert_eq!(retry_after.as_deref(), Some("5"));
    assert_eq!(job_count(&db).await, 0);

    proxy.restore().await;
    let (status, body, _) = post(&ingest, org).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(job_count(&db).await, 1);
}

#[tokio::test]
async fn a_statement_past_its_timeout_is_cancelled_and_answers_503() {
    let db = TestDb::new().await;
    let ingest =
        ingest(PgStore::new(db.config.clone()).with_statement_timeout(Duration::from_millis(500)));
    let org = new_org();
    assert_eq!(post(&ingest, org).await.0, StatusCode::ACCEPTED);

    // another session holds the table: the insert waits behind its lock
    let mut locker = db.client().await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE job_requests IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let started = Instant::now();
    let (status, body, retry_after) = post(&ingest, org).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry_after.as_deref(), Some("5"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // the waiting statement was cancelled on the server, not left queued behind the lock
    let observer = db.client().await;
    let waiting = async {
        integration_tests::count(
            &observer,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await
    };
    let mut left = waiting.await;
    for _ in 0..50 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = integration_tests::count(
            &observer,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await;
    }
    assert_eq!(left, 0, "the timed-out statement still waits on the server");
    tx.rollback().await.unwrap();

    let (status, body, _) = post(&ingest, org).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "the same handler serves again: {body}"
    );
    assert_eq!(
        job_count(&db).await,
        2,
        "the timed-out request wrote nothing"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_fails_the_connect_within_its_timeout() {
    // accepts the TCP connection, then says nothing (a blackholed database looks the same
    // once SYN is answered by something in between)
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let config = DbConfig::new(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable&connect_timeout=1"),
        None,
    )
    .unwrap();
    let started = Instant::now();
    let err = config.connect().await.unwrap_err();
    assert!(matches!(err, ConnectError::TimedOut { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        notify_core::error::report(&err).contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    // the store answers "unavailable" (ingest: 503) instead of hanging
    let store = PgStore::new(config).with_statement_timeout(Duration::from_secs(1));
    let err = store.get(new_org(), new_org()).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    held.abort();
}

#[tokio::test]
async fn a_schema_older_than_the_code_refuses_to_serve_naming_the_missing_migration() {
    let db = TestDb::empty().await;
    let all = notify_postgres::migrate::MIGRATIONS;
    let (last, _) = all[all.len() - 1];
    notify_postgres::migrate::run_files(&mut db.client().await, &all[..all.len() - 1])
        .await
        .unwrap();

    let store = PgStore::new(db.config.clone());
    let err = store.ready().await.unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaBehind(name) if name == last),
        "{err:?}"
    );
    assert!(err.to_string().contains(last), "{err}");
    let (status, body, _) = post(&ingest(PgStore::new(db.config.clone())), new_org()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");

    // MIGRATE_ON_START (local use) applies what is missing on the first connection
    let migrating = ingest(PgStore::new(db.config.clone()).with_migrations(true));
    let (status, body, _) = post(&migrating, new_org()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body, _) = post(&ingest(PgStore::new(db.config.clone())), new_org()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "now current: {body}");
}

async fn secrets_client() -> aws_sdk_secretsmanager::Client {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok(),
        "AWS_ENDPOINT_URL is not set: run the tests with `make test`, which starts the stand-in"
    );
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::v2026_01_12())
        .load()
        .await;
    aws_sdk_secretsmanager::Client::new(&sdk)
}

/// The RDS-managed secret shape, as Secrets Manager rotation writes it.
fn rds_secret(role: &str, password: &str, host: &str, port: u16, dbname: &str) -> String {
    json!({"engine": "postgres", "username": role, "password": password, "host": host,
           "port": port, "dbname": dbname})
    .to_string()
}

#[tokio::test]
async fn a_password_rotated_in_the_secret_reaches_a_warm_function() {
    let db = TestDb::new().await;
    let admin = db.client().await;
    let role = format!("rot_{}", &db.name[db.name.len() - 8..]);
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'first-password';
             GRANT ALL ON ALL TABLES IN SCHEMA public TO {role};
             GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
    // the secret names the server itself (the pooler's auth file knows only the admin role)
    let (host, port) = integration_tests::admin_config().host_port();
    let secrets = secrets_client().await;
    let name = format!("notif/{}", db.name);
    let arn = secrets
        .create_secret()
        .name(&name)
        .secret_string(rds_secret(&role, "first-password", &host, port, &db.name))
        .send()
        .await
        .expect("create the secret in the stand-in")
        .arn
        .unwrap();

    let config = DbConfig::from_secret(secrets.clone(), &arn, "sslmode=disable", None)
        .await
        .unwrap();
    let ingest = ingest(PgStore::new(config));
    let org = new_org();
    assert_eq!(post(&ingest, org).await.0, StatusCode::ACCEPTED);

    // rotation: the password changes on the server and in the secret; the warm function's
    // connection is then closed (as after a failover or an idle timeout)
    admin
        .batch_execute(&format!("ALTER ROLE {role} PASSWORD 'second-password'"))
        .await
        .unwrap();
    secrets
        .put_secret_value()
        .secret_id(&arn)
        .secret_string(rds_secret(&role, "second-password", &host, port, &db.name))
        .send()
        .await
        .unwrap();
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1",
            &[&role],
        )
        .await
        .unwrap();

    // the old password is really refused now
    let old = DbConfig::new(
        &format!(
            "postgres://{role}:first-password@{host}:{port}/{}?sslmode=disable",
            db.name
        ),
        None,
    )
    .unwrap();
    assert!(old.connect().await.unwrap_err().is_auth_failure());

    // the first call may meet the closed connection (503); the next one reconnects, is
    // refused with the cached password, reads the secret again and succeeds
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let (status, _, _) = post(&ingest, org).await;
        statuses.push(status);
        if status == StatusCode::ACCEPTED {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&StatusCode::ACCEPTED), "{statuses:?}");
    assert!(statuses.len() <= 2, "{statuses:?}");
    assert_eq!(job_count(&db).await, 2);
    drop(ingest);
    admin
        .batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}';
             REASSIGN OWNED BY {role} TO postgres; DROP OWNED BY {role}; DROP ROLE {role};"
        ))
        .await
        .unwrap();
}

/// The tests' template database is migrated once per set of migrations, and a server may be
/// kept up for days (`make db/up`): its history partitions are those of the day it was built.
/// A database cloned from a template built ten days ago still takes today's jobs, as each
/// clone makes the days around today (as the sweeper does first at every run).
#[tokio::test]
async fn a_database_cloned_from_a_template_built_days_ago_takes_todays_jobs() {
    // a template as it was left ten days ago: its days are those around that day
    let old = TestDb::empty().await;
    {
        let mut client = old.client().await;
        notify_postgres::migrate::run(&mut client).await.unwrap();
        let days: Vec<String> = client
            .query("SELECT to_char(day, 'YYYYMMDD') FROM history_days", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for day in days {
            client
                .batch_execute(&format!(
                    "DROP TABLE job_requests_{day}, job_outcomes_{day}, job_attempts_{day}"
                ))
                .await
                .unwrap();
        }
        client
            .batch_execute(
                "DELETE FROM history_days;
                 SELECT history_add_days((now() AT TIME ZONE 'UTC')::date - 11, 9);",
            )
            .await
            .unwrap();
        let today = integration_tests::count(
            &client,
            "SELECT count(*) FROM history_days WHERE day = (now() AT TIME ZONE 'UTC')::date",
        )
        .await;
        assert_eq!(today, 0, "the old template has no partition for today");
    }
    let db = TestDb::cloned_from(integration_tests::admin_config(), &old.name).await;
    let ingest = ingest(db.store().await);
    let (status, body, _) = post(&ingest, uuid::Uuid::new_v4()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(job_count(&db).await, 1);
}
