#!/usr/bin/env bash
# `make test`: starts what the tests need (PostgreSQL unless DATABASE_URL is set, the AWS
# stand-in unless AWS_ENDPOINT_URL is set), runs every test, then the API contract fuzzer
# (tests/scripts/contract.sh) and the generated clients' programs (tests/scripts/clients.sh),
# and stops what it started, also when tests fail.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/scripts/services.sh
. tests/scripts/services.sh
# shellcheck source=tests/scripts/tools.sh
. tests/scripts/tools.sh
services_session notif-test
# the watch and readme tests run the functions under the real `cargo lambda watch`; without
# it they fail (and say why), the other tests still run
tools_install cargo-lambda || log "tools: cargo-lambda could not be installed: the watch and readme tests will fail"
tools_install webhooks || log "tools: standardwebhooks could not be installed: the webhook tests under watch will fail"
pg_up
stand_in_up
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?

# The second pass: the store's integration tests again, with the code under test reaching
# PostgreSQL through a real PgBouncer in transaction pooling mode whose server pool is smaller
# than the number of clients (the tests' own set-up and assertions stay direct).
printf '\n=== the integration tests again, through PgBouncer (pool_mode = transaction) ===\n'
pgbouncer_up
# --workspace, as the first pass: the same feature set, so the test binary is not built again;
# the filters name the integration binary's modules that reach PostgreSQL through the store
cargo test --workspace --no-fail-fast --test it "$@" -- \
  claim_engine:: ingest_api:: worker_stand_in:: sweeper:: migrations:: batch:: rate_limits:: \
  worker_recording:: operations:: database:: migrations_custom_resource:: feedback:: \
  suppressions:: status_events:: fleet:: wake:: || status=$?

# The API contract: Schemathesis over functions/ingest/openapi.yaml against the real ingest
# function under cargo lambda watch (on this run's PostgreSQL, a database of its own)
printf '\n=== the API contract: schemathesis against cargo lambda watch (tests/scripts/contract.sh) ===\n'
tests/scripts/contract.sh || status=$?

# The generated clients: a Python and a TypeScript client generated from the spec, each used by
# a small program against the real ingest function under cargo lambda watch
printf '\n=== the generated clients: Python and TypeScript programs against cargo lambda watch (tests/scripts/clients.sh) ===\n'
tests/scripts/clients.sh || status=$?
exit "$status"
