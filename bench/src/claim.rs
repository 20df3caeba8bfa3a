//! 2: claim latency per batch with no finished rows and with many, and the claim's plan.
//!
//! The worker claims with claim.sql alone when it has no batch in hand, and otherwise with
//! the same claim inside its complete-and-claim statement. To time the claim by itself, one
//! connection drains the queue with `JobStore::claim` (timed: one round trip, commit
//! included) and completes each batch with `JobStore::complete` (timed apart).

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::Value;
use shared::store::{Completion, Decision, JobStore};

use crate::db::Bench;
use crate::stats::Samples;
use crate::worked::open_stores;

/// Claim and complete latencies of one connection draining `jobs` due jobs, `batch` a time.
pub async fn latencies(bench: &Bench, jobs: i64, batch: u32) -> Result<(Samples, Samples)> {
    bench.insert_due(jobs).await?;
    bench.settle().await?;
    let store = open_stores(bench, 1).await?.pop().context("a store")?;
    let (mut claims, mut completes) = (Samples::new(), Samples::new());
    loop {
        let t0 = Instant::now();
        let claimed = store.claim(batch, None).await?;
        if claimed.is_empty() {
            break;
        }
        claims.push(t0.elapsed());
        let now = chrono::Utc::now();
        let done: Vec<Completion> = claimed
            .iter()
            .map(|job| Completion {
                job_id: job.id,
                claim_token: job.claim_token,
                attempt: job.attempt,
                channel: job.channel,
                decision: Decision::Sent,
                provider_message_id: Some(job.id.to_string()),
                error_code: None,
                error_message: None,
                started_at: now,
                finished_at: now,
            })
            .collect();
        let t1 = Instant::now();
        store.complete(&done, None).await?;
        completes.push(t1.elapsed());
    }
    Ok((claims, completes))
}

/// Adds `n` finished jobs (9 in 10 sent, 1 in 10 dead after 5 attempts) spread over the last
/// 29 days (inside the default retention), each with its delivery row, then settles.
pub async fn fill_finished(bench: &Bench, n: i64) -> Result<()> {
    bench
        .client
        .execute(
            "INSERT INTO notification_jobs
                 (organization_id, channel, payload, status, attempts, max_attempts,
                  next_attempt_at, created_at, updated_at, claimed_at, claim_token, last_error)
             SELECT '0b9d8c1e-0000-4000-8000-000000000001'::uuid, 'sms',
                    jsonb_build_object('to', '+1555' || lpad((g % 10000000)::text, 7, '0'),
                                       'message', 'Your invoice is paid'),
                    CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'sent' END::job_status,
                    CASE WHEN g % 10 = 0 THEN 5 ELSE 1 END, 5,
                    t, t, t, t, gen_random_uuid(),
                    CASE WHEN g % 10 = 0 THEN 'InvalidParameter: bench' END
             FROM generate_series(1, $1::bigint) AS g,
                  LATERAL (SELECT now() - (g % 2505600) * interval '1 second' AS t) AS ts",
            &[&n],
        )
        .await
        .context("insert finished jobs")?;
    bench
        .client
        .batch_execute(
            "INSERT INTO notification_deliveries
                 (job_id, attempt, provider, provider_message_id, outcome, started_at, finished_at)
             SELECT j.id, j.attempts, 'sns', j.id::text,
                    CASE j.status WHEN 'sent' THEN 'sent' ELSE 'dead' END,
                    j.updated_at, j.updated_at
             FROM notification_jobs AS j
             WHERE j.status IN ('sent', 'dead')
               AND NOT EXISTS (SELECT 1 FROM notification_deliveries d WHERE d.job_id = j.id)",
        )
        .await
        .context("insert their delivery rows")?;
    bench.settle().await
}

/// EXPLAIN (ANALYZE, BUFFERS) of the worker's claim statement at `batch`, in a transaction
/// rolled back (the claim is an UPDATE).
pub async fn explain(bench: &Bench, batch: u32) -> Result<String> {
    let client = &bench.client;
    client.batch_execute("BEGIN").await?;
    let result = async {
        client
            .batch_execute(&format!(
                "PREPARE bench_claim(bigint, timestamptz) AS {}",
                shared::store::sql::CLAIM.sql
            ))
            .await
            .context("prepare the claim")?;
        let rows = client
            .simple_query(&format!(
                "EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_claim({batch}, NULL)"
            ))
            .await
            .context("explain the claim")?;
        let plan: Vec<String> = rows
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .collect();
        Ok::<_, anyhow::Error>(plan.join("\n"))
    }
    .await;
    client.batch_execute("ROLLBACK").await?;
    // a prepared statement outlives the transaction
    let _ = client.batch_execute("DEALLOCATE bench_claim").await;
    result
}

pub fn json((claims, completes): &(Samples, Samples)) -> Value {
    serde_json::json!({"claim": claims.json(), "complete": completes.json()})
}
