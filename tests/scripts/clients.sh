#!/usr/bin/env bash
# The generated clients, used as a caller would: a Python client (openapi-python-client) and a
# TypeScript one (openapi-typescript types for openapi-fetch) are generated from
# functions/ingest/openapi.yaml, and one small program each (tests/clients/) sends, reads,
# lists and cancels notifications through them against the real ingest function under
# `cargo lambda watch`, asserting the answers and the refusals through the one error type.
# The TypeScript program is compiled by tsc in strict mode first, so a spec change that breaks
# a caller's types fails here too.
#
# `make test` runs it after the contract fuzzer; alone: tests/scripts/clients.sh or
# `make clients` (it starts PostgreSQL unless DATABASE_URL is set, and stops what it started).
# Needs python3 (venv) and node with npm (18 or later); installs the rest, pinned:
# openapi-python-client in .venv-clients, the npm packages by tests/clients/typescript's lock.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=tests/scripts/services.sh
. tests/scripts/services.sh
# shellcheck source=tests/scripts/tools.sh
. tests/scripts/tools.sh

OPENAPI_PYTHON_CLIENT_VERSION=${OPENAPI_PYTHON_CLIENT_VERSION:-0.29.1}
CLIENTS_VENV=$ROOT/.venv-clients
SPEC=functions/ingest/openapi.yaml
GENERATED=$ROOT/target/clients

on_session_end() { ingest_watch_down; }
services_session notif-clients

say() { printf 'clients: %s\n' "$*" >&2; }

command -v npm >/dev/null || { say "npm not found (Debian: apt-get install nodejs npm; or nodejs.org, 18 or later)"; exit 1; }
command -v psql >/dev/null || { say "psql not found (Debian: apt-get install postgresql-client)"; exit 1; }
tools_install cargo-lambda
tools_path

# --- Python: openapi-python-client, in a virtualenv of its own (its pins are not the tools') --
if ! "$CLIENTS_VENV/bin/openapi-python-client" --version 2>/dev/null | grep -qF "$OPENAPI_PYTHON_CLIENT_VERSION"; then
  [ -x "$CLIENTS_VENV/bin/pip" ] || python3 -m venv "$CLIENTS_VENV"
  say "installing openapi-python-client $OPENAPI_PYTHON_CLIENT_VERSION into ${CLIENTS_VENV#"$ROOT"/}"
  "$CLIENTS_VENV/bin/pip" install -q --disable-pip-version-check "openapi-python-client==$OPENAPI_PYTHON_CLIENT_VERSION"
fi
rm -rf "$GENERATED/python"
mkdir -p "$GENERATED/python"
"$CLIENTS_VENV/bin/openapi-python-client" generate --path "$SPEC" --meta none \
  --config tests/clients/python/generator.yaml \
  --output-path "$GENERATED/python/notification_client" >"$GENERATED/python.log" 2>&1 \
  || { cat "$GENERATED/python.log" >&2; say "openapi-python-client could not generate a client"; exit 1; }
# a schema it cannot read is skipped with a warning, and the client silently lacks it
if grep -iE 'skipping (a|the)?|cannot parse|unsupported|could not' "$GENERATED/python.log" | grep -v 'Skipping Integration' >&2; then
  say "openapi-python-client skipped part of $SPEC (above)"
  exit 1
fi
say "python client: $(find "$GENERATED/python/notification_client/models" -name '*.py' ! -name '__init__.py' | wc -l) models"

# --- TypeScript: openapi-typescript's types for openapi-fetch, compiled by tsc --------------
TS=tests/clients/typescript
if [ ! -d "$TS/node_modules" ] || [ "$TS/package-lock.json" -nt "$TS/node_modules/.package-lock.json" ]; then
  say "npm ci in $TS"
  (cd "$TS" && npm ci --no-audit --no-fund --silent)
fi
rm -rf "$TS/generated" "$TS/dist"
(cd "$TS" && npm run -s generate >/dev/null && npm run -s build) \
  || { say "the TypeScript program does not compile against the generated types"; exit 1; }

# --- both programs against the real function ------------------------------------------------
pg_up
ingest_watch_up notif_clients
status=0
PYTHONPATH=$GENERATED/python PYTHONDONTWRITEBYTECODE=1 \
  "$CLIENTS_VENV/bin/python" tests/clients/python/program.py "$INGEST_URL" || status=$?
node "$TS/dist/program.js" "$INGEST_URL" || status=$?
if [ "$status" -ne 0 ]; then
  say "FAILED; the end of cargo lambda watch's log:"
  tail -n 20 "$NOTIF_STATE/watch.log" >&2
fi
exit "$status"
