//! The sweeper against a real PostgreSQL: stuck jobs are rescued, in-progress ones never.

use integration_tests::factory::Job;
use integration_tests::{TestDb, insert_due_jobs};
use notify_core::domain::JobStatus;
use notify_core::store::{
    At, Claim, ClaimedJob, Complete, Completion, Decision, DropHistoryDays, JobStore,
};
use notify_core::sweeper::{SweeperConfig, run_once};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

fn sent(job: &ClaimedJob, message_id: &str) -> Completion {
    integration_tests::completion(job, Decision::Sent, Some(message_id))
}

/// The same, the attempt timed as the store's clock says (`now` of the claim).
fn sent_now(job: &ClaimedJob, message_id: &str) -> Completion {
    Completion {
        started_at: job.claimed_at,
        finished_at: job.claimed_at,
        ..sent(job, message_id)
    }
}

async fn status_of(client: &tokio_postgres::Client, id: Uuid) -> (String, i32) {
    let row = client
        .query_one(
            "SELECT status::text, attempts FROM job_states WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn only_jobs_past_the_window_are_swept() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    // claimed (attempt 1) so long ago; the last has no attempt left
    let claimed = |secs: f64| Job::new().attempts(1).claimed_ago(secs);
    let fresh = claimed(1.0).insert(&client).await;
    let just_under = claimed(590.0).insert(&client).await;
    let past = claimed(605.0).insert(&client).await;
    let exhausted = claimed(3_600.0)
        .attempts(5)
        .max_attempts(5)
        .insert(&client)
        .await;

    let config = SweeperConfig::new(600, 120, 1_000).unwrap();
    let summary = run_once(&store, &config, At::SERVER).await.unwrap();
    assert_eq!((summary.requeued, summary.dead), (1, 1));

    assert_eq!(
        status_of(&client, fresh).await.0,
        "processing",
        "in progress: untouched"
    );
    assert_eq!(
        status_of(&client, just_under).await.0,
        "processing",
        "inside the window: untouched"
    );
    assert_eq!(
        status_of(&client, past).await.0,
        "failed",
        "requeued for a retry"
    );
    assert_eq!(
        status_of(&client, exhausted).await.0,
        "dead",
        "no attempts left"
    );
    let row = client
        .query_one(
            "SELECT claim_token IS NULL, next_attempt_at <= now(), last_error
             FROM job_states WHERE id = $1",
            &[&past],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "claim token cleared");
    assert!(row.get::<_, bool>(1), "due again now");
    assert!(
        row.get::<_, &str>(2)
            .starts_with("worker lost: processing since")
    );
    let lost: Vec<(Uuid, String, i32)> = client
        .query(
            "SELECT job_id, outcome, attempt FROM job_attempts ORDER BY job_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(lost.len(), 2, "a lost row for each swept job: {lost:?}");
    assert!(lost.iter().all(|(_, outcome, _)| outcome == "lost"));
    let attempt_of = |id: Uuid| lost.iter().find(|(j, _, _)| *j == id).map(|(_, _, a)| *a);
    assert_eq!(
        attempt_of(past),
        Some(1),
        "the lost row names the lost attempt"
    );
    assert_eq!(attempt_of(exhausted), Some(5));

    // the requeued job is claimable again, as attempt 2
    let again = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].id, again[0].attempt), (past, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sweepers_at_once_sweep_each_job_exactly_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    Job::new()
        .own_organizations()
        .attempts(1)
        .claimed_ago(3_600.0)
        .insert_many(&client, 1_000)
        .await;
    // small statements, so the two sweepers interleave
    let config = SweeperConfig::new(600, 120, 50).unwrap();
    let (a, b) = (db.store().await, db.store().await);
    let (ca, cb) = (config.clone(), config.clone());
    let (ra, rb) = tokio::join!(
        tokio::spawn(async move { run_once(&a, &ca, At::SERVER).await.unwrap() }),
        tokio::spawn(async move { run_once(&b, &cb, At::SERVER).await.unwrap() }),
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.requeued + rb.requeued, 1_000, "{ra:?} {rb:?}");
    assert!(
        ra.requeued > 0 && rb.requeued > 0,
        "both sweepers worked at once: {ra:?} {rb:?}"
    );
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT job_id) FROM job_attempts WHERE outcome = 'lost'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (1_000, 1_000));
    let left: i64 = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_states WHERE status = 'processing'",
    )
    .await;
    assert_eq!(left, 0);
}

/// A worker claims and crashes; after the window the sweeper requeues; a second worker
/// delivers; the first worker's late completion is fenced.
#[tokio::test]
async fn the_crash_story_ends_sent_with_a_lost_then_a_sent_attempt() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let ids = insert_due_jobs(&client, 1).await;
    let (crashing, healthy) = (db.store().await, db.store().await);
    // a short window, with a matching short worker timeout
    let config = SweeperConfig::new(2, 1, 1_000).unwrap();

    let lost_claim = crashing
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(lost_claim.len(), 1);
    // ... and the first worker stops here without completing.

    let early = run_once(&healthy, &config, At::SERVER).await.unwrap();
    assert_eq!(early.requeued, 0, "not swept inside the window");
    assert!(
        healthy
            .claim(Claim {
                batch_size: 10,
                now: None
            })
            .await
            .unwrap()
            .is_empty(),
        "still held"
    );

    // past the window (the clock is a parameter: no sleeping)
    let later = Some(chrono::Utc::now() + chrono::Duration::seconds(3));
    let swept = run_once(&healthy, &config, At { now: later })
        .await
        .unwrap();
    assert_eq!(swept.requeued, 1);

    let second = healthy
        .claim(Claim {
            batch_size: 10,
            now: later,
        })
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempt, 2);
    let report = healthy
        .complete(Complete {
            completions: &[sent(&second[0], "second")],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(report.applied, vec![ids[0]]);

    // the first worker wakes up and reports its (late) success
    let late = crashing
        .complete(Complete {
            completions: &[sent(&lost_claim[0], "first")],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(late.fenced, vec![ids[0]], "the late completion is fenced");

    assert_eq!(status_of(&client, ids[0]).await, ("sent".to_owned(), 2));
    let rows: Vec<(i32, String, Option<String>)> = client
        .query(
            "SELECT attempt, outcome, provider_message_id FROM job_attempt_history
             WHERE job_id = $1 ORDER BY attempt",
            &[&ids[0]],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![
            // the lost row keeps what the late worker learnt: the provider did accept it
            (1, "lost".to_owned(), Some("first".to_owned())),
            (2, "sent".to_owned(), Some("second".to_owned())),
        ]
    );
}

#[test]
fn a_window_not_longer_than_the_worker_timeout_stops_the_sweeper_at_start() {
    let lookup =
        notify_core::config::pairs(&[("STUCK_AFTER_SECS", "100"), ("WORKER_TIMEOUT_SECS", "120")]);
    let err = SweeperConfig::from_lookup(&notify_core::config::Vars::new(&lookup))
        .unwrap_err()
        .to_string();
    assert!(err.contains("STUCK_AFTER_SECS=100"), "{err}");
    assert!(err.contains("WORKER_TIMEOUT_SECS=120"), "{err}");
}

/// One delivery row for every job, sent, under the job's day (as the worker writes it).
async fn one_sent_attempt_each(client: &tokio_postgres::Client) {
    client
        .execute(
            "INSERT INTO job_attempts (job_id, job_created_at, attempt, provider, outcome,
                                       started_at, finished_at)
             SELECT id, created_at, 1, 'sns', 'sent', now(), now() FROM job_requests",
            &[],
        )
        .await
        .unwrap();
}

/// A database's partitions of `day` (YYYYMMDD) for the three history tables.
fn partitions_of(day: chrono::NaiveDate) -> String {
    format!(
        "SELECT count(*) FROM pg_class WHERE relname IN ('job_requests_{d}', 'job_outcomes_{d}',
             'job_attempts_{d}')",
        d = day.format("%Y%m%d")
    )
}

/// The day of a time, in UTC (the history's days).
fn day_of(at: chrono::DateTime<chrono::Utc>) -> chrono::NaiveDate {
    at.date_naive()
}

/// Retention: a day goes whole (its partitions of requests, outcomes and attempts dropped,
/// its idempotency keys deleted) once every job of the day ended RETENTION_DAYS ago, never
/// while one of them is open, and never while a read holds its history (the drop gives up
/// within its lock timeout and a later run drops it). The days ahead are made by every run.
#[tokio::test]
async fn retention_drops_a_day_once_its_jobs_all_ended_long_enough_ago() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let now = chrono::Utc::now();
    // today's jobs: in today's partitions
    let sent = Job::new()
        .status(JobStatus::Sent)
        .insert_many(&client, 3)
        .await;
    let open = Job::new().due_in(3_600.0).insert(&client).await;
    one_sent_attempt_each(&client).await;
    client
        .execute(
            "WITH keyed AS (
                 UPDATE job_requests SET idempotency_key = 'key-' || id, request_hash = 'h'
                 RETURNING organization_id, idempotency_key, id, created_at
             )
             INSERT INTO idempotency_keys (organization_id, idempotency_key, job_id, job_created_at)
             SELECT organization_id, idempotency_key, id, created_at FROM keyed",
            &[],
        )
        .await
        .unwrap();
    // the jobs' day, as the database's clock made it
    let today: chrono::NaiveDate = client
        .query_one(
            "SELECT (min(created_at) AT TIME ZONE 'UTC')::date FROM job_requests",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let in_today = |table: &str| format!("SELECT count(*) FROM {table}_{}", today.format("%Y%m%d"));
    assert_eq!(
        integration_tests::count(&client, &in_today("job_requests")).await,
        4
    );
    assert_eq!(
        integration_tests::count(&client, &in_today("job_outcomes")).await,
        3
    );
    assert_eq!(
        integration_tests::count(&client, &in_today("job_attempts")).await,
        4
    );

    let mut config = SweeperConfig::new(600, 120, 100).unwrap();
    config.retention_days = 30;
    let days_later = |days: i64| now + chrono::Duration::days(days);

    // a month on, today is past retention but one of its jobs is still open: kept
    let summary = run_once(
        &store,
        &config,
        At {
            now: Some(days_later(31)),
        },
    )
    .await
    .unwrap();
    assert!(
        !summary.history.dropped_days.contains(&today.to_string()),
        "{summary:?}"
    );
    assert_eq!(
        integration_tests::count(&client, &in_today("job_requests")).await,
        4
    );
    assert!(
        summary.history.added >= 3 * 8,
        "the days ahead of that time: {summary:?}"
    );
    assert_eq!(
        integration_tests::count(&client, &partitions_of(day_of(days_later(38)))).await,
        3,
        "a week ahead of the run's time exists"
    );

    // the open job is sent on day 31 (the clock is a parameter): its day is kept 30 days
    // after that
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: Some(days_later(31)),
        })
        .await
        .unwrap();
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![open]);
    let report = store
        .complete(Complete {
            completions: &[sent_now(&claimed[0], "late-send")],
            now: Some(days_later(31)),
        })
        .await
        .unwrap();
    assert_eq!(report.applied, vec![open]);
    let summary = run_once(
        &store,
        &config,
        At {
            now: Some(days_later(32)),
        },
    )
    .await
    .unwrap();
    assert!(
        !summary.history.dropped_days.contains(&today.to_string()),
        "a job of the day ended a day ago: {summary:?}"
    );

    // 31 days after that end, while a long read holds the attempts (a lock the drop must
    // wait for), the run does not fail and does not wait long: the day stays, keys and all
    let mut reader = db.client().await;
    let read = reader.transaction().await.unwrap();
    read.execute("SELECT count(*) FROM job_attempts", &[])
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let summary = run_once(
        &store,
        &config,
        At {
            now: Some(days_later(63)),
        },
    )
    .await
    .unwrap();
    assert!(
        !summary.history.dropped_days.contains(&today.to_string()),
        "{summary:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "the drop gave up within its lock timeout: {:?}",
        started.elapsed()
    );
    assert_eq!(
        integration_tests::count(&client, &partitions_of(today)).await,
        3,
        "today's partitions are kept while the read lasts"
    );
    assert_eq!(
        integration_tests::count(&client, "SELECT count(*) FROM idempotency_keys").await,
        4,
        "and so are its idempotency keys"
    );
    read.commit().await.unwrap();

    // the read is over: the next run drops today
    let summary = run_once(
        &store,
        &config,
        At {
            now: Some(days_later(63)),
        },
    )
    .await
    .unwrap();
    assert!(
        summary.history.dropped_days.contains(&today.to_string()),
        "{summary:?}"
    );
    assert_eq!(
        integration_tests::count(&client, &partitions_of(today)).await,
        0,
        "today's three partitions are gone"
    );
    assert_eq!(
        integration_tests::count(&client, "SELECT count(*) FROM job_requests").await,
        0,
        "every job of the day went: {sent:?}"
    );
    assert_eq!(
        integration_tests::count(&client, "SELECT count(*) FROM idempotency_keys").await,
        0,
        "with its idempotency keys"
    );
    assert_eq!(
        client
            .query_one(
                "SELECT count(*) FROM history_days WHERE day = $1",
                &[&today]
            )
            .await
            .unwrap()
            .get::<_, i64>(0),
        0,
        "and its row in history_days"
    );
    // the days whose jobs could still end are there: the run's own day and the week ahead
    assert_eq!(
        integration_tests::count(&client, &partitions_of(day_of(days_later(63)))).await,
        3
    );
}

/// The sweeper's steps are independent, and the days ahead come first: a sweep that fails (a
/// stuck job whose history lost its attempts partition, so the sweep's `lost` row has nowhere
/// to go) fails the run, yet the days ahead are made, expiry runs and retention drops what it
/// may. The error names the step.
#[tokio::test]
async fn a_failing_sweep_step_stops_none_of_the_others() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let now = chrono::Utc::now();
    // a stuck job of ten days ago, whose day has lost its attempts partition
    let old_day = day_of(now - chrono::Duration::days(10));
    client
        .execute("SELECT history_add_days($1, 1)", &[&old_day])
        .await
        .unwrap();
    Job::new()
        .attempts(1)
        .claimed_ago(3_600.0)
        .created_ago(10.0 * 86_400.0)
        .insert(&client)
        .await;
    client
        .batch_execute(&format!(
            "DROP TABLE job_attempts_{}",
            old_day.format("%Y%m%d")
        ))
        .await
        .unwrap();
    // a waiting job past its expiry, and a finished day long past retention
    let expired = Job::new().expires_in(-1.0).insert(&client).await;
    let gone_day = day_of(now - chrono::Duration::days(60));
    client
        .execute("SELECT history_add_days($1, 1)", &[&gone_day])
        .await
        .unwrap();
    // and no partitions ahead yet for the run's week: the run must make them
    let later = now + chrono::Duration::days(20);
    assert_eq!(
        integration_tests::count(&client, &partitions_of(day_of(later))).await,
        0
    );

    let mut config = SweeperConfig::new(600, 120, 100).unwrap();
    config.retention_days = 30;
    let err = run_once(&store, &config, At { now: Some(later) })
        .await
        .unwrap_err();
    assert_eq!(err.failures.len(), 1, "{err}");
    assert_eq!(err.failures[0].0, "sweep", "{err}");
    assert!(err.to_string().contains("sweep (Database"), "{err}");
    assert!(err.to_string().contains("23514"), "the SQLSTATE: {err}");
    assert!(
        err.summary.history.added >= 3 * 8,
        "the days ahead were made: {:?}",
        err.summary
    );
    assert_eq!(
        integration_tests::count(&client, &partitions_of(day_of(later))).await,
        3
    );
    assert_eq!(err.summary.expired, 1, "expiry ran: {:?}", err.summary);
    assert_eq!(status_of(&client, expired).await.0, "expired");
    assert!(
        err.summary
            .history
            .dropped_days
            .contains(&gone_day.to_string()),
        "retention ran: {:?}",
        err.summary
    );
    let diagnostic = lambda_runtime::Diagnostic::from(err);
    assert_eq!(diagnostic.error_type, "Database");
}

/// A job past its expiry is never sent: the claim skips it, and the sweeper makes it
/// `expired` with a delivery row saying why. A job in flight is left to finish, and one not
/// yet expired waits on.
#[tokio::test]
async fn an_expired_job_is_never_claimed_and_the_sweeper_marks_it_expired() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let expired = Job::new().expires_in(-1.0).insert(&client).await;
    let held_expired = Job::new()
        .status(JobStatus::Failed)
        .attempts(0)
        .expires_in(-60.0)
        .insert(&client)
        .await;
    let alive = Job::new()
        .expires_in(3_600.0)
        .due_in(600.0)
        .insert(&client)
        .await;
    let in_flight = Job::new()
        .attempts(1)
        .claimed_ago(1.0)
        .expires_in(-1.0)
        .insert(&client)
        .await;

    assert!(
        store
            .claim(Claim {
                batch_size: 10,
                now: None
            })
            .await
            .unwrap()
            .is_empty(),
        "nothing claimable"
    );
    let config = SweeperConfig::new(600, 120, 1_000).unwrap();
    let summary = run_once(&store, &config, At::SERVER).await.unwrap();
    assert_eq!(summary.expired, 2, "{summary:?}");
    for id in [expired, held_expired] {
        assert_eq!(status_of(&client, id).await.0, "expired");
        let row = client
            .query_one(
                "SELECT outcome, error_code, attempt FROM job_attempts WHERE job_id = $1",
                &[&id],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, &str>(0), "expired");
        assert_eq!(row.get::<_, &str>(1), "Expired");
        assert_eq!(row.get::<_, i32>(2), 1);
    }
    assert_eq!(status_of(&client, alive).await.0, "pending");
    assert_eq!(status_of(&client, in_flight).await.0, "processing");

    // an hour and a bit later (the clock is a parameter) the live one expires too
    let later = Some(chrono::Utc::now() + chrono::Duration::minutes(61));
    assert!(
        store
            .claim(Claim {
                batch_size: 10,
                now: later
            })
            .await
            .unwrap()
            .is_empty(),
        "expired by then"
    );
    let summary = run_once(&store, &config, At { now: later }).await.unwrap();
    // the in-flight job's worker is lost by then: swept, then found expired
    assert_eq!((summary.requeued, summary.expired), (1, 2), "{summary:?}");
    assert_eq!(status_of(&client, alive).await.0, "expired");
    assert_eq!(status_of(&client, in_flight).await.0, "expired");
}

/// A fresh database with the partitions of the next 40 days (a deployment keeps about as
/// many: the retention's days and the week ahead), and a connection to it.
async fn forty_days_ahead() -> (TestDb, tokio_postgres::Client) {
    let db = TestDb::new().await;
    let client = db.client().await;
    client
        .batch_execute("SELECT history_add_days(current_date, 40)")
        .await
        .unwrap();
    (db, client)
}

/// How many partitions of the history table `table` the plan of `sql` (run with `params`)
/// reads: scans "on" one (a bitmap index scan names its index instead), each partition
/// counted once however many scans read it (get_job.sql and jobs_within.sql read
/// job_requests twice: the job as it stands, and its request's priority).
async fn partitions_planned(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    table: &str,
) -> usize {
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN {sql}"), params)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let on = format!(" on {table}_2");
    plan.iter()
        .filter(|l| !l.contains("Bitmap Index Scan"))
        .filter_map(|l| {
            let at = l.find(&on)? + " on ".len();
            l[at..].split_whitespace().next()
        })
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// A lookup by id plans only the partitions of the job's day: with 40 days of partitions,
/// `GET`'s statement (its request and outcome rows) and its attempts' name the days around the
/// one of its UUIDv7 id, not every day, and so does the read of a listing page's or an
/// idempotency check's jobs for the days of those jobs. An id that is not a UUIDv7 names no
/// job and plans no partition.
#[tokio::test]
async fn a_lookup_by_id_plans_only_the_partitions_of_its_day() {
    let (db, client) = forty_days_ahead().await;
    let org = Uuid::new_v4();
    let v7 = Job::new()
        .org(org)
        .status(JobStatus::Cancelled)
        .insert(&client)
        .await;
    let params: [&(dyn ToSql + Sync); 2] = [&v7, &org];
    // GET and the status check: the requests and the outcome rows of the id's day
    let statements = [
        ("GET", notify_postgres::sql::GET_JOB.sql),
        ("the status check", notify_postgres::sql::JOB_STATUS.sql),
    ];
    for (name, statement) in statements {
        for table in ["job_requests", "job_outcomes"] {
            let planned = partitions_planned(&client, statement, &params, table).await;
            assert!(
                (1..=3).contains(&planned),
                "{name} plans the {table} partitions of the id's day, not 40: {planned}"
            );
        }
    }
    // a listing page's or an idempotency check's jobs: their days (here one instant)
    let (from, to) = (
        chrono::Utc::now(),
        chrono::Utc::now() + chrono::TimeDelta::seconds(1),
    );
    let ids = vec![v7];
    let find: [&(dyn ToSql + Sync); 3] = [&ids, &from, &to];
    for table in ["job_requests", "job_outcomes"] {
        let sql = &notify_postgres::sql::JOBS_WITHIN.sql;
        let planned = partitions_planned(&client, sql, &find, table).await;
        assert!(
            (1..=3).contains(&planned),
            "the jobs of a listing page or an idempotency check: the {table} partitions of their days: {planned}"
        );
    }
    // its attempts: the same window (one parameter, so the organization goes unused)
    let attempts = format!(
        "{} AND $2::uuid IS NOT NULL",
        notify_postgres::sql::LIST_DELIVERIES
            .sql
            .trim_end()
            .trim_end_matches("ORDER BY d.attempt")
    );
    let planned = partitions_planned(&client, &attempts, &params, "job_attempts").await;
    assert!(
        (1..=3).contains(&planned),
        "its attempts plan the same days: {planned}"
    );
    let v4 = Uuid::new_v4();
    let none: [&(dyn ToSql + Sync); 2] = [&v4, &org];
    for table in ["job_requests", "job_outcomes"] {
        let planned =
            partitions_planned(&client, notify_postgres::sql::GET_JOB.sql, &none, table).await;
        assert_eq!(planned, 0, "a v4 id plans no {table} partition");
    }
    let store = db.store().await;
    assert!(store.get(org, v7).await.unwrap().is_some(), "found");
    assert!(
        store.get(org, v4).await.unwrap().is_none(),
        "a v4 id names no job"
    );
}

/// The feedback function's matching plans the days around its events only
/// (apply_feedback.sql with a window from `feedback::jobs_window`): with 40 days of
/// partitions, the delivery rows, outcome rows and records of about five days, not every day.
/// The sweeper's pass (no window) plans them all.
#[tokio::test]
async fn feedback_matching_plans_only_the_days_around_its_events() {
    let (_db, client) = forty_days_ahead().await;
    let now = chrono::Utc::now();
    let (from, to) = notify_core::feedback::jobs_window([], now);
    let apply = &notify_postgres::sql::APPLY_FEEDBACK.sql;
    let none = None::<chrono::DateTime<chrono::Utc>>;
    let windowed: [&(dyn ToSql + Sync); 3] = [&none, &from, &to];
    let unbounded: [&(dyn ToSql + Sync); 3] = [&none, &none, &none];
    // job_outcomes is read twice: matching (a job's last attempt is in its outcome row) and
    // the status change
    for (table, reads) in [
        ("job_attempts", 1),
        ("job_outcomes", 2),
        ("job_requests", 1),
    ] {
        let planned = partitions_planned(&client, apply, &windowed, table).await;
        assert!(
            (1..=6 * reads).contains(&planned),
            "the feedback function plans the {table} partitions of its window, not 40: {planned}"
        );
        let planned = partitions_planned(&client, apply, &unbounded, table).await;
        assert!(
            planned >= 40,
            "the sweeper's pass plans every {table} partition: {planned}"
        );
    }
}

/// A listing page after a cursor plans the days from the cursor's on (list_jobs.sql): with 40
/// days of partitions and a cursor 35 days ahead, the requests (every status) or the outcome
/// rows (a final status) of about five days, not 41.
#[tokio::test]
async fn a_listing_page_plans_the_days_from_its_cursor_on() {
    let (_db, client) = forty_days_ahead().await;
    let org = Uuid::new_v4();
    let cursor = (
        chrono::Utc::now() + chrono::TimeDelta::days(35),
        Uuid::now_v7(),
    );
    let list = &notify_postgres::sql::LIST_JOBS.sql;
    for (status, table) in [(None, "job_requests"), (Some("sent"), "job_outcomes")] {
        let params: [&(dyn ToSql + Sync); 5] = [&org, &status, &cursor.0, &cursor.1, &50_i64];
        let planned = partitions_planned(&client, list, &params, table).await;
        assert!(
            (1..=6).contains(&planned),
            "a page after the cursor plans the {table} partitions from its day on: {planned}"
        );
    }
}

/// A requeue racing the drop of its job's day, forced: the drop is held (a test trigger
/// sleeps in the deletion of the day's idempotency keys) after it chose the day as past
/// retention with no open job, and the requeue runs meanwhile. Whichever wins, the two agree: either the job is
/// back in the queue and its day kept, or the day is gone and the requeue found nothing.
/// Never a queue row whose history is gone (every later completion and sweep would fail on
/// it), and the sweeper's next run succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_requeue_racing_its_days_drop_never_leaves_a_queue_row_without_its_history() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let now = chrono::Utc::now();
    // a dead job of 40 days ago, ended then, with an idempotency key
    let id = Job::new()
        .status(JobStatus::Dead)
        .attempts(5)
        .created_ago(40.0 * 86_400.0)
        .updated_ago(40.0 * 86_400.0)
        .insert(&client)
        .await;
    let org: Uuid = client
        .query_one(
            "SELECT organization_id FROM job_requests WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    client
        .execute(
            "WITH keyed AS (
                 UPDATE job_requests SET idempotency_key = 'key', request_hash = 'h'
                 WHERE id = $1
                 RETURNING organization_id, idempotency_key, id, created_at
             )
             INSERT INTO idempotency_keys (organization_id, idempotency_key, job_id, job_created_at)
             SELECT organization_id, idempotency_key, id, created_at FROM keyed",
            &[&id],
        )
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE FUNCTION slow_key_delete() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(1); RETURN OLD; END $$;
             CREATE TRIGGER slow_key_delete BEFORE DELETE ON idempotency_keys
                 FOR EACH ROW EXECUTE FUNCTION slow_key_delete();",
        )
        .await
        .unwrap();

    let config = SweeperConfig::new(600, 120, 100).unwrap();
    let keep = config.history_kept();
    let dropping = {
        let store = db.store().await;
        tokio::spawn(async move {
            store
                .drop_history_days(DropHistoryDays {
                    keep,
                    now: Some(now),
                })
                .await
        })
    };
    // the drop is in its deletion of the day's keys: it has made its decision
    integration_tests::until_a_statement_sleeps(&client).await;
    let store = db.store().await;
    let requeued = store.requeue(org, id).await.unwrap();
    let dropped = dropping.await.unwrap().unwrap();
    let day: chrono::NaiveDate = client
        .query_one(
            "SELECT (created_at AT TIME ZONE 'UTC')::date FROM job_requests WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    let day = day.to_string();
    match &requeued {
        notify_core::store::Transition::Done(_) => {
            assert!(!dropped.dropped_days.contains(&day), "{dropped:?}");
            assert_eq!(status_of(&client, id).await.0, "pending");
        }
        notify_core::store::Transition::NotFound => {
            assert!(dropped.dropped_days.contains(&day), "{dropped:?}")
        }
        other => panic!("{other:?}"),
    }
    let orphans = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_queue AS q
         WHERE NOT EXISTS (SELECT FROM job_requests AS j WHERE j.id = q.id)",
    )
    .await;
    assert_eq!(
        orphans, 0,
        "a queue row without its history ({requeued:?}, {dropped:?})"
    );
    client
        .batch_execute("DROP TRIGGER slow_key_delete ON idempotency_keys")
        .await
        .unwrap();
    run_once(&store, &config, At::SERVER)
        .await
        .expect("the next sweep succeeds");
}
