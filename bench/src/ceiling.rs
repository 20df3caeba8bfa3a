//! 6: the ceiling — the worker's own SQL (notify_postgres::sql::COMPLETE_AND_CLAIM), driven by
//! pgbench with no application in the loop, in the shape the worker runs it: complete.sql
//! with claim.sql in its `claimed` CTE, one statement (one commit) per batch that completes
//! the batch in hand (all sent) and claims the next. Each pgbench client carries its batch
//! from one transaction to the next in variables (\gset); the first transaction completes
//! nothing, the last claims nothing. Prepared (-M prepared), as the worker's statements are.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde::Serialize;

use crate::Plan;
use crate::db::Bench;
use crate::stats::{rounded, rounded_all, rounded_opt};

/// pgbench: $PGBENCH, then next to the server binaries as tests/scripts/services.sh finds
/// initdb ($PG_BINDIR, pg_config --bindir, /usr/lib/postgresql/*/bin), then $PATH.
pub fn find_pgbench() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PGBENCH").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("PG_BINDIR") {
        dirs.push(d.into());
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let d = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !d.is_empty() {
            dirs.push(d.into());
        }
    }
    for root in ["/usr/lib/postgresql", "/usr/local/opt", "/opt/homebrew/opt"] {
        if let Ok(entries) = std::fs::read_dir(root) {
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .collect();
            // the newest version first
            found.sort_by_key(|p| std::cmp::Reverse(version_of(p)));
            dirs.extend(found);
        }
    }
    for d in dirs {
        if d.join("pgbench").is_file() {
            return Some(d.join("pgbench"));
        }
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("pgbench"))
            .find(|p| p.is_file())
    })
}

fn version_of(bin: &Path) -> u32 {
    bin.parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.rsplit(['@', '-']).next())
        .and_then(|v| v.split('.').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A statement without its full-line comments (the markers of sql/ included).
fn without_comments(text: &str) -> String {
    let body: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect();
    body.join("\n").trim().trim_end_matches(';').to_owned()
}

/// The highest `$n` in a statement.
fn max_param(sql: &str) -> usize {
    (1..=99)
        .take_while(|n| sql.contains(&format!("${n}")))
        .last()
        .unwrap_or(0)
}

/// Replaces `$n` (highest first, so `$12` is not read as `$1`) with pgbench variables.
fn with_variables(sql: &str, names: &[&str]) -> String {
    let mut out = sql.to_owned();
    for (i, name) in names.iter().enumerate().rev() {
        out = out.replace(&format!("${}", i + 1), &format!(":{name}"));
    }
    out
}

/// Splits `WITH … SELECT …` before its top-level SELECT (outside parentheses, strings and
/// comments).
fn split_final_select(sql: &str) -> Option<(&str, &str)> {
    let bytes = sql.as_bytes();
    let (mut depth, mut i) = (0i32, 0usize);
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ if depth == 0
                && sql[i..].len() >= 6
                && sql[i..i + 6].eq_ignore_ascii_case("select")
                && (i == 0 || !word(bytes[i - 1]))
                && !bytes.get(i + 6).copied().is_some_and(word) =>
            {
                return Some((&sql[..i], &sql[i..]));
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// What the pgbench clients start with: no batch in hand.
pub const INITIAL: [&str; 12] = [
    "ids",
    "tokens",
    "attempts",
    "outcomes",
    "retry_at",
    "providers",
    "message_ids",
    "error_codes",
    "error_messages",
    "started",
    "finished",
    "created",
];

/// The pgbench script.
pub fn script() -> Result<String> {
    // the statement the worker runs (complete.sql holds claim.sql, copied in by the build):
    // claim.sql's $1 (batch size) and $2 (the current time, NULL: the server's) are its own
    let complete = notify_postgres::sql::COMPLETE_AND_CLAIM.sql;
    if max_param(complete) != 14 || !complete.contains("-- @include claim.sql") {
        bail!(
            "complete.sql changed shape (it takes {} parameters; the ceiling script expects 14, \
             with claim.sql included): update bench/src/ceiling.rs",
            max_param(complete),
        );
    }
    let statement = without_comments(complete).replace("$2::timestamptz", "NULL::timestamptz");
    let mut names: Vec<&str> = vec!["next", "now"];
    names.extend(INITIAL);
    let statement = with_variables(&statement, &names);
    let (with, last) = split_final_select(&statement)
        .context("complete.sql: no final SELECT after its WITH list")?;
    // the next transaction's input: the claimed rows (applied is null), delivered at once
    Ok(format!(
        "\\set k :k + 1\n\
         \\set next :batch\n\
         \\if :k >= :last\n\
         \\set next 0\n\
         \\endif\n\
         {with_list},\n\
         bench_out AS (\n{last}\n)\n\
         SELECT coalesce(array_agg(id) FILTER (WHERE applied IS NULL), '{{}}') AS ids,\n\
                coalesce(array_agg(claim_token) FILTER (WHERE applied IS NULL), '{{}}') AS tokens,\n\
                coalesce(array_agg(tries) FILTER (WHERE applied IS NULL), '{{}}') AS attempts,\n\
                coalesce(array_agg('sent'::text) FILTER (WHERE applied IS NULL), '{{}}') AS outcomes,\n\
                coalesce(array_agg(NULL::timestamptz) FILTER (WHERE applied IS NULL), '{{}}') AS retry_at,\n\
                coalesce(array_agg(CASE channel WHEN 'sms' THEN 'sns' ELSE 'ses' END) FILTER (WHERE applied IS NULL), '{{}}') AS providers,\n\
                coalesce(array_agg(gen_random_uuid()::text) FILTER (WHERE applied IS NULL), '{{}}') AS message_ids,\n\
                coalesce(array_agg(NULL::text) FILTER (WHERE applied IS NULL), '{{}}') AS error_codes,\n\
                coalesce(array_agg(NULL::text) FILTER (WHERE applied IS NULL), '{{}}') AS error_messages,\n\
                coalesce(array_agg(clock_timestamp()) FILTER (WHERE applied IS NULL), '{{}}') AS started,\n\
                coalesce(array_agg(clock_timestamp()) FILTER (WHERE applied IS NULL), '{{}}') AS finished,\n\
                coalesce(array_agg(created_at) FILTER (WHERE applied IS NULL), '{{}}') AS created\n\
         FROM bench_out \\gset\n",
        with_list = with.trim_end(),
    ))
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Ceiling {
    #[serde(rename = "connections")]
    pub clients: usize,
    pub batch: u32,
    pub jobs: i64,
    #[serde(serialize_with = "rounded::<1, _>")]
    pub jobs_per_sec: f64,
    /// Every repetition's jobs/s (`jobs_per_sec` is the best).
    #[serde(rename = "runs_jobs_per_sec", serialize_with = "rounded_all::<1, _>")]
    pub runs: Vec<f64>,
}

/// 6: the ceiling over the worked grid's cells.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ceilings {
    /// pgbench, when found.
    pub tool: Option<String>,
    pub runs_per_cell: usize,
    pub grid: Vec<Ceiling>,
    pub best: Option<Ceiling>,
    /// Our best cell's jobs/s ÷ the best ceiling's.
    #[serde(serialize_with = "rounded_opt::<3, _>")]
    pub ours_best_over_ceiling_best: Option<f64>,
    /// Why cells are missing, when some are.
    pub note: Option<String>,
}

impl Ceilings {
    pub fn at(&self, batch: u32, clients: usize) -> Option<&Ceiling> {
        self.grid
            .iter()
            .find(|c| c.batch == batch && c.clients == clients)
    }
}

/// The plan's grid run by pgbench, each cell the best of `plan.reps` runs; what cannot run
/// (no pgbench, SQL of another shape, a failed run) is a note, not an error. The ratio to
/// our best is left for the caller.
pub async fn grid(bench: &Bench, plan: &Plan) -> Result<Ceilings> {
    let pgbench = find_pgbench();
    let mut out = Ceilings {
        tool: pgbench.as_ref().map(|p| p.display().to_string()),
        runs_per_cell: plan.reps,
        ..Ceilings::default()
    };
    match (&pgbench, script()) {
        (Some(pgbench), Ok(script)) => {
            let path =
                std::env::temp_dir().join(format!("notif-bench-{}.pgbench", std::process::id()));
            std::fs::write(&path, &script)?;
            out.note = cells(bench, plan, pgbench, &path, &mut out.grid).await;
            let _ = std::fs::remove_file(&path);
        }
        (None, _) => out.note = Some("pgbench not found (set PGBENCH or PG_BINDIR)".into()),
        (_, Err(e)) => out.note = Some(format!("{e:#}")),
    }
    out.best = out
        .grid
        .iter()
        .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
        .cloned();
    Ok(out)
}

/// Pushes each cell that ran at least once onto `grid`; the last failure, if any.
async fn cells(
    bench: &Bench,
    plan: &Plan,
    pgbench: &Path,
    script_path: &Path,
    grid: &mut Vec<Ceiling>,
) -> Option<String> {
    let mut note = None;
    for &batch in &plan.batches {
        for &clients in &plan.workers {
            let mut runs: Vec<Ceiling> = Vec::new();
            for rep in 1..=plan.reps {
                crate::step!(
                    "ceiling (pgbench): {clients} connections, batch {batch} (run {rep}/{})",
                    plan.reps
                );
                match cell(bench, pgbench, script_path, plan.jobs, clients, batch).await {
                    Ok(c) => runs.push(c),
                    Err(e) => {
                        note = Some(format!("{e:#}"));
                        break;
                    }
                }
            }
            let all: Vec<f64> = runs.iter().map(|c| c.jobs_per_sec).collect();
            if let Some(mut best) = runs
                .into_iter()
                .max_by(|a, b| a.jobs_per_sec.total_cmp(&b.jobs_per_sec))
            {
                best.runs = all;
                grid.push(best);
            }
        }
    }
    note
}

/// Drains `jobs` due jobs with `clients` pgbench connections claiming `batch` at a time.
pub async fn cell(
    bench: &Bench,
    pgbench: &Path,
    script_path: &Path,
    jobs: i64,
    clients: usize,
    batch: u32,
) -> Result<Ceiling> {
    bench.reset(jobs).await?;
    // enough transactions per client to drain the queue, one more for slack, and the last
    // that only completes
    let per_client = (jobs as u64).div_ceil(u64::from(batch) * clients as u64) + 2;
    let mut command = tokio::process::Command::new(pgbench);
    command
        .args(["-n", "-M", "prepared", "-f"])
        .arg(script_path)
        .args(["-D", &format!("batch={batch}")])
        .args(["-D", "k=0"])
        .args(["-D", &format!("last={per_client}")]);
    for name in INITIAL {
        command.args(["-D", &format!("{name}={{}}")]);
    }
    let output = command
        .args(["-c", &clients.to_string()])
        .args(["-j", &clients.min(2).to_string()])
        .args(["-t", &per_client.to_string()])
        .arg(&bench.url)
        .output()
        .await
        .with_context(|| format!("run {}", pgbench.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success(),
        "pgbench failed ({}): {stderr}{stdout}",
        output.status
    );
    let tps: f64 = stdout
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.trim_start_matches("tps = ").split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {stdout}"))?;
    let counts = bench.counts().await?;
    ensure!(
        counts.sent == jobs && counts.deliveries == jobs,
        "pgbench clients={clients} batch={batch}: {jobs} jobs, but {} sent, {} attempts recorded, {} open",
        counts.sent,
        counts.deliveries,
        counts.open
    );
    // tps counts whole script runs without connection time
    let transactions = (per_client * clients as u64) as f64;
    let secs = transactions / tps;
    Ok(Ceiling {
        clients,
        batch,
        jobs,
        jobs_per_sec: jobs as f64 / secs,
        runs: vec![jobs as f64 / secs],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_is_built_from_the_sql_files() {
        let script = script().unwrap();
        assert!(
            !script.contains('$'),
            "every parameter became a variable:\n{script}"
        );
        assert!(
            script.contains("FOR UPDATE SKIP LOCKED"),
            "the claim is in it"
        );
        assert!(
            script.contains("INSERT INTO job_outcomes"),
            "so is the completion"
        );
        assert!(script.trim_end().ends_with("FROM bench_out \\gset"));
    }

    #[test]
    fn splits_before_the_top_level_select() {
        let sql = "WITH a AS (SELECT 1 AS x), b AS (SELECT ')' FROM a) -- SELECT\nSELECT x FROM a UNION ALL SELECT 2";
        let (with, last) = split_final_select(sql).unwrap();
        assert_eq!(
            with,
            "WITH a AS (SELECT 1 AS x), b AS (SELECT ')' FROM a) -- SELECT\n"
        );
        assert_eq!(last, "SELECT x FROM a UNION ALL SELECT 2");
        assert_eq!(
            with_variables(
                "$1 $12 $2",
                &["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]
            ),
            ":a :l :b"
        );
    }
}
