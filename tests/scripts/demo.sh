#!/usr/bin/env bash
# `make demo`: the service's main job on local defaults — no AWS account, no Docker engine.
# Starts PostgreSQL and the AWS stand-in, migrates, serves the three functions with
# `cargo lambda watch`, posts sample notifications through the ingest function's local URL,
# invokes the worker and the sweeper, prints each notification's final status and delivery
# trail and what the stand-in received, then stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=tests/scripts/services.sh
. tests/scripts/services.sh
# shellcheck source=tests/scripts/tools.sh
. tests/scripts/tools.sh

WATCH_PID=
on_session_end() { if [ -n "$WATCH_PID" ]; then kill -- -"$WATCH_PID" 2>/dev/null || true; fi; }
services_session notif-demo

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "tools"
tools_install cargo-lambda
tools_path
command -v psql >/dev/null || { echo "psql not found (Debian: apt-get install postgresql-client)"; exit 1; }

say "services"
pg_up
stand_in_up
EMAIL_FROM=${EMAIL_FROM:-noreply@example.com}
# SES in the stand-in, as in the real one, sends only from a verified identity
"$ROOT/.venv/bin/python" - <<PY
import boto3
boto3.client("sesv2", endpoint_url="$AWS_ENDPOINT_URL", region_name="$AWS_REGION").create_email_identity(EmailIdentity="$EMAIL_FROM")
PY

say "migrate"
cargo run -q -p shared --bin migrate

say "build the functions (cargo lambda watch would compile them on first call)"
cargo build -q -p ingest -p worker -p sweeper

PORT=$(free_port)
say "cargo lambda watch on port $PORT"
# a short sweep window (with a matching worker timeout) so the demo can show a sweep
setsid cargo lambda watch --invoke-port "$PORT" --ignore-changes \
  --env-var "DATABASE_URL=$DATABASE_URL" \
  --env-var "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL,AWS_REGION=$AWS_REGION" \
  --env-var "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" \
  --env-var "ALLOW_ORG_HEADER=true,EMAIL_FROM=$EMAIL_FROM,RUST_LOG=warn" \
  --env-var "WORKER_TIMEOUT_SECS=120,STUCK_AFTER_SECS=600" \
  >"$NOTIF_STATE/watch.log" 2>&1 </dev/null &
WATCH_PID=$!
URL="http://127.0.0.1:$PORT/lambda-url/ingest/notifications"
ORG=0b9d8c1e-0000-4000-8000-0000000000d0

post() { # post NAME BODY [IDEMPOTENCY-KEY]
  local name=$1 body=$2 key=${3:-} args=()
  [ -n "$key" ] && args=(-H "Idempotency-Key: $key")
  local out
  out=$(curl -sS -m 120 -w '\n%{http_code}' -X POST "$URL" -H 'Content-Type: application/json' \
        -H "X-Organization-Id: $ORG" "${args[@]}" -d "$body")
  printf '  %-28s %s  %s\n' "$name" "$(tail -n1 <<<"$out")" "$(head -n1 <<<"$out")"
}

for _ in $(seq 1 300); do
  curl -s -o /dev/null -m 120 "$URL" -X OPTIONS 2>/dev/null && break
  kill -0 "$WATCH_PID" 2>/dev/null || { cat "$NOTIF_STATE/watch.log"; exit 1; }
  sleep 0.5
done

say "POST /notifications (X-Organization-Id: $ORG)"
AHEAD=$(date -u -d '+4 seconds' +%Y-%m-%dT%H:%M:%SZ)
post "sms" '{"channel":"sms","to":"+15555550101","message":"Your invoice INV-1 is paid"}'
post "email (text + html)" '{"channel":"email","to":"ann@example.com","subject":"Receipt","text":"Thanks!","html":"<p>Thanks!</p>"}'
post "email (text)" '{"channel":"email","to":"bob@example.com","subject":"Welcome","text":"Hello Bob"}'
post "sms scheduled +4s" "{\"channel\":\"sms\",\"to\":\"+15555550102\",\"message\":\"Reminder\",\"send_at\":\"$AHEAD\"}"
post "sms with key (first)" '{"channel":"sms","to":"+15555550103","message":"Code 1234"}' demo-key-1
post "sms with key (repeat)" '{"channel":"sms","to":"+15555550103","message":"Code 1234"}' demo-key-1
post "sms, same key, new body" '{"channel":"sms","to":"+15555550103","message":"Code 9999"}' demo-key-1
post "sms to an invalid number" '{"channel":"sms","to":"+0555","message":"never sent"}'

say "a job with a number the stand-in rejects (inserted directly: ingest refuses such numbers)"
psql "$DATABASE_URL" -X -q -c "INSERT INTO notification_jobs (organization_id, channel, payload)
  VALUES ('$ORG', 'sms', '{\"to\": \"+0123456789\", \"message\": \"rejected by SNS\"}')"
echo "  sms to +0123456789 inserted as pending"

invoke() {
  printf '  %s: ' "$1"
  cargo lambda invoke "$1" --invoke-port "$PORT" --data-file tests/fixtures/events/scheduled.json
  echo
}
say "invoke the worker (the scheduled send is not due yet)"
invoke worker
sleep 5
say "invoke the worker again (the scheduled send is due now) and the sweeper"
invoke worker
invoke sweeper

say "final status of each notification and its delivery trail"
psql "$DATABASE_URL" -X -q -P pager=off -c "
  SELECT j.channel, j.payload->>'to' AS recipient, j.status, j.attempts,
         d.attempt, d.outcome, d.provider, coalesce(d.provider_message_id, d.error_code) AS message_id_or_error
  FROM notification_jobs j
  LEFT JOIN notification_deliveries d ON d.job_id = j.id
  ORDER BY j.created_at, d.attempt"

say "what the stand-in received"
python3 - "$AWS_ENDPOINT_URL/moto-api/data.json" <<'PY'
import json, sys, urllib.request
data = json.load(urllib.request.urlopen(sys.argv[1]))
sms = data.get("sns", {}).get("SMS", [])
mail = data.get("ses", {}).get("Message", [])
print(f"  SNS received {len(sms)} SMS:")
for m in sms:
    print(f"    {m['phone_number']:<18} {m['message_id']}  {m['message']!r}")
print(f"  SES received {len(mail)} emails:")
for m in mail:
    to = ", ".join(m["destinations"].get("ToAddresses", []))
    print(f"    {to:<18} {m['id'][:36]}  {m['subject']!r}")
PY
say "done: every sample above reached a final status"
