#!/usr/bin/env bash
# Storage alternatives of the queue and history design, measured with pgbench on a durable PostgreSQL:
#   A   the current schema (migrations/*.sql) and the worker's SQL (shared/postgres/sql)
#   B   a narrow queue table + append-only history (requests, attempts, outcomes)
#   C   B with the history tables partitioned by day
#   C2  C with the idempotency keys in an unpartitioned table of their own
#   D   the current table, with the claim kept out of indexed columns (HOT) and fillfactor 50
#   E   B with the claim kept out of indexed columns (HOT)
# See bench/storage/README.md. Usage:
#
#   bench/storage/run.sh                  default sizes (about 15 minutes on 2 cores)
#   bench/storage/run.sh --quick          a smoke run (about 2 minutes)
#   bench/storage/run.sh --jobs 200000 --history 10000000 --retention-jobs 1000000
#   bench/storage/run.sh --help           every flag
#
# Without DATABASE_URL it starts a cluster of its own (fsync, synchronous_commit and
# full_page_writes on, as tests/scripts/bench.sh; pg_stat_statements preloaded; pg_walinspect
# available) in a temporary folder, and removes it at the end. With DATABASE_URL it creates
# and drops databases storage_<design>_<phase> on that server (superuser needed for the WAL and
# statement counters; without them those columns are empty).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

for arg in "$@"; do
  if [ "$arg" = --help ] || [ "$arg" = -h ]; then exec python3 "$HERE/storage.py" --help; fi
done

pg_bindir() {
  local d
  for d in ${PG_BINDIR:-} "$(pg_config --bindir 2>/dev/null || true)" /usr/lib/postgresql/*/bin; do
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/pgbench" ]; then echo "$d"; return 0; fi
  done
  return 1
}
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

BIN=$(pg_bindir) || { echo "storage bench: PostgreSQL binaries (initdb, pg_ctl, pgbench) not found; set PG_BINDIR" >&2; exit 1; }
export PG_BINDIR=$BIN

dir=""
cleanup() {
  if [ -n "$dir" ]; then
    as_owner "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    echo "storage bench: cluster stopped, $dir removed" >&2
  fi
}
trap cleanup EXIT INT TERM

if [ -z "${DATABASE_URL:-}" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/storage-bench.XXXXXX")
  chmod 755 "$dir"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$dir"
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_owner "$BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  # tests/scripts/bench.sh's durable settings (everything else at its default: shared_buffers
  # 128MB, max_wal_size 1GB, …), statement tracking on, and WAL kept long enough for
  # pg_walinspect to read a whole run even when a checkpoint falls inside it.
  as_owner "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 120 start -o "\
 -p $port -k $dir -c listen_addresses='' -c max_connections=100\
 -c fsync=on -c synchronous_commit=on -c full_page_writes=on\
 -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top\
 -c wal_keep_size=${STORAGE_WAL_KEEP:-3GB} -c log_checkpoints=on ${STORAGE_PG_OPTS:-}" >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  export PGHOST=$dir PGPORT=$port PGUSER=postgres
  export STORAGE_SERVER_LOG=$dir/server.log
  echo "storage bench: cluster in $dir (port $port, socket only)" >&2
fi

python3 "$HERE/storage.py" --root "$ROOT" "$@"
