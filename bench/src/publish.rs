//! `--only publish`: what publishing the status events to the bus costs the database, per
//! row claims (before migration 0010: each event claimed and completed like a job, two
//! updates of its row) against the stream's cursor (0010, 0011: the event inserted once, one
//! cursor row moved per batch). Two databases on the server, alike but for what 0010
//! changed: the other one gets 0010's defaults and 0011's index taken away, so its events
//! wait unpublished as before, and is published by the statements 0010 replaced (kept here,
//! as they were, the only copy). Rounds in turns, ABBA as part 5's; each round:
//! 1. 100,000 due jobs (the plan's peer size), VACUUM, a CHECKPOINT, and a drain at the
//!    template's defaults (1 worker, batch 100, no-op provider): the outcomes and their
//!    events, written by the triggers;
//! 2. a CHECKPOINT, then every event published as the worker publishes them: claims of
//!    [`BUS_BATCH`], each answered "published" by a bus that takes no time, one connection,
//!    every statement prepared once (the product's own adapter on the cursor's side).
//!
//! Measured by pg_stat_wal (bytes, full-page images) and the wall clock, per job.

use std::time::Instant;

use anyhow::{Context, Result};
use notify_core::events::dispatch::{BUS_BATCH, CURSOR_LEASE};
use notify_core::events::{ClaimedEvent, EventStore, Published};
use notify_postgres::PgStore;
use serde::Serialize;
use uuid::Uuid;

use crate::Plan;
use crate::db::Bench;
use crate::peer::{OURS_DEFAULT, ratio_of_rounds};
use crate::stats::{median, rounded};

/// The database of the row claims, beside the bench's own (the cursor, as migrated).
const ROW_CLAIMS_DB: &str = "notif_bench_row_claims";

/// What 0010 and 0011 changed, taken away: events wait unpublished, as before, due at once
/// (the retry path's columns, which the triggers leave to their defaults since 0013).
const BEFORE_0010: &str = "ALTER TABLE status_events ALTER COLUMN published_at DROP DEFAULT;
     ALTER TABLE status_events ALTER COLUMN tx DROP DEFAULT;
     ALTER TABLE status_events ALTER COLUMN next_attempt_at SET DEFAULT now();
     ALTER TABLE status_events ALTER COLUMN attempts SET DEFAULT 0;
     DROP INDEX status_events_stream;";

/// claim_events.sql before 0010 (its `data` read as 0013 reads it).
const ROW_CLAIM: &str = r#"WITH due AS (
    SELECT id
    FROM status_events
    WHERE published_at IS NULL
      AND claim_token IS NULL
      AND next_attempt_at <= coalesce($2::timestamptz, now())
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE status_events AS e
SET claim_token = gen_random_uuid(),
    claimed_at  = coalesce($2::timestamptz, now()),
    attempts    = e.attempts + 1
FROM due
WHERE e.id = due.id
RETURNING e.id, e.type AS event_type, e.created_at, e.organization_id, e.sequence,
          status_event_body(e) AS data, e.claim_token, e.attempts"#;

/// complete_events.sql before 0010.
const ROW_COMPLETE: &str = r#"WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[])
         AS t(id, claim_token, retry_at, error)
)
UPDATE status_events AS e
SET published_at    = CASE WHEN i.retry_at IS NULL THEN coalesce($5::timestamptz, now()) END,
    next_attempt_at = coalesce(i.retry_at, e.next_attempt_at),
    claim_token     = NULL,
    claimed_at      = NULL,
    last_error      = i.error
FROM input AS i
WHERE e.id = i.id
  AND e.claim_token = i.claim_token
RETURNING e.id"#;

/// One side's round.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Round {
    /// The drain's WAL a job (its outcome and its event).
    #[serde(serialize_with = "rounded::<1, _>")]
    pub drain_wal_per_job: f64,
    /// Publishing's WAL an event (each job ends with one).
    #[serde(serialize_with = "rounded::<1, _>")]
    pub publish_wal_per_event: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub publish_full_page_images_per_event: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub events_per_sec: f64,
    /// Drain and publishing together, a job.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub wal_per_job: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Publish {
    pub jobs_per_round: i64,
    pub row_claims: Vec<Round>,
    pub cursor: Vec<Round>,
    /// Median WAL a job, drain and publishing, cursor ÷ row claims, with its interval.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub wal_ratio: f64,
    pub wal_ratio_ci95: Option<[f64; 2]>,
    /// Publishing's WAL an event alone, cursor ÷ row claims.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub publish_wal_ratio: f64,
    pub publish_wal_ratio_ci95: Option<[f64; 2]>,
    /// Events published a second, cursor ÷ row claims.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub rate_ratio: f64,
    pub rate_ratio_ci95: Option<[f64; 2]>,
}

/// Publishes every event through the cursor, with the product's adapter: how many.
async fn by_cursor(bench: &Bench) -> Result<u64> {
    let store = PgStore::connect(bench.config.clone())
        .await
        .context("open a store")?;
    let mut n = 0;
    loop {
        let claimed = store.claim_events(BUS_BATCH, CURSOR_LEASE).await?;
        if claimed.is_empty() {
            return Ok(n);
        }
        let done: Vec<Published> = claimed.iter().map(ClaimedEvent::taken).collect();
        n += store.complete_events(&done).await?;
    }
}

/// Publishes every event by row claims, as before 0010: how many.
async fn by_row_claims(bench: &Bench) -> Result<u64> {
    let client = bench.config.connect().await.context("connect")?;
    let claim = client
        .prepare(ROW_CLAIM)
        .await
        .context("prepare the claim")?;
    let complete = client
        .prepare(ROW_COMPLETE)
        .await
        .context("prepare the completion")?;
    let none: Option<chrono::DateTime<chrono::Utc>> = None;
    let mut n = 0;
    loop {
        let rows = client
            .query(&claim, &[&i64::from(BUS_BATCH), &none])
            .await
            .context("claim events")?;
        if rows.is_empty() {
            return Ok(n);
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.get("id")).collect();
        let tokens: Vec<Uuid> = rows.iter().map(|r| r.get("claim_token")).collect();
        let retry: Vec<Option<chrono::DateTime<chrono::Utc>>> = vec![None; ids.len()];
        let errors: Vec<Option<&str>> = vec![None; ids.len()];
        n += client
            .query(&complete, &[&ids, &tokens, &retry, &errors, &none])
            .await
            .context("complete events")?
            .len() as u64;
    }
}

async fn round(bench: &Bench, jobs: i64, cursor: bool) -> Result<Round> {
    let (workers, batch) = OURS_DEFAULT;
    bench.reset(jobs).await?;
    bench
        .client
        .batch_execute("TRUNCATE status_events")
        .await
        .context("empty status_events")?;
    let (bytes0, _) = bench.wal_counters().await?;
    crate::worked::drain(bench, workers, batch)
        .await?
        .checked(bench, jobs)
        .await?;
    let (bytes1, _) = bench.wal_counters().await?;
    bench.client.batch_execute("CHECKPOINT").await?;
    let (bytes2, fpi2) = bench.wal_counters().await?;
    let started = Instant::now();
    let published = if cursor {
        by_cursor(bench).await?
    } else {
        by_row_claims(bench).await?
    };
    let secs = started.elapsed().as_secs_f64();
    let (bytes3, fpi3) = bench.wal_counters().await?;
    anyhow::ensure!(
        published == jobs as u64,
        "published {published} events of {jobs} jobs"
    );
    let per = jobs as f64;
    Ok(Round {
        drain_wal_per_job: (bytes1 - bytes0) / per,
        publish_wal_per_event: (bytes3 - bytes2) / per,
        publish_full_page_images_per_event: (fpi3 - fpi2) / per,
        events_per_sec: per / secs,
        wal_per_job: (bytes1 - bytes0 + bytes3 - bytes2) / per,
    })
}

pub async fn measure(bench: &Bench, plan: &Plan) -> Result<Publish> {
    let jobs = plan.peer_jobs;
    let before = bench.sibling(ROW_CLAIMS_DB).await?;
    let result = async {
        before
            .client
            .batch_execute(BEFORE_0010)
            .await
            .context("take 0010 away")?;
        let mut out = Publish {
            jobs_per_round: jobs,
            ..Publish::default()
        };
        for r in 0..plan.publish_rounds {
            let rows_first = r % 2 == 0;
            for rows in [rows_first, !rows_first] {
                let name = if rows { "row claims" } else { "cursor" };
                crate::step!(
                    "publish, round {}/{}, {name}: {jobs} jobs drained, their events published",
                    r + 1,
                    plan.publish_rounds
                );
                if rows {
                    out.row_claims.push(round(&before, jobs, false).await?);
                } else {
                    out.cursor.push(round(bench, jobs, true).await?);
                }
            }
        }
        let of = |side: &[Round], f: fn(&Round) -> f64| side.iter().map(f).collect::<Vec<_>>();
        (out.wal_ratio, out.wal_ratio_ci95) = ratio_of_rounds(
            &of(&out.cursor, |r| r.wal_per_job),
            &of(&out.row_claims, |r| r.wal_per_job),
        );
        (out.publish_wal_ratio, out.publish_wal_ratio_ci95) = ratio_of_rounds(
            &of(&out.cursor, |r| r.publish_wal_per_event),
            &of(&out.row_claims, |r| r.publish_wal_per_event),
        );
        (out.rate_ratio, out.rate_ratio_ci95) = ratio_of_rounds(
            &of(&out.cursor, |r| r.events_per_sec),
            &of(&out.row_claims, |r| r.events_per_sec),
        );
        anyhow::Ok(out)
    }
    .await;
    before.drop_sibling().await;
    result
}

impl Publish {
    pub fn render(&self) {
        crate::say!(
            "publishing the status events, row claims (before 0010) against the cursor (0010): {} rounds in turns, each a drain of {} jobs at the defaults, then their events published in claims of {BUS_BATCH} to a bus that takes no time",
            self.cursor.len(),
            self.jobs_per_round
        );
        for (name, side) in [("row claims", &self.row_claims), ("cursor", &self.cursor)] {
            let med = |f: fn(&Round) -> f64| median(&side.iter().map(f).collect::<Vec<_>>());
            crate::say!(
                "   {name:>10} (medians): drain {:.0} B WAL a job; publishing {:.0} B an event, {:.3} full-page images an event, {:.0} events/s; together {:.0} B a job",
                med(|r| r.drain_wal_per_job),
                med(|r| r.publish_wal_per_event),
                med(|r| r.publish_full_page_images_per_event),
                med(|r| r.events_per_sec),
                med(|r| r.wal_per_job)
            );
        }
        let ci = |c: Option<[f64; 2]>| {
            c.map(|[lo, hi]| format!(" (95% interval {lo:.3} to {hi:.3})"))
                .unwrap_or_default()
        };
        crate::say!(
            "   cursor ÷ row claims: WAL a job, drain and publishing {:.3}{}; publishing's WAL an event {:.3}{}; events/s {:.3}{}",
            self.wal_ratio,
            ci(self.wal_ratio_ci95),
            self.publish_wal_ratio,
            ci(self.publish_wal_ratio_ci95),
            self.rate_ratio,
            ci(self.rate_ratio_ci95)
        );
    }
}
