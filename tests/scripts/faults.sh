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
# under target/faults-mutants/src gets each patch in turn, and the binaries it breaks — the
# worker, or those its `Binaries:` line names (`Binaries: ingest`) — are built into the same
# target folder (only the workspace's own crates compile again; the dependencies are shared)
# and copied to target/faults-mutants/<patch>/, where the suite runs them. A patch that no
# longer applies fails the run: the mutant must follow the code it breaks. Built before the
# real binaries, which are then built from the checkout's own code (see the end).
build_mutants() {
  local target=${CARGO_TARGET_DIR:-$PWD/target}
  local copy=$target/faults-mutants/src patch name bin bins
  rm -rf "$copy"
  mkdir -p "$copy"
  git ls-files -z --cached --others --exclude-standard |
    tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$copy"
  for patch in tests/mutants/*.patch; do
    name=$(basename "$patch" .patch)
    read -r -a bins <<<"$(sed -n 's/^Binaries: *//p' "$patch" | head -n 1)"
    [ "${#bins[@]}" -gt 0 ] || bins=(worker)
    echo "faults: building the mutant $name (${bins[*]})"
    patch -p1 --quiet --forward -d "$copy" <"$patch" || { echo "faults: $patch no longer applies"; return 1; }
    CARGO_TARGET_DIR=$target cargo build -q --manifest-path "$copy/Cargo.toml" "${bins[@]/#/--bin=}"
    rm -rf "${target:?}/faults-mutants/$name"
    mkdir -p "$target/faults-mutants/$name"
    for bin in "${bins[@]}"; do
      cp "$target/debug/$bin" "$target/faults-mutants/$name/$bin"
    done
    patch -p1 --quiet --reverse -d "$copy" <"$patch"
  done
  # The copy's crates share the target folder's artifacts and fingerprints with the checkout's
  # (same names, same hashes, sources named relative to their package), and cargo judges
  # them fresh by mtime alone: the checkout's files, older than the last mutant's build, would
  # pass its crates as fresh, and the real binaries would link its bug. Each build above
  # compiled the crates of the patch before it again (reversed, so newer than their build);
  # the copy is built once more with every patch reversed, and the real build finds the
  # checkout's own code (and compiles again whatever changed in the checkout meanwhile).
  echo "faults: building the copy again with every patch reversed"
  CARGO_TARGET_DIR=$target cargo build -q --manifest-path "$copy/Cargo.toml" \
    --bin ingest --bin worker --bin sweeper
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
