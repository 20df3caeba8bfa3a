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

/// A migration that cannot take its locks in time (its own lock_timeout: a long statement
/// holds the table) rolls back and is tried again, and applies once the table is free; one
/// that never can fails, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_that_cannot_lock_in_time_is_tried_again() {
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    migrate::run(&mut client).await.unwrap();
    let mut files = MIGRATIONS.to_vec();
    files.push((
        "9998_locks.sql",
        "SET LOCAL lock_timeout = '100ms';
         LOCK TABLE notification_jobs IN ACCESS EXCLUSIVE MODE;
         CREATE TABLE after_the_lock (x int);",
    ));

    // a reader holds the table for 700 ms: the first tries time out, a later one applies
    let holder = db.client().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE notification_jobs IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        holder.batch_execute("COMMIT").await.unwrap();
        holder
    });
    let report = migrate::run_files(&mut client, &files).await.unwrap();
    let holder = release.await.unwrap();
    assert_eq!(report.applied, vec!["9998_locks.sql".to_owned()]);

    // held for longer than every retry together: the run fails and names the file
    files.push((
        "9999_never.sql",
        "SET LOCAL lock_timeout = '50ms';
         LOCK TABLE notification_jobs IN ACCESS EXCLUSIVE MODE;",
    ));
    holder
        .batch_execute("BEGIN; LOCK TABLE notification_jobs IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let err = migrate::run_files(&mut client, &files).await.unwrap_err();
    assert!(err.to_string().contains("9999_never.sql"), "{err}");
    holder.batch_execute("ROLLBACK").await.unwrap();
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

/// A job after 0011: recipient, recorded status, status as it stands, and its queue row's
/// attempts, tries, claim token and whether it has an expiry (None: no queue row).
type Standing = (
    String,
    String,
    String,
    Option<i32>,
    Option<i32>,
    Option<String>,
    Option<bool>,
);

/// 0011 moves the queue out of notification_jobs on a deployed database: every open job gets
/// its queue row (a claimed one keeps its claim, so its worker's completion still applies),
/// finished jobs get none, and the claim columns leave the job table, so a worker of the
/// previous release fails instead of claiming beside a new one.
#[tokio::test]
async fn the_queue_leaves_the_job_table_with_every_open_job() {
    let db = TestDb::empty().await;
    let mut client = db.client().await;
    let before = integration_tests::migrations_before("0011");
    migrate::run_files(&mut client, &before).await.unwrap();
    client
        .batch_execute(
            "INSERT INTO notification_jobs
                 (organization_id, channel, payload, status, attempts, max_attempts, tries,
                  next_attempt_at, expires_at, claimed_at, claim_token)
             VALUES
               ('00000000-0000-4000-8000-000000000001', 'sms', '{\"to\": \"+15555550101\"}',
                'pending', 0, 5, 0, now() - interval '1 minute', now() + interval '1 day',
                NULL, NULL),
               ('00000000-0000-4000-8000-000000000001', 'sms', '{\"to\": \"+15555550102\"}',
                'failed', 2, 5, 3, now() + interval '1 minute', NULL, NULL, NULL),
               ('00000000-0000-4000-8000-000000000001', 'sms', '{\"to\": \"+15555550103\"}',
                'processing', 1, 5, 1, now(), NULL, now() - interval '5 seconds',
                '00000000-0000-4000-8000-00000000c1a1'),
               ('00000000-0000-4000-8000-000000000001', 'sms', '{\"to\": \"+15555550104\"}',
                'processing', 3, 5, 3, now(), NULL, now() - interval '5 seconds',
                '00000000-0000-4000-8000-00000000c1a2'),
               ('00000000-0000-4000-8000-000000000001', 'sms', '{\"to\": \"+15555550105\"}',
                'sent', 1, 5, 1, now(), NULL, now(), '00000000-0000-4000-8000-00000000c1a3'),
               ('00000000-0000-4000-8000-000000000001', 'sms', '{\"to\": \"+15555550106\"}',
                'dead', 5, 5, 5, now(), NULL, NULL, NULL)",
        )
        .await
        .unwrap();
    // up to 0014: 0015 drops the adopting trigger checked below (by then the previous release
    // is one that queues its jobs itself)
    let report = migrate::run_files(&mut client, &integration_tests::migrations_before("0015"))
        .await
        .unwrap();
    assert!(
        report.applied.iter().any(|n| n.starts_with("0011_")),
        "{report:?}"
    );

    let rows = client
        .query(
            "SELECT j.payload ->> 'to', j.status::text, s.status::text,
                    q.attempts, q.tries, q.claim_token::text,
                    CASE WHEN q.id IS NOT NULL THEN q.expires_at IS NOT NULL END
             FROM notification_jobs AS j
             JOIN job_states AS s ON s.id = j.id
             LEFT JOIN job_queue AS q ON q.id = j.id
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<Standing> = rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
            )
        })
        .collect();
    let claim = |n: &str| Some(format!("00000000-0000-4000-8000-00000000c1a{n}"));
    let expected = vec![
        (
            "+15555550101".into(),
            "pending".into(),
            "pending".into(),
            Some(0),
            Some(0),
            None,
            Some(true),
        ),
        (
            "+15555550102".into(),
            "failed".into(),
            "failed".into(),
            Some(2),
            Some(3),
            None,
            Some(false),
        ),
        // claimed: the record says what it said before the claim; the claim is in the queue
        (
            "+15555550103".into(),
            "pending".into(),
            "processing".into(),
            Some(1),
            Some(1),
            claim("1"),
            Some(false),
        ),
        (
            "+15555550104".into(),
            "failed".into(),
            "processing".into(),
            Some(3),
            Some(3),
            claim("2"),
            Some(false),
        ),
        (
            "+15555550105".into(),
            "sent".into(),
            "sent".into(),
            None,
            None,
            None,
            None,
        ),
        (
            "+15555550106".into(),
            "dead".into(),
            "dead".into(),
            None,
            None,
            None,
            None,
        ),
    ];
    assert_eq!(got, expected);

    // the previous release's ingest still works while the deploy rolls out: its job (no
    // queue row written) is queued by the adopting trigger, and the new claim takes it
    let adopted: uuid::Uuid = client
        .query_one(
            "INSERT INTO notification_jobs
                 (id, organization_id, channel, payload, max_attempts, next_attempt_at,
                  idempotency_key, request_hash, expires_at, trace_header)
             VALUES (gen_random_uuid(), '00000000-0000-4000-8000-000000000001', 'sms',
                     '{\"to\": \"+15555550107\"}', 5, now() - interval '2 minutes',
                     NULL, NULL, NULL, NULL)
             RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // the rest of the migrations, then the current claim
    migrate::run(&mut client).await.unwrap();
    let store = shared::store::PgStore::new(db.config.clone());
    let claimed = shared::store::JobStore::claim(&store, 10, None)
        .await
        .unwrap();
    let ids: Vec<uuid::Uuid> = claimed.iter().map(|j| j.id).collect();
    assert!(
        ids.contains(&adopted),
        "an old-release job is claimed: {ids:?}"
    );
    assert_eq!(
        claimed.len(),
        2,
        "the adopted job and the due pending one: {ids:?}"
    );

    // the previous release's claim no longer runs: it fails, it does not claim
    let old_claim = client
        .execute(
            "UPDATE notification_jobs SET status = 'processing', claim_token = gen_random_uuid()
             WHERE status = 'pending'",
            &[],
        )
        .await;
    assert!(old_claim.is_err(), "the old claim must fail after 0011");
}

/// The previous release's claim (shared/sql/claim.sql at 0011), trimmed to what the test
/// needs back.
const CLAIM_0011: &str = "
    WITH due AS (
        SELECT id FROM job_queue
        WHERE claim_token IS NULL AND next_attempt_at <= now()
        ORDER BY next_attempt_at LIMIT 10
        FOR UPDATE SKIP LOCKED
    )
    UPDATE job_queue AS q
    SET attempts = q.attempts + 1, tries = GREATEST(q.tries, q.attempts) + 1,
        claimed_at = now(), claim_token = gen_random_uuid()
    FROM due WHERE q.id = due.id
    RETURNING q.id, q.claim_token";

/// The previous release's completion of a sent job (complete.sql at 0011, trimmed): the queue
/// row goes and the record takes the final status.
const SENT_0011: &str = "
    WITH finished AS (
        DELETE FROM job_queue AS q
        WHERE q.id = $1 AND q.claim_token = $2
        RETURNING q.id, q.attempts, q.tries
    )
    UPDATE notification_jobs AS j
    SET status = 'sent', attempts = f.attempts, tries = f.tries, last_error = NULL,
        updated_at = now()
    FROM finished AS f WHERE j.id = f.id";

/// 0012 copies no history: a job that ended before it keeps its final status on its record,
/// and every read and change treats it as before, beside the jobs that end after it (an
/// outcome row). The previous release's worker, still running while a deploy rolls out, keeps
/// completing jobs its way, and those read the same.
#[tokio::test]
async fn jobs_that_ended_before_the_outcome_table_read_and_change_as_before() {
    use shared::domain::JobStatus;
    use shared::store::{FeedbackStore, JobStore, PgStore, Transition};

    let db = TestDb::empty().await;
    let mut client = db.client().await;
    let org: uuid::Uuid = "00000000-0000-4000-8000-000000000012".parse().unwrap();
    migrate::run_files(&mut client, &integration_tests::migrations_before("0012"))
        .await
        .unwrap();
    // at 0011: three jobs that ended (one of them 40 days ago), one waiting in the queue
    let ids: Vec<uuid::Uuid> = client
        .query(
            "WITH jobs AS (
                 INSERT INTO notification_jobs
                     (organization_id, channel, payload, status, attempts, tries,
                      created_at, updated_at)
                 SELECT $1, 'sms', jsonb_build_object('to', '+1555555010' || n), s::job_status,
                        a, a, now() - make_interval(days => d) + n * interval '1 ms',
                        now() - make_interval(days => d)
                 FROM (VALUES (1, 'sent', 1, 40), (2, 'sent', 1, 1), (3, 'dead', 5, 1),
                              (4, 'pending', 0, 1)) AS v(n, s, a, d)
                 RETURNING id, organization_id, channel, payload, status, next_attempt_at,
                           max_attempts, created_at
             ),
             queued AS (
                 INSERT INTO job_queue (id, organization_id, channel, payload, next_attempt_at,
                                        max_attempts)
                 SELECT id, organization_id, channel, payload, next_attempt_at, max_attempts
                 FROM jobs WHERE status = 'pending'
             )
             SELECT id FROM jobs ORDER BY created_at",
            &[&org],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (old_sent, sent, dead, waiting) = (ids[0], ids[1], ids[2], ids[3]);
    // the previous release's worker claims the waiting job before the migration ...
    let claim = client.query_one(CLAIM_0011, &[]).await.unwrap();
    assert_eq!(claim.get::<_, uuid::Uuid>(0), waiting);
    migrate::run(&mut client).await.unwrap();
    // ... and completes it after (its way: the record's status)
    let token: uuid::Uuid = claim.get(1);
    assert_eq!(
        client
            .execute(SENT_0011, &[&waiting, &token])
            .await
            .unwrap(),
        1
    );
    // a job that ends now: an outcome row
    let new_sent = integration_tests::factory::Job::new()
        .org(org)
        .status(JobStatus::Sent)
        .insert(&client)
        .await;
    let outcomes = integration_tests::count(&client, "SELECT count(*) FROM job_outcomes").await;
    assert_eq!(
        outcomes, 1,
        "no history is copied: only the new job has an outcome row"
    );

    let store = PgStore::new(db.config.clone());
    let status = |id| {
        let store = &store;
        async move { store.get(org, id).await.unwrap().expect("the job").status }
    };
    for id in [old_sent, sent, waiting, new_sent] {
        assert_eq!(status(id).await, JobStatus::Sent, "{id}");
    }
    assert_eq!(status(dead).await, JobStatus::Dead);
    let listed = |status| {
        let store = &store;
        async move {
            let page = store.list(org, Some(status), None, 10).await.unwrap();
            page.iter().map(|j| j.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed(JobStatus::Sent).await,
        vec![old_sent, sent, waiting, new_sent],
        "both kinds, in page order"
    );
    assert_eq!(listed(JobStatus::Dead).await, vec![dead]);

    // feedback on a job that ended before 0012: its record says delivered
    client
        .batch_execute(&format!(
            "INSERT INTO notification_deliveries
                 (job_id, attempt, provider, provider_message_id, outcome, started_at,
                  finished_at)
             VALUES ('{sent}', 1, 'sns', 'legacy-message', 'sent', now(), now());
             INSERT INTO delivery_feedback
                 (provider_message_id, channel, event_key, kind, suppresses, occurred_at,
                  received_at, raw)
             VALUES ('legacy-message', 'sms', 'k', 'delivery', false, now(), now(), '{{}}')"
        ))
        .await
        .unwrap();
    let applied = store.apply_waiting_feedback(None).await.unwrap();
    assert_eq!(applied.jobs_changed, 1, "{applied:?}");
    assert_eq!(status(sent).await, JobStatus::Delivered);

    // requeue undoes the end of a job that ended before 0012 too
    assert!(matches!(
        store.requeue(org, dead).await.unwrap(),
        Transition::Done(_)
    ));
    assert_eq!(status(dead).await, JobStatus::Pending);
    assert_eq!(listed(JobStatus::Dead).await, Vec::<uuid::Uuid>::new());
    assert_eq!(listed(JobStatus::Pending).await, vec![dead]);
    let claimed = store.claim(10, None).await.unwrap();
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![dead]);

    // retention deletes the job that ended 40 days ago, and nothing else
    assert_eq!(store.prune(30, 100, None).await.unwrap().jobs, 1);
    assert!(store.get(org, old_sent).await.unwrap().is_none());
    assert_eq!(status(sent).await, JobStatus::Delivered);
}

/// 0014 and 0015 partition the history by day while the previous release (0013) keeps
/// working: its ingest writes notification_jobs directly (its ON CONFLICT reads that table's
/// own unique index), its keys reach idempotency_keys, its worker's completion routes the
/// outcome row and writes its delivery row into the partition before the cut. The current
/// release reads all of it, deduplicates against keys of either release, and finishes the
/// jobs the previous one accepted. A job accepted after the cut goes to its day's partition.
#[tokio::test]
async fn the_history_is_partitioned_while_the_previous_release_works() {
    use chrono::{DateTime, Utc};
    use shared::domain::{Channel, JobStatus};
    use shared::store::{Decision, Idempotency, Inserted, JobStore, NewJob, PgStore};

    let db = TestDb::empty().await;
    let mut client = db.client().await;
    let org: uuid::Uuid = "00000000-0000-4000-8000-000000000015".parse().unwrap();
    migrate::run_files(&mut client, &integration_tests::migrations_before("0014"))
        .await
        .unwrap();
    // the previous release, on a connection of its own
    let old = db.client().await;
    let old_ingest = |key: Option<&'static str>| {
        let client = &old;
        async move {
            integration_tests::release_0013::ingest(client, org, key)
                .await
                .expect("the previous release's ingest")
        }
    };
    let before = old_ingest(Some("k1")).await.expect("inserted");
    // its worker claims the job before the migration
    let claimed = integration_tests::release_0013::complete_and_claim(&old, &[], 1)
        .await
        .expect("the previous release's claim");
    assert_eq!(
        claimed.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![before]
    );

    let report = migrate::run(&mut client).await.unwrap();
    assert!(
        report.applied.iter().any(|n| n.starts_with("0015_")),
        "{report:?}"
    );
    let cut: DateTime<Utc> = client
        .query_one("SELECT cut FROM job_history_cut", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        cut > Utc::now() + chrono::Duration::days(1),
        "a database with jobs: the cut is after any deploy window ({cut})"
    );

    // the previous release goes on: a keyed job, a repeat of a key it used before the
    // migration (nothing written), and the completion of the job it claimed before it
    let after = old_ingest(Some("k2"))
        .await
        .expect("the previous ingest still inserts");
    assert_eq!(
        old_ingest(Some("k1")).await,
        None,
        "its repeat is still deduplicated"
    );
    let next = integration_tests::release_0013::complete_and_claim(&old, &claimed, 0)
        .await
        .expect("the previous release's completion");
    assert!(next.is_empty());
    assert_eq!(
        integration_tests::count(
            &client,
            &format!(
                "SELECT count(*) FROM job_outcomes WHERE job_id = '{before}' AND status = 'sent'"
            )
        )
        .await,
        1,
        "its completion applied"
    );

    // the current release
    let store = PgStore::new(db.config.clone());
    let job = |key: &str| NewJob {
        organization_id: org,
        channel: Channel::Sms,
        payload: serde_json::json!({"to": "+15555550199", "message": "hi"}),
        max_attempts: 5,
        next_attempt_at: Utc::now() - chrono::Duration::seconds(1),
        expires_at: Utc::now() + chrono::Duration::days(1),
        idempotency: Some(Idempotency {
            key: key.to_owned(),
            request_hash: format!("hash-{key}"),
        }),
        trace_header: None,
    };
    // a key either release used is known: the same request answers with that job
    for (key, id) in [("k1", before), ("k2", after)] {
        match store.insert(&job(key)).await.unwrap() {
            Inserted::Existing(s) => assert_eq!(s.id, id, "key {key}"),
            other => panic!("key {key} of job {id}: {other:?}"),
        }
    }
    let fresh = match store.insert(&job("k3")).await.unwrap() {
        Inserted::Created(s) => s.id,
        other => panic!("{other:?}"),
    };
    let done = store.get(org, before).await.unwrap().expect("the job");
    assert_eq!(done.status, JobStatus::Sent);
    let attempts = done.deliveries.expect("its attempts");
    assert_eq!(
        attempts.len(),
        1,
        "its attempt, written by the previous release"
    );
    assert_eq!(
        attempts[0].provider_message_id,
        Some(format!("msg-{before}"))
    );
    // the current worker finishes the jobs both releases accepted
    let claimed = store.claim(10, None).await.unwrap();
    let mut ids: Vec<uuid::Uuid> = claimed.iter().map(|c| c.id).collect();
    ids.sort();
    let mut want = vec![after, fresh];
    want.sort();
    assert_eq!(ids, want);
    let completions: Vec<_> = claimed
        .iter()
        .map(|c| integration_tests::completion(c, Decision::Sent, Some(&format!("msg-{}", c.id))))
        .collect();
    store.complete(&completions, None).await.unwrap();
    for id in [after, fresh] {
        let job = store.get(org, id).await.unwrap().expect("the job");
        let attempts = job.deliveries.map(|d| d.len());
        assert_eq!((job.status, attempts), (JobStatus::Sent, Some(1)), "{id}");
    }
    // before the cut, everything is in the partitions that were today's tables
    let in_before = integration_tests::count(
        &client,
        "SELECT (SELECT count(*) FROM notification_jobs) * 100
                + (SELECT count(*) FROM job_outcomes_before) * 10
                + (SELECT count(*) FROM notification_deliveries)",
    )
    .await;
    assert_eq!(
        in_before, 331,
        "3 records, 3 outcome rows, 1 delivery row: the previous release's (the current \
         release's last attempts are in their outcome rows)"
    );
    // a job accepted after the cut goes to its day's partitions
    let partition: String = client
        .query_one(
            "INSERT INTO job_requests (organization_id, channel, payload, created_at)
             SELECT $1, 'sms', '{\"to\": \"+15555550198\"}', cut + interval '1 hour'
             FROM job_history_cut
             RETURNING tableoid::regclass::text",
            &[&org],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(partition, format!("job_requests_{}", cut.format("%Y%m%d")));
}
