//! The migration runner: idempotent, safe under concurrent cold starts, refuses edits.

use integration_tests::TestDb;
use shared::migrate::{self, MIGRATIONS};

#[tokio::test]
async fn applying_twice_is_a_no_op() {
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    let first = migrate::run(&mut client).await.unwrap();
    assert_eq!(first.applied.len(), MIGRATIONS.len());
    let second = migrate::run(&mut client).await.unwrap();
    assert!(second.applied.is_empty());
    assert_eq!(second.already_applied, MIGRATIONS.len());
    let recorded: i64 =
        integration_tests::count(&client, "SELECT count(*) FROM schema_migrations").await;
    assert_eq!(recorded as usize, MIGRATIONS.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appliers_end_with_one_applied_set() {
    let db = TestDb::empty().await;
    let mut runs = Vec::new();
    for _ in 0..6 {
        let config = db.config.clone();
        runs.push(tokio::spawn(async move {
            let mut client = config.connect().await.unwrap();
            migrate::run(&mut client).await.unwrap()
        }));
    }
    let mut applied_total = 0;
    for run in runs {
        applied_total += run.await.unwrap().applied.len();
    }
    assert_eq!(
        applied_total,
        MIGRATIONS.len(),
        "each file applied by exactly one run"
    );
    let client = db.client().await;
    let versions: Vec<i32> = client
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions.len(), MIGRATIONS.len());
}

#[tokio::test]
async fn an_edited_applied_file_is_refused() {
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    migrate::run(&mut client).await.unwrap();
    let (name, sql) = MIGRATIONS[0];
    let edited: &'static str = Box::leak(format!("{sql}\n-- edited\n").into_boxed_str());
    let mut files = MIGRATIONS.to_vec();
    files[0] = (name, edited);
    let err = migrate::run_files(&mut client, &files).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains(name), "{message}");
    assert!(message.contains("edited after it was applied"), "{message}");
}

#[tokio::test]
async fn a_failing_migration_leaves_nothing_half_applied() {
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    let mut files = MIGRATIONS.to_vec();
    files.push((
        "9999_broken.sql",
        "CREATE TABLE half_done (x int); SELECT no_such_function();",
    ));
    let err = migrate::run_files(&mut client, &files).await.unwrap_err();
    assert!(err.to_string().contains("9999_broken.sql"));
    let half: Option<String> = client
        .query_one("SELECT to_regclass('half_done')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(half, None, "the broken file's transaction rolled back");
    // the good files were applied and recorded
    let recorded: i64 =
        integration_tests::count(&client, "SELECT count(*) FROM schema_migrations").await;
    assert_eq!(recorded as usize, MIGRATIONS.len());
}

#[tokio::test]
async fn a_concurrent_index_build_runs_outside_a_transaction_and_an_interrupted_one_is_named() {
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    let mut files = MIGRATIONS.to_vec();
    files.push((
        "9000_table.sql",
        "CREATE TABLE pairs (x int); INSERT INTO pairs VALUES (1), (1);",
    ));
    files.push((
        "9001_index.sql",
        "-- migrate: no-transaction\n\
         CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS pairs_x ON pairs (x);\n",
    ));
    // the build fails on the duplicate and leaves an invalid index behind
    let err = migrate::run_files(&mut client, &files).await.unwrap_err();
    assert!(err.to_string().contains("9001_index.sql"), "{err}");
    // IF NOT EXISTS would skip the invalid index: the runner names it instead
    let err = migrate::run_files(&mut client, &files).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("index pairs_x is invalid"), "{message}");
    assert!(
        message.contains("DROP INDEX CONCURRENTLY pairs_x"),
        "{message}"
    );
    let recorded = integration_tests::count(
        &client,
        "SELECT count(*) FROM schema_migrations WHERE version = 9001",
    )
    .await;
    assert_eq!(recorded, 0, "an invalid build is not recorded");

    client
        .batch_execute(
            "DROP INDEX pairs_x; DELETE FROM pairs WHERE ctid = (SELECT max(ctid) FROM pairs);",
        )
        .await
        .unwrap();
    let report = migrate::run_files(&mut client, &files).await.unwrap();
    assert_eq!(report.applied, vec!["9001_index.sql".to_owned()]);
    let valid: bool = client
        .query_one(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'pairs_x'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(valid);
}
