//! The claim engine against a real PostgreSQL: no job claimed twice, none missed,
//! fencing of stale completions, and what plain FOR UPDATE would do instead.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use integration_tests::factory::Job;
use integration_tests::{TestDb, insert_due_jobs};
use notify_core::domain::{Channel, JobStatus};
use notify_core::store::{
    At, Claim, Complete, CompleteAndClaim, Completion, Decision, JobStore, QueueDepth,
};
use notify_postgres::sql;
use tokio_postgres::Client;
use uuid::Uuid;

fn completion(job: &notify_core::store::ClaimedJob, decision: Decision) -> Completion {
    let message_id = matches!(decision, Decision::Sent).then_some("msg-1");
    integration_tests::completion(job, decision, message_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_claimers_claim_every_job_exactly_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let expected: HashSet<Uuid> = insert_due_jobs(&client, 5_000).await.into_iter().collect();

    let mut claimers = Vec::new();
    for _ in 0..8 {
        let store = db.store().await; // each claimer on its own connection
        claimers.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let batch = store
                    .claim(Claim {
                        batch_size: 37,
                        now: None,
                    })
                    .await
                    .unwrap();
                if batch.is_empty() {
                    return mine;
                }
                mine.extend(batch.into_iter().map(|j| (j.id, j.attempt)));
            }
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    let mut claimers_with_work = 0;
    for claimer in claimers {
        let mine = claimer.await.unwrap();
        claimers_with_work += usize::from(!mine.is_empty());
        for (id, attempt) in mine {
            total += 1;
            assert_eq!(attempt, 1, "first claim is attempt 1");
            assert!(seen.insert(id), "job {id} claimed twice");
        }
    }
    assert_eq!(total, 5_000);
    assert_eq!(
        seen, expected,
        "claimed ids must be exactly the inserted ids"
    );
    assert!(claimers_with_work > 1, "the claimers ran concurrently");
    let processing: i64 = integration_tests::count(
        &client,
        "SELECT count(*) FROM job_states WHERE status = 'processing' AND claim_token IS NOT NULL",
    )
    .await;
    assert_eq!(processing, 5_000);
}

#[tokio::test]
async fn future_jobs_wait_and_due_failed_jobs_are_claimed_again() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let future = Job::new().due_in(3_600.0).insert(&client).await;
    let failed_due = Job::new()
        .status(JobStatus::Failed)
        .attempts(2)
        .due_in(-1.0)
        .insert(&client)
        .await;
    let failed_later = Job::new()
        .status(JobStatus::Failed)
        .attempts(1)
        .due_in(300.0)
        .insert(&client)
        .await;

    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "only the due failed job: {claimed:?}");
    assert_eq!(claimed[0].id, failed_due);
    assert_eq!(claimed[0].attempt, 3, "attempts incremented by the claim");
    assert!(
        store
            .claim(Claim {
                batch_size: 10,
                now: None
            })
            .await
            .unwrap()
            .is_empty()
    );

    // six minutes on (the clock is a parameter): the later retry is due, the future job not
    let later = Some(chrono::Utc::now() + chrono::Duration::minutes(6));
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: later,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].id, failed_later);
    let in_two_hours = Some(chrono::Utc::now() + chrono::Duration::hours(2));
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: in_two_hours,
        })
        .await
        .unwrap();
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), [future]);
}

#[tokio::test]
async fn completion_with_a_stale_token_is_fenced_but_recorded() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let ids = insert_due_jobs(&client, 2).await;
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let (good, stale) = (&claimed[0], &claimed[1]);
    let mut stale_completion = completion(stale, Decision::Sent);
    stale_completion.claim_token = Uuid::new_v4(); // another claim's token

    let report = store
        .complete(Complete {
            completions: &[completion(good, Decision::Sent), stale_completion],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(report.applied, vec![good.id]);
    assert_eq!(report.fenced, vec![stale.id]);

    let status = |id: Uuid| {
        let client = &client;
        async move {
            client
                .query_one("SELECT status::text FROM job_states WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert_eq!(status(good.id).await, "sent");
    assert_eq!(status(stale.id).await, "processing", "fenced job untouched");
    let rows = client
        .query(
            "SELECT job_id, outcome, fenced, provider, provider_message_id
             FROM job_attempt_history ORDER BY fenced",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "a delivery row for both, fenced or not");
    assert_eq!(rows[0].get::<_, Uuid>(0), good.id);
    assert!(!rows[0].get::<_, bool>(2));
    assert_eq!(rows[1].get::<_, Uuid>(0), stale.id);
    assert!(
        rows[1].get::<_, bool>(2),
        "the stale completion is marked fenced"
    );
    assert_eq!(rows[1].get::<_, &str>(3), "sns");
    assert!(ids.contains(&stale.id));
}

#[tokio::test]
async fn retry_and_dead_decisions_are_applied() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    insert_due_jobs(&client, 2).await;
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    let retry_at = Utc::now() + chrono::Duration::minutes(2);
    let mut retry = completion(&claimed[0], Decision::Retry { at: retry_at });
    retry.error_code = Some("Throttling".into());
    retry.error_message = Some("slow down".into());
    let mut dead = completion(&claimed[1], Decision::Dead);
    dead.error_code = Some("InvalidParameter".into());
    dead.channel = Channel::Sms;
    let report = store
        .complete(Complete {
            completions: &[retry, dead],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(report.applied.len(), 2);

    let row = client
        .query_one(
            "SELECT status::text, last_error, next_attempt_at FROM job_states WHERE id = $1",
            &[&claimed[0].id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "failed");
    assert_eq!(row.get::<_, &str>(1), "Throttling: slow down");
    let at: chrono::DateTime<Utc> = row.get(2);
    assert!((at - retry_at).num_milliseconds().abs() < 5);
    let status: String = client
        .query_one(
            "SELECT status::text FROM job_states WHERE id = $1",
            &[&claimed[1].id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "dead");
    assert!(
        store
            .claim(Claim {
                batch_size: 10,
                now: None
            })
            .await
            .unwrap()
            .is_empty(),
        "neither is due now"
    );
}

/// The lesson's closing question: with plain FOR UPDATE (no SKIP LOCKED), a second claimer
/// blocks until the first one's transaction ends; with SKIP LOCKED it takes other rows at once.
#[tokio::test]
async fn plain_for_update_blocks_the_second_claimer_skip_locked_does_not() {
    let db = TestDb::new().await;
    let setup = db.client().await;
    insert_due_jobs(&setup, 20).await;
    let plain = sql::CLAIM
        .sql
        .replace("FOR UPDATE SKIP LOCKED", "FOR UPDATE");
    assert_ne!(plain, sql::CLAIM.sql);

    let mut first = db.client().await;
    let tx = first.transaction().await.unwrap();
    let first_batch = tx
        .query(plain.as_str(), &[&10_i64, &None::<chrono::DateTime<Utc>>])
        .await
        .unwrap();
    assert_eq!(first_batch.len(), 10);

    // SKIP LOCKED: answers at once, with the other ten rows.
    let skipping = db.client().await;
    let skipped = tokio::time::timeout(
        Duration::from_secs(5),
        skipping.query(sql::CLAIM.sql, &[&10_i64, &None::<chrono::DateTime<Utc>>]),
    )
    .await
    .expect("SKIP LOCKED never waits")
    .unwrap();
    assert_eq!(skipped.len(), 10);

    // Plain FOR UPDATE: waits on the first claimer's row locks.
    let blocked = db.client().await;
    let pid: i32 = blocked
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let plain_for_task = plain.clone();
    let waiter = tokio::spawn(async move {
        let rows = blocked
            .query(
                plain_for_task.as_str(),
                &[&10_i64, &None::<chrono::DateTime<Utc>>],
            )
            .await
            .unwrap();
        rows.len()
    });
    let mut waited_on_lock = false;
    for _ in 0..100 {
        let row = setup
            .query_one(
                "SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap();
        if row.get::<_, &str>(0) == "Lock" {
            waited_on_lock = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        waited_on_lock,
        "the plain FOR UPDATE claimer waits on a row lock"
    );
    assert!(!waiter.is_finished(), "and has not returned");

    tx.commit().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("unblocked once the first claimer commits")
        .unwrap();
    // Every row it had picked is now 'processing' (claimed by the others): after waiting,
    // it re-checks them, finds none due, and comes back empty-handed.
    assert_eq!(got, 0);
}

/// The worker's loop shape: each round completes its batch and claims the next in one
/// statement. Four such loops at once still claim and complete every job exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn completing_and_claiming_in_one_round_trip_handles_every_job_once() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let expected: HashSet<Uuid> = insert_due_jobs(&client, 3_000).await.into_iter().collect();
    let mut loops = Vec::new();
    for _ in 0..4 {
        let store = db.store().await;
        loops.push(tokio::spawn(async move {
            let mut done = Vec::new();
            let mut batch = store
                .claim(Claim {
                    batch_size: 50,
                    now: None,
                })
                .await
                .unwrap();
            while !batch.is_empty() {
                let completions: Vec<_> = batch
                    .iter()
                    .map(|job| completion(job, Decision::Sent))
                    .collect();
                let (report, next) = store
                    .complete_and_claim(CompleteAndClaim {
                        completions: &completions,
                        next_batch: 50,
                        now: None,
                    })
                    .await
                    .unwrap();
                assert!(report.fenced.is_empty());
                assert_eq!(report.applied.len(), batch.len());
                done.extend(report.applied);
                batch = next;
            }
            done
        }));
    }
    let mut seen = HashSet::new();
    for l in loops {
        for id in l.await.unwrap() {
            assert!(seen.insert(id), "job {id} completed twice");
        }
    }
    assert_eq!(seen, expected);
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'sent'),
                    (SELECT count(*) FROM job_attempt_history WHERE outcome = 'sent')
             FROM job_states",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (3_000, 3_000));
}

#[tokio::test]
async fn the_claim_part_sees_jobs_the_completion_makes_due_only_in_the_next_round() {
    let db = TestDb::new().await;
    let client = db.client().await;
    insert_due_jobs(&client, 1).await;
    let store = db.store().await;
    let first = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    // a retry due right away: the same statement must not claim it again (it was processing
    // in the statement's snapshot); the next claim does
    let retry = completion(
        &first[0],
        Decision::Retry {
            at: Utc::now() - chrono::Duration::seconds(1),
        },
    );
    let (report, next) = store
        .complete_and_claim(CompleteAndClaim {
            completions: &[retry],
            next_batch: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(report.applied, vec![first[0].id]);
    assert!(
        next.is_empty(),
        "not claimed in the statement that completed it"
    );
    let again = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!((again[0].id, again[0].attempt), (first[0].id, 2));
}

/// The queue by state, and the backlog's age, the oldest due job's wait: jobs not yet due,
/// jobs claimed or finished do not count towards it, and an empty backlog is 0.
#[tokio::test]
async fn the_queue_depth_counts_each_state_and_the_backlog_age_is_the_oldest_due_jobs_wait() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let now = Utc::now();
    let depth = || store.queue_depth(At { now: Some(now) });
    assert_eq!(depth().await.unwrap(), QueueDepth::default());
    Job::new().due_in(3600.0).insert(&client).await;
    Job::new()
        .due_in(-900.0)
        .status(JobStatus::Sent)
        .insert(&client)
        .await;
    Job::new()
        .due_in(-600.0)
        .status(JobStatus::Processing)
        .insert(&client)
        .await;
    Job::new()
        .due_in(600.0)
        .status(JobStatus::Failed)
        .insert_many(&client, 2)
        .await;
    assert_eq!(
        depth().await.unwrap(),
        QueueDepth {
            backlog_age_secs: 0.0,
            due: 0,
            processing: 1,
            held: 2,
            scheduled: 1,
        }
    );
    Job::new().due_in(-30.0).insert(&client).await;
    Job::new()
        .due_in(-90.0)
        .status(JobStatus::Failed)
        .insert(&client)
        .await;
    let queue = depth().await.unwrap();
    assert_eq!(
        (queue.due, queue.processing, queue.held, queue.scheduled),
        (2, 1, 2, 1)
    );
    let age = queue.backlog_age_secs;
    assert!((89.0..=92.0).contains(&age), "{age}");
}

/// The worker never writes the job's record (its payload and four indexes): the claim
/// updates the queue row in place (a HOT update, no index entry), a retry updates the queue
/// row, and a final outcome deletes it and writes an outcome row.
#[tokio::test]
async fn the_worker_writes_the_queue_and_an_outcome_row_and_the_claim_is_a_hot_update() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let store = db.store().await;
    let ids = insert_due_jobs(&client, 2).await;
    let record_version = |id: Uuid| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT xmin::text, (SELECT count(*) FROM job_queue WHERE id = $1),
                            (SELECT status::text FROM job_outcomes WHERE job_id = $1)
                     FROM job_requests WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (
                row.get::<_, String>(0),
                row.get::<_, i64>(1),
                row.get::<_, Option<String>>(2),
            )
        }
    };
    let before: Vec<_> = [record_version(ids[0]).await, record_version(ids[1]).await].into();
    let claimed = store
        .claim(Claim {
            batch_size: 10,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(
        queue_updates(&client, 2).await,
        (2, 2),
        "both claims are HOT updates of the queue row"
    );
    let (sent, retried) = if claimed[0].id == ids[0] {
        (&claimed[0], &claimed[1])
    } else {
        (&claimed[1], &claimed[0])
    };
    let retry = Decision::Retry {
        at: Utc::now() + chrono::Duration::minutes(1),
    };
    store
        .complete(Complete {
            completions: &[completion(sent, Decision::Sent), completion(retried, retry)],
            now: None,
        })
        .await
        .unwrap();
    let after = [record_version(ids[0]).await, record_version(ids[1]).await];
    for (was, is) in before.iter().zip(&after) {
        assert_eq!(was.0, is.0, "the worker leaves the record alone");
    }
    let (_, sent_queued, sent_outcome) = record_version(sent.id).await;
    assert_eq!(sent_queued, 0, "a finished job leaves the queue");
    assert_eq!(sent_outcome.as_deref(), Some("sent"), "its outcome row");
    let (_, retried_queued, retried_outcome) = record_version(retried.id).await;
    assert_eq!(retried_queued, 1, "a retried job stays in the queue");
    assert_eq!(retried_outcome, None);
    let row = client
        .query_one(
            "SELECT status::text, attempts, claim_token IS NULL FROM job_states WHERE id = $1",
            &[&retried.id],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i32>(1),
            row.get::<_, bool>(2)
        ),
        ("failed".to_owned(), 1, true)
    );
}

/// The queue's (updates, HOT updates) once at least `updates` are counted: another session's
/// statistics reach the shared counters within a second or so of its transaction.
async fn queue_updates(client: &Client, updates: i64) -> (i64, i64) {
    for _ in 0..100 {
        let row = client
            .query_one(
                "SELECT n_tup_upd, n_tup_hot_upd
                 FROM pg_stat_user_tables WHERE relname = 'job_queue'",
                &[],
            )
            .await
            .unwrap();
        let counts = (row.get::<_, i64>(0), row.get::<_, i64>(1));
        if counts.0 >= updates {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the queue's update count never reached {updates}");
}

/// The claim stays one indexed statement however deep a lane is: with 100,000 due `low` jobs
/// and five `high` ones, its plan reads `job_queue` through indexes only (each lane a range
/// of `job_queue_lanes`, the claimed rows by their key), and it answers the lanes in order.
/// The payloads come from the requests by key: no partition of the history is scanned.
/// The lanes' LIMITs are expressions the planner guesses at a tenth of a lane: without the
/// claim's own `LIMIT $1` over them, the UPDATE joined them by scanning the whole queue.
#[tokio::test]
async fn the_claim_reads_index_ranges_only_however_deep_the_low_lane() {
    let db = TestDb::new().await;
    let client = db.client().await;
    Job::new().insert_many(&client, 100_000).await;
    client
        .batch_execute("UPDATE job_queue SET priority = 'low'")
        .await
        .unwrap();
    let high = Job::new().due_in(-0.5).insert_many(&client, 5).await;
    client
        .batch_execute(
            "UPDATE job_queue SET priority = 'high' WHERE priority = 'normal';
             ANALYZE job_queue, job_requests",
        )
        .await
        .unwrap();

    // the sequential scans that ran (a partition pruned at run time never does)
    fn scans(node: &serde_json::Value, found: &mut Vec<String>) {
        if node["Node Type"] == "Seq Scan" && node["Actual Loops"].as_f64() != Some(0.0) {
            found.push(node["Relation Name"].as_str().unwrap_or("?").to_owned());
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            scans(child, found);
        }
    }
    let none: Option<chrono::DateTime<Utc>> = None;
    // the claim, and the fair claim with the same UPDATE: neither scans the queue whole, and
    // each reads the claimed jobs' payloads from their requests by key (migration 0012),
    // never by scanning a day of history
    let mut client = client;
    for claim in [&sql::CLAIM, &sql::CLAIM_FAIR] {
        let mut params: Vec<(&(dyn tokio_postgres::types::ToSql + Sync), _)> = vec![
            (&100_i64, claim.params[0].clone()),
            (&none, claim.params[1].clone()),
        ];
        if claim.params.len() > 2 {
            params.push((&600_i32, claim.params[2].clone()));
        }
        // run, and undone
        let tx = client.transaction().await.unwrap();
        let rows = tx
            .query_typed(
                &format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", claim.sql),
                &params,
            )
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        let plan: serde_json::Value = rows[0].get(0);
        let mut seq = Vec::new();
        scans(&plan[0]["Plan"], &mut seq);
        assert!(
            !seq.iter().any(|table| table.starts_with("job_requests")),
            "{} scans a partition of job_requests for the payloads: {plan:#}",
            claim.name
        );
        if claim.name == "CLAIM" {
            assert!(
                !seq.iter().any(|table| table == "job_queue"),
                "the claim scans job_queue whole: {plan:#}"
            );
        }
    }

    let store = db.store().await;
    let claimed = store
        .claim(Claim {
            batch_size: 100,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 100);
    let first: HashSet<Uuid> = claimed[..5].iter().map(|j| j.id).collect();
    assert_eq!(
        first,
        high.into_iter().collect(),
        "the high lane comes first in the answer"
    );
}

/// Whether `node`'s plan, or any plan below it, is a node of `kind`.
fn has_node(node: &serde_json::Value, kind: &str) -> bool {
    node["Node Type"] == kind
        || node["Plans"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|child| has_node(child, kind))
}

/// The priority and due time of each job, in the order given.
async fn lanes_of(client: &Client, ids: &[Uuid]) -> Vec<(String, chrono::DateTime<Utc>)> {
    let rows = client
        .query(
            "SELECT q.priority::text, q.next_attempt_at
             FROM unnest($1::uuid[]) WITH ORDINALITY AS i (id, n)
             JOIN job_queue AS q ON q.id = i.id
             ORDER BY i.n",
            &[&ids],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// The batch's order is the order the worker calls providers in, so both claims answer lane
/// by lane, each lane oldest first, whatever join the planner picks. On a small queue it may
/// hash the UPDATE's join, which keeps no order: here the database forbids nested loops where
/// it has a choice (`enable_nestloop = off` for every connection, the store's included), the
/// plan is checked to hash, and the `high` jobs are spread through the heap.
#[tokio::test]
async fn both_claims_answer_lane_by_lane_oldest_first_when_the_join_hashes() {
    let db = TestDb::new().await;
    let client = db.client().await;
    Job::new().insert_many(&client, 300).await;
    // due times spread over 1,000 s, 30 `high` jobs among them by their random ids
    client
        .batch_execute(
            "UPDATE job_queue
                SET next_attempt_at = now() - interval '1 second' * (1 + abs(hashtext(id::text)) % 1000);
             UPDATE job_queue SET priority = 'high'
              WHERE id IN (SELECT id FROM job_queue ORDER BY id LIMIT 30);
             ANALYZE job_queue",
        )
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET enable_nestloop = off",
            db.name
        ))
        .await
        .unwrap();
    // a new connection, with the setting
    let client = db.client().await;
    let none: Option<chrono::DateTime<Utc>> = None;
    let claim = &sql::CLAIM;
    let plan = client
        .query_typed(
            &format!("EXPLAIN (FORMAT JSON) {}", claim.sql),
            &[
                (&100_i64, claim.params[0].clone()),
                (&none, claim.params[1].clone()),
            ],
        )
        .await
        .unwrap();
    let plan: serde_json::Value = plan[0].get(0);
    assert!(
        has_node(&plan[0]["Plan"], "Hash Join"),
        "the UPDATE's join does not hash here, so the test shows nothing: {plan:#}"
    );

    let in_order = |lanes: &[(String, chrono::DateTime<Utc>)]| {
        let rank = |p: &str| ["high", "normal", "low"].iter().position(|l| *l == p);
        lanes
            .windows(2)
            .all(|w| (rank(&w[0].0), w[0].1) <= (rank(&w[1].0), w[1].1))
    };
    let store = db.store().await;
    let first = store
        .claim(Claim {
            batch_size: 100,
            now: None,
        })
        .await
        .unwrap();
    let ids: Vec<Uuid> = first.iter().map(|j| j.id).collect();
    let lanes = lanes_of(&client, &ids).await;
    assert_eq!(lanes.len(), 100);
    assert!(
        lanes[..30].iter().all(|(p, _)| p == "high"),
        "claim.sql: the 30 high jobs first: {lanes:?}"
    );
    assert!(in_order(&lanes), "claim.sql's answer: {lanes:?}");

    // complete.sql: the first batch completed, the next claimed with it
    let completions: Vec<_> = first
        .iter()
        .map(|job| completion(job, Decision::Sent))
        .collect();
    let (_, next) = store
        .complete_and_claim(CompleteAndClaim {
            completions: &completions,
            next_batch: 100,
            now: None,
        })
        .await
        .unwrap();
    let ids: Vec<Uuid> = next.iter().map(|j| j.id).collect();
    let lanes = lanes_of(&client, &ids).await;
    assert_eq!(lanes.len(), 100);
    assert!(in_order(&lanes), "complete.sql's answer: {lanes:?}");
}
