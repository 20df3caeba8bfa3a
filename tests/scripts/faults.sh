#!/usr/bin/env bash
# `make faults`: the fault suite. Starts a throwaway PostgreSQL cluster of its own
# (scenario 2 restarts it, so never DATABASE_URL's server) and the AWS stand-in (moto, unless
# AWS_ENDPOINT_URL is set), builds the three function binaries, runs the suite and stops
# what it started, also when the suite fails.
#
#   tests/scripts/faults.sh            the full suite: docs/operations.md's table, and what CI runs
#   tests/scripts/faults.sh --quick    a shorter version, for a quick local check
#   tests/scripts/faults.sh --only 1,3 some scenarios (numbered as in the table), no mutants
#   tests/scripts/faults.sh --no-mutants
#
# The binaries' logs stay in target/faults-logs/ (FAULTS_LOG_DIR), the table in
# target/faults-table.md (FAULTS_TABLE). FAULTS_NO_BUILD=1 runs what is already built;
# FAULTS_BIN_DIR runs the function binaries of another build (say, a deliberately broken
# copy, to see a check go red).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/scripts/services.sh
. tests/scripts/services.sh
services_session notif-faults

# The code mutants (tests/mutants/*.patch, one deliberate bug each): a copy of the checkout
# under target/faults-mutants/src gets each patch in turn, and its worker is built into the
# same target folder (only the workspace's own crates compile again; the dependencies are
# shared) and copied to target/faults-mutants/<patch>/worker, where the suite runs it. A patch
# that no longer applies fails the run: the mutant must follow the code it breaks. Built
# before the real binaries, whose build then puts the real worker back in target/debug.
build_mutants() {
  local target=${CARGO_TARGET_DIR:-$PWD/target}
  local copy=$target/faults-mutants/src patch name
  rm -rf "$copy"
  mkdir -p "$copy"
  git ls-files -z --cached --others --exclude-standard |
    tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$copy"
  for patch in tests/mutants/*.patch; do
    name=$(basename "$patch" .patch)
    echo "faults: building the mutant $name"
    patch -p1 --quiet --forward -d "$copy" <"$patch" || { echo "faults: $patch no longer applies"; return 1; }
    CARGO_TARGET_DIR=$target cargo build -q --manifest-path "$copy/Cargo.toml" --bin worker
    mkdir -p "$target/faults-mutants/$name"
    cp "$target/debug/worker" "$target/faults-mutants/$name/worker"
    patch -p1 --quiet --reverse -d "$copy" <"$patch"
  done
  # The copy's crates share the target folder's artifacts with the checkout's (same names,
  # same hashes), and their recorded sources are the copy's files. Gone, they are stale to
  # cargo, so every later build compiles the checkout's own sources again, also after an edit.
  rm -rf "$copy"
}

mutants=yes
for arg in "$@"; do
  case $arg in --only | --no-mutants) mutants=no ;; esac
done

if [ -z "${FAULTS_NO_BUILD:-}" ]; then # FAULTS_NO_BUILD=1: run the binaries already built
  if [ "$mutants" = yes ]; then build_mutants; fi
  echo "faults: building the function binaries and the suite"
  # --bin, not -p: features resolved over the whole workspace, as `cargo test` and
  # `sam build` (`cargo lambda build --bin …`) resolve them, so the dependencies `make test`
  # compiled are reused (with -p, tokio, hyper and the AWS SDK were compiled again)
  cargo build -q --bin ingest --bin worker --bin sweeper --bin faults
fi

unset DATABASE_URL # our own cluster: scenario 2 restarts it
pg_up
stand_in_up
# shellcheck disable=SC1091
. "$NOTIF_STATE/pg.env"
export DATABASE_URL FAULTS_PG_DIR="$PG_DIR" FAULTS_PG_BINDIR="$PG_BINDIR_USED"
export FAULTS_TABLE=${FAULTS_TABLE:-$PWD/target/faults-table.md}
# the binaries cargo built: target/debug, or CARGO_TARGET_DIR's when that is set
export FAULTS_BIN_DIR=${FAULTS_BIN_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/debug}
"$FAULTS_BIN_DIR/faults" "$@"
