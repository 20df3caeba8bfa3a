//! `--only lanes`: the claim with priority lanes on a deep queue, alone.
//!
//! The queue holds `plan.lanes_low_jobs` due `low` jobs (spread over [`ORGS`] organizations),
//! [`HIGH_DUE`] due `high` ones, and a tenth as many `high` jobs due tomorrow: a deep lane
//! below the batch, and a lane whose range of `job_queue_lanes` starts with jobs that are not
//! due (one ordered scan over all lanes would pass over them before the `low` lane's due jobs).
//! Then, for the worker's claim (claim.sql) and for the fair one (claim_fair.sql, what
//! `RATE_LIMIT_PER_ORG_PER_MIN` switches on), at batch 100:
//!
//! - EXPLAIN (ANALYZE, BUFFERS), in a transaction rolled back, and whether the plan reads
//!   `job_queue` through an index only (no sequential scan of it);
//! - the first claim's rows: every due `high` job among them, none of tomorrow's;
//! - the claim's time over `plan.lanes_claims` claims, each in a transaction rolled back, so
//!   every claim sees the same queue. The time is the statement's round trip as the worker
//!   sends it (`query_typed`, custom plan), without its commit (part 2 times that too).

use std::time::Instant;

use anyhow::{Context, Result, ensure};
use notify_postgres::sql::{CLAIM, CLAIM_FAIR};
use serde::Serialize;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::Plan;
use crate::claim::explain_statement;
use crate::db::{Bench, ORG, max_age_secs, uuid_v7};
use crate::stats::{Latency, Samples};

/// The batch the claims take: the template's `WorkerBatchSize`.
pub const BATCH: u32 = 100;
/// Due `high` jobs: fewer than a batch, so the first claim takes them all and tops up with `low`.
pub const HIGH_DUE: i64 = 10;
/// Organizations the jobs are spread over (the fair claim visits each one with due jobs).
pub const ORGS: i64 = 1_000;
/// `RATE_LIMIT_PER_ORG_PER_MIN` for the fair claim: more than a batch, so each organization
/// offers a whole batch of candidates (its budget is never the limit here).
pub const FAIR_PER_MIN: i32 = 600;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Lanes {
    pub low_due: i64,
    pub high_due: i64,
    /// `high` jobs due tomorrow.
    pub high_later: i64,
    pub organizations: i64,
    pub batch: u32,
    /// claim.sql.
    pub plain: LaneClaim,
    /// claim_fair.sql at [`FAIR_PER_MIN`].
    pub fair: LaneClaim,
    pub fair_per_min: i32,
}

/// One claim statement on the lanes' queue.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LaneClaim {
    /// EXPLAIN (ANALYZE, BUFFERS) at batch 100.
    pub explain: String,
    /// The plan reads `job_queue` by index only: no `Seq Scan on job_queue`.
    pub indexed: bool,
    /// The first claim: how many rows, how many of them due `high`, `high` due tomorrow, `low`.
    pub rows: i64,
    pub high_due: i64,
    pub high_later: i64,
    pub low: i64,
    /// The due `high` jobs are the first rows the claim answers.
    pub high_first: bool,
    /// Each claim, rolled back.
    pub claim: Latency,
}

pub async fn measure(bench: &Bench, plan: &Plan) -> Result<Lanes> {
    let low = plan.lanes_low_jobs;
    let later = low / 10;
    bench.truncate().await?;
    crate::step!(
        "lanes: filling {low} due low jobs over {ORGS} organizations, {HIGH_DUE} due high, {later} high due tomorrow"
    );
    fill(bench, low, "low", ORGS, -3_600).await?;
    fill(bench, HIGH_DUE, "high", HIGH_DUE, -60).await?;
    fill(bench, later, "high", ORGS, 86_400).await?;
    // off while the claims run: their rolled-back row versions would call autovacuum in at
    // a random claim (the bench's settle vacuums instead)
    bench.autovacuum(false).await?;
    bench.settle().await?;
    let measured = async {
        crate::step!("lanes: claim.sql, {} claims", plan.lanes_claims);
        let plain = claim_on(bench, ClaimSql::Plain, plan.lanes_claims).await?;
        crate::step!(
            "lanes: claim_fair.sql at {FAIR_PER_MIN} per organization per minute, {} claims",
            plan.lanes_claims
        );
        let fair = claim_on(bench, ClaimSql::Fair, plan.lanes_claims).await?;
        anyhow::Ok((plain, fair))
    }
    .await;
    let restored = bench.autovacuum(true).await;
    let (plain, fair) = measured?;
    restored?;
    Ok(Lanes {
        low_due: low,
        high_due: HIGH_DUE,
        high_later: later,
        organizations: ORGS,
        batch: BATCH,
        plain,
        fair,
        fair_per_min: FAIR_PER_MIN,
    })
}

#[derive(Debug, Clone, Copy)]
enum ClaimSql {
    Plain,
    Fair,
}

impl ClaimSql {
    /// One claim at [`BATCH`], as the worker's store sends it; the claimed ids in the order
    /// the statement answers them.
    async fn claim(self, client: &Client) -> Result<Vec<Uuid>> {
        let batch = i64::from(BATCH);
        let now: Option<chrono::DateTime<chrono::Utc>> = None;
        let rows = match self {
            Self::Plain => {
                client
                    .query_typed(CLAIM.sql, &CLAIM.typed(&[&batch, &now]))
                    .await
            }
            Self::Fair => {
                client
                    .query_typed(
                        CLAIM_FAIR.sql,
                        &CLAIM_FAIR.typed(&[&batch, &now, &FAIR_PER_MIN]),
                    )
                    .await
            }
        }
        .with_context(|| format!("{self:?} claim"))?;
        Ok(rows.iter().map(|r| r.get("id")).collect())
    }

    async fn explain(self, client: &Client) -> Result<String> {
        match self {
            Self::Plain => {
                explain_statement(
                    client,
                    CLAIM.sql,
                    "bigint, timestamptz",
                    &format!("{BATCH}, NULL"),
                )
                .await
            }
            Self::Fair => {
                explain_statement(
                    client,
                    CLAIM_FAIR.sql,
                    "bigint, timestamptz, int",
                    &format!("{BATCH}, NULL, {FAIR_PER_MIN}"),
                )
                .await
            }
        }
    }
}

/// The plan, the first claim's rows, and `claims` timed claims of `statement`, each rolled back.
async fn claim_on(bench: &Bench, statement: ClaimSql, claims: usize) -> Result<LaneClaim> {
    let client = &bench.client;
    let explain = statement.explain(client).await?;
    // the first claim (untimed: it also warms the cache), and what it took, in its transaction
    client.batch_execute("BEGIN").await?;
    let first = async {
        let ids = statement.claim(client).await?;
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE priority = 'high' AND next_attempt_at <= now()),
                        count(*) FILTER (WHERE priority = 'high' AND next_attempt_at > now()),
                        count(*) FILTER (WHERE priority = 'low'),
                        count(*) FILTER (WHERE priority = 'high'
                                           AND id = ANY(($1::uuid[])[1:$2]))
                 FROM job_queue WHERE id = ANY($1)",
                &[&ids, &(HIGH_DUE as i32)],
            )
            .await
            .context("the first claim's lanes")?;
        anyhow::Ok((ids.len() as i64, row))
    }
    .await;
    client.batch_execute("ROLLBACK").await?;
    let (rows, lanes) = first?;
    let (high_due, high_later, low, leading): (i64, i64, i64, i64) =
        (lanes.get(0), lanes.get(1), lanes.get(2), lanes.get(3));
    ensure!(
        rows == i64::from(BATCH) && high_due == HIGH_DUE && high_later == 0,
        "{statement:?}: the first claim took {rows} rows, {high_due} of the {HIGH_DUE} due high jobs and {high_later} high jobs due tomorrow"
    );
    let mut samples = Samples::new();
    for _ in 0..claims {
        client.batch_execute("BEGIN").await?;
        let t0 = Instant::now();
        let claimed = statement.claim(client).await;
        let took = t0.elapsed();
        client.batch_execute("ROLLBACK").await?;
        ensure!(
            claimed?.len() == BATCH as usize,
            "{statement:?}: a claim took less than a batch"
        );
        samples.push(took);
    }
    Ok(LaneClaim {
        indexed: !explain.contains("Seq Scan on job_queue"),
        explain,
        rows,
        high_due,
        high_later,
        low,
        high_first: leading == HIGH_DUE,
        claim: samples.latency(),
    })
}

/// Adds `n` jobs of lane `priority` in one statement, written as ingest writes them (as
/// [`Bench::insert_due`] does, with a lane and a due time): due `due_in_secs` from now, each
/// up to an hour later than that (jobs of the same lane in no particular order of their ids),
/// over `orgs` organizations (the first is the bench's [`ORG`]).
async fn fill(bench: &Bench, n: i64, priority: &str, orgs: i64, due_in_secs: i64) -> Result<()> {
    let org_prefix = &ORG[..ORG.len() - 12];
    bench
        .client
        .execute(
            &format!(
                "WITH jobs AS (
                     INSERT INTO job_requests (id, organization_id, created_at, channel, payload,
                                               max_attempts, send_at, expires_at, priority)
                     SELECT {id}, ('{org_prefix}' || lpad(to_hex(1 + g % $2::bigint), 12, '0'))::uuid,
                            now(), 'sms',
                            jsonb_build_object('to', '+1555' || lpad((g % 10000000)::text, 7, '0'),
                                               'message', 'Your invoice is paid'),
                            {max_attempts}, due, due + make_interval(secs => $4::bigint),
                            $5::text::job_priority
                     FROM generate_series(1, $1::bigint) AS g,
                          LATERAL (SELECT now() + make_interval(secs => $3::bigint + g % 3600)
                                          AS due) AS d
                     RETURNING id, organization_id, channel, payload, send_at, expires_at,
                               max_attempts, created_at, priority
                 )
                 INSERT INTO job_queue (id, organization_id, channel, payload, next_attempt_at,
                                        expires_at, max_attempts, created_at, updated_at,
                                        priority)
                 SELECT id, organization_id, channel,
                        CASE WHEN (SELECT copies_payload FROM queue_settings) THEN payload END,
                        send_at, expires_at, max_attempts, created_at, created_at, priority
                 FROM jobs",
                id = uuid_v7("clock_timestamp()"),
                max_attempts = notify_api::validate::DEFAULT_MAX_ATTEMPTS,
            ),
            &[&n, &orgs, &due_in_secs, &max_age_secs(), &priority],
        )
        .await
        .with_context(|| format!("insert {n} {priority} jobs"))?;
    Ok(())
}
