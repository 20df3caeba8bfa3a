#!/usr/bin/env bash
# `make demo`: the service's main job on local defaults — no AWS account, no Docker engine.
# Starts PostgreSQL and the AWS stand-in, migrates, serves the four functions with
# `cargo lambda watch`, posts sample notifications through the ingest function's local URL,
# invokes the worker and the sweeper, then plays the providers' part: invokes feedback with
# events shaped as AWS sends them (tests/fixtures/feedback/, naming the message ids the worker
# recorded) so one email ends delivered, one bounced (and its recipient suppressed: a second
# POST to it is refused) and one SMS delivered. Prints each notification's final status,
# delivery trail and feedback and what the stand-in received, then stops everything it started.
# Every answer is checked as it comes (each POST's and GET's status and fields, the worker's,
# the sweeper's and feedback's summaries): the first that differs from what the demo expects
# stops it with a message naming the step, and a non-zero exit.
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

# fail STEP WHAT: stops the demo (exit 1) naming the step; shows the end of watch's log
fail() {
  printf '\n\033[1;31mdemo failed at step "%s":\033[0m %s\n' "$1" "$2" >&2
  if [ -s "$NOTIF_STATE/watch.log" ]; then
    printf -- '--- the end of cargo lambda watch'"'"'s log:\n' >&2
    tail -n 30 "$NOTIF_STATE/watch.log" >&2
  fi
  exit 1
}

# check_json STEP JSON KEY=VALUE...: fails STEP unless JSON is an object with each KEY at VALUE.
# A KEY may be a path: `deliveries.0.feedback.0.type` (list elements by position); a VALUE
# that is not a string is compared as compact JSON (`recorded={"email":{"delivery":1}}`).
check_json() {
  local step=$1 json=$2 problem
  shift 2
  problem=$(python3 -c '
import json, sys
text, pairs = sys.argv[1], sys.argv[2:]
try:
    got = json.loads(text)
except ValueError:
    sys.exit("not JSON: %r" % text)
if not isinstance(got, dict):
    sys.exit("not a JSON object: %r" % text)
def at(value, path):
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value
def shown(value):
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
bad = ["%s: expected %s, got %s" % (k, v, json.dumps(at(got, k)))
       for k, v in (p.split("=", 1) for p in pairs)
       if shown(at(got, k)) != v]
if bad:
    sys.exit("; ".join(bad) + " in " + text)
' "$json" "$@" 2>&1) || fail "$step" "$problem"
}

say "tools"
tools_install cargo-lambda
tools_path
command -v psql >/dev/null || { echo "psql not found (Debian: apt-get install postgresql-client)"; exit 1; }

say "services"
pg_up
stand_in_up
EMAIL_FROM=${EMAIL_FROM:-noreply@example.com}
# SES in the stand-in, as in the real one, sends only from a verified identity
stand_in_verify_sender "$EMAIL_FROM"

say "migrate"
cargo run -q --bin migrate

say "build the functions (cargo lambda watch would compile them on first call)"
# as `cargo lambda watch` builds them (`cargo run --bin …` in the workspace: the same features)
cargo build -q --bin ingest --bin worker --bin sweeper --bin feedback

PORT=$(free_port)
say "cargo lambda watch on port $PORT"
# a short sweep window (with a matching worker timeout) so the demo can show a sweep
setsid cargo lambda watch --invoke-address 127.0.0.1 --invoke-port "$PORT" --ignore-changes \
  --env-var "DATABASE_URL=$DATABASE_URL" \
  --env-var "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL,AWS_REGION=$AWS_REGION" \
  --env-var "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" \
  --env-var "ALLOW_ORG_HEADER=true,EMAIL_FROM=$EMAIL_FROM,RUST_LOG=warn" \
  --env-var "WORKER_TIMEOUT_SECS=120,STUCK_AFTER_SECS=600" \
  >"$NOTIF_STATE/watch.log" 2>&1 </dev/null &
WATCH_PID=$!
URL="http://127.0.0.1:$PORT/lambda-url/ingest/notifications"
ORG=0b9d8c1e-0000-4000-8000-0000000000d0

# request STEP WANT METHOD URL [CURL-ARGS...]: prints the answer; fails STEP unless its status
# is WANT. Sets STATUS and BODY. The first call compiles ingest if it is not fresh: 10 minutes.
request() {
  local step=$1 want=$2 method=$3 url=$4 out
  shift 4
  out=$(curl -sS -m 600 -w '\n%{http_code}' -X "$method" "$url" -H "X-Organization-Id: $ORG" "$@") \
    || fail "$step" "no answer from $method $url"
  STATUS=${out##*$'\n'}
  BODY=${out%$'\n'*}
  printf '  %-28s %s  %s\n' "$step" "$STATUS" "$BODY"
  [ "$STATUS" = "$want" ] || fail "$step" "$method answered $STATUS, expected $want: $BODY"
}

post() { # post STEP WANT BODY [IDEMPOTENCY-KEY]
  local step=$1 want=$2 body=$3 key=${4:-} args=()
  [ -n "$key" ] && args=(-H "Idempotency-Key: $key")
  request "$step" "$want" POST "$URL" -H 'Content-Type: application/json' "${args[@]}" -d "$body"
}

id_of() { python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get("id", ""))' "$1"; }

for _ in $(seq 1 300); do
  curl -s -o /dev/null -m 120 "$URL" -X OPTIONS 2>/dev/null && break
  kill -0 "$WATCH_PID" 2>/dev/null || fail "cargo lambda watch" "it exited before serving"
  sleep 0.5
done

say "POST /notifications (X-Organization-Id: $ORG)"
post "sms" 202 '{"channel":"sms","to":"+15555550101","message":"Your invoice INV-1 is paid"}'
check_json "sms" "$BODY" status=pending
SMS_ID=$(id_of "$BODY")
post "email (text + html)" 202 '{"channel":"email","to":"ann@example.com","subject":"Receipt","text":"Thanks!","html":"<p>Thanks!</p>"}'
ANN_ID=$(id_of "$BODY")
post "email (text)" 202 '{"channel":"email","to":"bob@example.com","subject":"Welcome","text":"Hello Bob"}'
BOB_ID=$(id_of "$BODY")
# due 10 seconds from now: after the worker's first run, before its second (the demo waits)
AHEAD_EPOCH=$(($(date +%s) + 10))
AHEAD=$(date -u -d "@$AHEAD_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
post "sms scheduled +10s" 202 "{\"channel\":\"sms\",\"to\":\"+15555550102\",\"message\":\"Reminder\",\"send_at\":\"$AHEAD\"}"
SCHEDULED_ID=$(id_of "$BODY")
check_json "sms scheduled +10s" "$BODY" "next_attempt_at=$AHEAD"
post "sms with key (first)" 202 '{"channel":"sms","to":"+15555550103","message":"Code 1234"}' demo-key-1
KEYED_ID=$(id_of "$BODY")
post "sms with key (repeat)" 200 '{"channel":"sms","to":"+15555550103","message":"Code 1234"}' demo-key-1
check_json "sms with key (repeat)" "$BODY" "id=$KEYED_ID"
post "sms, same key, new body" 409 '{"channel":"sms","to":"+15555550103","message":"Code 9999"}' demo-key-1
post "sms to an invalid number" 400 '{"channel":"sms","to":"+0555","message":"never sent"}'
request "GET the sms" 200 GET "$URL/$SMS_ID"
check_json "GET the sms" "$BODY" status=pending attempts=0
request "GET an unknown id" 404 GET "$URL/00000000-0000-4000-8000-000000000000"

say "a job with a number the stand-in rejects (inserted directly: ingest refuses such numbers)"
# (its id a UUIDv7 of now, as ingest makes ids: the job's day is read from it)
psql "$DATABASE_URL" -X -q -c "WITH job AS (
    INSERT INTO job_requests (id, organization_id, created_at, channel, payload, max_attempts,
                              send_at)
    VALUES ((lpad(to_hex(floor(extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '7'
             || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid,
            '$ORG', now(), 'sms',
            '{\"to\": \"+0123456789\", \"message\": \"rejected by SNS\"}', 5, now())
    RETURNING id, organization_id, channel, payload, send_at, max_attempts, created_at)
  INSERT INTO job_queue (id, organization_id, channel, payload, next_attempt_at, max_attempts,
                         created_at, updated_at)
  SELECT id, organization_id, channel, payload, send_at, max_attempts, created_at, created_at
  FROM job"
echo "  sms to +0123456789 inserted as pending"

# invoke_with STEP FUNCTION EVENT-FILE KEY=VALUE...: invokes FUNCTION with the event in
# EVENT-FILE; prints its answer; fails STEP unless it has each KEY=VALUE (see check_json)
invoke_with() {
  local step=$1 function=$2 event=$3 out
  shift 3
  out=$(cargo lambda invoke "$function" --invoke-address 127.0.0.1 --invoke-port "$PORT" \
        --data-file "$event") || fail "$step" "cargo lambda invoke $function failed"
  printf '  %s: %s\n' "$step" "$out"
  check_json "$step" "$out" "$@"
}
# invoke STEP FUNCTION KEY=VALUE...: the same with the EventBridge scheduled event
invoke() {
  local step=$1 function=$2
  shift 2
  invoke_with "$step" "$function" tests/fixtures/events/scheduled.json "$@"
}
say "invoke the worker (the scheduled send is not due yet)"
# due: 2 SMS, 2 emails, the SMS to the rejected number (permanent error: dead at once)
[ "$(date +%s)" -lt "$AHEAD_EPOCH" ] \
  || fail "worker, first run" "the samples took so long that the scheduled send is already due"
invoke "worker, first run" worker claimed=5 sent=4 retried=0 held=0 dead=1 released=0 fenced=0
sleep $((AHEAD_EPOCH - $(date +%s) + 1))
say "invoke the worker again (the scheduled send is due now) and the sweeper"
invoke "worker, second run" worker claimed=1 sent=1 retried=0 held=0 dead=0 released=0 fenced=0
invoke "sweeper" sweeper requeued=0 dead=0 expired=0 feedback_applied=0 feedback_dropped=0
# message_id STEP: the provider message id the worker recorded for the first attempt of the
# job in $BODY (a GET /notifications/{id} answer); fails STEP if there is none
message_id() {
  local found
  found=$(python3 -c '
import json, sys
deliveries = json.loads(sys.argv[1]).get("deliveries") or [{}]
print(deliveries[0].get("provider_message_id") or "")
' "$BODY")
  [ -n "$found" ] || fail "$1" "no deliveries[0].provider_message_id in $BODY"
  echo "$found"
}
request "GET the sms" 200 GET "$URL/$SMS_ID"
check_json "GET the sms" "$BODY" status=sent attempts=1
SMS_MESSAGE_ID=$(message_id "GET the sms")
request "GET ann's email" 200 GET "$URL/$ANN_ID"
check_json "GET ann's email" "$BODY" status=sent attempts=1
ANN_MESSAGE_ID=$(message_id "GET ann's email")
request "GET bob's email" 200 GET "$URL/$BOB_ID"
check_json "GET bob's email" "$BODY" status=sent attempts=1
BOB_MESSAGE_ID=$(message_id "GET bob's email")
request "GET the scheduled sms" 200 GET "$URL/$SCHEDULED_ID"
check_json "GET the scheduled sms" "$BODY" status=sent attempts=1

# feedback_event STEP FIXTURE MESSAGE-ID: writes FIXTURE (tests/fixtures/feedback/) with
# MESSAGE-ID in place of its placeholder, as the event Lambda receives, to $EVENT: an SES
# fixture is one already (an SNS event); an SMS delivery-status batch (sns-sms-*) goes gzip +
# base64 into {"awslogs":{"data":…}}, as CloudWatch Logs sends it.
feedback_event() {
  local step=$1 fixture=$2 id=$3
  EVENT="$NOTIF_STATE/feedback-$fixture"
  python3 - "tests/fixtures/feedback/$fixture" "$id" "$EVENT" <<'PY' || fail "$step" "could not write the event"
import base64, gzip, json, sys
fixture, message_id, out = sys.argv[1:]
event = json.loads(open(fixture).read().replace("MESSAGE_ID", message_id))
if "logEvents" in event:
    data = base64.b64encode(gzip.compress(json.dumps(event).encode())).decode()
    event = {"awslogs": {"data": data}}
json.dump(event, open(out, "w"))
PY
}

say "the providers report back: feedback invoked with events shaped as AWS sends them"
feedback_event "feedback: SES Delivery" ses-delivery.json "$ANN_MESSAGE_ID"
invoke_with "feedback: SES Delivery" feedback "$EVENT" events=1 malformed=0 \
  'recorded={"email":{"delivery":1}}' duplicates=0 applied=1 jobs_changed=1 suppressed=0
request "GET ann's email" 200 GET "$URL/$ANN_ID"
check_json "GET ann's email" "$BODY" status=delivered deliveries.0.feedback.0.type=delivery \
  'deliveries.0.feedback.0.diagnostic=250 2.6.0 Message received'

feedback_event "feedback: SES Bounce" ses-bounce-permanent.json "$BOB_MESSAGE_ID"
invoke_with "feedback: SES Bounce" feedback "$EVENT" events=1 malformed=0 \
  'recorded={"email":{"bounce":1}}' duplicates=0 applied=1 jobs_changed=1 suppressed=1
request "GET bob's email" 200 GET "$URL/$BOB_ID"
check_json "GET bob's email" "$BODY" status=bounced deliveries.0.feedback.0.type=bounce \
  deliveries.0.feedback.0.subtype=Permanent/General
# the suppression list keeps email in lower case: another spelling is the same recipient
post "email to Bob@example.com" 422 '{"channel":"email","to":"Bob@example.com","subject":"Welcome","text":"Hello again"}'
check_json "email to Bob@example.com" "$BODY" error.code=recipient_suppressed

feedback_event "feedback: SMS SUCCESS log line" sns-sms-success.json "$SMS_MESSAGE_ID"
invoke_with "feedback: SMS SUCCESS log line" feedback "$EVENT" events=1 malformed=0 \
  'recorded={"sms":{"delivery":1}}' duplicates=0 applied=1 jobs_changed=1 suppressed=0
request "GET the sms" 200 GET "$URL/$SMS_ID"
check_json "GET the sms" "$BODY" status=delivered deliveries.0.feedback.0.type=delivery

say "final status of each notification, its delivery trail and the providers' feedback"
psql "$DATABASE_URL" -X -q -P pager=off -c "
  SELECT j.channel, j.payload->>'to' AS recipient, j.status, j.attempts,
         d.attempt, d.outcome, d.provider, coalesce(d.provider_message_id, d.error_code) AS message_id_or_error,
         (SELECT string_agg(f.kind || coalesce(' ' || f.subtype, ''), ', ' ORDER BY f.occurred_at)
            FROM delivery_feedback f WHERE f.job_id = j.id AND f.attempt = d.attempt) AS feedback
  FROM job_states j
  LEFT JOIN job_attempt_history d ON d.job_id = j.id
  ORDER BY j.created_at, d.attempt"
echo "  the organization's suppression list:"
psql "$DATABASE_URL" -X -q -P pager=off -c "
  SELECT recipient, reason, detail FROM suppressions WHERE organization_id = '$ORG' ORDER BY recipient"

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
unfinished=$(psql "$DATABASE_URL" -X -q -tA -c "SELECT count(*) FROM job_states
  WHERE status NOT IN ('sent', 'delivered', 'bounced', 'dead')")
[ "$unfinished" = 0 ] || fail "final status" "$unfinished job(s) not sent, delivered, bounced or dead"
say "done: every sample above ended sent (no report yet), delivered, bounced or dead"
