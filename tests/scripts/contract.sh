#!/usr/bin/env bash
# The API contract fuzzer: Schemathesis (from PyPI, pinned, in .venv-tools) generates requests
# from functions/ingest/openapi.yaml and sends them to the real ingest function, served by
# `cargo lambda watch` on its function URL (http://127.0.0.1:PORT/lambda-url/ingest/…) with
# ALLOW_ORG_HEADER=true, against a database of its own. Every check is on (`--checks all`:
# server errors, undeclared statuses, headers and content types, response schemas, refusals of
# invalid data, 405 and Allow, auth), over every phase: the spec's examples, coverage, fuzzing,
# and stateful sequences that follow the spec's links (POST /notifications → GET and cancel by
# the new id, POST /suppressions → DELETE). Bounded: CONTRACT_MAX_EXAMPLES per operation, a
# fixed seed. The report (JUnit XML) goes to target/schemathesis/. Any failure fails the script.
#
# `make test` runs it after the cargo tests; alone: tests/scripts/contract.sh (it starts
# PostgreSQL unless DATABASE_URL is set, and stops what it started). Settings:
#   CONTRACT_MAX_EXAMPLES  test cases per operation and phase (default 200)
#   CONTRACT_SEED          the generator's seed (default 16)
#   CONTRACT_ORG           the organization the requests act for (a fixed UUID)
# tests/scripts/schemathesis.toml and contract_hooks.py hold the rest, each setting explained.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=tests/scripts/services.sh
. tests/scripts/services.sh
# shellcheck source=tests/scripts/tools.sh
. tests/scripts/tools.sh

CONTRACT_MAX_EXAMPLES=${CONTRACT_MAX_EXAMPLES:-200}
CONTRACT_SEED=${CONTRACT_SEED:-16}
export CONTRACT_ORG=${CONTRACT_ORG:-5c0e7a1b-16c0-4d1e-8a5f-00000000c0de}
REPORT_DIR=$ROOT/target/schemathesis

on_session_end() { ingest_watch_down; }
services_session notif-contract

say() { printf 'contract: %s\n' "$*" >&2; }

tools_install schemathesis cargo-lambda
tools_path
command -v psql >/dev/null || { say "psql not found (Debian: apt-get install postgresql-client)"; exit 1; }
pg_up

# the real function as `make watch` serves it, on a database of its own
ingest_watch_up notif_contract
BASE=$INGEST_URL

mkdir -p "$REPORT_DIR"
JUNIT=$REPORT_DIR/junit.xml
OUTPUT=$REPORT_DIR/output.txt
export CONTRACT_RETRIES=$REPORT_DIR/emulator-retries.txt
rm -f "$JUNIT" "$OUTPUT" "$CONTRACT_RETRIES"
say "schemathesis $("$TOOLS_BIN/schemathesis" --version | awk '{print $NF}') on $BASE: --checks all, --max-examples $CONTRACT_MAX_EXAMPLES, --seed $CONTRACT_SEED"
started=$(date +%s)
status=0
# one worker: the function serves one request at a time under watch anyway (no __pycache__ for
# the hooks file in the checkout)
PYTHONDONTWRITEBYTECODE=1 "$TOOLS_BIN/schemathesis" --config-file tests/scripts/schemathesis.toml --no-color run \
  functions/ingest/openapi.yaml --url "$BASE" \
  --checks all --phases examples,coverage,fuzzing,stateful \
  --max-examples "$CONTRACT_MAX_EXAMPLES" --seed "$CONTRACT_SEED" --workers 1 \
  --generation-database none \
  --report junit --report-junit-path "$JUNIT" 2>&1 | tee "$OUTPUT" || status=$?
elapsed=$(($(date +%s) - started))

# the counts, from schemathesis's summary: "Tested: N" and "N generated, …"
operations=$(sed -n 's/^ *Tested: *\([0-9][0-9]*\).*/\1/p' "$OUTPUT" | head -n 1)
cases=$(sed -n 's/^ *\([0-9][0-9]*\) generated.*/\1/p' "$OUTPUT" | head -n 1)
retries=$( [ -f "$CONTRACT_RETRIES" ] && wc -l <"$CONTRACT_RETRIES" || echo 0)
say "${operations:-?} operations, ${cases:-?} generated examples in ${elapsed}s (report: ${JUNIT#"$ROOT"/}); cargo lambda watch's own 500s retried: $((retries))"
if [ "$status" -ne 0 ]; then
  say "FAILED (schemathesis exited $status); the end of cargo lambda watch's log:"
  tail -n 20 "$NOTIF_STATE/watch.log" >&2
fi
exit "$status"
