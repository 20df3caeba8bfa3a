#!/usr/bin/env python3
"""The storage alternatives of the queue and history design, measured: see README.md beside this file.

Runs against the server that PGHOST/PGPORT/PGUSER (run.sh's own cluster) or DATABASE_URL
name, with psql and pgbench from PG_BINDIR. Every design gets databases of its own, dropped
at the end. Prints the tables and, with --json, writes every figure to a file.
"""

import argparse
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("PG_BINDIR", "")


def tool(name):
    path = os.path.join(BIN, name) if BIN else shutil.which(name)
    if not path or not os.path.exists(path):
        sys.exit(f"storage bench: {name} not found (set PG_BINDIR)")
    return path


PSQL = tool("psql")
PGBENCH = tool("pgbench")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------
# connections


def dsn(db):
    """A connection string for database `db` on the server under test."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        return f"dbname={db}"
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + db))


def psql(db, sql=None, *, file=None, variables=None, check=True, timeout=None):
    """Runs SQL (or a file) with psql, unaligned and tuples only; returns stdout."""
    cmd = [PSQL, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn(db)]
    for k, v in (variables or {}).items():
        cmd += ["-v", f"{k}={v}"]
    cmd += ["-f", file] if file else ["-c", sql]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"psql failed on {db}: {p.stderr.strip()}\n{(sql or file)[:400]}")
    return p.stdout


def one(db, sql):
    return psql(db, sql).strip()


# ----------------------------------------------------------------------------------------
# A's statement, built from shared/postgres/sql as the worker composes it (and as bench/src/ceiling.rs
# builds the pgbench ceiling): complete.sql with claim.sql in its `claimed` CTE.

WORK_PREAMBLE = """\\set k :k + 1
\\set next :batch
\\if :k >= :last
\\set next 0
\\endif
\\if :split = 1 AND :k % 2 = 0
\\set next 0
\\endif
"""

WORK_OUTPUT = """SELECT coalesce(array_agg(id) FILTER (WHERE applied IS NULL), '{}') AS ids,
       coalesce(array_agg(claim_token) FILTER (WHERE applied IS NULL), '{}') AS tokens,
       coalesce(array_agg(tries) FILTER (WHERE applied IS NULL), '{}') AS attempts,
       coalesce(array_agg('sent'::text) FILTER (WHERE applied IS NULL), '{}') AS outcomes,
       coalesce(array_agg(NULL::timestamptz) FILTER (WHERE applied IS NULL), '{}') AS retry_at,
       coalesce(array_agg(CASE channel WHEN 'sms' THEN 'sns' ELSE 'ses' END) FILTER (WHERE applied IS NULL), '{}') AS providers,
       coalesce(array_agg(id::text) FILTER (WHERE applied IS NULL), '{}') AS message_ids,
       coalesce(array_agg(NULL::text) FILTER (WHERE applied IS NULL), '{}') AS error_codes,
       coalesce(array_agg(NULL::text) FILTER (WHERE applied IS NULL), '{}') AS error_messages,
       coalesce(array_agg(clock_timestamp()) FILTER (WHERE applied IS NULL), '{}') AS started,
       coalesce(array_agg(clock_timestamp()) FILTER (WHERE applied IS NULL), '{}') AS finished
FROM bench_out \\gset
"""

ARRAYS = ["ids", "tokens", "attempts", "outcomes", "retry_at", "providers", "message_ids",
          "error_codes", "error_messages", "started", "finished"]


def read_sql(root, name):
    text = open(os.path.join(root, "shared", "postgres", "sql", name)).read()
    body = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(body).strip().rstrip(";")


def split_final_select(sql):
    """`WITH … SELECT …` split before its top-level SELECT."""
    depth, i, n = 0, 0, len(sql)
    word = lambda c: c.isalnum() or c == "_"
    while i < n:
        c = sql[i]
        if c == "'":
            i += 1
            while i < n and sql[i] != "'":
                i += 1
        elif sql.startswith("--", i):
            while i < n and sql[i] != "\n":
                i += 1
        elif sql.startswith("/*", i):
            i = sql.index("*/", i + 2) + 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif (depth == 0 and sql[i:i + 6].lower() == "select" and (i == 0 or not word(sql[i - 1]))
              and (i + 6 >= n or not word(sql[i + 6]))):
            return sql[:i], sql[i:]
        i += 1
    raise ValueError("no top-level SELECT")


def a_work_script(root):
    claim = read_sql(root, "claim.sql")
    complete = read_sql(root, "complete.sql")
    marker = "/* claim.sql */"
    if marker not in complete or "$13" not in complete or "$3" in claim:
        raise SystemExit("shared/postgres/sql/claim.sql or complete.sql changed shape: update storage.py")
    statement = complete.replace(marker, claim).replace("$2::timestamptz", "NULL::timestamptz")
    if "$2" in statement:
        raise SystemExit("complete.sql: $2 used other than as $2::timestamptz")
    names = ["next", "now"] + ARRAYS
    for i in range(len(names), 0, -1):  # $13 before $1
        statement = statement.replace(f"${i}", f":{names[i - 1]}")
    with_list, last = split_final_select(statement)
    return (
        "-- A work: shared/postgres/sql/complete.sql with shared/postgres/sql/claim.sql in its `claimed` CTE (as\n"
        "-- notify_postgres::sql::COMPLETE_AND_CLAIM composes them), generated by storage.py\n"
        + WORK_PREAMBLE + with_list.rstrip() + ",\nbench_out AS (\n" + last + "\n)\n" + WORK_OUTPUT
    )


# ----------------------------------------------------------------------------------------
# the designs


class Design:
    def __init__(self, key, label, tables, ingest, work, fill, extra_vars=()):
        self.key, self.label, self.tables = key, label, tables
        self.ingest, self.work, self.fill = ingest, work, fill
        self.extra_vars = extra_vars  # further arrays the work script carries


A_TABLES = ["notification_jobs", "notification_deliveries"]
BC_TABLES = ["job_queue", "job_requests", "job_attempts", "job_outcomes"]

DESIGNS = {
    "A": Design("A", "A current", A_TABLES, "a_ingest.pgbench", None, "a_fill.sql"),
    "B": Design("B", "B queue+history", BC_TABLES, "b_ingest.pgbench", "b_work.pgbench", "b_fill.sql"),
    "C": Design("C", "C B, partitioned", BC_TABLES, "c_ingest.pgbench", "c_work.pgbench", "c_fill.sql",
                extra_vars=("created",)),
    "D": Design("D", "D current, HOT claim", A_TABLES, "a_ingest.pgbench", "d_work.pgbench", "a_fill.sql"),
    "E": Design("E", "E B, HOT claim", BC_TABLES, "b_ingest.pgbench", "b_work.pgbench", "b_fill.sql"),
    "C2": Design("C2", "C2 C, keys table", BC_TABLES + ["idempotency_keys"], "c2_ingest.pgbench",
                 "c_work.pgbench", "c2_fill.sql", extra_vars=("created",)),
}


def dbname(design, phase):
    return f"storage_{design.key.lower()}_{phase}"


def create_db(design, phase, root):
    db = dbname(design, phase)
    psql("postgres", f"DROP DATABASE IF EXISTS {db}")
    psql("postgres", f"CREATE DATABASE {db}")
    psql("postgres", f"ALTER DATABASE {db} SET timezone = 'UTC'")
    for ext in ("pg_stat_statements", "pg_walinspect"):
        psql(db, f"CREATE EXTENSION IF NOT EXISTS {ext}", check=False)
    if design.key in ("A", "D"):
        for path in sorted(glob.glob(os.path.join(root, "migrations", "*.sql"))):
            first = open(path).readline()
            if first.startswith("-- migrate: no-transaction"):
                psql(db, file=path)  # statement by statement, outside a transaction
            else:
                apply_migration(db, path)  # in one transaction
        if design.key == "D":
            psql(db, file=os.path.join(HERE, "d_schema.sql"))
    else:
        psql(db, file=os.path.join(HERE, f"{design.key.lower()}_schema.sql"))
    return db


def apply_migration(db, path):
    subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-d", dsn(db), "-f", path],
                   check=True, capture_output=True, text=True)


def drop_db(db):
    psql("postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", check=False)


def has_ext(db, ext):
    return one(db, f"SELECT count(*) FROM pg_extension WHERE extname = '{ext}'") == "1"


# ----------------------------------------------------------------------------------------
# counters


def table_counters(db, tables):
    rows = psql(db, "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del "
                    "FROM pg_stat_user_tables ORDER BY relname")
    out = {}
    for line in rows.splitlines():
        name, ins, upd, hot, dele = line.split("|")
        out[name] = [int(ins), int(upd), int(hot), int(dele)]
    return out


def settled_counters(db, tables):
    """The table counters once the sessions that wrote them have flushed them (a backend
    flushes as it exits, which can be just after pgbench returns): two equal readings."""
    prev = table_counters(db, tables)
    for _ in range(20):
        time.sleep(0.3)
        cur = table_counters(db, tables)
        if cur == prev:
            return cur
        prev = cur
    return prev


def snapshot(db, tables, reset_statements=False):
    if reset_statements and has_ext(db, "pg_stat_statements"):
        psql(db, "SELECT pg_stat_statements_reset()", check=False)
    s = {"counters": settled_counters(db, tables)}
    row = one(db, "SELECT pg_current_wal_lsn(), w.wal_records, w.wal_fpi, w.wal_bytes, "
                  "b.checkpoints_timed + b.checkpoints_req, b.buffers_backend, b.buffers_clean, "
                  "b.buffers_checkpoint FROM pg_stat_wal w, pg_stat_bgwriter b").split("|")
    s.update(lsn=row[0], wal_records=int(row[1]), wal_fpi=int(row[2]),
             checkpoints=int(row[4]), buffers_backend=int(row[5]), buffers_clean=int(row[6]),
             buffers_checkpoint=int(row[7]), t=time.time())
    return s


def statements(db):
    if not has_ext(db, "pg_stat_statements"):
        return None
    row = one(db, "SELECT coalesce(sum(shared_blks_dirtied), 0), coalesce(sum(shared_blks_written), 0), "
                  "coalesce(sum(wal_bytes), 0), coalesce(sum(wal_fpi), 0), coalesce(sum(calls), 0) "
                  "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
                  "WHERE datname = current_database())").split("|")
    return {"dirtied": int(row[0]), "written": int(row[1]), "wal_bytes": float(row[2]),
            "wal_fpi": int(row[3]), "calls": int(row[4])}


BTREE_ENTRY = ("INSERT_LEAF", "INSERT_POST", "SPLIT_L", "SPLIT_R")


def flushed(lsn):
    """`lsn`, or the WAL flushed so far if that is earlier: pg_walinspect reads flushed WAL
    only, and a background process may have inserted a record not flushed yet."""
    return (f"(SELECT CASE WHEN '{lsn}'::pg_lsn > pg_current_wal_flush_lsn() "
            f"THEN pg_current_wal_flush_lsn() ELSE '{lsn}'::pg_lsn END)")


def wal_breakdown(db, start, end):
    """Per resource manager and record type: count, record bytes, FPI bytes (pg_walinspect)."""
    if not has_ext(db, "pg_walinspect"):
        return None
    try:
        rows = psql(db, f"SELECT \"resource_manager/record_type\", count, record_size, fpi_size "
                        f"FROM pg_get_wal_stats('{start}', {flushed(end)}, true) WHERE count > 0")
    except RuntimeError as e:
        log(f"pg_walinspect: {e}")
        return None
    out = {}
    for line in rows.splitlines():
        name, count, rec, fpi = line.split("|")
        out[name] = [int(count), int(rec), int(fpi)]
    return out


def index_entries_by_relation(db, start, end):
    """B-tree tuple inserts per index in the window (pg_walinspect's per-record listing;
    slower, so only for the runs that ask for it)."""
    if not has_ext(db, "pg_walinspect"):
        return None
    sql = f"""
        WITH r AS (
            SELECT substring(block_ref from 'rel \\d+/\\d+/(\\d+)')::oid AS filenode
            FROM pg_get_wal_records_info('{start}', {flushed(end)})
            WHERE resource_manager = 'Btree'
              AND record_type IN ('INSERT_LEAF', 'INSERT_POST', 'SPLIT_L', 'SPLIT_R'))
        SELECT coalesce(c.relname, r.filenode::text), count(*)
        FROM r LEFT JOIN pg_class AS c ON c.relfilenode = r.filenode
        GROUP BY 1 ORDER BY 2 DESC"""
    try:
        rows = psql(db, sql)
    except RuntimeError as e:
        log(f"pg_walinspect: {e}")
        return None
    return {name: int(n) for name, n in (line.split("|") for line in rows.splitlines())}


def window(db, design, before, after, jobs, secs, per_index=False):
    """Per-job figures of a measured window."""
    wal = int(float(one(db, f"SELECT pg_wal_lsn_diff('{after['lsn']}', '{before['lsn']}')")))
    d_ins = d_upd = d_hot = d_del = 0
    per_table = {}
    for name in set(after["counters"]) | set(before["counters"]):
        a = after["counters"].get(name, [0, 0, 0, 0])
        b = before["counters"].get(name, [0, 0, 0, 0])
        delta = [x - y for x, y in zip(a, b)]
        if any(delta):
            per_table[name] = delta
        d_ins += delta[0]
        d_upd += delta[1]
        d_hot += delta[2]
        d_del += delta[3]
    out = {
        "jobs": jobs, "secs": secs, "jobs_per_sec": jobs / secs if secs else None,
        "wal_bytes_per_job": wal / jobs,
        "wal_records_per_job": (after["wal_records"] - before["wal_records"]) / jobs,
        "heap_tuples_per_job": (d_ins + d_upd + d_del) / jobs,
        "heap_inserts_per_job": d_ins / jobs, "heap_updates_per_job": d_upd / jobs,
        "hot_updates_per_job": d_hot / jobs, "heap_deletes_per_job": d_del / jobs,
        "per_table": {k: [x / jobs for x in v] for k, v in sorted(per_table.items())},
        "checkpoints": after["checkpoints"] - before["checkpoints"],
        "buffers_written_by_backends_per_job":
            (after["buffers_backend"] - before["buffers_backend"]) / jobs,
    }
    breakdown = wal_breakdown(db, before["lsn"], after["lsn"])
    if breakdown:
        out["wal_fpi_bytes_per_job"] = sum(v[2] for v in breakdown.values()) / jobs
        out["index_entries_per_job"] = sum(
            v[0] for k, v in breakdown.items() if k.startswith("Btree/") and k.split("/")[1] in BTREE_ENTRY
        ) / jobs
        by_rmgr = {}
        for k, (count, rec, fpi) in breakdown.items():
            r = by_rmgr.setdefault(k.split("/")[0], [0, 0, 0])
            r[0] += count
            r[1] += rec
            r[2] += fpi
        out["wal_by_rmgr_per_job"] = {k: {"records": v[0] / jobs, "record_bytes": v[1] / jobs,
                                          "fpi_bytes": v[2] / jobs}
                                      for k, v in sorted(by_rmgr.items(), key=lambda kv: -kv[1][1] - kv[1][2])}
        out["wal_by_record_per_job"] = {k: {"records": v[0] / jobs, "record_bytes": v[1] / jobs,
                                            "fpi_bytes": v[2] / jobs}
                                        for k, v in sorted(breakdown.items(), key=lambda kv: -kv[1][1] - kv[1][2])
                                        if (v[1] + v[2]) / jobs >= 1}
    if per_index:
        idx = index_entries_by_relation(db, before["lsn"], after["lsn"])
        if idx:
            out["index_entries_by_index_per_job"] = {k: v / jobs for k, v in idx.items()}
    st = statements(db)
    if st:
        out["buffers_dirtied_per_job"] = st["dirtied"] / jobs
        out["statement_wal_bytes_per_job"] = st["wal_bytes"] / jobs
        out["statement_blocks_written_per_job"] = st["written"] / jobs
    return out


# ----------------------------------------------------------------------------------------
# runs


def pgbench(db, script, clients, transactions, variables, log_prefix=None):
    cmd = [PGBENCH, "-n", "-M", "prepared", "-f", script, "-c", str(clients),
           "-j", str(min(clients, 2)), "-t", str(transactions)]
    for k, v in variables.items():
        cmd += ["-D", f"{k}={v}"]
    if log_prefix:
        cmd += ["-l", "--log-prefix", log_prefix]
    cmd.append(dsn(db))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError(f"pgbench {os.path.basename(script)} failed: {p.stderr[-2000:]}{p.stdout[-1000:]}")
    return secs


RUN_ID = [0]


def ingest(db, design, jobs, clients, ingest_batch):
    RUN_ID[0] += 1
    per_client = jobs // (ingest_batch * clients)
    return pgbench(db, os.path.join(HERE, design.ingest), clients, per_client,
                   {"k": 0, "ib": ingest_batch, "run": RUN_ID[0]})


def work_vars(design, batch, last, split):
    v = {"k": 0, "batch": batch, "last": last, "split": 1 if split else 0}
    for name in ARRAYS + list(design.extra_vars):
        v[name] = "{}"
    return v


def truncate(db, design):
    if design.key in ("A", "D"):
        psql(db, "TRUNCATE notification_jobs, notification_deliveries, delivery_feedback CASCADE")
    else:
        psql(db, "TRUNCATE " + ", ".join(design.tables))


def settle(db, design):
    psql(db, "VACUUM ANALYZE " + ", ".join(design.tables))
    psql(db, "CHECKPOINT")


def counts(db, design):
    """(sent, open, attempt rows)."""
    if design.key in ("A", "D"):
        sql = ("SELECT count(*) FILTER (WHERE status = 'sent'), count(*) FILTER "
               "(WHERE status NOT IN ('sent', 'dead')), (SELECT count(*) FROM notification_deliveries) "
               "FROM notification_jobs")
    else:
        sql = ("SELECT (SELECT count(*) FROM job_outcomes WHERE status = 'sent'), "
               "(SELECT count(*) FROM job_queue), (SELECT count(*) FROM job_attempts)")
    return [int(x) for x in one(db, sql).split("|")]


def check_worked(db, design, jobs, before=(0, 0, 0)):
    """Every queued job sent once, with one attempt row, none left open."""
    sent, open_, attempts = [a - b for a, b in zip(counts(db, design), before)]
    if open_ + before[1] != 0 or sent != jobs or attempts != jobs:
        raise RuntimeError(f"{design.key}: {jobs} jobs queued, but {sent} sent, {open_ + before[1]} open, "
                           f"{attempts} attempt rows")


def work_run(db, design, script, jobs, clients, batch, ingest_batch, per_index=False):
    """One measured run: ingest `jobs`, settle, drain them, then the VACUUM they owe."""
    truncate(db, design)
    psql(db, "CHECKPOINT")
    b = snapshot(db, design.tables, reset_statements=True)
    secs = ingest(db, design, jobs, clients, ingest_batch)
    a = snapshot(db, design.tables)
    ing = window(db, design, b, a, jobs, secs)
    settle(db, design)

    per_client = math.ceil(jobs / (batch * clients)) + 2
    b = snapshot(db, design.tables, reset_statements=True)
    secs = pgbench(db, script, clients, per_client, work_vars(design, batch, per_client, False))
    a = snapshot(db, design.tables)
    wrk = window(db, design, b, a, jobs, secs, per_index=per_index)
    check_worked(db, design, jobs)

    b = snapshot(db, design.tables)
    t0 = time.time()
    psql(db, "VACUUM " + ", ".join(design.tables))
    secs = time.time() - t0
    a = snapshot(db, design.tables)
    vac = window(db, design, b, a, jobs, secs)
    return {"ingest": ing, "work": wrk, "vacuum": {"secs": secs, "wal_bytes_per_job": vac["wal_bytes_per_job"],
                                                   "wal_fpi_bytes_per_job": vac.get("wal_fpi_bytes_per_job")}}


def claim_latency_run(db, design, script, due, batch, ingest_batch, base_finished, tmpdir):
    """`due` jobs queued beside the history, then drained by one client that claims `batch`
    and completes them in separate transactions: every claim's latency (commit included),
    from pgbench's per-transaction log, and the run's per-job writes."""
    if not base_finished:
        truncate(db, design)
    before = counts(db, design)
    psql(db, "CHECKPOINT")
    b = snapshot(db, design.tables)
    ingest_secs = ingest(db, design, due, 1, ingest_batch)
    a = snapshot(db, design.tables)
    ing = window(db, design, b, a, due, ingest_secs)
    settle(db, design)
    transactions = 2 * math.ceil(due / batch) + 2
    prefix = os.path.join(tmpdir, f"lat_{design.key}")
    for f in glob.glob(prefix + "*"):
        os.remove(f)
    b = snapshot(db, design.tables, reset_statements=True)
    secs = pgbench(db, script, 1, transactions, work_vars(design, batch, transactions, True), prefix)
    a = snapshot(db, design.tables)
    w = window(db, design, b, a, due, secs)
    check_worked(db, design, due, before)
    claims, completes = [], []
    for path in glob.glob(prefix + "*"):
        for line in open(path):
            f = line.split()
            # client_id transaction_no time script_no time_epoch time_us
            n, us = int(f[1]), int(f[2])
            (claims if n % 2 == 0 else completes).append(us / 1000.0)  # 0-based: even = odd k
    # the claims that found jobs (the last one or two find none)
    claims = claims[: math.ceil(due / batch)]
    completes = completes[: math.ceil(due / batch)]
    return {"claim_ms": pct(claims), "complete_ms": pct(completes), "n": len(claims),
            "wal_bytes_per_job": w["wal_bytes_per_job"], "wal_fpi_bytes_per_job": w.get("wal_fpi_bytes_per_job"),
            "index_entries_per_job": w.get("index_entries_per_job"),
            "buffers_dirtied_per_job": w.get("buffers_dirtied_per_job"),
            "jobs_per_sec": w["jobs_per_sec"], "ingest_jobs_per_sec": due / ingest_secs,
            "ingest_wal_bytes_per_job": ing["wal_bytes_per_job"],
            "ingest_wal_fpi_bytes_per_job": ing.get("wal_fpi_bytes_per_job")}


def pct(xs):
    if not xs:
        return None
    s = sorted(xs)
    q = lambda p: s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))]
    return {"p50": q(0.5), "p99": q(0.99), "mean": sum(s) / len(s), "max": s[-1]}


def fill_history(db, design, total, start, span, tag, chunk=1_000_000):
    """`total` finished jobs created over [start, start + span), in chunks (one transaction
    each)."""
    done = 0
    while done < total:
        hi = min(total, done + chunk)
        psql(db, file=os.path.join(HERE, design.fill),
             variables={"tag": tag, "lo": done + 1, "hi": hi, "total": total, "start": start, "span": span})
        done = hi
        if total > chunk:
            log(f"  {design.key}: {done:,} / {total:,} history rows")


def db_size(db):
    return int(one(db, "SELECT pg_database_size(current_database())"))


def prune_loop(db, stmt, batch):
    """The sweeper's retention loop: one statement (one transaction, one commit) per batch of
    `batch`, until a statement deletes nothing. `stmt` takes ($1 days, $2 limit, $3 now)."""
    if os.path.exists(stmt):
        stmt = "\n".join(l for l in open(stmt).read().splitlines() if not l.lstrip().startswith("--"))
    psql(db, "CREATE OR REPLACE PROCEDURE bench_prune(days int, lim bigint) LANGUAGE plpgsql AS $p$\n"
             "DECLARE n bigint; total bigint := 0; BEGIN LOOP\n"
             f"EXECUTE $s${stmt}$s$ USING days, lim, NULL::timestamptz;\n"
             "GET DIAGNOSTICS n = ROW_COUNT; total := total + n; COMMIT; EXIT WHEN n = 0; END LOOP;\n"
             "RAISE NOTICE 'pruned %', total; END $p$")
    psql(db, f"CALL bench_prune(30, {batch})")


def retention_run(db, design, root, day_jobs, batch):
    """One UTC day of `day_jobs` finished jobs 31 days ago (past a 30-day retention), beside
    a day as large 28 days ago (kept): the time and WAL to remove the old day."""
    old_day = one(db, "SELECT (now() AT TIME ZONE 'UTC')::date - 31")
    kept_day = one(db, "SELECT (now() AT TIME ZONE 'UTC')::date - 28")
    fill_history(db, design, day_jobs, f"{old_day} 00:00:00+00", "23 hours 59 minutes", "old")
    fill_history(db, design, day_jobs, f"{kept_day} 00:00:00+00", "23 hours 59 minutes", "kept")
    settle(db, design)
    size_before = db_size(db)
    b = snapshot(db, design.tables)
    t0 = time.time()
    if design.key in ("C", "C2"):
        out = psql(db, file=os.path.join(HERE, "c_retention.sql"), variables={"day": old_day})
        if "still open" in out:
            raise RuntimeError(out)
        how = "DETACH PARTITION CONCURRENTLY + DROP TABLE (3 partitions)"
        if design.key == "C2":
            prune_loop(db, os.path.join(HERE, "c2_retention_keys.sql"), batch)
            how += f", then its keys: c2_retention_keys.sql, batches of {batch}"
    else:
        if design.key == "B":
            stmt = open(os.path.join(HERE, "b_retention.sql")).read()
            stmt = "\n".join(l for l in stmt.splitlines() if not l.lstrip().startswith("--"))
            how = f"b_retention.sql, batches of {batch}"
        else:
            stmt = read_sql(root, "prune.sql")
            how = f"shared/postgres/sql/prune.sql, batches of {batch} (the sweeper's SWEEP_BATCH_SIZE)"
        prune_loop(db, stmt, batch)
    secs = time.time() - t0
    a = snapshot(db, design.tables)
    wal = int(float(one(db, f"SELECT pg_wal_lsn_diff('{a['lsn']}', '{b['lsn']}')")))
    fpi = None
    bd = wal_breakdown(db, b["lsn"], a["lsn"])
    if bd:
        fpi = sum(v[2] for v in bd.values())
    left = one(db, "SELECT count(*) FROM notification_jobs" if design.key in ("A", "D")
               else "SELECT count(*) FROM job_requests")
    if int(left) != day_jobs:
        raise RuntimeError(f"{design.key} retention: {left} jobs left, expected {day_jobs}")
    # the vacuum the deletes leave behind (none after a partition drop)
    b = snapshot(db, design.tables)
    t0 = time.time()
    psql(db, "VACUUM " + ", ".join(design.tables))
    vsecs = time.time() - t0
    a = snapshot(db, design.tables)
    vwal = int(float(one(db, f"SELECT pg_wal_lsn_diff('{a['lsn']}', '{b['lsn']}')")))
    return {"how": how, "jobs": day_jobs, "secs": secs, "wal_bytes": wal, "wal_fpi_bytes": fpi,
            "vacuum_secs": vsecs, "vacuum_wal_bytes": vwal,
            "db_bytes_before": size_before, "db_bytes_after_vacuum": db_size(db)}


# ----------------------------------------------------------------------------------------
# output


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in
                              enumerate(zip(r, widths))) + " |" for r in rows]
    return "\n".join([line, sep] + body)


def report(results, args):
    out = []
    work = results.get("work")
    if work:
        out.append(f"\n## Per job: ingest {args.jobs:,} jobs ({args.ingest_batch} per transaction), "
                   f"then drain them (claim {args.batch}, complete as sent), median of {args.reps} runs\n")
        rows = []
        for key in args.designs:
            for c in args.clients:
                runs = work.get(key, {}).get(str(c), [])
                if not runs:
                    continue
                g = lambda phase, field: med([r[phase].get(field) for r in runs])
                rows.append([
                    DESIGNS[key].label, c,
                    fmt(g("work", "jobs_per_sec")),
                    fmt(g("work", "wal_bytes_per_job")), fmt(g("work", "wal_fpi_bytes_per_job")),
                    fmt(g("work", "heap_tuples_per_job"), 2), fmt(g("work", "hot_updates_per_job"), 2),
                    fmt(g("work", "index_entries_per_job"), 2), fmt(g("work", "buffers_dirtied_per_job"), 2),
                    fmt(med([r["vacuum"]["wal_bytes_per_job"] for r in runs])),
                    fmt(g("ingest", "jobs_per_sec")), fmt(g("ingest", "wal_bytes_per_job")),
                    fmt(g("ingest", "heap_tuples_per_job"), 2), fmt(g("ingest", "index_entries_per_job"), 2),
                ])
        out.append(table(["design", "clients", "worked jobs/s", "WAL B/job", "of which FPI",
                          "heap tuples/job", "of which HOT", "index entries/job", "buffers dirtied/job",
                          "VACUUM after, WAL B/job", "ingest jobs/s", "ingest WAL B/job",
                          "ingest heap tuples/job", "ingest index entries/job"], rows))
        for key in args.designs:
            runs = work.get(key, {}).get(str(args.clients[0]), [])
            prof = next((r["work"] for r in runs if r["work"].get("wal_by_rmgr_per_job")), None)
            if not prof:
                continue
            out.append(f"\n{DESIGNS[key].label}, {args.clients[0]} client(s): WAL per job by record type "
                       f"(run 1; record bytes + FPI bytes)")
            items = list(prof["wal_by_record_per_job"].items())[:10]
            out.append("  " + "; ".join(f"{k} {v['records']:.2f}× {v['record_bytes'] + v['fpi_bytes']:.0f} B"
                                        + (f" (FPI {v['fpi_bytes']:.0f})" if v['fpi_bytes'] >= 1 else "")
                                        for k, v in items))
            if prof.get("index_entries_by_index_per_job"):
                out.append("  index entries per job: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in prof["index_entries_by_index_per_job"].items() if v >= 0.01))
            if prof.get("per_table"):
                out.append("  heap per job (ins, upd, hot, del): " + ", ".join(
                    f"{k} {v[0]:.2f}/{v[1]:.2f}/{v[2]:.2f}/{v[3]:.2f}" for k, v in prof["per_table"].items()))
    lat = results.get("latency")
    if lat:
        out.append(f"\n## Claim latency (ms, commit included), batch {args.batch}, 1 client, "
                   f"{args.due:,} due jobs, median of {args.latency_reps} runs after {args.latency_warmup} not counted; "
                   f"and the per-job writes of those runs\n")
        rows = []
        for key in args.designs:
            d = lat.get(key)
            if not d:
                continue
            z, h = d.get("0", []), d.get(str(args.history), [])
            zp50, zp99 = med([r["claim_ms"]["p50"] for r in z]), med([r["claim_ms"]["p99"] for r in z])
            hp50, hp99 = med([r["claim_ms"]["p50"] for r in h]), med([r["claim_ms"]["p99"] for r in h])
            ratio = lambda x, y: f"{x / y:.2f}" if x and y else "-"
            rows.append([DESIGNS[key].label, fmt(zp50, 2), fmt(zp99, 2), fmt(hp50, 2), fmt(hp99, 2),
                         ratio(hp50, zp50), ratio(hp99, zp99),
                         fmt(med([r["wal_bytes_per_job"] for r in z])), fmt(med([r["wal_bytes_per_job"] for r in h])),
                         fmt(med([r["wal_fpi_bytes_per_job"] for r in h])),
                         fmt(med([r["buffers_dirtied_per_job"] for r in z]), 2),
                         fmt(med([r["buffers_dirtied_per_job"] for r in h]), 2),
                         fmt(med([r["ingest_jobs_per_sec"] for r in z])),
                         fmt(med([r["ingest_jobs_per_sec"] for r in h])),
                         fmt(med([r.get("ingest_wal_bytes_per_job") for r in z])),
                         fmt(med([r.get("ingest_wal_bytes_per_job") for r in h])),
                         fmt((d.get("db_bytes") or 0) / 2**30, 2)])
        out.append(table(["design", "p50, 0 hist", "p99, 0 hist", f"p50, {args.history:,} hist",
                          f"p99, {args.history:,} hist", "p50 ratio", "p99 ratio",
                          "WAL B/job, 0 hist", "WAL B/job, hist", "of which FPI, hist",
                          "dirtied/job, 0 hist", "dirtied/job, hist", "ingest jobs/s, 0 hist",
                          "ingest jobs/s, hist", "ingest WAL B/job, 0 hist", "ingest WAL B/job, hist",
                          "DB GiB with hist"], rows))
    ret = results.get("retention")
    if ret:
        out.append(f"\n## Retention: one day of {args.retention_jobs:,} finished jobs (beside another day as large)\n")
        rows = []
        for key, r in ret.items():
            rows.append([DESIGNS[key].label, r["how"], fmt(r["secs"], 2), fmt(r["wal_bytes"] / 2**20, 1),
                         fmt((r["wal_fpi_bytes"] or 0) / 2**20, 1), fmt(r["vacuum_secs"], 2),
                         fmt(r["vacuum_wal_bytes"] / 2**20, 1)])
        out.append(table(["design", "how", "secs", "WAL MiB", "of which FPI MiB", "VACUUM after, secs",
                          "VACUUM after, WAL MiB"], rows))
    return "\n".join(out)


# ----------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.abspath(os.path.join(HERE, "..", "..")))
    p.add_argument("--designs", default="A,B,C,C2,D,E", help="which designs (default A,B,C,C2,D,E)")
    p.add_argument("--jobs", type=int, default=50_000, help="jobs per work run (default 50000)")
    p.add_argument("--clients", default="1,2", help="pgbench clients, comma-separated (default 1,2)")
    p.add_argument("--reps", type=int, default=3, help="work runs per cell (default 3)")
    p.add_argument("--batch", type=int, default=100, help="claim batch (default 100)")
    p.add_argument("--ingest-batch", type=int, default=100, help="requests per ingest transaction")
    p.add_argument("--no-per-index", dest="per_index", action="store_false",
                   help="skip attributing index entries to indexes (each design's first run)")
    p.add_argument("--history", type=int, default=1_000_000,
                   help="finished jobs beside the queue for the claim latency (default 1000000)")
    p.add_argument("--due", type=int, default=10_000, help="due jobs drained per latency run")
    p.add_argument("--latency-reps", type=int, default=3)
    p.add_argument("--latency-warmup", type=int, default=1, help="latency runs not counted, first")
    p.add_argument("--retention-jobs", type=int, default=200_000,
                   help="finished jobs in the day that retention removes (default 200000)")
    p.add_argument("--retention-batch", type=int, default=1000)
    p.add_argument("--skip", default="", help="phases to skip: work,latency,retention")
    p.add_argument("--quick", action="store_true", help="small sizes, one run each (a smoke test)")
    p.add_argument("--json", help="write every figure to this file")
    p.add_argument("--keep", action="store_true", help="keep the databases (debugging)")
    args = p.parse_args()
    if args.quick:
        args.jobs, args.reps, args.history, args.due = 10_000, 1, 100_000, 5_000
        args.latency_reps, args.retention_jobs, args.latency_warmup = 1, 20_000, 0
    args.designs = [d.strip().upper() for d in args.designs.split(",") if d.strip()]
    args.clients = [int(c) for c in args.clients.split(",")]
    skip = set(s.strip() for s in args.skip.split(",") if s.strip())
    for c in args.clients:
        unit = args.ingest_batch * c
        if args.jobs % unit:
            args.jobs += unit - args.jobs % unit
    if args.due % args.ingest_batch:
        args.due += args.ingest_batch - args.due % args.ingest_batch

    server = one("postgres", "SELECT version()")
    settings = dict(line.split("|") for line in psql("postgres", (
        "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', "
        "'full_page_writes', 'shared_buffers', 'max_wal_size', 'checkpoint_timeout', 'wal_keep_size', "
        "'shared_preload_libraries', 'wal_compression')")).splitlines())
    log(f"server: {server.split(',')[0]}; {settings}")
    results = {"args": {k: v for k, v in vars(args).items() if k != "root"}, "server": server,
               "settings": settings, "work": {}, "latency": {}, "retention": {}}
    tmpdir = tempfile.mkdtemp(prefix="storage-bench-")
    scripts = {}
    for key in args.designs:
        d = DESIGNS[key]
        if d.work:
            scripts[key] = os.path.join(HERE, d.work)
        else:
            path = os.path.join(tmpdir, "a_work.pgbench")
            open(path, "w").write(a_work_script(args.root))
            scripts[key] = path
    created = []
    started = time.time()
    try:
        if "work" not in skip:
            dbs = {}
            for key in args.designs:
                dbs[key] = create_db(DESIGNS[key], "work", args.root)
                created.append(dbs[key])
            # repetitions outermost, designs interleaved: noise from the shared machine falls on
            # every design alike
            for rep in range(args.reps):
                for c in args.clients:
                    for key in args.designs:
                        d = DESIGNS[key]
                        t0 = time.time()
                        r = work_run(dbs[key], d, scripts[key], args.jobs, c, args.batch, args.ingest_batch,
                                     per_index=args.per_index and rep == 0 and c == args.clients[0])
                        results["work"].setdefault(key, {}).setdefault(str(c), []).append(r)
                        w = r["work"]
                        log(f"work {key} clients={c} run {rep + 1}/{args.reps}: {w['jobs_per_sec']:,.0f} jobs/s, "
                            f"WAL {w['wal_bytes_per_job']:,.0f} B/job (FPI {fmt(w.get('wal_fpi_bytes_per_job'))}), "
                            f"heap {w['heap_tuples_per_job']:.2f}, idx {fmt(w.get('index_entries_per_job'), 2)}, "
                            f"dirtied {fmt(w.get('buffers_dirtied_per_job'), 2)}, ingest WAL "
                            f"{r['ingest']['wal_bytes_per_job']:,.0f} B/job [{time.time() - t0:.0f}s]")
            if not args.keep:
                for db in dbs.values():
                    drop_db(db)
        if "latency" not in skip:
            for key in args.designs:
                d = DESIGNS[key]
                db = create_db(d, "hist", args.root)
                created.append(db)
                res = results["latency"].setdefault(key, {})
                for hist in (0, args.history):
                    if hist:
                        t0 = time.time()
                        # over the last 29 days, in time order, ending an hour ago
                        start = one(db, "SELECT now() - interval '29 days'")
                        fill_history(db, d, hist, start, "28 days 23 hours", "hist")
                        settle(db, d)
                        res["fill_secs"] = time.time() - t0
                        res["db_bytes"] = db_size(db)
                        res["wal_dir_bytes"] = int(one(db, "SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()") or 0)
                        log(f"latency {key}: {hist:,} history rows in {res['fill_secs']:.0f}s, "
                            f"database {res['db_bytes'] / 2**30:.2f} GiB, pg_wal {res['wal_dir_bytes'] / 2**30:.2f} GiB")
                    # the OS writes back what the fill left dirty in its page cache, which slows
                    # every commit's fsync for a while: flush it, then one run not counted
                    os.sync()
                    for rep in range(-args.latency_warmup, args.latency_reps):
                        r = claim_latency_run(db, d, scripts[key], args.due, args.batch, args.ingest_batch, hist, tmpdir)
                        if rep < 0:
                            log(f"latency {key} history={hist:,} warm-up run: claim p50 {r['claim_ms']['p50']:.2f} ms, "
                                f"p99 {r['claim_ms']['p99']:.2f} ms (not counted)")
                            continue
                        res.setdefault(str(hist), []).append(r)
                        log(f"latency {key} history={hist:,} run {rep + 1}: claim p50 {r['claim_ms']['p50']:.2f} ms, "
                            f"p99 {r['claim_ms']['p99']:.2f} ms; WAL {r['wal_bytes_per_job']:,.0f} B/job")
                if not args.keep:
                    drop_db(db)
        if "retention" not in skip:
            for key in args.designs:
                if key in ("D", "E"):
                    continue  # A's and B's retention exactly
                d = DESIGNS[key]
                db = create_db(d, "ret", args.root)
                created.append(db)
                r = retention_run(db, d, args.root, args.retention_jobs, args.retention_batch)
                results["retention"][key] = r
                log(f"retention {key}: {r['secs']:.2f}s, WAL {r['wal_bytes'] / 2**20:.1f} MiB; vacuum after "
                    f"{r['vacuum_secs']:.2f}s, {r['vacuum_wal_bytes'] / 2**20:.1f} MiB")
                if not args.keep:
                    drop_db(db)
    finally:
        if not args.keep:
            for db in created:
                drop_db(db)
        shutil.rmtree(tmpdir, ignore_errors=True)
    results["elapsed_secs"] = time.time() - started
    text = report(results, args)
    print(text)
    print(f"\n(total {results['elapsed_secs'] / 60:.1f} min; {server.split(',')[0]}; "
          + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) + ")")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
