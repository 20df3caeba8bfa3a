#!/usr/bin/env bash
# Throughput before and after a change: ours at the template's defaults (`bench --only ours`:
# one worker invocation, batch 100, WORKER_CONCURRENCY 32, no-op deliveries, jobs/s by the
# database's clock), the product at REV against the working tree, in turns ABBA (REV first in
# odd rounds, the tree first in even ones), on one durable PostgreSQL started here with the
# settings tests/scripts/bench.sh uses. Prints each round's jobs/s, each side's median, the
# ratio tree ÷ REV, and each pair of rounds' ratio with the order's effect cancelled.
#
#   bench/compare.sh REV [BENCH_ARGS...]
#   bench/compare.sh 6444c57               6 rounds of 100,000 jobs a side
#   COMPARE_ROUNDS=16 bench/compare.sh 6444c57   8 pairs of rounds, for a tighter interval
#   COMPARE_ROUNDS=2 bench/compare.sh 6444c57 --quick     a smoke run (20,000 jobs a side)
#
# The harness is the same on both sides: REV's checkout, a git worktree at $COMPARE_WORKTREE
# (default ../bench-before beside this checkout, made or moved to REV here), gets this
# tree's bench/src and bench/Cargo.toml before it is built, so only the product (shared/,
# functions/, migrations/) differs; this tree's bench must therefore build against REV's
# crates. Both sides are built with the profile BENCH_PROFILE (default bench-fast, as
# bench.sh); REV into a target directory of its own (target/compare/rev-target, built in full
# the first time): the two checkouts' workspace crates get the same artifact names (cargo
# names a path crate by its path inside the workspace and records its sources relative to
# it), so notify-postgres's build script, compiled once with the checkout's absolute path
# baked in (CARGO_MANIFEST_DIR) to find migrations/, would be reused by the other checkout
# and one binary would embed the other's migrations. Each binary is
# checked to embed its own checkout's migrations, then copied to target/compare/. Each run
# creates and migrates its own database. The bench's progress lines go to
# target/compare/compare.log. With DATABASE_URL set, that server is used instead.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
rev=$1
shift
rounds=${COMPARE_ROUNDS:-6}
worktree=${COMPARE_WORKTREE:-$(dirname "$ROOT")/bench-before}
profile=${BENCH_PROFILE:-bench-fast}
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
target=${CARGO_TARGET_DIR:-$ROOT/target}
out=$target/compare
mkdir -p "$out"
log=$out/compare.log
: >"$log"

# REV's checkout with this tree's harness
if [ -e "$worktree/.git" ]; then
  git -C "$worktree" checkout -q --force --detach "$rev"
else
  git worktree add -q --detach "$worktree" "$rev"
fi
rm -rf "$worktree/bench/src"
cp -R bench/src "$worktree/bench/src"
cp bench/Cargo.toml "$worktree/bench/Cargo.toml"
short=$(git rev-parse --short "$rev")

# build CHECKOUT TARGET_DIR NAME: the bench of CHECKOUT, as $out/bench-NAME, once it is
# seen to embed every migration of CHECKOUT (by file name)
build() {
  echo "compare: building $1's bench (profile $profile)" >&2
  (cd "$1" && CARGO_TARGET_DIR=$2 cargo build -q --bin bench --profile "$profile")
  for m in "$1"/migrations/*.sql; do
    grep -aqF "$(basename "$m")" "$2/$dir/bench" ||
      { echo "compare: $2/$dir/bench lacks $m" >&2; exit 1; }
  done
  cp "$2/$dir/bench" "$out/bench-$3"
}
build "$worktree" "$out/rev-target" "$short"
build "$ROOT" "$target" tree

# a durable server with the settings of tests/scripts/bench.sh, in a state folder of its own
export NOTIF_STATE="${BENCH_STATE:-$ROOT/.local/bench-compare}"
export PG_EXTRA_OPTS="-c fsync=on -c synchronous_commit=on -c full_page_writes=on -c log_checkpoints=on -c log_autovacuum_min_duration=0 -c log_timezone=UTC"
# shellcheck source=../tests/scripts/services.sh
. tests/scripts/services.sh
started_pg=false
[ -n "${DATABASE_URL:-}" ] || started_pg=true
cleanup() { if $started_pg; then pg_down; fi; }
trap cleanup EXIT
pg_up

# run SIDE [BENCH_ARGS...]: one drain by bench-SIDE, its jobs/s (from its BENCH line)
run() {
  local side=$1
  shift
  "$out/bench-$side" --only ours "$@" 2>>"$log" |
    python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("BENCH "):
        print(json.loads(line[6:])["ours_default"]["jobs_per_sec"])' ||
    { echo "compare: bench-$side failed (its log: $log)" >&2; tail -5 "$log" >&2; return 1; }
}
before=()
after=()
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2 == 1)); then
    b=$(run "$short" "$@")
    a=$(run tree "$@")
    order="$short first"
  else
    a=$(run tree "$@")
    b=$(run "$short" "$@")
    order="tree first"
  fi
  before+=("$b")
  after+=("$a")
  printf 'round %d (%s): %s %s jobs/s, tree %s jobs/s, tree/%s %s (load %s)\n' "$i" "$order" \
    "$short" "$b" "$a" "$short" "$(python3 -c "print(f'{$a / $b:.3f}')")" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
done
python3 - "$short" "${before[*]}" "${after[*]}" <<'PY'
import random, statistics, sys
rev, b, a = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
mb, ma = statistics.median(b), statistics.median(a)
ratios = [y / x for x, y in zip(b, a)]
print(f"median: {rev} {mb:,.1f} jobs/s, tree {ma:,.1f} jobs/s; tree/{rev} {ma / mb:.3f} "
      f"(each round's ratio: median {statistics.median(ratios):.3f}, "
      f"range {min(ratios):.3f} to {max(ratios):.3f})")
# A round's two runs do not meet the server alike (the second follows the first's writes), so
# a round's ratio carries its order as well as the change: each pair of rounds (REV first,
# then the tree first) has both orders once, and the geometric mean of its two ratios cancels
# a factor the order multiplies both sides by.
pairs = [(ratios[i] * ratios[i + 1]) ** 0.5 for i in range(0, len(ratios) - 1, 2)]
if pairs:
    # the median's bootstrap 95% interval (10,000 resamples, fixed seed), as the bench does
    # for ours ÷ theirs
    rng = random.Random(7)
    meds = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(10_000))
    low, high = meds[249], meds[9_749]
    print(f"each pair of rounds' ratio (order cancelled): "
          f"{', '.join(f'{r:.3f}' for r in pairs)}; median {statistics.median(pairs):.3f}, "
          f"bootstrap 95% interval {low:.3f} to {high:.3f}")
    verdict = statistics.median(pairs)
else:
    verdict = ma / mb
print(f"within 5%: {'yes' if verdict >= 0.95 else 'NO'}")
PY
