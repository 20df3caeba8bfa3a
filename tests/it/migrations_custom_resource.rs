//! The `Migrations` custom resource handler (the migrator function's logic) against a real,
//! empty database and a local stand-in for the presigned S3 `ResponseURL`: what CloudFormation
//! would read, what the database holds, and that an answer is delivered on every path.
//!
//! The events are `tests/fixtures/events/migrations_*.json` (CloudFormation's request shapes:
//! a Create, an Update to the next schema version, the Update a rollback of that sends, a
//! Delete), with the `ResponseURL`'s scheme and host pointed at the stand-in (path and signed
//! query kept), and their `SchemaVersion`s set from the code's: the Create's and the
//! rollback's this code's version, the Update's the next, which is the tests' own migration
//! (`integration_tests::test_migration`), standing for the next release's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use integration_tests::TestDb;
use integration_tests::response_url::ResponseUrlStandIn;
use notify_core::config::{Vars, pairs};
use notify_postgres::custom_resource::{
    self, HandleError, Invocation, MigrationError, PHYSICAL_RESOURCE_ID, RESPONSE_RESERVE,
    RespondError, Responder, Status, apply_migration_files,
};
use notify_postgres::db::DbConfig;
use notify_postgres::migrate::{MIGRATIONS, MigrateReport};
use serde_json::Value;
use tokio::time::Instant;

/// The schema version this code needs.
fn code_version() -> i32 {
    notify_postgres::migrate::latest_version()
}

const LOG_STREAM: &str = "2025/01/01/[$LATEST]0123456789abcdef0123456789abcdef";

/// A fixture event with its `ResponseURL` sent to `stand_in`; also the original URL.
fn event(name: &str, stand_in: &ResponseUrlStandIn) -> (Value, String) {
    let path = format!(
        "{}/fixtures/events/migrations_{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut event: Value = serde_json::from_str(&text).unwrap();
    let (this, next) = (code_version().to_string(), (code_version() + 1).to_string());
    let (new, old) = match name {
        "update" => (next, Some(this)),
        "update_rollback" => (this, Some(next)),
        _ => (this, None),
    };
    event["ResourceProperties"]["SchemaVersion"] = Value::String(new);
    if let Some(old) = old {
        event["OldResourceProperties"]["SchemaVersion"] = Value::String(old);
    }
    let original = event["ResponseURL"].as_str().unwrap().to_owned();
    event["ResponseURL"] = Value::String(stand_in.rewrite(&original));
    (event, original)
}

/// An invocation with `budget` left before Lambda's deadline, beyond the answer's reserve.
fn invocation(budget: Duration) -> Invocation {
    Invocation {
        deadline: Instant::now() + RESPONSE_RESERVE + budget,
        log_stream: Some(LOG_STREAM.to_owned()),
    }
}

/// A port on this machine that nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs the handler on `event` against `config`, as the function's main does, with the code of
/// the next release: the embedded migrations and the test migration after them.
async fn run(
    event: Value,
    invocation: &Invocation,
    config: Result<DbConfig, notify_postgres::db::ConnectError>,
) -> Result<custom_resource::Response, HandleError> {
    run_with(
        &integration_tests::with_test_migration(),
        event,
        invocation,
        config,
    )
    .await
}

/// The same with the code whose migrations are `files`.
async fn run_with(
    files: &[(&'static str, &'static str)],
    event: Value,
    invocation: &Invocation,
    config: Result<DbConfig, notify_postgres::db::ConnectError>,
) -> Result<custom_resource::Response, HandleError> {
    let responder = Responder::new().expect("the system's root certificates load");
    custom_resource::handle(event, invocation, &responder, |to, give_up_at| {
        apply_migration_files(config, files, to, give_up_at)
    })
    .await
}

async fn recorded_migrations(db: &TestDb) -> Vec<String> {
    db.client()
        .await
        .query("SELECT name FROM schema_migrations ORDER BY version", &[])
        .await
        .expect("schema_migrations exists")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A Create migrates to the version its properties name, and no further (the code knows the
/// test migration after it; it is not applied).
#[tokio::test]
async fn create_applies_every_migration_and_puts_success_with_the_count() {
    let db = TestDb::empty().await;
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (create, original_url) = event("create", &stand_in);

    let returned = run(
        create.clone(),
        &invocation(Duration::from_secs(60)),
        Ok(db.config.clone()),
    )
    .await
    .expect("answered");

    let put = stand_in.next().await;
    assert_eq!(put.method, "PUT");
    // the signed path and query reach S3 untouched
    let signed = &original_url[original_url.find(".com/").unwrap() + 4..];
    assert_eq!(put.target, signed);
    // signed without a content type: sending one would break the signature
    assert_eq!(put.header("content-type"), Some(""));
    assert_eq!(
        put.header("content-length"),
        Some(put.body.len().to_string().as_str())
    );
    let body = put.json();
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
    assert_eq!(body["StackId"], create["StackId"]);
    assert_eq!(body["RequestId"], create["RequestId"]);
    assert_eq!(body["LogicalResourceId"], create["LogicalResourceId"]);
    assert_eq!(body["Data"]["applied"], MIGRATIONS.len());
    assert_eq!(body["Data"]["already_applied"], 0);
    assert_eq!(serde_json::to_value(&returned).unwrap(), body);
    assert!(stand_in.drain().is_empty(), "answered exactly once");

    let expected: Vec<&str> = MIGRATIONS.iter().map(|(name, _)| *name).collect();
    assert_eq!(recorded_migrations(&db).await, expected);
}

/// A deploy to the next schema version, then its rollback, as CloudFormation runs them: the
/// Update applies the new migration only; the Update of UPDATE_ROLLBACK_IN_PROGRESS (the
/// previous template's properties, SchemaVersion 3) changes nothing and succeeds, whether the
/// migrator serving it is the new code or the previous release's (which knows migrations up to
/// 3 only); the Delete that follows a failed stack leaves the data.
#[tokio::test]
async fn an_update_migrates_to_its_version_and_its_rollback_changes_nothing() {
    let db = TestDb::empty().await;
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (create, _) = event("create", &stand_in);
    let (update, _) = event("update", &stand_in);
    let (rollback, _) = event("update_rollback", &stand_in);
    let (delete, _) = event("delete", &stand_in);
    let budget = invocation(Duration::from_secs(60));
    let all: Vec<String> = integration_tests::with_test_migration()
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();

    run(create, &budget, Ok(db.config.clone())).await.unwrap();
    assert_eq!(stand_in.next().await.json()["Status"], "SUCCESS");
    assert_eq!(recorded_migrations(&db).await.len(), MIGRATIONS.len());

    run(update.clone(), &budget, Ok(db.config.clone()))
        .await
        .unwrap();
    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["PhysicalResourceId"], update["PhysicalResourceId"]);
    assert_eq!(body["RequestId"], update["RequestId"]);
    assert_eq!(body["Data"]["applied"], 1, "{body}");
    assert_eq!(body["Data"]["already_applied"], MIGRATIONS.len());
    assert_eq!(recorded_migrations(&db).await, all);

    // the rollback's Update, served by the new code, then by the previous release's
    let previous_release = MIGRATIONS.to_vec();
    for files in [integration_tests::with_test_migration(), previous_release] {
        run_with(&files, rollback.clone(), &budget, Ok(db.config.clone()))
            .await
            .unwrap();
        let body = stand_in.next().await.json();
        assert_eq!(body["Status"], "SUCCESS", "{body}");
        assert_eq!(body["RequestId"], rollback["RequestId"]);
        assert_eq!(body["PhysicalResourceId"], update["PhysicalResourceId"]);
        assert_eq!(body["Data"]["applied"], 0, "{body}");
        let reason = body["Reason"].as_str().unwrap();
        let ahead = format!(
            "the database is at version {}, ahead of it",
            code_version() + 1
        );
        assert!(reason.contains(&ahead), "{reason}");
        assert_eq!(recorded_migrations(&db).await, all, "nothing undone");
    }
    let column = integration_tests::count(
        &db.client().await,
        "SELECT count(*) FROM information_schema.columns
         WHERE table_name = 'job_queue' AND column_name = 'online_test'",
    )
    .await;
    assert_eq!(column, 1, "the newer schema is kept");

    run(delete, &budget, Ok(db.config.clone())).await.unwrap();
    assert_eq!(stand_in.next().await.json()["Status"], "SUCCESS");
    assert_eq!(
        recorded_migrations(&db).await,
        all,
        "a Delete keeps the data"
    );
}

/// An Update naming a schema version the migrator's code does not have (a template ahead of
/// its code) fails with a reason that says so, and changes nothing.
#[tokio::test]
async fn an_update_to_a_version_the_code_does_not_know_fails_and_says_why() {
    let db = TestDb::empty().await;
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (update, _) = event("update", &stand_in);
    run_with(
        MIGRATIONS,
        update,
        &invocation(Duration::from_secs(60)),
        Ok(db.config.clone()),
    )
    .await
    .unwrap();
    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap();
    let unknown = format!(
        "schema version {} was asked for, but this code has migrations up to version {}",
        code_version() + 1,
        code_version()
    );
    assert!(reason.contains(&unknown), "{reason}");
    let untouched = integration_tests::count(
        &db.client().await,
        "SELECT count(*) FROM pg_tables WHERE tablename = 'schema_migrations'",
    )
    .await;
    assert_eq!(untouched, 0);
}

#[tokio::test]
async fn an_unreachable_database_is_answered_failed_with_the_reason() {
    let port = closed_port();
    let unreachable = DbConfig::new(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"),
        None,
    )
    .unwrap();
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (update, _) = event("update", &stand_in);
    let started = Instant::now();

    // 3 s to give up in: the connection is refused, tried again after 1 s, then reported
    let returned = run(
        update.clone(),
        &invocation(Duration::from_secs(3)),
        Ok(unreachable),
    )
    .await
    .expect("a failure is still answered");

    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "cannot connect to the database at 127.0.0.1:{port}"
        )),
        "{reason}"
    );
    assert!(reason.to_lowercase().contains("refused"), "{reason}");
    assert!(
        reason.ends_with(&format!("(log stream {LOG_STREAM})")),
        "{reason}"
    );
    assert!(!reason.contains('\n'), "one line: {reason}");
    assert_eq!(body["PhysicalResourceId"], update["PhysicalResourceId"]);
    assert!(body.get("Data").is_none(), "{body}");
    assert_eq!(returned.status, Status::Failed);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn invalid_database_settings_are_answered_failed_with_the_reason() {
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (create, _) = event("create", &stand_in);
    let settings = DbConfig::new("postgres://app@db.internal:notaport/notifications", None);
    assert!(settings.is_err());

    run(create, &invocation(Duration::from_secs(60)), settings)
        .await
        .expect("a failure is still answered");

    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap();
    assert!(
        reason.starts_with("cannot read the database settings: DATABASE_URL is not a valid"),
        "{reason}"
    );
    // a Create that failed still names the id CloudFormation will send the Delete for
    assert_eq!(body["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
}

#[tokio::test]
async fn missing_database_settings_are_answered_failed_with_the_reason() {
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (update, _) = event("update", &stand_in);
    // what the function reads when neither DATABASE_SECRET_ARN nor DATABASE_URL is set
    let nothing = pairs(&[]);
    let settings = DbConfig::from_lookup(&Vars::new(&nothing)).await;

    run(update, &invocation(Duration::from_secs(60)), settings)
        .await
        .expect("a failure is still answered");

    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap();
    assert!(
        reason.starts_with("cannot read the database settings: DATABASE_URL is not set"),
        "{reason}"
    );
}

#[tokio::test]
async fn delete_answers_success_without_touching_the_database() {
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (delete, _) = event("delete", &stand_in);
    let touched = AtomicBool::new(false);
    let responder = Responder::new().unwrap();

    let returned = custom_resource::handle(
        delete.clone(),
        &invocation(Duration::from_secs(60)),
        &responder,
        |_, _| async {
            touched.store(true, Ordering::SeqCst);
            Err::<MigrateReport, _>(MigrationError::TimedOut(Duration::ZERO))
        },
    )
    .await
    .expect("answered");

    assert!(
        !touched.load(Ordering::SeqCst),
        "Delete called the database"
    );
    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "SUCCESS", "{body}");
    assert_eq!(body["PhysicalResourceId"], delete["PhysicalResourceId"]);
    assert_eq!(body["RequestId"], delete["RequestId"]);
    assert!(body.get("Data").is_none(), "{body}");
    assert_eq!(serde_json::to_value(&returned).unwrap(), body);
}

#[tokio::test]
async fn migrations_cut_off_by_the_deadline_are_answered_failed_in_time() {
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (create, _) = event("create", &stand_in);
    let responder = Responder::new().unwrap();
    let started = Instant::now();

    // one second to migrate in, and a migration that never ends
    custom_resource::handle(
        create,
        &invocation(Duration::from_secs(1)),
        &responder,
        |_, _| std::future::pending(),
    )
    .await
    .expect("answered");

    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "FAILED", "{body}");
    let reason = body["Reason"].as_str().unwrap();
    assert!(reason.contains("did not finish within"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_unknown_request_type_is_answered_failed() {
    let mut stand_in = ResponseUrlStandIn::start().await;
    let (mut event, _) = event("update", &stand_in);
    event["RequestType"] = Value::String("Replace".into());

    run(
        event,
        &invocation(Duration::from_secs(60)),
        Err(notify_postgres::db::ConnectError::MissingUrl),
    )
    .await
    .unwrap();

    let body = stand_in.next().await.json();
    assert_eq!(body["Status"], "FAILED", "{body}");
    assert!(
        body["Reason"].as_str().unwrap().contains("\"Replace\""),
        "{body}"
    );
}

#[tokio::test]
async fn a_5xx_from_s3_is_retried_and_a_403_is_the_invocation_s_error() {
    // 503 then 200: delivered on the second attempt, the same body both times
    let mut stand_in = ResponseUrlStandIn::answering(vec![503]).await;
    let (delete, _) = event("delete", &stand_in);
    let responder = Responder::new().unwrap();
    let budget = invocation(Duration::from_secs(60));
    let never = |_, _| async { unreachable!("Delete migrates nothing") };
    custom_resource::handle(delete.clone(), &budget, &responder, never)
        .await
        .expect("delivered on the retry");
    let first = stand_in.next().await;
    let second = stand_in.next().await;
    assert_eq!(first.body, second.body);
    assert_eq!(second.json()["Status"], "SUCCESS");

    // 403 (an expired signature): not retried, and the invocation fails, so Lambda's own
    // retry of the asynchronous invocation runs it again
    let mut stand_in = ResponseUrlStandIn::answering(vec![403]).await;
    let (delete, _) = event("delete", &stand_in);
    let err = custom_resource::handle(delete, &budget, &responder, never)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            HandleError::Respond(RespondError::Status { status, .. }) if status.as_u16() == 403
        ),
        "{err:?}"
    );
    stand_in.next().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(stand_in.drain().is_empty(), "a 403 is not retried");
}

#[tokio::test]
async fn an_event_that_is_not_a_custom_resource_request_is_an_error_and_sends_nothing() {
    let mut stand_in = ResponseUrlStandIn::start().await;
    let scheduled: Value =
        serde_json::from_str(include_str!("../fixtures/events/scheduled.json")).unwrap();
    let responder = Responder::new().unwrap();
    let err = custom_resource::handle(
        scheduled,
        &invocation(Duration::from_secs(60)),
        &responder,
        |_, _| async { unreachable!("nothing to migrate for") },
    )
    .await
    .unwrap_err();
    assert!(matches!(err, HandleError::NotARequest(_)), "{err:?}");
    assert!(stand_in.drain().is_empty());
}
