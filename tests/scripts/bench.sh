#!/usr/bin/env bash
# make bench: the benchmark on a PostgreSQL of its own, with durable settings
# (fsync and synchronous_commit on, unlike the test cluster), started here and stopped after.
#
#   tests/scripts/bench.sh            full run, optimized build (profile bench-fast)
#   tests/scripts/bench.sh --quick    small run, debug build (the CI smoke test)
#   tests/scripts/bench.sh --only claim   the claim latency alone (part 2, 10M history)
#   tests/scripts/bench.sh --only peer    our grid and graphile-worker's (parts 1 and 5)
#   tests/scripts/bench.sh --only life    a job's whole life on both sides (part 11)
#   tests/scripts/bench.sh --only soak    both sides under a steady load, 30 minutes (part 12)
#   tests/scripts/bench.sh --only cold    cold starts, as deployed too (part 8)
#   tests/scripts/bench.sh --only lanes   the claim and the fair claim on 1M due `low` jobs
#                                         and a few `high` (plans, times; bench/src/lanes.rs)
#   tests/scripts/bench.sh --only ours    one drain at the template's defaults (what
#                                         bench/compare.sh REV runs against REV in turns)
#   tests/scripts/bench.sh --only wake    the wake, a burst and the fan-out with worker
#                                         invocations started in-process (part 13), after
#                                         the cold starts its derived cold figure uses
#   tests/scripts/bench.sh --only prepared  statements prepared once per connection against
#                                         unnamed, in turns: ingest, then the drain at the
#                                         defaults (decision 0014)
#   tests/scripts/bench.sh --only keys    the status events' key, random against
#                                         time-ordered, beside 30 days of events (0015)
#   tests/scripts/bench.sh --only publish the status events published by row claims against
#                                         the stream's cursor, in turns (0016)
#
# BENCH_PAYLOAD_COPY=1 with --only life: ingest copies each payload into the queue row, as on
# a database upgraded from 1.0 (the design before migration 0012; decision 0017).
# BENCH_WAL_BY_RELATION=1 with --only life: each phase's WAL by relation on stderr
# (pg_walinspect; bench/src/walmap.rs).
#
# Any other arguments go to the bench binary (--peer, --no-peer, --history N: finished jobs
# beside the queue for the claim latency, 10,000,000 in a full run). BENCH_PROFILE overrides
# the cargo profile (dev, release, bench-fast). With DATABASE_URL set, that server is used
# instead (the benchmark creates and drops its own databases on it). BENCH_STATE overrides
# the state folder of the server started here (.local/bench; its log stays there after the run).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# a state folder of its own: never the cluster of `make db/up` or of the tests (NOTIF_STATE,
# which they use, is not read here)
export NOTIF_STATE="${BENCH_STATE:-$ROOT/.local/bench}"
# durable defaults: the test-only fsync=off / full_page_writes=off are not applied
# checkpoints and autovacuum runs are logged: the server's log is kept in $NOTIF_STATE/server.log
# after the run, to set beside the bench's progress lines (their times are UTC) when a figure
# is out of line
export PG_EXTRA_OPTS="-c fsync=on -c synchronous_commit=on -c full_page_writes=on -c log_checkpoints=on -c log_autovacuum_min_duration=0 -c log_timezone=UTC"
# shellcheck source=services.sh
. tests/scripts/services.sh
# pg_stat_statements, when the server has it, for the write budget's buffers dirtied: loaded
# with tracking off, switched on by the bench for its measured write-budget runs only
# (bench/src/probe.rs); without it those figures read "not measured"
if bindir=$(pg_bindir); then
  for lib in "$bindir"/../lib/pg_stat_statements.* "$bindir"/../lib/postgresql/pg_stat_statements.*; do
    if [ -e "$lib" ]; then
      PG_EXTRA_OPTS="$PG_EXTRA_OPTS -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=none"
      break
    fi
  done
fi

quick=false
for arg in "$@"; do [ "$arg" = --quick ] && quick=true; done
if [ -n "${BENCH_PROFILE:-}" ]; then
  profile=$BENCH_PROFILE
elif $quick; then
  profile=dev
else
  profile=bench-fast
fi

# build first, so the database is not up (and the machine not busy) during a long compile
echo "bench: building (profile $profile)" >&2
# and the functions' binaries beside it, for the cold-start runs. --bin, not -p: features are
# resolved over the whole workspace, as `make build` and `sam build` (`cargo lambda build
# --bin …`) resolve them, and as `make test` does, so its dependencies are reused; with the
# OpenSSL the Lambda build compiles in (vendored), not this machine's, so that a cold start
# parses the trusted roots as deployed
cargo build -q --bin bench --bin ingest --bin worker --bin sweeper --profile "$profile" \
  --features bench/vendored-openssl
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
bin="${CARGO_TARGET_DIR:-$ROOT/target}/$dir/bench"

# matplotlib for the soak's plot (bench/plot_soak.py), pinned, in a virtualenv of its own;
# without it the soak's series are still written, and the report says why there is no plot
BENCH_VENV=$ROOT/.venv-bench
if [ ! -x "$BENCH_VENV/bin/python" ] || ! "$BENCH_VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
  echo "bench: installing matplotlib into $BENCH_VENV" >&2
  { python3 -m venv "$BENCH_VENV" &&
    "$BENCH_VENV/bin/pip" install -q --disable-pip-version-check "matplotlib==3.9.4"; } >&2 ||
    echo "bench: matplotlib could not be installed: the soak's plot will be missing" >&2
fi
export BENCH_PYTHON=$BENCH_VENV/bin/python

started_pg=false
tls_dir=
if [ -z "${DATABASE_URL:-}" ]; then
  started_pg=true
  # TLS for the cold start as deployed (bench/src/cold_start.rs): a throwaway certificate for
  # localhost, the key owned by the server's user as PostgreSQL requires; the bench trusts it
  # through BENCH_DB_CA_FILE, as a function trusts the RDS bundle through DATABASE_CA_FILE
  tls_dir=$(mktemp -d "${TMPDIR:-/tmp}/notif-tls.XXXXXX")
  if openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
       -addext subjectAltName=DNS:localhost -keyout "$tls_dir/server.key" \
       -out "$tls_dir/server.crt" >/dev/null 2>&1; then
    chmod 600 "$tls_dir/server.key"
    chmod 755 "$tls_dir"
    if [ "$(id -u)" = 0 ]; then chown -R postgres "$tls_dir"; fi
    PG_EXTRA_OPTS="$PG_EXTRA_OPTS -c ssl=on -c ssl_cert_file=$tls_dir/server.crt -c ssl_key_file=$tls_dir/server.key"
    export BENCH_DB_CA_FILE=$tls_dir/server.crt
  else
    echo "bench: openssl could not make a certificate: the cold start as deployed will be skipped" >&2
  fi
fi
# pg_down keeps the server's log in $NOTIF_STATE/server.log
cleanup() {
  if $started_pg; then pg_down; fi
  if [ -n "$tls_dir" ]; then rm -rf "$tls_dir"; fi
}
trap cleanup EXIT
pg_up
echo "bench: uptime: $(uptime)" >&2
"$bin" "$@"
