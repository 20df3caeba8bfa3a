#!/usr/bin/env bash
# `make lint` (template part) and CI: checks template.yaml with cfn-lint and `sam validate --lint`,
# offline and without AWS credentials. Installs both (pinned, from PyPI) into .venv-tools first
# when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/scripts/tools.sh
. tests/scripts/tools.sh
tools_install sam

# sam needs a region to translate the template, never credentials: give it a region and
# dummy keys (only where none are set), and keep it from phoning home.
export AWS_REGION=${AWS_REGION:-us-east-1}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-$AWS_REGION}
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-testing}
export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-testing}
export SAM_CLI_TELEMETRY=0

echo "cfn-lint $("$TOOLS_BIN/cfn-lint" --version | awk '{print $2}'): template.yaml"
"$TOOLS_BIN/cfn-lint" template.yaml
echo "cfn-lint: no findings"
"$TOOLS_BIN/sam" validate --template-file template.yaml
"$TOOLS_BIN/sam" validate --lint --template-file template.yaml
