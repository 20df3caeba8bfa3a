//! 2: claim latency per batch with no finished rows and with many, and the claim's plan.
//!
//! The worker claims with claim.sql alone when it has no batch in hand, and otherwise with
//! the same claim inside its complete-and-claim statement. To time the claim by itself, one
//! connection drains the queue with `JobStore::claim` (timed: one round trip, commit
//! included) and completes each batch with `JobStore::complete` (timed apart).

use std::time::Instant;

use anyhow::{Context, Result};
use notify_core::store::{Claim, ClaimedJob, Complete, Completion, Decision, JobStore};
use serde::Serialize;

use crate::Plan;
use crate::db::{Bench, HISTORY_DB, ORG};
use crate::stats::{Latency, Samples, rounded, rounded_all};
use crate::worked::open_stores;

/// 2: claim latency per batch size, with no finished rows and with many.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClaimLatency {
    /// Due jobs each run drains.
    pub due_jobs: i64,
    /// Finished jobs (each with its outcome row, holding its last attempt) in the second database's history.
    pub finished_rows: i64,
    /// Drains of each batch size on each side.
    pub rounds: usize,
    pub batches: Vec<ClaimBatch>,
    /// EXPLAIN (ANALYZE, BUFFERS) of the claim at batch 100, without and with them.
    pub explain_finished_0: String,
    pub explain_finished_many: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ClaimBatch {
    pub batch: u32,
    /// All rounds' samples together.
    pub finished_0: Drain,
    pub finished_many: Drain,
    /// The claim's p50 and p99 with many finished rows ÷ with none.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub ratio_p50: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub ratio_p99: f64,
    /// Each round's p50 ratio, to show the spread between rounds.
    #[serde(serialize_with = "rounded_all::<3, _>")]
    pub round_ratios_p50: Vec<f64>,
    /// And each round's p99 ratio (about three samples above it per drain at batch 100).
    #[serde(serialize_with = "rounded_all::<3, _>")]
    pub round_ratios_p99: Vec<f64>,
}

impl ClaimBatch {
    fn new(batch: u32, rounds: Vec<(DrainSamples, DrainSamples)>) -> Self {
        let (mut none, mut many) = (DrainSamples::default(), DrainSamples::default());
        let mut round_ratios_p50 = Vec::with_capacity(rounds.len());
        let mut round_ratios_p99 = Vec::with_capacity(rounds.len());
        for (a, b) in rounds {
            round_ratios_p50.push(b.claims.p50() / a.claims.p50());
            round_ratios_p99.push(b.claims.p99() / a.claims.p99());
            none.extend(a);
            many.extend(b);
        }
        let (finished_0, finished_many) = (none.latency(), many.latency());
        let (a, b) = (&finished_0.claim, &finished_many.claim);
        Self {
            batch,
            ratio_p50: b.p50_ms / a.p50_ms,
            ratio_p99: b.p99_ms / a.p99_ms,
            round_ratios_p50,
            round_ratios_p99,
            finished_0,
            finished_many,
        }
    }
}

/// The latencies of one connection draining the queue.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Drain {
    pub claim: Latency,
    pub complete: Latency,
}

/// The samples of one or more drains.
#[derive(Debug, Clone, Default)]
pub struct DrainSamples {
    pub claims: Samples,
    pub completes: Samples,
}

impl DrainSamples {
    fn extend(&mut self, other: DrainSamples) {
        self.claims.extend(other.claims);
        self.completes.extend(other.completes);
    }

    fn latency(&self) -> Drain {
        Drain {
            claim: self.claims.latency(),
            complete: self.completes.latency(),
        }
    }
}

/// Every batch size of the plan, on a queue with no finished rows beside it (this database)
/// and on one with `plan.finished_rows` of them (a second database on the same server, filled
/// once). The two take turns, `plan.claim_rounds` times each, in the order none, many, many,
/// none, ...: a machine that speeds up or slows down over the minutes of the run weighs on
/// both sides alike, instead of on the ratio. Autovacuum is off on both for the drains. The
/// claim's plan in both.
pub async fn measure(bench: &Bench, plan: &Plan) -> Result<ClaimLatency> {
    bench.truncate().await?;
    bench.insert_due(plan.claim_jobs).await?;
    bench.settle().await?;
    let explain_finished_0 = explain(bench, 100).await?;
    bench.truncate().await?;
    let full = bench.sibling(HISTORY_DB).await?;
    let result = async {
        crate::step!(
            "filling {} finished jobs (their outcome rows) in {HISTORY_DB}",
            plan.finished_rows
        );
        fill_finished(&full, plan.finished_rows, Finished::KEPT).await?;
        // the drains run with autovacuum off on both sides, each between two VACUUM ANALYZEs
        // (`drain`). With it on, the server's log showed its runs landing inside drains: the
        // launcher visits each database about once a minute, so whether a visit (a drain's
        // 30,000 dead queue rows, the day's partitions analyzed: 0.4 to 1 s of work on a
        // 2-core machine) fell on a drain of one side or the other was chance, and it moved a
        // side's p99 by 20–35%. Turning it off also waits for (or cancels) the fill's own
        // vacuum before the first drain. Vacuum's cost is part 10's (retention), not this one's
        bench.autovacuum(false).await?;
        full.autovacuum(false).await?;
        let mut batches = Vec::new();
        for &batch in &plan.claim_batches {
            let mut rounds = Vec::new();
            for round in 0..plan.claim_rounds {
                crate::step!(
                    "claim latency: batch {batch}, round {} of {}, 0 and {} finished rows",
                    round + 1,
                    plan.claim_rounds,
                    plan.finished_rows
                );
                let (none, many) = if round % 2 == 0 {
                    let none = drain(bench, plan.claim_jobs, batch).await?;
                    (none, drain(&full, plan.claim_jobs, batch).await?)
                } else {
                    let many = drain(&full, plan.claim_jobs, batch).await?;
                    (drain(bench, plan.claim_jobs, batch).await?, many)
                };
                rounds.push((none, many));
            }
            batches.push(ClaimBatch::new(batch, rounds));
        }
        full.insert_due(plan.claim_jobs).await?;
        full.settle().await?;
        let explain_finished_many = explain(&full, 100).await?;
        Ok::<_, anyhow::Error>((batches, explain_finished_many))
    }
    .await;
    // the full history goes at once: its 10M rows would weigh on the sections after this one
    full.drop_sibling().await;
    let restored = bench.autovacuum(true).await;
    let (batches, explain_finished_many) = result?;
    restored?;
    Ok(ClaimLatency {
        due_jobs: plan.claim_jobs,
        finished_rows: plan.finished_rows,
        rounds: plan.claim_rounds,
        batches,
        explain_finished_0,
        explain_finished_many,
    })
}

/// Claim and complete latencies of one connection draining `jobs` due jobs, `batch` a time.
pub async fn drain(bench: &Bench, jobs: i64, batch: u32) -> Result<DrainSamples> {
    bench.insert_due(jobs).await?;
    bench.settle().await?;
    let store = open_stores(bench, 1).await?.pop().context("a store")?;
    let mut samples = DrainSamples::default();
    loop {
        let t0 = Instant::now();
        let claimed = store
            .claim(Claim {
                batch_size: batch,
                now: None,
            })
            .await?;
        if claimed.is_empty() {
            break;
        }
        samples.claims.push(t0.elapsed());
        let done = sent(&claimed);
        let t1 = Instant::now();
        store
            .complete(Complete {
                completions: &done,
                now: None,
            })
            .await?;
        samples.completes.push(t1.elapsed());
    }
    // the drain's dead queue rows vacuumed now, untimed (autovacuum is off for the part: see
    // `measure`), so the next drain's due jobs reuse their space instead of extending the table
    bench.settle().await?;
    Ok(samples)
}

/// Each claimed job sent, answered at once with a provider's message id.
pub fn sent(claimed: &[ClaimedJob]) -> Vec<Completion> {
    let now = chrono::Utc::now();
    claimed
        .iter()
        .map(|job| Completion {
            job_id: job.id,
            claim_token: job.claim_token,
            call: job.call,
            channel: job.channel,
            decision: Decision::Sent,
            provider_message_id: Some(crate::worked::message_id()),
            error_code: None,
            error_message: None,
            started_at: now,
            finished_at: now,
            job_created_at: job.created_at,
        })
        .collect()
}

/// When the finished jobs of [`fill_finished`] were accepted (and ended): spread evenly over
/// `spread_secs`, the newest `ago_secs` ago; and whether each came with an idempotency key.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    pub ago_secs: i64,
    pub spread_secs: i64,
    pub keyed: bool,
}

impl Finished {
    /// The last 29 days: history inside the default retention (30 days). No idempotency keys:
    /// the claim reads none.
    pub const KEPT: Self = Self {
        ago_secs: 0,
        spread_secs: 29 * 86_400,
        keyed: false,
    };
}

/// Adds `n` finished jobs (9 in 10 sent, 1 in 10 dead after 5 attempts) accepted `when`, a
/// million per statement, then settles. Each is written as ingest and the worker leave a job
/// worked to its end: its request (`job_requests`) and its outcome row holding its last
/// attempt (the dead ones' earlier attempts are not written), both in the partitions of its
/// day, made first where missing (`history_add_days`, which also registers the days in
/// `history_days`); a UUIDv7 id of its `created_at`; and with `when.keyed`, an idempotency
/// key (a UUID's text, as the benchmark's ingest requests send) with its request hash and its
/// row in `idempotency_keys`. A job ends the moment it was accepted: its day's last end is the
/// day itself. Provider message ids are random (v4), as SNS gives them.
pub async fn fill_finished(bench: &Bench, n: i64, when: Finished) -> Result<()> {
    const CHUNK: i64 = 1_000_000;
    // one clock for every statement: a long fill stays inside the days it was given
    let base: chrono::DateTime<chrono::Utc> = bench
        .client
        .query_one(
            "SELECT now() AS base, history_add_days(first, (last - first) + 1)
             FROM (SELECT ((now() - make_interval(secs => $1::bigint + $2::bigint - 1))
                               AT TIME ZONE 'UTC')::date AS first,
                          ((now() - make_interval(secs => $1::bigint))
                               AT TIME ZONE 'UTC')::date AS last) AS days",
            &[&when.ago_secs, &when.spread_secs],
        )
        .await
        .context("the days' partitions")?
        .get("base");
    let sql = format!(
        "WITH src AS MATERIALIZED (
             SELECT {id} AS id, g, t, CASE WHEN g % 10 = 0 THEN 5 ELSE 1 END AS attempts,
                    CASE WHEN $5::bool THEN md5(random()::text)::uuid::text END AS key
             FROM generate_series($1::bigint, $2::bigint) AS g,
                  LATERAL (SELECT $7::timestamptz - make_interval(secs => $3::bigint + g % $4::bigint)
                                  AS t) AS ts
         ),
         keyed AS (
             INSERT INTO idempotency_keys (organization_id, idempotency_key, job_id,
                                           job_created_at)
             SELECT '{ORG}'::uuid, key, id, t
             FROM src
             WHERE key IS NOT NULL
         ),
         jobs AS (
             INSERT INTO job_requests
                 (id, organization_id, created_at, channel, payload, max_attempts, send_at,
                  expires_at, idempotency_key, request_hash)
             SELECT id, '{ORG}'::uuid, t, 'sms',
                    jsonb_build_object('to', '+1555' || lpad((g % 10000000)::text, 7, '0'),
                                       'message', 'Your invoice is paid'),
                    5, t, t + make_interval(secs => $6::bigint), key,
                    CASE WHEN key IS NOT NULL THEN encode(sha256(convert_to(key, 'UTF8')), 'hex') END
             FROM src
         ),
         ended AS (
             INSERT INTO job_outcomes
                 (job_id, organization_id, created_at, status, attempts, max_attempts, tries,
                  next_attempt_at, last_error, updated_at, provider, provider_message_id,
                  error_code, error_message, started_at, finished_at)
             SELECT id, '{ORG}'::uuid, t,
                    CASE attempts WHEN 1 THEN 'sent' ELSE 'dead' END::job_status,
                    attempts, 5, attempts, t,
                    CASE attempts WHEN 1 THEN NULL ELSE 'InvalidParameter: bench' END, t,
                    'sns', gen_random_uuid()::text,
                    CASE attempts WHEN 1 THEN NULL ELSE 'InvalidParameter' END,
                    CASE attempts WHEN 1 THEN NULL ELSE 'bench' END, t, t
             FROM src
         )
         SELECT count(*) FROM src",
        id = crate::db::uuid_v7("t")
    );
    let max_age = crate::db::max_age_secs();
    let mut from = 1;
    while from <= n {
        let to = (from + CHUNK - 1).min(n);
        bench
            .client
            .execute(
                &sql,
                &[
                    &from,
                    &to,
                    &when.ago_secs,
                    &when.spread_secs,
                    &when.keyed,
                    &max_age,
                    &base,
                ],
            )
            .await
            .with_context(|| format!("insert finished jobs {from}..={to}"))?;
        from = to + 1;
    }
    bench.settle().await
}

/// EXPLAIN (ANALYZE, BUFFERS) of the worker's claim statement at `batch`, in a transaction
/// rolled back (the claim is an UPDATE).
pub async fn explain(bench: &Bench, batch: u32) -> Result<String> {
    explain_statement(
        &bench.client,
        notify_postgres::sql::CLAIM.sql,
        "bigint, timestamptz",
        &format!("{batch}, NULL"),
    )
    .await
}

/// EXPLAIN (ANALYZE, BUFFERS) of `sql` (parameters of the SQL types `types`, given `args`, both
/// comma-separated), prepared and run in a transaction rolled back: a claim changes nothing.
pub async fn explain_statement(
    client: &tokio_postgres::Client,
    sql: &str,
    types: &str,
    args: &str,
) -> Result<String> {
    client.batch_execute("BEGIN").await?;
    let result = async {
        client
            .batch_execute(&format!("PREPARE bench_claim({types}) AS {sql}"))
            .await
            .context("prepare the claim")?;
        let rows = client
            .simple_query(&format!(
                "EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_claim({args})"
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
