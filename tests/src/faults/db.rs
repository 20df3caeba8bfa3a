//! What the job tables say at the end of a scenario. A job's request is in job_requests; an
//! open job (pending, failed, processing) has one row in job_queue, whose claim token says a
//! worker holds it and whose attempts, tries and due time are the live ones; an ended job has
//! no queue row and one row in job_outcomes (its final status).

use std::collections::HashMap;

use tokio_postgres::Client;
use uuid::Uuid;

/// Each job as it stands, to select from (`FROM ({STANDS}) j`): the view job_states (the
/// request, with the live attempts, tries, budget and due time of an open job from its queue
/// row, `processing` while that row holds a claim, and an ended job's from its outcome row),
/// its status as text, and whether it has a queue row (`queued`) at all.
pub const STANDS: &str = "
    SELECT s.id, s.organization_id, s.channel, s.payload, s.status::text AS status,
           s.attempts, s.max_attempts, s.tries, s.next_attempt_at, s.updated_at,
           EXISTS (SELECT 1 FROM job_queue AS q WHERE q.id = s.id) AS queued
    FROM job_states AS s";

/// Job counts by status, as each job stands (`processing` from its claim).
pub async fn statuses(client: &Client) -> HashMap<String, u64> {
    client
        .query(
            &format!("SELECT status, count(*) FROM ({STANDS}) j GROUP BY 1"),
            &[],
        )
        .await
        .expect("count jobs")
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
        .collect()
}

/// Every row of the job table.
pub async fn jobs(client: &Client) -> u64 {
    crate::count(client, "SELECT count(*) FROM job_requests").await as u64
}

/// The queue: its rows (the open jobs) and those a worker holds (claim token set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queue {
    pub open: u64,
    pub claimed: u64,
}

/// What job_queue holds now.
pub async fn queue(client: &Client) -> Queue {
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE claim_token IS NOT NULL) FROM job_queue",
            &[],
        )
        .await
        .expect("count the queue");
    Queue {
        open: row.get::<_, i64>(0) as u64,
        claimed: row.get::<_, i64>(1) as u64,
    }
}

/// Jobs whose queue and outcome rows disagree: a request with neither (never claimed again,
/// never ended: lost), or a queue row with an outcome row beside it or no request.
pub async fn queue_mismatches(client: &Client) -> u64 {
    crate::count(
        client,
        "SELECT (SELECT count(*) FROM job_requests j
                 WHERE NOT EXISTS (SELECT 1 FROM job_queue q WHERE q.id = j.id)
                   AND NOT EXISTS (SELECT 1 FROM job_outcomes o WHERE o.job_id = j.id))
              + (SELECT count(*) FROM job_queue q
                 WHERE NOT EXISTS (SELECT 1 FROM job_requests j WHERE j.id = q.id)
                    OR EXISTS (SELECT 1 FROM job_outcomes o WHERE o.job_id = q.id))",
    )
    .await as u64
}

/// Accepted ids that are missing or not final (`sent`/`dead`).
pub async fn lost(client: &Client, accepted: &[Uuid]) -> u64 {
    let row = client
        .query_one(
            &format!(
                "SELECT count(*) FROM unnest($1::uuid[]) AS a(id)
                 LEFT JOIN ({STANDS}) j ON j.id = a.id
                 WHERE j.id IS NULL OR j.status NOT IN ('sent', 'dead')"
            ),
            &[&accepted],
        )
        .await
        .expect("count lost jobs");
    row.get::<_, i64>(0) as u64
}

/// Accepted ids with no row.
pub async fn missing_rows(client: &Client, accepted: &[Uuid]) -> u64 {
    let row = client
        .query_one(
            "SELECT count(*) FROM unnest($1::uuid[]) AS a(id)
             WHERE NOT EXISTS (SELECT 1 FROM job_requests j WHERE j.id = a.id)",
            &[&accepted],
        )
        .await
        .expect("count missing rows");
    row.get::<_, i64>(0) as u64
}

/// Jobs whose attempts (live ones for an open job) are not each recorded by exactly one
/// delivery row.
pub async fn attempts_without_rows(client: &Client) -> u64 {
    let attempts = super::claims::try_column("j");
    crate::count(
        client,
        &format!(
            "SELECT count(*) FROM ({STANDS}) j
             WHERE {attempts} <> (SELECT count(*) FROM job_attempt_history d
                                  WHERE d.job_id = j.id)"
        ),
    )
    .await as u64
}

/// Delivery rows the sweeper wrote for attempts whose worker was lost.
pub async fn lost_attempts(client: &Client) -> u64 {
    crate::count(
        client,
        "SELECT count(*) FROM job_attempt_history WHERE outcome = 'lost'",
    )
    .await as u64
}

/// `DATABASE_URL` with another database name.
pub fn url_with_db(url: &str, db: &str) -> String {
    notify_postgres::db::url_with_dbname(url, db).expect("DATABASE_URL is a postgres:// URL")
}
