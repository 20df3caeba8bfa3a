#!/usr/bin/env bash
# CI: `sam build` as `make deploy` runs it (samconfig.toml's settings, template.yaml's
# rust-cargolambda functions built by cargo-lambda for Lambda arm64), then checks that every
# function of the template has a bootstrap that is an aarch64 ELF executable.
#
# The RDS CA bundle layer downloads Amazon's bundle at build time. With no internet (this
# project's CI machine), RDS_CA_BUNDLE_URL may name a local PEM instead; unset here, a
# throwaway self-signed certificate stands in (the layer's build is checked, not its content).
#
# The release profile optimizes the whole dependency graph for arm64 and links each of the
# six functions with fat LTO: about 20 minutes from cold on this project's 2-core CI machine,
# thin LTO no faster (docs/decisions/0009-one-feature-set-for-every-function.md). CI checks
# the build path (sam's builder, cargo-lambda, zig's arm64 cross-link, the vendored OpenSSL,
# the bootstrap layout, panic = "unwind" reaching the build), which the optimizer settings do
# not touch, so it builds unoptimized: opt-level 0, no LTO, many codegen units.
# SAM_BUILD_AS_DEPLOYED=1 keeps the release profile unchanged, exactly as `make deploy` builds.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/scripts/tools.sh
. tests/scripts/tools.sh
tools_install sam cargo-lambda
tools_path
export SAM_CLI_TELEMETRY=0
export AWS_REGION=${AWS_REGION:-us-east-1}

if [ -z "${RDS_CA_BUNDLE_URL:-}" ] && ! curl -fsI -m 10 https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem >/dev/null 2>&1; then
  placeholder=$(mktemp -d)
  trap 'rm -rf "$placeholder"' EXIT
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=sam-build placeholder" \
    -keyout "$placeholder/key.pem" -out "$placeholder/ca.pem" 2>/dev/null
  export RDS_CA_BUNDLE_URL=file://$placeholder/ca.pem
  echo "sam-build: no internet: a placeholder PEM stands in for the RDS CA bundle"
fi

if [ "${SAM_BUILD_AS_DEPLOYED:-0}" != 1 ]; then
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_LTO=off \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256
  echo "sam-build: release profile unoptimized: opt-level 0, no LTO, 256 codegen units (SAM_BUILD_AS_DEPLOYED=1: as deployed)"
fi
started=$SECONDS
sam build
echo "sam-build: sam build took $((SECONDS - started)) s"

# every function of the built template: an aarch64 (ELF e_machine 183) executable bootstrap
"$TOOLS_BIN/python" - <<'PY'
import pathlib, sys
import yaml
template = yaml.safe_load(pathlib.Path(".aws-sam/build/template.yaml").read_text())
functions = [name for name, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"]
bad = []
for name in functions:
    boot = pathlib.Path(".aws-sam/build") / name / "bootstrap"
    head = boot.read_bytes()[:20] if boot.is_file() else b""
    if head[:4] != b"\x7fELF" or int.from_bytes(head[18:20], "little") != 183:
        bad.append(name)
if bad:
    sys.exit(f"sam-build: no aarch64 bootstrap for {', '.join(bad)}")
print(f"sam-build: {len(functions)} functions, each an aarch64 bootstrap: {', '.join(sorted(functions))}")
PY
