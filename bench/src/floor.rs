//! 9, continued: what one history row costs in WAL, whatever the design, measured
//! on the same server in the same run as the write budget. Beside the worked job's figures it
//! shows which part of them any design that records attempts must write, and what is left to
//! save.
//!
//! Each shape is a table of its own in a scratch schema, new for the measurement, filled with
//! as many rows as the write budget's run works jobs, 500 rows per statement (the worker's
//! batch), from one session, with ids made as ingest makes them (UUIDv7, in time order). So
//! pages split at the right edge, and no full-page image is written (every page is new): each
//! figure is the least that shape writes, the WAL of its heap insert and
//! of one entry in each of its indexes. The worked run writes more for the same rows (eight
//! workers insert side by side, and splits fall in the middle of pages).
//!
//! The shapes:
//! - a bare row (job id, day, status, time), no index: the floor of anything kept per job;
//! - the same with one index (the job id, so a `GET` finds it);
//! - ours: an outcome row (`job_outcomes`' columns and indexes) holding the job's last
//!   attempt, what a job worked once writes to the history; and an attempt row
//!   (`job_attempts`'), what each retry adds;
//! - the last attempt apart: an outcome row without the attempt's columns (and without the
//!   provider message id's index), which a job worked once would write beside an attempt row.

use anyhow::{Context, Result};
use serde::Serialize;

use crate::db::{Bench, uuid_v7};
use crate::stats::rounded;

/// The scratch schema the shapes' tables are made in (dropped afterwards).
const SCHEMA: &str = "bench_floor";

/// Rows per statement.
const BATCH: i64 = 500;

/// The values of a worked job's rows after its id, as the completion writes them after `worked.rs`'s no-op
/// delivery (which gives the job id as the provider's message id).
const ATTEMPT: &str = "1, 'ses', id::text, NULL, NULL, 'sent', false, now(), now(), now()";
const OUTCOME: &str = "'0b9d8c1e-0000-4000-8000-000000000001'::uuid, now(), 'sent', 1, 5, 1, \
                       now(), NULL, now()";

/// The start of the shapes' names the table's summary line looks them up by.
pub const INLINE: &str = "ours: an outcome row";
pub const ATTEMPT_ROW: &str = "ours: an attempt row";
pub const APART: &str = "the last attempt apart";

/// One shape: its name, the statements that make its table, and the row each insert writes
/// (`values` are those after the job id).
struct Shape {
    name: &'static str,
    indexes: u32,
    create: &'static str,
    columns: &'static str,
    values: &'static str,
}

const SHAPES: [Shape; 5] = [
    Shape {
        name: "a bare row (job id, day, status, time), no index",
        indexes: 0,
        create: "CREATE TABLE bench_floor.bare (job_id uuid NOT NULL, created_at timestamptz \
                 NOT NULL, status smallint NOT NULL, finished_at timestamptz NOT NULL)",
        columns: "bare (job_id, created_at, status, finished_at)",
        values: "now(), 1, now()",
    },
    Shape {
        name: "the same, with an index on the job id",
        indexes: 1,
        create: "CREATE TABLE bench_floor.keyed (LIKE bench_floor.bare);
                 CREATE INDEX ON bench_floor.keyed (job_id)",
        columns: "keyed (job_id, created_at, status, finished_at)",
        values: "now(), 1, now()",
    },
    Shape {
        name: "ours: an outcome row with the job's last attempt (job_outcomes)",
        indexes: 3,
        create: "CREATE TABLE bench_floor.outcome (LIKE job_outcomes INCLUDING ALL)",
        columns: "outcome (job_id, organization_id, created_at, status, attempts, \
                  max_attempts, tries, next_attempt_at, last_error, updated_at, provider, \
                  provider_message_id, error_code, error_message, started_at, finished_at)",
        // the outcome's values, then its attempt's (from the provider on)
        values: "'0b9d8c1e-0000-4000-8000-000000000001'::uuid, now(), 'sent', 1, 5, 1, now(), \
                 NULL, now(), 'ses', id::text, NULL, NULL, now(), now()",
    },
    Shape {
        name: "ours: an attempt row, for each retry (job_attempts)",
        indexes: 2,
        create: "CREATE TABLE bench_floor.attempt (LIKE job_attempts INCLUDING ALL)",
        columns: "attempt (job_id, attempt, provider, provider_message_id, error_code, \
                  error_message, outcome, fenced, started_at, finished_at, job_created_at)",
        values: ATTEMPT,
    },
    Shape {
        name: "the last attempt apart: an outcome row without it, beside an attempt row",
        indexes: 2,
        // job_outcomes without the attempt's columns: its key and its listing index
        create: "CREATE TABLE bench_floor.narrow (job_id uuid NOT NULL, \
                     organization_id uuid NOT NULL, created_at timestamptz NOT NULL, \
                     status job_status NOT NULL, attempts int NOT NULL, \
                     max_attempts int NOT NULL, tries int NOT NULL, \
                     next_attempt_at timestamptz NOT NULL, last_error text, \
                     updated_at timestamptz NOT NULL, UNIQUE (job_id, created_at));
                 CREATE INDEX ON bench_floor.narrow (organization_id, status, created_at, job_id)",
        columns: "narrow (job_id, organization_id, created_at, status, attempts, \
                  max_attempts, tries, next_attempt_at, last_error, updated_at)",
        values: OUTCOME,
    },
];

#[derive(Debug, Clone, Default, Serialize)]
pub struct HistoryFloor {
    /// Rows inserted into each shape's table.
    pub rows: i64,
    pub shapes: Vec<RowCost>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RowCost {
    pub shape: String,
    pub indexes: u32,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub wal_bytes_per_row: f64,
}

impl HistoryFloor {
    /// The shape's measured cost, by the start of its name.
    pub fn of(&self, name: &str) -> Option<f64> {
        self.shapes
            .iter()
            .find(|s| s.shape.starts_with(name))
            .map(|s| s.wal_bytes_per_row)
    }
}

pub async fn measure(bench: &Bench, rows: i64) -> Result<HistoryFloor> {
    crate::step!(
        "history rows: {rows} rows of each of {} shapes",
        SHAPES.len()
    );
    let client = &bench.client;
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"
        ))
        .await
        .context("the scratch schema")?;
    let measured = async {
        let mut shapes = Vec::with_capacity(SHAPES.len());
        for shape in &SHAPES {
            client
                .batch_execute(shape.create)
                .await
                .with_context(|| format!("create: {}", shape.name))?;
            let insert = client
                .prepare(&format!(
                    "INSERT INTO {SCHEMA}.{} SELECT id, {} FROM (SELECT {} AS id FROM \
                     generate_series($1::bigint, $2::bigint) AS g ORDER BY g) AS r",
                    shape.columns,
                    shape.values,
                    uuid_v7("clock_timestamp()"),
                ))
                .await
                .with_context(|| format!("insert: {}", shape.name))?;
            let before = bench.wal().await?;
            for first in (1..=rows).step_by(BATCH as usize) {
                let last = (first + BATCH - 1).min(rows);
                client
                    .execute(&insert, &[&first, &last])
                    .await
                    .with_context(|| format!("insert: {}", shape.name))?;
            }
            let after = bench.wal().await?;
            shapes.push(RowCost {
                shape: shape.name.into(),
                indexes: shape.indexes,
                wal_bytes_per_row: (after - before) as f64 / rows as f64,
            });
        }
        Ok::<_, anyhow::Error>(shapes)
    }
    .await;
    let _ = client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        .await;
    Ok(HistoryFloor {
        rows,
        shapes: measured?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_finds_each_of_its_shapes_once() {
        for name in [INLINE, ATTEMPT_ROW, APART] {
            let found = SHAPES.iter().filter(|s| s.name.starts_with(name)).count();
            assert_eq!(found, 1, "{name}");
        }
    }
}
