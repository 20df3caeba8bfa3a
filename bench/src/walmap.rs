//! `BENCH_WAL_BY_RELATION=1`: where a whole-life phase's WAL goes, relation by relation.
//!
//! The whole-life part (11) reads one figure per phase, the WAL position's move. With this
//! switch each phase also prints, on stderr, its records grouped by the relation of their
//! first block (`pg_walinspect`, PostgreSQL 15+), bytes per job, the full-page images' share
//! apart: the table, index or TOAST relation a cut would have to remove. Records of no
//! relation (commits, running transactions) are grouped by resource manager.
//!
//! Diagnostic only: nothing here enters the report or the `BENCH` line. It needs a superuser
//! (the extension) and the WAL still on disk when the phase ends (the bench's own server keeps
//! it: a phase writes far less than `max_wal_size`); where either is missing it says so once
//! and prints nothing else.

use anyhow::{Context, Result};
use tokio_postgres::Client;

/// Whether the switch is on.
pub fn on() -> bool {
    std::env::var("BENCH_WAL_BY_RELATION").is_ok_and(|v| v == "1")
}

/// The WAL position now, as text, where the switch is on and the extension can be had.
pub async fn mark(client: &Client) -> Option<String> {
    if !on() {
        return None;
    }
    let ready = client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        .await;
    if let Err(e) = ready {
        eprintln!("bench: WAL by relation not measured: pg_walinspect: {e}");
        return None;
    }
    match client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
    {
        Ok(row) => Some(row.get(0)),
        Err(e) => {
            eprintln!("bench: WAL by relation not measured: {e}");
            None
        }
    }
}

/// Prints the WAL written since `from` (a [`mark`]), by relation, per job.
pub async fn print(client: &Client, phase: &str, jobs: i64, from: Option<String>) {
    let Some(from) = from else { return };
    if let Err(e) = print_since(client, phase, jobs, &from).await {
        eprintln!("bench: WAL by relation, {phase}: not measured: {e:#}");
    }
}

async fn print_since(client: &Client, phase: &str, jobs: i64, from: &str) -> Result<()> {
    let rows = client
        .query(
            "WITH r AS (
                 SELECT record_length, fpi_length, resource_manager,
                        (regexp_match(block_ref, 'rel \\d+/\\d+/(\\d+)'))[1]::oid AS node
                 FROM pg_get_wal_records_info_till_end_of_wal($1::text::pg_lsn)
             )
             SELECT coalesce(c.relname::text, '(' || r.resource_manager || ')') AS what,
                    sum(r.record_length)::float8, sum(r.fpi_length)::float8, count(*)
             FROM r
             LEFT JOIN pg_class AS c ON c.oid = pg_filenode_relation(0, r.node)
             GROUP BY 1
             ORDER BY 2 DESC",
            &[&from],
        )
        .await
        .context("pg_get_wal_records_info_till_end_of_wal")?;
    let side: String = client
        .query_one("SELECT current_database()::text", &[])
        .await?
        .get(0);
    let n = jobs.max(1) as f64;
    let total: f64 = rows.iter().map(|r| r.get::<_, f64>(1)).sum();
    eprintln!(
        "bench: WAL by relation, {side} {phase}: {:.0} B per job in records (page headers not counted)",
        total / n
    );
    for row in rows.iter().take(16) {
        let what: String = row.get(0);
        let bytes: f64 = row.get(1);
        let fpi: f64 = row.get(2);
        let count: i64 = row.get(3);
        eprintln!(
            "bench:   {what:<40} {:>8.1} B/job  (images {:>7.1})  {:>6.2} records/job",
            bytes / n,
            fpi / n,
            count as f64 / n
        );
    }
    Ok(())
}
