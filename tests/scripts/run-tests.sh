#!/usr/bin/env bash
# `make test`: starts what the tests need (PostgreSQL unless DATABASE_URL is set, the AWS
# stand-in unless AWS_ENDPOINT_URL is set), runs every test, and stops what it started,
# also when tests fail.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/scripts/services.sh
. tests/scripts/services.sh
services_session notif-test
pg_up
stand_in_up
cargo test --workspace --no-fail-fast "$@"
