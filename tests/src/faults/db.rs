//! What the job table says at the end of a scenario.

use std::collections::HashMap;

use tokio_postgres::Client;
use uuid::Uuid;

/// Job counts by status.
pub async fn statuses(client: &Client) -> HashMap<String, u64> {
    client
        .query(
            "SELECT status::text, count(*) FROM notification_jobs GROUP BY 1",
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
    crate::count(client, "SELECT count(*) FROM notification_jobs").await as u64
}

/// Accepted ids that are missing or not final (`sent`/`dead`).
pub async fn lost(client: &Client, accepted: &[Uuid]) -> u64 {
    let row = client
        .query_one(
            "SELECT count(*) FROM unnest($1::uuid[]) AS a(id)
             LEFT JOIN notification_jobs j ON j.id = a.id
             WHERE j.id IS NULL OR j.status NOT IN ('sent', 'dead')",
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
             WHERE NOT EXISTS (SELECT 1 FROM notification_jobs j WHERE j.id = a.id)",
            &[&accepted],
        )
        .await
        .expect("count missing rows");
    row.get::<_, i64>(0) as u64
}

/// Jobs whose attempts are not each recorded by exactly one delivery row.
pub async fn attempts_without_rows(client: &Client) -> u64 {
    let attempts = super::claims::try_column(client, "j").await;
    crate::count(
        client,
        &format!(
            "SELECT count(*) FROM notification_jobs j
             WHERE {attempts} <> (SELECT count(*) FROM notification_deliveries d
                                  WHERE d.job_id = j.id)"
        ),
    )
    .await as u64
}

/// Delivery rows the sweeper wrote for attempts whose worker was lost.
pub async fn lost_attempts(client: &Client) -> u64 {
    crate::count(
        client,
        "SELECT count(*) FROM notification_deliveries WHERE outcome = 'lost'",
    )
    .await as u64
}

/// `DATABASE_URL` with another database name.
pub fn url_with_db(url: &str, db: &str) -> String {
    shared::db::url_with_dbname(url, db).expect("DATABASE_URL is a postgres:// URL")
}
