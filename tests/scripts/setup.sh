#!/usr/bin/env bash
# `make setup`: checks what the project needs and installs what it can, then says what is left.
#   - Rust toolchain (cargo), plus rustfmt, clippy and the aarch64 target (`make build`)
#   - PostgreSQL server binaries (initdb, pg_ctl) for the throwaway local database
#   - PgBouncer (transaction pooling) for the tests' second pass through a pooler
#   - psql (`make demo` reads its results with it) and curl (`make demo`, the manual's examples)
#   - python3 with venv, for the project-local tool virtualenvs
#   - cargo-lambda (brings zig), aws-sam-cli and cfn-lint from PyPI into .venv-tools
#   - moto's server (the local AWS stand-in) from PyPI into .venv
#   - Node.js 18+ with npm, for the generated TypeScript client's program (make test)
# Installs system packages with apt-get only when run as root on Debian/Ubuntu; otherwise
# prints the command to run.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/scripts/services.sh
. tests/scripts/services.sh
# shellcheck source=tests/scripts/tools.sh
. tests/scripts/tools.sh

ok() { printf '  ok       %s\n' "$*"; }
missing=()

apt_packages=()
pg_bindir >/dev/null || apt_packages+=(postgresql)
{ command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; } || apt_packages+=(pgbouncer)
python3 -c 'import venv, ensurepip' 2>/dev/null || apt_packages+=(python3-venv)
command -v curl >/dev/null || apt_packages+=(curl)
command -v psql >/dev/null || apt_packages+=(postgresql-client)
command -v npm >/dev/null || apt_packages+=(nodejs npm)
# native-tls links the system's OpenSSL in builds for this machine (the Lambda build compiles its own)
{ command -v pkg-config >/dev/null && pkg-config --exists openssl; } || apt_packages+=(libssl-dev pkg-config)
if [ ${#apt_packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    printf '  install  %s (apt-get)\n' "${apt_packages[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_packages[@]}" >/dev/null
  else
    missing+=("system packages ${apt_packages[*]}: sudo apt-get install ${apt_packages[*]}   (macOS: brew install postgresql@15 curl)")
  fi
fi
if command -v curl >/dev/null; then ok "$(curl --version | head -n1 | cut -d' ' -f1-2)"; else missing+=("curl"); fi
if command -v psql >/dev/null; then ok "$(psql --version)"; else missing+=("psql (Debian/Ubuntu: postgresql-client; macOS: brew install postgresql@15, then put its bin folder on PATH)"); fi

if command -v cargo >/dev/null; then
  ok "$(cargo --version)"
  if command -v rustup >/dev/null; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || missing+=("rustfmt and clippy: rustup component add rustfmt clippy")
    rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
      || rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 \
      || missing+=("the arm64 target for make build: rustup target add aarch64-unknown-linux-gnu")
  fi
else
  missing+=("the Rust toolchain: see https://rustup.rs")
fi

if command -v node >/dev/null && node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
  ok "Node.js $(node --version) with npm"
else
  missing+=("Node.js 18 or later with npm (the generated TypeScript client's program): https://nodejs.org, or apt-get install nodejs npm")
fi

if bindir=$(pg_bindir); then ok "PostgreSQL server binaries in $bindir"; else missing+=("PostgreSQL server binaries (initdb, pg_ctl)"); fi

if python3 -c 'import venv, ensurepip' 2>/dev/null; then
  ok "$(python3 --version) with venv"
  if tools_install sam cargo-lambda; then
    if versions=$(tools_check_versions); then
      ok "$versions and cfn-lint in ${TOOLS_VENV#"$PWD"/} (at least SAM CLI $SAM_CLI_MINIMUM, cargo-lambda $CARGO_LAMBDA_MINIMUM)"
    else
      missing+=("SAM CLI >= $SAM_CLI_MINIMUM and cargo-lambda >= $CARGO_LAMBDA_MINIMUM: rm -rf .venv-tools and run make setup again")
    fi
  else
    missing+=("cargo-lambda, aws-sam-cli, cfn-lint (pip install into .venv-tools failed)")
  fi
  if stand_in_install; then ok "moto server (the AWS stand-in) in .venv"; else missing+=("moto[server] (pip install into .venv failed)"); fi
else
  missing+=("python3 venv: sudo apt-get install python3-venv")
fi

if [ ${#missing[@]} -gt 0 ]; then
  printf '\nStill missing:\n' >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi
printf '\nReady: make test, make watch, make build.\n'
