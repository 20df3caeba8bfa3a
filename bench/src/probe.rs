//! The counters behind the write budget ([`crate::writes`]), read over connections of their
//! own (never the measured sessions): the WAL position, `pg_stat_user_tables`,
//! `pg_stat_statements` and `pg_walinspect`.
//!
//! `pg_stat_statements` needs `shared_preload_libraries` (tests/scripts/bench.sh loads it with
//! `pg_stat_statements.track = none`, so the timed runs are not tracked); a measured run
//! switches tracking on for its database only (`ALTER DATABASE … SET`, which the sessions it
//! opens pick up) and off after. On a server without it, or without the rights, the figures
//! it gives are "not measured" and the others still are.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use notify_postgres::db::DbConfig;
use tokio_postgres::Client;

/// One table's cumulative counters (`pg_stat_user_tables`; as a delta once diffed) and its
/// valid indexes (all of them, and the partial ones among them).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TableCounters {
    pub inserted: i64,
    pub updated: i64,
    pub hot_updated: i64,
    pub deleted: i64,
    pub indexes: i64,
    pub partial_indexes: i64,
}

/// One statement's totals since the reset (`pg_stat_statements`, top-level statements).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatementTotals {
    pub query: String,
    pub calls: i64,
    pub rows: i64,
    pub wal_bytes: f64,
    pub wal_fpi: i64,
    pub dirtied: i64,
    /// Milliseconds the server spent executing it (`total_exec_time`).
    pub exec_ms: f64,
}

/// What the WAL records of the window say (`pg_walinspect`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WalRecords {
    /// Index tuples written: B-tree leaf inserts, posting-list inserts and page splits (a
    /// split's record carries the new tuple).
    pub index_entries: i64,
    /// Full-page images, in bytes.
    pub fpi_bytes: i64,
    /// Every record type, most bytes (record and full-page images) first.
    pub by_type: Vec<RecordType>,
    /// The same records by the table they change (`name` is the table), most bytes first:
    /// see [`Probe::wal_by_table`]. Empty when it could not be read.
    pub by_table: Vec<RecordType>,
}

/// One WAL record type's records in the window (`resource_manager/record_type`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordType {
    pub name: String,
    pub count: i64,
    /// Records and their full-page images, in bytes.
    pub bytes: i64,
    pub fpi_bytes: i64,
}

/// The record types whose records each write one index tuple.
const INDEX_ENTRY_RECORDS: [&str; 4] = [
    "Btree/INSERT_LEAF",
    "Btree/INSERT_POST",
    "Btree/SPLIT_L",
    "Btree/SPLIT_R",
];

impl WalRecords {
    pub fn of(by_type: Vec<RecordType>) -> Self {
        let index_entries = by_type
            .iter()
            .filter(|t| INDEX_ENTRY_RECORDS.contains(&t.name.as_str()))
            .map(|t| t.count)
            .sum();
        Self {
            index_entries,
            fpi_bytes: by_type.iter().map(|t| t.fpi_bytes).sum(),
            by_type,
            by_table: Vec::new(),
        }
    }
}

/// Everything one measured run wrote, as deltas; the parts that could not be read say why.
#[derive(Debug, Clone)]
pub struct Deltas {
    pub wal_bytes: f64,
    pub tables: BTreeMap<String, TableCounters>,
    pub wal_records: Result<WalRecords, String>,
    pub statements: Result<Vec<StatementTotals>, String>,
}

/// The counters at the start of a measured run.
pub struct Mark {
    lsn: String,
    tables: BTreeMap<String, TableCounters>,
    /// The sessions on the database before the run (ours: set-up and probe connections).
    sessions: Vec<i32>,
    statements: Result<(), String>,
}

pub struct Probe {
    /// On the benchmark's database, where the two extensions are created (their views and
    /// functions are cluster-wide).
    cluster: Client,
    /// On the measured database (`pg_stat_user_tables` is per database).
    target: Client,
    db: String,
    statements: Result<(), String>,
    walinspect: Result<(), String>,
}

/// A server error's own message (tokio-postgres's `Display` says only "db error").
pub fn why(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_owned())
}

impl Probe {
    /// Connects to `cluster` and to `target` (the database named `db`) and creates the
    /// extensions where it can.
    pub async fn open(cluster: &DbConfig, target: &DbConfig, db: &str) -> Result<Self> {
        let cluster = cluster.connect().await.context("connect the probe")?;
        let target = target.connect().await.context("connect the probe")?;
        let statements = enable_statements(&cluster).await;
        let walinspect = cluster
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            .await
            .map_err(|e| format!("pg_walinspect: {}", why(&e)));
        Ok(Self {
            cluster,
            target,
            db: db.to_owned(),
            statements,
            walinspect,
        })
    }

    /// Just before the run: statements tracked for the sessions opened from now on and reset
    /// (this database's only), `helper`'s pending counters (the queueing) flushed, then the
    /// counters read, the WAL position last.
    pub async fn begin(&self, helper: &Client) -> Result<Mark> {
        let statements = match &self.statements {
            Ok(()) => self.track(true).await,
            Err(e) => Err(e.clone()),
        };
        flush(helper).await;
        let sessions: Vec<i32> = self
            .target
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname::text = $1",
                &[&self.db],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok(Mark {
            tables: self.tables().await?,
            lsn: self.lsn().await?,
            sessions,
            statements,
        })
    }

    /// Right after the run: the WAL position first, then (once the run's sessions have
    /// ended, so their counters are flushed, and the counters agree twice) everything else.
    pub async fn end(&self, mark: Mark) -> Result<Deltas> {
        let lsn = self.lsn().await?;
        if mark.statements.is_ok() {
            // new sessions are no longer tracked; the run's own keep their setting
            let _ = self.track(false).await;
        }
        self.wait_quiet(&mark.sessions).await?;
        let tables = self.settled_tables().await?;
        let wal_bytes: f64 = self
            .cluster
            .query_one(
                "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::float8",
                &[&lsn, &mark.lsn],
            )
            .await?
            .get(0);
        let wal_records = match &self.walinspect {
            Ok(()) => self.wal_records(&mark.lsn, &lsn).await,
            Err(e) => Err(e.clone()),
        };
        let statements = match mark.statements {
            Ok(()) => self.statements().await,
            Err(e) => Err(e),
        };
        Ok(Deltas {
            wal_bytes,
            tables: diff(&mark.tables, &tables),
            wal_records,
            statements,
        })
    }

    /// Statement tracking on (reset for this database) or off, for sessions opened next.
    async fn track(&self, on: bool) -> Result<(), String> {
        let db = &self.db;
        let sql = if on {
            format!("ALTER DATABASE \"{db}\" SET pg_stat_statements.track = 'top'")
        } else {
            format!("ALTER DATABASE \"{db}\" RESET pg_stat_statements.track")
        };
        let fail = |e: tokio_postgres::Error| format!("pg_stat_statements: {}", why(&e));
        self.cluster.batch_execute(&sql).await.map_err(fail)?;
        if on {
            self.cluster
                .execute(
                    "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname::text = $1), 0)",
                    &[db],
                )
                .await
                .map_err(fail)?;
        }
        Ok(())
    }

    async fn lsn(&self) -> Result<String> {
        let row = self
            .cluster
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .context("pg_current_wal_lsn")?;
        Ok(row.get(0))
    }

    /// Waits (up to 30 s) until no session but those of `before` is on the database: a
    /// session flushes its counters as it ends, before it leaves `pg_stat_activity`.
    async fn wait_quiet(&self, before: &[i32]) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let others: i64 = self
                .target
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname::text = $1 AND backend_type = 'client backend'
                       AND pid <> ALL($2)",
                    &[&self.db, &before],
                )
                .await?
                .get(0);
            if others == 0 {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{others} sessions still on {} 30 s after the run",
                self.db
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The table counters once two readings 200 ms apart agree (at most 10 s).
    async fn settled_tables(&self) -> Result<BTreeMap<String, TableCounters>> {
        flush(&self.target).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = self.tables().await?;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = self.tables().await?;
            if now == last || Instant::now() > deadline {
                return Ok(now);
            }
            last = now;
        }
    }

    /// Every user table of the database: its counters and valid indexes.
    async fn tables(&self) -> Result<BTreeMap<String, TableCounters>> {
        let rows = self
            .target
            .query(
                "SELECT s.schemaname || '.' || s.relname,
                        s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del,
                        count(i.indexrelid) FILTER (WHERE i.indisvalid),
                        count(i.indexrelid) FILTER (WHERE i.indisvalid AND i.indpred IS NOT NULL)
                 FROM pg_stat_user_tables AS s
                 LEFT JOIN pg_index AS i ON i.indrelid = s.relid
                 GROUP BY 1, 2, 3, 4, 5",
                &[],
            )
            .await
            .context("pg_stat_user_tables")?;
        Ok(rows
            .iter()
            .map(|r| {
                let counters = TableCounters {
                    inserted: r.get(1),
                    updated: r.get(2),
                    hot_updated: r.get(3),
                    deleted: r.get(4),
                    indexes: r.get(5),
                    partial_indexes: r.get(6),
                };
                (r.get(0), counters)
            })
            .collect())
    }

    /// The WAL records between the two positions, in one pass over them: by type, and by the
    /// table each changes (its first block reference). An index's records count for its
    /// table, and a partition's for its partitioned table, so the queue and each history table
    /// read as one line. Records that change no relation (commits and the like) and those of
    /// other databases get a line each.
    async fn wal_records(&self, from: &str, to: &str) -> Result<WalRecords, String> {
        let fail = |e: tokio_postgres::Error| format!("pg_walinspect: {}", why(&e));
        // one row per record type (by_type), and one per (database, relfilenode) of the
        // records' first block, both NULL for a record that changes no relation
        let rows = self
            .cluster
            .query(
                "WITH r AS (
                     SELECT resource_manager || '/' || record_type AS kind, record_length,
                            fpi_length,
                            regexp_match(block_ref, 'rel [0-9]+/([0-9]+)/([0-9]+)') AS m
                     FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
                 )
                 SELECT GROUPING(kind) = 0 AS by_type, kind, m[1]::oid, m[2]::oid, count(*),
                        sum(record_length)::int8, sum(fpi_length)::int8
                 FROM r
                 GROUP BY GROUPING SETS ((kind), (m[1], m[2]))",
                &[&from, &to],
            )
            .await
            .map_err(fail)?;
        let line = |r: &tokio_postgres::Row, name: String| RecordType {
            name,
            count: r.get(4),
            bytes: r.get(5),
            fpi_bytes: r.get(6),
        };
        let (types, blocks): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.get::<_, bool>(0));
        let mut by_type: Vec<RecordType> = types.iter().map(|r| line(r, r.get(1))).collect();
        by_type.sort_by_key(|t| std::cmp::Reverse(t.bytes));
        let database: u32 = self
            .target
            .query_one(
                "SELECT oid FROM pg_database WHERE datname = current_database()",
                &[],
            )
            .await
            .map_err(fail)?
            .get(0);
        let nodes: Vec<u32> = blocks
            .iter()
            .filter(|r| r.get::<_, Option<u32>>(2) == Some(database))
            .filter_map(|r| r.get::<_, Option<u32>>(3))
            .collect();
        // each file's table: an index's table, a TOAST table's owner, a partition's parent
        let names: BTreeMap<u32, String> = self
            .target
            .query(
                "SELECT f.node, coalesce(p.inhparent, t.rel)::regclass::text
                 FROM unnest($1::oid[]) AS f(node)
                 CROSS JOIN LATERAL (SELECT pg_filenode_relation(0, f.node) AS rel) AS r
                 LEFT JOIN pg_index AS i ON i.indexrelid = r.rel
                 LEFT JOIN pg_class AS owner ON owner.reltoastrelid = coalesce(i.indrelid, r.rel)
                 CROSS JOIN LATERAL (SELECT coalesce(owner.oid, i.indrelid, r.rel) AS rel) AS t
                 LEFT JOIN pg_inherits AS p ON p.inhrelid = t.rel
                 WHERE r.rel IS NOT NULL",
                &[&nodes],
            )
            .await
            .map_err(fail)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let mut by_table: BTreeMap<String, RecordType> = BTreeMap::new();
        for r in &blocks {
            let (db, node): (Option<u32>, Option<u32>) = (r.get(2), r.get(3));
            let name = match (db, node) {
                (None, _) | (_, None) => "(no relation: commits and the like)".to_owned(),
                (Some(db), _) if db != database => "(other databases, shared catalogs)".to_owned(),
                (_, Some(node)) => names
                    .get(&node)
                    .cloned()
                    .unwrap_or_else(|| "(relations dropped since)".to_owned()),
            };
            let part = line(r, name.clone());
            let total = by_table.entry(name.clone()).or_insert_with(|| RecordType {
                name,
                ..RecordType::default()
            });
            total.count += part.count;
            total.bytes += part.bytes;
            total.fpi_bytes += part.fpi_bytes;
        }
        let mut by_table: Vec<RecordType> = by_table.into_values().collect();
        by_table.sort_by_key(|t| std::cmp::Reverse(t.bytes));
        Ok(WalRecords {
            by_table,
            ..WalRecords::of(by_type)
        })
    }

    /// This database's statements since the reset, most WAL first.
    async fn statements(&self) -> Result<Vec<StatementTotals>, String> {
        let rows = self
            .cluster
            .query(
                "SELECT query, calls, rows, wal_bytes::float8, wal_fpi, shared_blks_dirtied,
                        total_exec_time
                 FROM pg_stat_statements
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname::text = $1)
                 ORDER BY wal_bytes DESC, shared_blks_dirtied DESC",
                &[&self.db],
            )
            .await
            .map_err(|e| format!("pg_stat_statements: {}", why(&e)))?;
        Ok(rows
            .iter()
            .map(|r| StatementTotals {
                query: r.get(0),
                calls: r.get(1),
                rows: r.get(2),
                wal_bytes: r.get(3),
                wal_fpi: r.get(4),
                dirtied: r.get(5),
                exec_ms: r.get(6),
            })
            .collect())
    }
}

/// `Err`: why `pg_stat_statements` cannot be used on this server.
async fn enable_statements(client: &Client) -> Result<(), String> {
    let loaded: String = client
        .query_one("SELECT current_setting('shared_preload_libraries')", &[])
        .await
        .map_err(|e| why(&e))?
        .get(0);
    if !loaded.split(',').any(|l| l.trim() == "pg_stat_statements") {
        return Err("pg_stat_statements is not in the server's shared_preload_libraries".into());
    }
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .map_err(|e| format!("pg_stat_statements: {}", why(&e)))
}

/// Makes `client`'s session flush its pending counters (PostgreSQL 15: at its next idle
/// moment, which the second statement waits for). On an older server this does nothing.
async fn flush(client: &Client) {
    let _ = client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await;
    let _ = client.batch_execute("SELECT 1").await;
}

/// `after − before`, table by table (the index counts are `after`'s); tables that did not
/// change are left out.
pub fn diff(
    before: &BTreeMap<String, TableCounters>,
    after: &BTreeMap<String, TableCounters>,
) -> BTreeMap<String, TableCounters> {
    let mut out = BTreeMap::new();
    for (name, a) in after {
        let b = before.get(name).copied().unwrap_or_default();
        let d = TableCounters {
            inserted: a.inserted - b.inserted,
            updated: a.updated - b.updated,
            hot_updated: a.hot_updated - b.hot_updated,
            deleted: a.deleted - b.deleted,
            indexes: a.indexes,
            partial_indexes: a.partial_indexes,
        };
        if d.inserted != 0 || d.updated != 0 || d.deleted != 0 {
            out.insert(name.clone(), d);
        }
    }
    out
}
