#!/usr/bin/env bash
# Deploy and build tools from PyPI, in a project-local virtualenv (.venv-tools), pinned:
#
#   tools_install sam           aws-sam-cli and cfn-lint (template checks, sam build/deploy)
#   tools_install cargo-lambda  cargo-lambda, which brings zig (cross-compiles for arm64 Lambda)
#   tools_install schemathesis  schemathesis, the API contract fuzzer (tests/scripts/contract.sh)
#   tools_install webhooks      standardwebhooks, which verifies webhook signatures in the tests
#                               and the demo's receiver (tests/scripts/webhook_receiver.py)
#
# Source this file; then "$TOOLS_BIN/sam", "$TOOLS_BIN/cfn-lint", "$TOOLS_BIN/cargo-lambda",
# "$TOOLS_BIN/schemathesis".
# `cargo lambda …` finds cargo-lambda when $TOOLS_BIN is on PATH (tools_path does that).

TOOLS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS_VENV=${TOOLS_VENV:-$TOOLS_ROOT/.venv-tools}
TOOLS_BIN=$TOOLS_VENV/bin
SAM_CLI_VERSION=${SAM_CLI_VERSION:-1.170.0}
CFN_LINT_VERSION=${CFN_LINT_VERSION:-1.58.0}
CARGO_LAMBDA_VERSION=${CARGO_LAMBDA_VERSION:-1.9.2}
SCHEMATHESIS_VERSION=${SCHEMATHESIS_VERSION:-4.32.5}
STANDARDWEBHOOKS_VERSION=${STANDARDWEBHOOKS_VERSION:-1.3.0}
# The oldest versions the build is known to work with: SAM CLI builds rust-cargolambda
# functions without a beta flag, and cargo-lambda builds the workspace for arm64 under zig.
SAM_CLI_MINIMUM=1.170.0
CARGO_LAMBDA_MINIMUM=1.9.2

# tools_at_least NAME HAVE WANT: whether version HAVE is WANT or later (says which, if not).
tools_at_least() {
  if [ "$(printf '%s\n%s\n' "$3" "$2" | sort -V | head -n1)" = "$3" ]; then return 0; fi
  printf 'tools: %s %s is older than %s, the oldest this project builds with\n' "$1" "$2" "$3" >&2
  return 1
}

# tools_check_versions: the installed sam and cargo-lambda against the minimums above.
tools_check_versions() {
  local sam lambda
  sam=$("$TOOLS_BIN/sam" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1)
  lambda=$("$TOOLS_BIN/cargo-lambda" lambda --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1)
  [ -n "$sam" ] && [ -n "$lambda" ] || { printf 'tools: sam or cargo-lambda does not answer --version\n' >&2; return 1; }
  tools_at_least "SAM CLI" "$sam" "$SAM_CLI_MINIMUM" && tools_at_least cargo-lambda "$lambda" "$CARGO_LAMBDA_MINIMUM" \
    && printf '%s %s\n' "sam $sam" "cargo-lambda $lambda"
}

tools_venv() {
  [ -x "$TOOLS_BIN/pip" ] && return 0
  python3 -m venv "$TOOLS_VENV" || {
    printf 'tools: python3 -m venv failed (Debian/Ubuntu: apt-get install python3-venv)\n' >&2
    return 1
  }
}

# tools_install NAME...: installs each missing tool; quiet when all are there.
tools_install() {
  local what pkgs=()
  for what in "$@"; do
    case "$what" in
      sam)
        [ -x "$TOOLS_BIN/sam" ] && [ -x "$TOOLS_BIN/cfn-lint" ] \
          || pkgs+=("aws-sam-cli==$SAM_CLI_VERSION" "cfn-lint==$CFN_LINT_VERSION") ;;
      cargo-lambda)
        [ -x "$TOOLS_BIN/cargo-lambda" ] || pkgs+=("cargo-lambda==$CARGO_LAMBDA_VERSION") ;;
      schemathesis)
        "$TOOLS_BIN/schemathesis" --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION" \
          || pkgs+=("schemathesis==$SCHEMATHESIS_VERSION") ;;
      webhooks)
        "$TOOLS_BIN/python" -c 'import standardwebhooks' 2>/dev/null \
          || pkgs+=("standardwebhooks==$STANDARDWEBHOOKS_VERSION") ;;
      *) printf 'tools: unknown tool %s\n' "$what" >&2; return 2 ;;
    esac
  done
  [ ${#pkgs[@]} -eq 0 ] && return 0
  tools_venv || return 1
  printf 'tools: installing %s into %s\n' "${pkgs[*]}" "$TOOLS_VENV" >&2
  "$TOOLS_BIN/pip" install -q --disable-pip-version-check "${pkgs[@]}" || {
    printf 'tools: pip install %s failed\n' "${pkgs[*]}" >&2
    return 1
  }
}

# Puts the tools first on PATH (cargo finds `cargo-lambda` there, cargo-lambda finds zig).
tools_path() {
  case ":$PATH:" in *":$TOOLS_BIN:"*) ;; *) export PATH="$TOOLS_BIN:$PATH" ;; esac
}
