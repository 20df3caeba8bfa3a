//! 9: the write budget — what working one job writes, ours and graphile-worker's
//! side by side: WAL bytes, heap tuples, index entries and buffers dirtied per job.
//!
//! Each side is measured in a run of its own, after its timed runs: as many queued jobs as a
//! timed run, drained at the settings of that side's best timed run (ours: the best cell's
//! workers and batch; graphile-worker: its best process count). Like every timed run it
//! starts after VACUUM ANALYZE and a CHECKPOINT, so both sides pay the full-page images of
//! first touching a page after a checkpoint; queueing the jobs is before the window on both
//! sides. A run of its own rather than the best timed run: statement tracking is on in that
//! run only (the timed figures stay comparable with earlier runs), and reading the counters
//! needs the run's sessions gone, which would lengthen the timed runs.
//!
//! The figures, each the run's delta ÷ jobs (the counters are read by [`crate::probe`]):
//! - WAL bytes: `pg_wal_lsn_diff` of `pg_current_wal_lsn()` after and before the run. It is
//!   cluster-wide: autovacuum during the run counts, and so would other work on the server
//!   (the benchmark's own cluster has none). Vacuum after the run is not in it.
//! - heap tuples: `n_tup_ins + n_tup_upd + n_tup_del` over every user table of the database
//!   (`pg_stat_user_tables`; ours: `db::JOB_TABLES` and anything else the worker writes;
//!   graphile-worker: its schema's tables), HOT updates
//!   (`n_tup_hot_upd`) apart. Read from a separate connection once the run's sessions have
//!   ended (a session flushes its counters as it ends) and two readings agree.
//! - index entries: the B-tree tuple inserts in the WAL of the window (`pg_walinspect`:
//!   INSERT_LEAF, INSERT_POST and SPLIT_L/R records, a split's record carrying the new tuple).
//!   Every index of both schemas is a B-tree; an upper-level split (a few per thousand leaf
//!   splits) counts as one too. `pg_stat_user_indexes` has no insert counter, so the table
//!   counters give only a bound, kept beside it: Σ over tables of
//!   (n_tup_ins + n_tup_upd − n_tup_hot_upd) × valid indexes — exact for full indexes (a
//!   non-HOT update adds a tuple to every index, PostgreSQL 15), an upper bound where an index
//!   is partial (a row outside its predicate adds nothing).
//! - buffers dirtied: `shared_blks_dirtied` summed over the database's top-level statements in
//!   `pg_stat_statements` (reset before the run). Statements only: autovacuum's and the
//!   checkpointer's are not in it. It also gives each statement's WAL.

use anyhow::Result;
use notify_postgres::db::DbConfig;
use serde::Serialize;
use tokio_postgres::Client;

use crate::db::{Bench, DB, PEER_DB};
use crate::probe::{Deltas, Probe, RecordType, StatementTotals, TableCounters};
use crate::stats::{rounded, rounded_opt};
use crate::worked::{self, Cell};
use crate::{peer, step};

/// 9: both sides and their ratios.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteBudget {
    pub ours: Side,
    pub graphile_worker: Side,
    /// Ours ÷ graphile-worker's, figure by figure (null when either is not measured).
    pub ours_over_theirs: Ratios,
}

/// One side's measured run, or why there is none.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Side {
    /// `measured`, or why not.
    pub status: String,
    pub run: Option<Writes>,
}

/// What one measured run wrote, per job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Writes {
    /// The run's settings (those of the side's best timed run).
    pub setting: String,
    pub jobs: i64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub secs: f64,
    /// The measured run's own rate (statements tracked); the timed figures are elsewhere.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub jobs_per_sec: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub wal_bytes_per_job: f64,
    /// Of the WAL, full-page images (from `pg_walinspect`).
    #[serde(serialize_with = "rounded_opt::<1, _>")]
    pub wal_fpi_bytes_per_job: Option<f64>,
    /// Inserted + updated + deleted.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub heap_tuples_per_job: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub inserted_per_job: f64,
    /// HOT updates included.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub updated_per_job: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub hot_updated_per_job: f64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub deleted_per_job: f64,
    /// B-tree tuple inserts in the WAL.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub index_entries_per_job: Option<f64>,
    /// Σ (inserted + updated − HOT) × valid indexes, table by table.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub index_entries_bound_per_job: f64,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub buffers_dirtied_per_job: Option<f64>,
    /// The WAL the statements themselves wrote (the rest: commits outside a statement,
    /// autovacuum, checkpoints).
    #[serde(serialize_with = "rounded_opt::<1, _>")]
    pub statements_wal_bytes_per_job: Option<f64>,
    /// The database's time per job: its statements' execution time (`pg_stat_statements`
    /// `total_exec_time`, top-level statements, summed), in milliseconds. What a job costs
    /// the server, whatever the client's machine does.
    #[serde(serialize_with = "rounded_opt::<4, _>")]
    pub exec_ms_per_job: Option<f64>,
    pub tables: Vec<TableWrites>,
    /// The statements that wrote most WAL, most first (at most [`TOP`]).
    pub statements: Vec<StatementWrites>,
    /// The WAL record types that took most bytes, most first (at most [`TOP_RECORDS`];
    /// from `pg_walinspect`).
    pub wal_by_record_type: Vec<RecordWrites>,
    /// The WAL by the table it changed (indexes and partitions with their table; from
    /// `pg_walinspect`), most bytes first: what the queue costs against what the history
    /// does.
    pub wal_by_table: Vec<TableWal>,
    /// What was not measured, and why.
    pub not_measured: Vec<String>,
}

/// How many statements a run keeps.
pub const TOP: usize = 5;

/// How many WAL record types a run keeps.
pub const TOP_RECORDS: usize = 8;

/// One table's counters over the run (totals, not per job).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableWrites {
    pub table: String,
    pub inserted: i64,
    pub updated: i64,
    pub hot_updated: i64,
    pub deleted: i64,
    pub indexes: i64,
    pub partial_indexes: i64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StatementWrites {
    /// The statement's text, comments dropped and blanks folded, cut at 160 characters.
    pub query: String,
    pub calls: i64,
    pub rows: i64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub wal_bytes_per_job: f64,
    pub wal_fpi: i64,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub buffers_dirtied_per_job: f64,
}

/// One WAL record type's share of the run, per job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecordWrites {
    /// `resource_manager/record_type`, as `pg_walinspect` names it.
    pub record_type: String,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub records_per_job: f64,
    /// Records and their full-page images.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub bytes_per_job: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub fpi_bytes_per_job: f64,
}

/// One table's share of the run's WAL (its indexes and partitions included), per job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableWal {
    pub table: String,
    #[serde(serialize_with = "rounded::<3, _>")]
    pub records_per_job: f64,
    /// Records and their full-page images.
    #[serde(serialize_with = "rounded::<1, _>")]
    pub bytes_per_job: f64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub fpi_bytes_per_job: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Ratios {
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub wal_bytes: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub heap_tuples: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub index_entries: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub index_entries_bound: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub buffers_dirtied: Option<f64>,
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub exec_ms: Option<f64>,
}

impl WriteBudget {
    pub fn compare(ours: Side, graphile_worker: Side) -> Self {
        let of = |f: fn(&Writes) -> Option<f64>| match (&ours.run, &graphile_worker.run) {
            (Some(a), Some(b)) => f(a).zip(f(b)).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b),
            _ => None,
        };
        let ours_over_theirs = Ratios {
            wal_bytes: of(|w| Some(w.wal_bytes_per_job)),
            heap_tuples: of(|w| Some(w.heap_tuples_per_job)),
            index_entries: of(|w| w.index_entries_per_job),
            index_entries_bound: of(|w| Some(w.index_entries_bound_per_job)),
            buffers_dirtied: of(|w| w.buffers_dirtied_per_job),
            exec_ms: of(|w| w.exec_ms_per_job),
        };
        Self {
            ours,
            graphile_worker,
            ours_over_theirs,
        }
    }
}

impl Side {
    pub fn not_measured(why: impl Into<String>) -> Self {
        Self {
            status: why.into(),
            run: None,
        }
    }

    fn of(run: Result<Writes>) -> Self {
        match run {
            Ok(w) => Self {
                status: "measured".into(),
                run: Some(w),
            },
            Err(e) => Self::not_measured(format!("not measured: {e:#}")),
        }
    }
}

impl Writes {
    /// The per-job figures of a run's deltas.
    pub fn of(setting: String, jobs: i64, secs: f64, d: Deltas) -> Self {
        let n = jobs.max(1) as f64;
        let sum = |f: fn(&TableCounters) -> i64| d.tables.values().map(f).sum::<i64>() as f64;
        let (ins, upd, del) = (sum(|t| t.inserted), sum(|t| t.updated), sum(|t| t.deleted));
        let bound = sum(|t| (t.inserted + t.updated - t.hot_updated) * t.indexes);
        let hot = sum(|t| t.hot_updated);
        let tables = tables(&d);
        let mut not_measured = Vec::new();
        let records = match d.wal_records {
            Ok(r) => Some(r),
            Err(e) => {
                not_measured.push(format!("index entries from the WAL: {e}"));
                None
            }
        };
        let statements = match d.statements {
            Ok(s) => Some(s),
            Err(e) => {
                not_measured.push(format!("buffers dirtied: {e}"));
                None
            }
        };
        let total = |f: fn(&StatementTotals) -> f64| {
            statements
                .as_ref()
                .map(|s| s.iter().map(f).sum::<f64>() / n)
        };
        Self {
            setting,
            jobs,
            secs,
            jobs_per_sec: jobs as f64 / secs,
            wal_bytes_per_job: d.wal_bytes / n,
            wal_fpi_bytes_per_job: records.as_ref().map(|r| r.fpi_bytes as f64 / n),
            heap_tuples_per_job: (ins + upd + del) / n,
            inserted_per_job: ins / n,
            updated_per_job: upd / n,
            hot_updated_per_job: hot / n,
            deleted_per_job: del / n,
            index_entries_per_job: records.as_ref().map(|r| r.index_entries as f64 / n),
            index_entries_bound_per_job: bound / n,
            buffers_dirtied_per_job: total(|s| s.dirtied as f64),
            statements_wal_bytes_per_job: total(|s| s.wal_bytes),
            exec_ms_per_job: total(|s| s.exec_ms),
            tables,
            statements: statements
                .iter()
                .flatten()
                .take(TOP)
                .map(|s| statement(s, n))
                .collect(),
            wal_by_record_type: records
                .iter()
                .flat_map(|r| &r.by_type)
                .take(TOP_RECORDS)
                .map(|t| record_type(t, n))
                .collect(),
            wal_by_table: records
                .iter()
                .flat_map(|r| &r.by_table)
                .map(|t| TableWal {
                    table: t.name.clone(),
                    records_per_job: t.count as f64 / n,
                    bytes_per_job: t.bytes as f64 / n,
                    fpi_bytes_per_job: t.fpi_bytes as f64 / n,
                })
                .collect(),
            not_measured,
        }
    }
}

fn tables(d: &Deltas) -> Vec<TableWrites> {
    d.tables
        .iter()
        .map(|(name, t)| TableWrites {
            table: name.clone(),
            inserted: t.inserted,
            updated: t.updated,
            hot_updated: t.hot_updated,
            deleted: t.deleted,
            indexes: t.indexes,
            partial_indexes: t.partial_indexes,
        })
        .collect()
}

fn statement(s: &StatementTotals, jobs: f64) -> StatementWrites {
    StatementWrites {
        query: summary(&s.query),
        calls: s.calls,
        rows: s.rows,
        wal_bytes_per_job: s.wal_bytes / jobs,
        wal_fpi: s.wal_fpi,
        buffers_dirtied_per_job: s.dirtied as f64 / jobs,
    }
}

fn record_type(t: &RecordType, jobs: f64) -> RecordWrites {
    RecordWrites {
        record_type: t.name.clone(),
        records_per_job: t.count as f64 / jobs,
        bytes_per_job: t.bytes as f64 / jobs,
        fpi_bytes_per_job: t.fpi_bytes as f64 / jobs,
    }
}

/// A statement's text without its `--` comments, blanks folded, at most 160 characters.
pub fn summary(query: &str) -> String {
    let text: Vec<&str> = query
        .lines()
        .map(|l| l.split_once("--").map_or(l, |(code, _)| code))
        .flat_map(str::split_whitespace)
        .collect();
    let text = text.join(" ");
    match text.char_indices().nth(160) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// Ours: `jobs` due jobs drained at the best cell's workers and batch.
pub async fn ours(bench: &Bench, jobs: i64, best: &Cell) -> Side {
    let setting = format!("{} workers, batch {}", best.workers, best.batch);
    step!("write budget: ours, {jobs} jobs at the best cell ({setting})");
    let run = async {
        let probe = Probe::open(&bench.config, &bench.config, DB).await?;
        bench.reset(jobs).await?;
        let mark = probe.begin(&bench.client).await?;
        let drained = worked::drain(bench, best.workers, best.batch).await;
        // read (and tracking switched off) even when the run failed
        let deltas = probe.end(mark).await;
        let cell = drained?.checked(bench, jobs).await?;
        Ok(Writes::of(setting.clone(), jobs, cell.secs, deltas?))
    };
    Side::of(run.await)
}

/// graphile-worker: `jobs` queued jobs drained by `processes` processes with `settings`;
/// `client` is on its database.
pub async fn peer(
    bench: &Bench,
    client: &Client,
    jobs: i64,
    processes: usize,
    settings: peer::Settings,
) -> Side {
    let setting = format!(
        "{processes} processes × concurrentJobs {}, localQueue {}",
        settings.concurrent_jobs, settings.local_queue_size
    );
    step!("write budget: graphile-worker, {jobs} jobs at its best setting ({setting})");
    let run = async {
        let target = DbConfig::new(&bench.peer_url, None)?;
        let probe = Probe::open(&bench.config, &target, PEER_DB).await?;
        peer::queue(client, jobs).await?;
        let mark = probe.begin(client).await?;
        let worked = peer::work(bench, processes, settings, peer::Task::Noop, jobs).await;
        let deltas = probe.end(mark).await;
        let secs = worked?.window_secs;
        peer::check(client, jobs).await?;
        Ok(Writes::of(setting.clone(), jobs, secs, deltas?))
    };
    Side::of(run.await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::WalRecords;
    use std::collections::BTreeMap;

    fn record(name: &str, count: i64, bytes: i64, fpi_bytes: i64) -> RecordType {
        RecordType {
            name: name.into(),
            count,
            bytes,
            fpi_bytes,
        }
    }

    fn deltas() -> Deltas {
        let table =
            |inserted, updated, hot_updated, deleted, indexes, partial_indexes| TableCounters {
                inserted,
                updated,
                hot_updated,
                deleted,
                indexes,
                partial_indexes,
            };
        let statement = |query: &str, wal_bytes, dirtied| StatementTotals {
            query: query.into(),
            calls: 10,
            rows: 1000,
            wal_bytes,
            wal_fpi: 3,
            dirtied,
            exec_ms: 250.0,
        };
        Deltas {
            wal_bytes: 2_500_000.0,
            tables: BTreeMap::from([
                ("public.jobs".into(), table(0, 2000, 500, 0, 4, 1)),
                ("public.deliveries".into(), table(1000, 0, 0, 0, 1, 0)),
            ]),
            wal_records: Ok(WalRecords {
                by_table: vec![
                    record("public.jobs", 8000, 1_900_000, 800_000),
                    record("(no relation: commits and the like)", 1000, 81_000, 0),
                ],
                ..WalRecords::of(vec![
                    record("Heap/UPDATE", 2000, 1_000_000, 300_000),
                    record("Btree/INSERT_LEAF", 6990, 900_000, 500_000),
                    record("Btree/SPLIT_R", 10, 80_000, 0),
                    record("Transaction/COMMIT", 20, 1_000, 0),
                ])
            }),
            statements: Ok(vec![
                statement("-- claim\nUPDATE  jobs\n SET x = 1 -- why", 2_000_000.0, 40),
                statement("SELECT 1", 0.0, 2),
            ]),
        }
    }

    #[test]
    fn the_figures_are_the_deltas_per_job() {
        let w = Writes::of("1 worker".into(), 1000, 0.5, deltas());
        assert_eq!(w.jobs_per_sec, 2000.0);
        assert_eq!(w.wal_bytes_per_job, 2500.0);
        // two statements, 250 ms each, over 1000 jobs
        assert_eq!(w.exec_ms_per_job, Some(0.5));
        assert_eq!(w.wal_fpi_bytes_per_job, Some(800.0));
        assert_eq!(w.heap_tuples_per_job, 3.0);
        assert_eq!((w.inserted_per_job, w.updated_per_job), (1.0, 2.0));
        assert_eq!((w.hot_updated_per_job, w.deleted_per_job), (0.5, 0.0));
        assert_eq!(w.index_entries_per_job, Some(7.0));
        // jobs: (0 + 2000 − 500) × 4, deliveries: 1000 × 1
        assert_eq!(w.index_entries_bound_per_job, 7.0);
        assert_eq!(w.buffers_dirtied_per_job, Some(0.042));
        assert_eq!(w.statements_wal_bytes_per_job, Some(2000.0));
        assert_eq!(w.statements[0].query, "UPDATE jobs SET x = 1");
        assert_eq!(w.tables.len(), 2);
        assert_eq!(w.wal_by_record_type[0].record_type, "Heap/UPDATE");
        assert_eq!(w.wal_by_record_type[1].records_per_job, 6.99);
        assert_eq!(w.wal_by_record_type[0].fpi_bytes_per_job, 300.0);
        assert_eq!(w.wal_by_table[0].table, "public.jobs");
        assert_eq!(w.wal_by_table[0].bytes_per_job, 1900.0);
        assert_eq!(w.wal_by_table[1].records_per_job, 1.0);
        assert!(w.not_measured.is_empty());
    }

    #[test]
    fn what_the_server_cannot_give_is_not_measured() {
        let mut d = deltas();
        d.wal_records = Err("pg_walinspect: not installed".into());
        d.statements = Err("not preloaded".into());
        let w = Writes::of("x".into(), 1000, 1.0, d);
        assert_eq!(w.index_entries_per_job, None);
        assert_eq!(w.buffers_dirtied_per_job, None);
        assert_eq!(w.wal_bytes_per_job, 2500.0, "the rest still is");
        assert_eq!(w.not_measured.len(), 2);
        let budget = WriteBudget::compare(Side::of(Ok(w.clone())), Side::of(Ok(w)));
        assert_eq!(budget.ours_over_theirs.wal_bytes, Some(1.0));
        assert_eq!(budget.ours_over_theirs.buffers_dirtied, None);
    }

    #[test]
    fn ratios_are_ours_over_theirs_when_both_are_measured() {
        let ours = Writes::of("a".into(), 1000, 1.0, deltas());
        let mut d = deltas();
        d.wal_bytes = 1_000_000.0;
        let theirs = Writes::of("b".into(), 1000, 1.0, d);
        let budget = WriteBudget::compare(Side::of(Ok(ours.clone())), Side::of(Ok(theirs)));
        assert_eq!(budget.ours_over_theirs.wal_bytes, Some(2.5));
        assert_eq!(budget.ours_over_theirs.heap_tuples, Some(1.0));
        let alone = WriteBudget::compare(Side::of(Ok(ours)), Side::not_measured("quick"));
        assert_eq!(alone.ours_over_theirs.wal_bytes, None);
        assert_eq!(alone.graphile_worker.status, "quick");
    }

    #[test]
    fn long_statements_are_cut() {
        let long = "SELECT ".to_owned() + &"é".repeat(300);
        assert_eq!(summary(&long).chars().count(), 161);
    }
}
