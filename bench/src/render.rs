//! The human table: every part of [`Results`] in the order of the questions, then the
//! targets. Only formatting here; the figures and verdicts are computed before.

use crate::cpu::FULL_VCPU_MB;
use crate::results::Results;
use crate::say;
use crate::targets::Target;
use crate::writes::{Side, WriteBudget, Writes};

pub fn render(r: &Results, targets: &[Target]) {
    header(r);
    say!("");
    worked(r);
    say!("");
    ceiling(r);
    say!("");
    peer(r);
    say!("");
    write_budget(r);
    say!("");
    claim(r);
    say!("");
    retention(r);
    whole_life(r);
    soak(r);
    say!("");
    ingest(r);
    say!("");
    accept_to_provider(r);
    say!("");
    cpu(r);
    say!("");
    r.cold_start.render();
    say!("");
    wake(r);
    say!("");
    footer(r, targets);
}

/// A count with thousands separators; `-` when there is none.
pub fn fmt_n(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Milliseconds, two decimals below 100; `-` when there is none.
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// `--only claim`: part 2's section and its targets.
pub fn claim_only(r: &Results, targets: &[Target]) {
    header(r);
    say!("");
    claim(r);
    say!("");
    footer(r, targets);
}

/// `--only peer`: the grid of part 1 and the comparison of part 5.
pub fn peer_only(r: &Results, targets: &[Target]) {
    header(r);
    say!("");
    worked(r);
    say!("");
    peer(r);
    say!("");
    footer(r, targets);
}

/// `--only life`, `soak`, `cold`, `retention`, `lanes`, `ours` or `wake` (after part 8's,
/// whose worker cold start its derived figure adds): that part's section.
pub fn part_only(part: &str, r: &Results, targets: &[Target]) {
    header(r);
    say!("");
    match part {
        "life" => whole_life(r),
        "soak" => soak(r),
        "retention" => retention(r),
        "lanes" => lanes(r),
        "ours" => ours(r),
        "keys" => {
            if let Some(k) = &r.keys {
                k.render();
            }
        }
        "publish" => {
            if let Some(p) = &r.publish {
                p.render();
            }
        }
        "prepared" => {
            if let Some(p) = &r.prepared {
                p.render();
            }
        }
        "wake" => {
            r.cold_start.render();
            say!("");
            wake(r);
        }
        _ => r.cold_start.render(),
    }
    say!("");
    footer(r, targets);
}

/// The targets, and the load and time of the run.
fn footer(r: &Results, targets: &[Target]) {
    if !targets.is_empty() {
        verdicts(targets);
    }
    say!(
        "load average after: {}; total time {:.0} s",
        r.load_after,
        r.total_secs
    );
}

fn header(r: &Results) {
    say!(
        "notification-service benchmark ({} mode, {} build) — {}",
        r.mode,
        r.build,
        r.date
    );
    say!(
        "machine: {} cores, {}; load average before: {}",
        r.machine.cores,
        r.machine.cpu,
        r.machine.load_before
    );
    let pg = |name: &str| r.postgres.get(name).map_or("?", String::as_str);
    say!(
        "postgres {}: fsync={} synchronous_commit={} full_page_writes={} shared_buffers={}",
        pg("server_version"),
        pg("fsync"),
        pg("synchronous_commit"),
        pg("full_page_writes"),
        pg("shared_buffers"),
    );
}

/// The grid's column header (workers) and one row per batch size, `cell`'s figure in each.
fn grid(r: &Results, cell: impl Fn(u32, usize) -> Option<f64>) -> Vec<String> {
    let workers = r.worked.workers();
    let mut header = "   batch \\ workers".to_owned();
    for w in &workers {
        header.push_str(&format!("{w:>12}"));
    }
    let mut lines = vec![header];
    for batch in r.worked.batches() {
        let mut line = format!("   {batch:>17}");
        for &w in &workers {
            line.push_str(&format!(
                "{:>12}",
                fmt_n(cell(batch, w).unwrap_or(f64::NAN))
            ));
        }
        lines.push(line);
    }
    lines
}

fn worked(r: &Results) {
    let w = &r.worked;
    say!(
        "1. worked jobs/s ({} due jobs; each worker = own connection + notify_core::worker::run, WORKER_CONCURRENCY default, no-op delivery; every attempt recorded; best of {} runs)",
        w.jobs,
        w.runs_per_cell
    );
    for line in grid(r, |b, n| w.at(b, n).map(|c| c.jobs_per_sec)) {
        say!("{line}");
    }
    say!(
        "   best: {} jobs/s ({} workers, batch {})",
        fmt_n(w.best.jobs_per_sec),
        w.best.workers,
        w.best.batch
    );
}

fn ceiling(r: &Results) {
    let c = &r.ceiling;
    say!(
        "6. ceiling: the worker's complete.sql (claim.sql included) driven by pgbench (-M prepared), same grid, best of {} runs",
        c.runs_per_cell
    );
    if !c.grid.is_empty() {
        let lines = grid(r, |b, n| c.at(b, n).map(|c| c.jobs_per_sec));
        say!(
            "{}",
            lines[0].replace("batch \\ workers    ", "batch \\ connections")
        );
        for (line, batch) in lines[1..].iter().zip(r.worked.batches()) {
            let mut ratios = String::from("   ours ÷ ceiling:");
            for w in r.worked.workers() {
                if let (Some(c), Some(o)) = (c.at(batch, w), r.worked.at(batch, w)) {
                    ratios.push_str(&format!(" {:.2}", o.jobs_per_sec / c.jobs_per_sec));
                }
            }
            say!("{line}{ratios}");
        }
    }
    if let Some(note) = &c.note {
        say!("   ceiling incomplete: {note}");
    }
    if let (Some(best), Some(ratio)) = (&c.best, c.ours_best_over_ceiling_best) {
        say!(
            "   best ceiling: {} jobs/s ({} connections, batch {}); our best ÷ best ceiling = {ratio:.2}",
            fmt_n(best.jobs_per_sec),
            best.clients,
            best.batch
        );
    }
}

fn peer(r: &Results) {
    let p = &r.peer;
    say!("5. peer: {}", p.status);
    if p.default.is_none() && p.grid.is_empty() {
        return;
    }
    say!("   one clock for both: {}", p.clock);
    if let Some(h) = &p.default {
        let all = |v: &[f64]| v.iter().map(|x| fmt_n(*x)).collect::<Vec<_>>().join(" ");
        say!("   at the defaults, {} rounds in turns (ABBA):", p.rounds);
        say!(
            "     ours ({}): median {} jobs/s ({})",
            h.ours,
            fmt_n(h.ours_jobs_per_sec),
            all(&h.ours_rounds)
        );
        say!(
            "     graphile-worker ({}): median {} jobs/s ({})",
            h.theirs,
            fmt_n(h.theirs_jobs_per_sec),
            all(&h.theirs_rounds)
        );
        let ci = p
            .ratio_ci95
            .map_or("n/a".into(), |[lo, hi]| format!("{lo:.2} to {hi:.2}"));
        say!(
            "     ours ÷ theirs: {:.2} (medians); each round's ratio, median {:.2}, bootstrap 95% interval {ci}",
            h.ratio,
            p.ratio_median.unwrap_or(f64::NAN)
        );
    }
    if !p.grid.is_empty() {
        say!(
            "   graphile-worker over its grid (processes × concurrentJobs × localQueue, best of {} runs each):",
            r.worked.runs_per_cell
        );
        for run in &p.grid {
            say!(
                "     {} × {} × {}: {} jobs/s",
                run.processes,
                run.settings.concurrent_jobs,
                run.settings.local_queue_size,
                fmt_n(run.jobs_per_sec)
            );
        }
    }
    if let Some(ps) = &r.provider_shaped {
        let all = |v: &[f64]| v.iter().map(|x| fmt_n(*x)).collect::<Vec<_>>().join(" ");
        say!(
            "   with a provider's pace (each call 30–80 ms), the defaults, {} rounds of {} jobs in turns: ours {} jobs/s ({}), graphile-worker {} jobs/s ({}); ours ÷ theirs {:.2}",
            ps.rounds,
            ps.jobs,
            fmt_n(ps.ours_jobs_per_sec),
            all(&ps.ours_rounds),
            fmt_n(ps.theirs_jobs_per_sec),
            all(&ps.theirs_rounds),
            ps.ratio
        );
        say!(
            "     per call slot: ours {:.1} jobs/s ({} slots), graphile-worker {:.1} ({} slots), ratio {:.2}; our Lambda time for 1M notifications at 512 MB arm64: ${:.3} (the database's time not included)",
            ps.ours_jobs_per_sec_per_slot,
            ps.ours_slots,
            ps.theirs_jobs_per_sec_per_slot,
            ps.theirs_slots,
            ps.per_slot_ratio,
            ps.ours_lambda_usd_per_million
        );
    }
    if let (Some(best), Some(ratio)) = (&p.best, p.ours_best_over_peer_best) {
        say!(
            "   best of each grid: ours {} jobs/s ({} workers, batch {}), graphile-worker {} jobs/s ({} × {} × {}); ours ÷ theirs = {ratio:.2}",
            fmt_n(r.worked.best.jobs_per_sec),
            r.worked.best.workers,
            r.worked.best.batch,
            fmt_n(best.jobs_per_sec),
            best.processes,
            best.settings.concurrent_jobs,
            best.settings.local_queue_size
        );
    }
}

/// A per-job figure: whole numbers from 100 up, else two significant decimals or so.
fn per_job(v: Option<f64>) -> String {
    match v {
        Some(v) if v.abs() >= 100.0 => fmt_n(v),
        Some(v) if v.abs() >= 1.0 => format!("{v:.2}"),
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => "-".into(),
    }
}

fn write_budget(r: &Results) {
    let b = &r.write_budget;
    let sides = [("ours", &b.ours), ("graphile-worker", &b.graphile_worker)];
    let jobs = sides
        .iter()
        .find_map(|(_, s)| s.run.as_ref().map(|w| w.jobs));
    say!(
        "9. write budget per worked job: for each side a run of its own, {} queued jobs at the settings of its best timed run, from VACUUM ANALYZE + CHECKPOINT like every run; queueing not counted",
        jobs.unwrap_or(0)
    );
    let exec = |s: &crate::writes::Side| s.run.as_ref().and_then(|w| w.exec_ms_per_job);
    say!(
        "   the server's time per worked job (statements' execution, pg_stat_statements): ours {} ms, graphile-worker {} ms; ours ÷ theirs {}",
        per_job(exec(&b.ours)),
        per_job(exec(&b.graphile_worker)),
        b.ours_over_theirs
            .exec_ms
            .map_or("n/a".into(), |x| format!("{x:.2}"))
    );
    for (name, side) in sides {
        match &side.run {
            Some(w) => say!(
                "   {name}: {} ({} jobs/s in this run{})",
                w.setting,
                fmt_n(w.jobs_per_sec),
                if w.buffers_dirtied_per_job.is_some() {
                    ", statements tracked"
                } else {
                    ""
                }
            ),
            None => say!("   {name}: {}", side.status),
        }
    }
    if jobs.is_some() {
        write_table(b);
        for (name, side) in sides {
            write_details(name, side);
        }
    }
    history_rows(r);
}

/// What one history row costs, shape by shape, and what a job worked once writes to the
/// history with its last attempt inline in its outcome row, against that attempt in a row
/// of its own.
fn history_rows(r: &Results) {
    let f = &r.history_rows;
    if f.shapes.is_empty() {
        return;
    }
    say!(
        "   what one history row writes: {} rows in each shape's own new table, 500 per statement, one session, ids in time order (the least each shape writes; WAL bytes per row):",
        fmt_n(f.rows as f64)
    );
    for s in &f.shapes {
        say!(
            "   {:>12}   {} {:<7}  {}",
            per_job(Some(s.wal_bytes_per_row)),
            s.indexes,
            if s.indexes == 1 { "index" } else { "indexes" },
            s.shape
        );
    }
    let inline = f.of(crate::floor::INLINE);
    let attempt = f.of(crate::floor::ATTEMPT_ROW);
    let apart = f.of(crate::floor::APART);
    if let (Some(inline), Some(attempt), Some(apart)) = (inline, attempt, apart) {
        say!(
            "   a job worked once: one outcome row with its attempt inline ({}), where an outcome row and an attempt row apart would write {}: {} less",
            per_job(Some(inline)),
            per_job(Some(apart + attempt)),
            per_job(Some(apart + attempt - inline))
        );
    }
}

/// The figures side by side, with ours ÷ theirs for the headline ones.
fn write_table(b: &WriteBudget) {
    let x = &b.ours_over_theirs;
    let row = |label: &str, f: fn(&Writes) -> Option<f64>, ratio: Option<Option<f64>>| {
        let side = |s: &Side| per_job(s.run.as_ref().and_then(f));
        let ratio = ratio.map_or(String::new(), |r| {
            r.map_or("-".into(), |r| format!("{r:.2}"))
        });
        say!(
            "   {label:<54}{:>12}{:>17}{:>15}",
            side(&b.ours),
            side(&b.graphile_worker),
            ratio
        );
    };
    say!(
        "   {:<54}{:>12}{:>17}{:>15}",
        "per job",
        "ours",
        "graphile-worker",
        "ours ÷ theirs"
    );
    row(
        "WAL bytes (pg_current_wal_lsn after − before)",
        |w| Some(w.wal_bytes_per_job),
        Some(x.wal_bytes),
    );
    row(
        "  of which full-page images (pg_walinspect)",
        |w| w.wal_fpi_bytes_per_job,
        None,
    );
    row(
        "  of which by statements (pg_stat_statements)",
        |w| w.statements_wal_bytes_per_job,
        None,
    );
    row(
        "heap tuples written (n_tup_ins + n_tup_upd + n_tup_del)",
        |w| Some(w.heap_tuples_per_job),
        Some(x.heap_tuples),
    );
    row("  inserted", |w| Some(w.inserted_per_job), None);
    row("  updated", |w| Some(w.updated_per_job), None);
    row(
        "    of which HOT (n_tup_hot_upd)",
        |w| Some(w.hot_updated_per_job),
        None,
    );
    row("  deleted", |w| Some(w.deleted_per_job), None);
    row(
        "index entries (B-tree inserts in the WAL)",
        |w| w.index_entries_per_job,
        Some(x.index_entries),
    );
    row(
        "index entries, bound: (ins + upd − HOT) × indexes",
        |w| Some(w.index_entries_bound_per_job),
        Some(x.index_entries_bound),
    );
    row(
        "buffers dirtied (pg_stat_statements)",
        |w| w.buffers_dirtied_per_job,
        Some(x.buffers_dirtied),
    );
}

/// A side's statements, most WAL first, and what it could not measure.
fn write_details(name: &str, side: &Side) {
    let Some(w) = &side.run else { return };
    if !w.statements.is_empty() {
        say!(
            "   {name}, statements by WAL (WAL bytes / buffers dirtied per job, calls, statement):"
        );
    }
    for s in &w.statements {
        let query: String = s.query.chars().take(100).collect();
        say!(
            "   {:>12} / {:<7} {:>7}  {query}",
            per_job(Some(s.wal_bytes_per_job)),
            per_job(Some(s.buffers_dirtied_per_job)),
            s.calls
        );
    }
    wal_lines(
        &format!("{name}, WAL by record type"),
        w.wal_by_record_type.iter().map(|t| {
            let per = (t.bytes_per_job, t.fpi_bytes_per_job, t.records_per_job);
            (per, t.record_type.as_str())
        }),
    );
    wal_lines(
        &format!("{name}, WAL by table, indexes and partitions included"),
        w.wal_by_table.iter().map(|t| {
            let per = (t.bytes_per_job, t.fpi_bytes_per_job, t.records_per_job);
            (per, t.table.as_str())
        }),
    );
    for why in &w.not_measured {
        say!("   {name}: not measured: {why}");
    }
}

/// A titled list of WAL shares, one line each: ((bytes, of which full-page images, records)
/// per job, what they are); nothing when the list is empty.
fn wal_lines<'a>(title: &str, lines: impl Iterator<Item = ((f64, f64, f64), &'a str)>) {
    let mut lines = lines.peekable();
    if lines.peek().is_some() {
        say!("   {title} (bytes per job, of which full-page images; records per job):");
    }
    for ((bytes, fpi, records), what) in lines {
        say!(
            "   {:>12} {:>9}   {:>7}  {what}",
            per_job(Some(bytes)),
            format!("({})", per_job(Some(fpi))),
            per_job(Some(records))
        );
    }
}

fn claim(r: &Results) {
    let c = &r.claim_latency;
    let finished = fmt_n(c.finished_rows as f64);
    say!(
        "2. claim latency per claim (claim.sql via JobStore::claim, one connection draining {} due jobs; each batch then completed)",
        c.due_jobs
    );
    say!(
        "   two databases on the server, one with no history and one with {finished} finished jobs; {} drains of each batch size on each, taking turns (none, many, many, none, ...); p50 and p99 over all of a side's claims",
        c.rounds
    );
    say!(
        "   {:>6} {:>22} {:>22} {:>16}  {}",
        "batch",
        "0 finished p50 / p99",
        format!("{finished} finished p50 / p99"),
        "ratio p50 / p99",
        "p50 / p99 ratio of each round"
    );
    for b in &c.batches {
        let (a, m) = (&b.finished_0.claim, &b.finished_many.claim);
        let rounds: Vec<String> = b
            .round_ratios_p50
            .iter()
            .zip(&b.round_ratios_p99)
            .map(|(p50, p99)| format!("{p50:.2}/{p99:.2}"))
            .collect();
        say!(
            "   {:>6} {:>22} {:>22} {:>16}  {}",
            b.batch,
            format!("{} / {}", ms(a.p50_ms), ms(a.p99_ms)),
            format!("{} / {}", ms(m.p50_ms), ms(m.p99_ms)),
            format!("{:.2} / {:.2}", b.ratio_p50, b.ratio_p99),
            rounds.join(" ")
        );
    }
    say!("   EXPLAIN (ANALYZE, BUFFERS) of the claim, batch 100, with {finished} finished rows:");
    for l in c.explain_finished_many.lines() {
        say!("     {l}");
    }
}

/// `--only lanes`.
fn lanes(r: &Results) {
    let Some(l) = &r.lanes else { return };
    say!(
        "lanes: the claim at batch {} on {} due low jobs ({} organizations), {} due high, {} high due tomorrow; each claim in a transaction rolled back (commit not timed)",
        l.batch,
        fmt_n(l.low_due as f64),
        fmt_n(l.organizations as f64),
        l.high_due,
        fmt_n(l.high_later as f64)
    );
    let yes = |b: bool| if b { "yes" } else { "NO" };
    for (name, c) in [
        ("claim.sql".to_owned(), &l.plain),
        (
            format!(
                "claim_fair.sql (RATE_LIMIT_PER_ORG_PER_MIN {})",
                l.fair_per_min
            ),
            &l.fair,
        ),
    ] {
        say!(
            "   {name}: p50 {} / p99 {} over {} claims; first claim: {} rows, {} due high (first: {}), {} high due tomorrow, {} low; job_queue read by index only: {}",
            ms(c.claim.p50_ms),
            ms(c.claim.p99_ms),
            c.claim.n,
            c.rows,
            c.high_due,
            yes(c.high_first),
            c.high_later,
            c.low,
            yes(c.indexed)
        );
    }
    for (name, c) in [("claim.sql", &l.plain), ("claim_fair.sql", &l.fair)] {
        say!(
            "   EXPLAIN (ANALYZE, BUFFERS) of {name}, batch {}:",
            l.batch
        );
        for line in c.explain.lines() {
            say!("     {line}");
        }
    }
}

/// `--only ours`.
fn ours(r: &Results) {
    let Some(c) = &r.ours_default else { return };
    say!(
        "ours at the template's defaults ({} worker, batch {}, WORKER_CONCURRENCY default, no-op delivery): {} jobs/s ({} jobs, {:.2} s between 10% and 90% of the drain, {:.4} CPU ms a job)",
        c.workers,
        c.batch,
        fmt_n(c.jobs_per_sec),
        fmt_n(c.jobs as f64),
        c.secs,
        c.cpu_ms_per_job
    );
}

fn retention(r: &Results) {
    let t = &r.retention;
    let mib = |b: i64| b as f64 / 1_048_576.0;
    say!(
        "10. retention: one day of {} finished jobs (each with its outcome row, holding its last attempt, and an idempotency key), dropped by the sweeper's call (drop_history_days.sql) once its last job ended more than {} days ago",
        fmt_n(t.jobs as f64),
        t.kept_days
    );
    say!(
        "   the day's partitions dropped whole ({:.1} MiB) and its {} idempotency keys deleted row by row, {} day(s) in the call: {:.3} s, {:.2} MiB of WAL; the partitions owe no VACUUM",
        mib(t.partition_bytes),
        fmt_n(t.keys_deleted as f64),
        t.days_dropped,
        t.secs,
        mib(t.wal_bytes)
    );
    say!(
        "   the VACUUM the key deletes leave owing (idempotency_keys, {:.1} MiB, that day's keys alone): {:.3} s, {:.2} MiB of WAL",
        mib(t.keys_bytes),
        t.vacuum_secs,
        mib(t.vacuum_wal_bytes)
    );
    let u = &r.retention_under_load;
    say!(
        "   under load: the same day with {} retry attempt rows and {} provider events, dropped by the sweeper's whole pass (sweeper::run_once) while ingest sends {} requests/s and a polling worker delivers them",
        fmt_n(u.attempt_rows as f64),
        fmt_n(u.feedback_rows as f64),
        u.rate_per_sec
    );
    say!(
        "   the pass: {:.3} s, {} day(s) dropped, {} provider events deleted; every one of the {} requests delivered",
        u.sweep_secs,
        u.days_dropped,
        fmt_n(u.feedback_pruned as f64),
        u.ingested
    );
    let l =
        |x: &crate::stats::Latency| format!("p50 {} p99 {} ({})", ms(x.p50_ms), ms(x.p99_ms), x.n);
    say!(
        "   ingest latency: before the pass {}, during it {}, after it {}",
        l(&u.ingest_before),
        l(&u.ingest_during),
        l(&u.ingest_after)
    );
}

fn ingest(r: &Results) {
    say!(
        "3. ingest: Ingest::handle in-process (API Gateway v2 event, SMS with an Idempotency-Key), one connection per instance"
    );
    for run in [&r.ingest.concurrency_1, &r.ingest.concurrency_8] {
        say!(
            "   concurrency {}: p50 {} p99 {}, {} requests/s ({} requests)",
            run.concurrency,
            ms(run.latency.p50_ms),
            ms(run.latency.p99_ms),
            fmt_n(run.per_sec),
            run.latency.n
        );
    }
}

fn accept_to_provider(r: &Results) {
    let a = &r.accept_to_provider;
    let (on, off) = (&a.polling_on, &a.polling_off);
    let period = off.scaled_period_secs;
    let (measured, work) = (&off.measured_at_scaled_period, &off.work_after_tick);
    let projected = &off.projected_1min_schedule;
    say!(
        "4. accept → provider call ({} requests/s through ingest; one worker, batch 100)",
        a.rate_per_sec
    );
    say!(
        "   polling on (WORKER_POLL_SECS set; empty queue polled every {} ms): p50 {} p99 {} ({} jobs)",
        notify_core::worker::POLL_INTERVAL.as_millis(),
        ms(on.p50_ms),
        ms(on.p99_ms),
        on.n
    );
    say!(
        "   polling off, schedule scaled to {period} s (measured): p50 {} p99 {}; work after the tick p50 {} p99 {}",
        ms(measured.p50_ms),
        ms(measured.p99_ms),
        ms(work.p50_ms),
        ms(work.p99_ms)
    );
    say!(
        "   polling off, 1-minute EventBridge schedule (projected: wait × 60/{period} + measured work): p50 {:.1} s p99 {:.1} s",
        projected.p50_ms / 1000.0,
        projected.p99_ms / 1000.0
    );
}

/// An optional figure with `digits` decimals, `-` when there is none.
fn opt(v: Option<f64>, digits: usize) -> String {
    v.filter(|v| v.is_finite())
        .map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// 13: the wake, the burst, the fan-out and idle.
fn wake(r: &Results) {
    let w = &r.wake;
    let s = &w.settings;
    if s.model.is_empty() {
        say!("13. wake, burst and fan-out: not measured in this run");
        return;
    }
    say!(
        "13. wake, burst and fan-out: polling {}, wake {}, WORKER_IDLE_MS {}, WORKER_MAX_INVOCATIONS {} unless stated, batch {}, concurrency {}, worker timeout {} s; provider calls {}–{} ms (uniform, seeded)",
        s.polling,
        s.wake,
        s.worker_idle_ms,
        s.worker_max_invocations,
        s.batch,
        s.concurrency,
        s.worker_timeout_secs,
        s.provider_ms[0],
        s.provider_ms[1]
    );
    say!("   how: {}", s.model);
    let st = &w.steady;
    say!(
        "   steady, {} requests/s through {} ingest instances taking turns ({:.1} requests/s achieved over {:.1} s): accept → provider p50 {} p99 {} ({} jobs); ingest's answer with the wake p50 {} p99 {}; invocations started {} ({} environments opened beyond the warm ones)",
        st.rate_per_sec,
        st.ingest_instances,
        st.achieved_per_sec,
        st.secs,
        ms(st.accept_to_provider.p50_ms),
        ms(st.accept_to_provider.p99_ms),
        st.accept_to_provider.n,
        ms(st.ingest_answer.p50_ms),
        ms(st.ingest_answer.p99_ms),
        st.invocations.total,
        st.environments_opened
    );
    let a = &w.after_idle;
    say!(
        "   a request after idle (no worker running), warm worker started in-process: accept → provider p50 {} max {} ({} rounds, {} invocations started)",
        ms(a.warm.p50_ms),
        ms(a.warm_max_ms),
        a.rounds,
        a.invocations.total
    );
    say!(
        "   the same, cold worker: p50 {} max {} — {}",
        ms(a.cold.p50_ms.unwrap_or(f64::NAN)),
        ms(a.cold.max_ms.unwrap_or(f64::NAN)),
        a.cold.derived
    );
    say!("   Lambda's own Invoke time and queueing are not modelled in either figure");
    let b = &w.burst;
    say!(
        "   burst: {} requests through {} ingest instances in {:.2} s: {} invocations started ({} wakes, {} fan-out, {} hand-offs), at most {} at once; accept → provider p50 {} p99 {}",
        fmt_n(b.requests as f64),
        b.ingest_instances,
        b.secs,
        b.invocations.total,
        b.invocations.wake,
        b.invocations.backlog,
        b.invocations.hand_off,
        b.peak_running,
        ms(b.accept_to_provider.p50_ms),
        ms(b.accept_to_provider.p99_ms)
    );
    if b.secs > 1.1 {
        say!(
            "   the burst took {:.2} s, not the second asked: ingest could not answer faster here (a busy machine, or a debug build)",
            b.secs
        );
    }
    let f = &w.fan_out;
    if !f.runs.is_empty() {
        say!(
            "   fan-out: {} due jobs, one worker woken, the others started by the fan-out; drain from the wake to the last job's end (database clock); server side over the drain",
            fmt_n(f.jobs as f64)
        );
        say!(
            "   {:>4} {:>9} {:>9} {:>9} {:>7} {:>22} {:>12} {:>9} {:>8} {:>8} {:>8}",
            "N",
            "drain s",
            "jobs/s",
            "speed-up",
            "÷ N",
            "started (wake/fan/hand)",
            "peak (at s)",
            "xacts/s",
            "DB cores",
            "bench",
            "machine"
        );
        for run in &f.runs {
            let i = &run.invocations;
            let sv = &run.server;
            say!(
                "   {:>4} {:>9.1} {:>9} {:>9} {:>7} {:>22} {:>12} {:>9} {:>8} {:>8} {:>8}",
                run.max_invocations,
                run.drain_secs,
                fmt_n(run.jobs_per_sec),
                opt(run.speed_up, 2),
                opt(run.speed_up_per_invocation, 2),
                format!("{} ({}/{}/{})", i.total, i.wake, i.backlog, i.hand_off),
                format!("{} ({})", run.peak_running, opt(run.peak_after_secs, 1)),
                sv.xacts_per_sec.map_or("-".into(), fmt_n),
                opt(sv.server_cores, 2),
                opt(sv.bench_cores, 2),
                sv.machine_busy
                    .map_or("-".into(), |b| format!("{:.0}%", b * 100.0))
            );
        }
        if let Some(note) = f.runs.iter().find_map(|r| r.server.note.as_deref()) {
            say!("   the server's CPU: not measured: {note}");
        }
        say!(
            "   DB cores and bench: CPU time over the drain in cores (of the machine's {}); machine: every core's busy share, other work on the machine included",
            r.machine.cores
        );
    }
    let i = &w.idle;
    say!(
        "   idle: {} scheduled invocation on an empty queue: {} invocations started beyond it; it claimed {} and ran {:.0} ms (its linger)",
        i.scheduled,
        i.invocations.total,
        i.claimed,
        i.ran_ms
    );
}

fn cpu(r: &Results) {
    let c = &r.cpu;
    let l = &c.lambda;
    let (memory, price) = (l.memory_mb, l.usd_per_gb_second);
    say!("7. worker CPU (getrusage of this process over each worked-jobs run; user + system)");
    say!(
        "   per delivered job: {:.4} CPU-ms at 1 worker, batch {}; {:.4} at the best cell",
        c.cpu_ms_per_job,
        c.cell.batch,
        c.best_cell_cpu_ms_per_job
    );
    say!(
        "   Lambda at {memory:.0} MB {} (${price}/GB-s, us-east-1 first tier; {memory:.0}/{FULL_VCPU_MB:.0} of a vCPU):",
        l.arch
    );
    say!(
        "   billed time per job ≈ max(wall {:.4} ms at 1 worker, CPU {:.4} ms × {:.2} throttling) = {:.4} ms → ${:.4} per million notifications (duration only; the per-minute invocations' request charge is not per notification; CPU measured on this machine, not Graviton)",
        l.wall_ms_per_job,
        c.cpu_ms_per_job,
        l.cpu_throttling,
        l.billed_ms_per_job,
        l.usd_per_million_notifications
    );
}

fn verdicts(targets: &[Target]) {
    say!("targets (reported, not enforced):");
    for t in targets {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        say!(
            "   {:<68} {:>10} (want {}) {verdict}",
            t.name,
            t.got,
            t.want
        );
    }
}

fn whole_life(r: &Results) {
    let l = &r.whole_life;
    say!(
        "11. a job's whole life at the defaults: {} jobs (half SMS, half emails of 5-30 KB HTML; mean request {} bytes), ingest in batches of {}, random provider message ids; per job",
        l.jobs,
        fmt_n(l.payload_bytes_mean),
        crate::life::INGEST_BATCH
    );
    for (name, side) in [("ours", &l.ours), ("graphile-worker", &l.theirs)] {
        if side.status != "measured" {
            say!("   {name}: {}", side.status);
            continue;
        }
        let phases: Vec<String> = side
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{} {} B, {} ms",
                    p.name,
                    fmt_n(p.wal_bytes_per_job),
                    per_job(p.ms_per_job)
                )
            })
            .collect();
        say!("   {name} ({}): {}", side.setting, phases.join("; "));
        say!(
            "     whole life: {} WAL bytes; statements {} ms, maintenance {} ms",
            fmt_n(side.wal_bytes_per_job),
            per_job(side.exec_ms_per_job),
            per_job(Some(side.maintenance_ms_per_job))
        );
    }
    let x = |v: Option<f64>| v.map_or("n/a".into(), |x| format!("{x:.2}"));
    say!(
        "   ours ÷ theirs: WAL {}, statements' time {}",
        x(l.wal_ratio),
        x(l.exec_ratio)
    );
    let c = &r.db_cost;
    let usd = |v: Option<f64>| v.map_or("n/a".into(), |x| format!("${x:.4}"));
    say!(
        "   the database's time for 1M notifications (statements and maintenance), priced on {}: ours {}, graphile-worker {}",
        c.rds_class,
        usd(c.ours.rds_usd_per_million),
        usd(c.theirs.rds_usd_per_million)
    );
}

fn soak(r: &Results) {
    let s = &r.soak;
    say!(
        "12. soak: both sides at once, {} s, {} jobs/s into each, REPEATABLE READ held on each database from {} s to {} s; claim latency over the claims that returned jobs",
        s.secs,
        s.rate_per_sec,
        s.held_from_secs,
        s.held_to_secs
    );
    if s.status != "measured" {
        say!("   {}", s.status);
        return;
    }
    for (name, side) in [("ours", &s.ours), ("graphile-worker", &s.theirs)] {
        let l = |x: &crate::stats::Latency| format!("{} / {}", ms(x.p50_ms), ms(x.p99_ms));
        say!(
            "   {name} ({}, {} jobs): claim p50 / p99 {} ({} claims); before {}, held {}, after {}",
            side.table,
            side.jobs,
            l(&side.claims),
            side.claims.n,
            l(&side.before),
            l(&side.held),
            l(&side.after)
        );
        say!(
            "     dead tuples at most {}; indexes at most {} KiB, {} KiB at the end",
            side.max_dead_tuples,
            side.max_index_bytes / 1024,
            side.end_index_bytes / 1024
        );
    }
    let x = |v: Option<f64>| v.map_or("n/a".into(), |x| format!("{x:.2}"));
    say!(
        "   ours ÷ theirs: claim p99 {}, p50 {}, p99 while held {}",
        x(s.claim_p99_ratio),
        x(s.claim_p50_ratio),
        x(s.held_claim_p99_ratio)
    );
    say!("   series: {}; plot: {}", s.csv, s.png);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(fmt_n(1_234_567.4), "1,234,567");
        assert_eq!(fmt_n(-1_000.0), "-1,000");
        assert_eq!(fmt_n(999.5), "1,000");
        assert_eq!(fmt_n(f64::NAN), "-");
    }

    #[test]
    fn a_hand_built_run_renders() {
        let results = crate::results::example();
        render(&results, &crate::targets::targets(&results));
        render(&Results::default(), &[]);
        part_only("wake", &results, &crate::targets::targets(&results));
    }

    #[test]
    fn optional_figures_show_a_dash_when_missing() {
        assert_eq!(opt(Some(1.234), 2), "1.23");
        assert_eq!(opt(None, 2), "-");
        assert_eq!(opt(Some(f64::NAN), 1), "-");
    }
}
