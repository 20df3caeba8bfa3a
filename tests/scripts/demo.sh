#!/usr/bin/env bash
# `make demo`: the service's main job on local defaults — no AWS account, no Docker engine.
# Starts PostgreSQL and the AWS stand-in, migrates, serves the four functions with
# `cargo lambda watch`, posts sample notifications through the ingest function's local URL
# (each accepted request wakes the worker through watch's own invoke API, as it would on
# Lambda: no invoke by hand sends them; the demo prints how long each took from its accept to
# its provider call), invokes the worker as the one-minute schedule would for a send
# scheduled ahead, and the sweeper, then plays the providers' part: invokes feedback with
# events shaped as AWS sends them (tests/fixtures/feedback/, naming the message ids the worker
# recorded) so one email ends delivered, one bounced (and its recipient suppressed: a second
# POST to it is refused) and one SMS delivered. Prints each notification's final status,
# delivery trail and feedback and what the stand-in received, then stops everything it started.
# A webhook endpoint registered first (a local receiver, tests/scripts/webhook_receiver.py, that
# verifies each signature with the Standard Webhooks library and answers each event's first
# delivery 500) hears every status change: the demo shows what it got, each event retried and
# then delivered, and the endpoint's attempts as GET /webhooks/{id}/deliveries lists them.
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
RECEIVER_PID=
on_session_end() {
  if [ -n "$WATCH_PID" ]; then kill -- -"$WATCH_PID" 2>/dev/null || true; fi
  if [ -n "$RECEIVER_PID" ]; then kill -- -"$RECEIVER_PID" 2>/dev/null || true; fi
}
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
# webhooks: the Standard Webhooks library the receiver verifies signatures with
tools_install cargo-lambda webhooks
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

say "a webhook receiver, as a caller would run one"
# it reads the endpoint's secret from RECEIVER_SECRET at each request (POST /webhooks, below,
# writes it there) and answers the first delivery of each webhook-id 500, to show a retry
RECEIVER_SECRET="$NOTIF_STATE/receiver.secret"
RECEIVER_RECORD="$NOTIF_STATE/receiver.jsonl"
: >"$RECEIVER_SECRET"
setsid "$TOOLS_BIN/python" tests/scripts/webhook_receiver.py --port 0 \
  --secret-file "$RECEIVER_SECRET" --record "$RECEIVER_RECORD" --fail-first 1 \
  --ready "$NOTIF_STATE/receiver.port" >"$NOTIF_STATE/receiver.log" 2>&1 </dev/null &
RECEIVER_PID=$!
for _ in $(seq 1 100); do
  [ -s "$NOTIF_STATE/receiver.port" ] && break
  kill -0 "$RECEIVER_PID" 2>/dev/null \
    || fail "webhook receiver" "it exited before listening: $(cat "$NOTIF_STATE/receiver.log")"
  sleep 0.1
done
[ -s "$NOTIF_STATE/receiver.port" ] || fail "webhook receiver" "not listening after 10 s"
RECEIVER_PORT=$(cat "$NOTIF_STATE/receiver.port")
echo "  listening on 127.0.0.1:$RECEIVER_PORT"

PORT=$(free_port)
say "cargo lambda watch on port $PORT"
# a short sweep window (with a matching worker timeout) so the demo can show a sweep;
# WEBHOOK_ALLOW_PRIVATE_ADDRESSES for the receiver on 127.0.0.1 (plain http, loopback): local
# use only, the template pins it to false
# WORKER_FUNCTION_NAME and AWS_ENDPOINT_URL_LAMBDA: ingest wakes the worker through watch's
# own invoke API, as `make watch` sets it up (two instances a function, the worker's fleet)
setsid cargo lambda watch --invoke-address 127.0.0.1 --invoke-port "$PORT" --ignore-changes \
  --concurrency 2 \
  --env-var "WORKER_FUNCTION_NAME=worker,WORKER_MAX_INVOCATIONS=2" \
  --env-var "AWS_ENDPOINT_URL_LAMBDA=http://127.0.0.1:$PORT" \
  --env-var "DATABASE_URL=$DATABASE_URL" \
  --env-var "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL,AWS_REGION=$AWS_REGION" \
  --env-var "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" \
  --env-var "ALLOW_ORG_HEADER=true,EMAIL_FROM=$EMAIL_FROM,RUST_LOG=warn" \
  --env-var "WORKER_TIMEOUT_SECS=120,STUCK_AFTER_SECS=600" \
  --env-var "WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true" \
  >"$NOTIF_STATE/watch.log" 2>&1 </dev/null &
WATCH_PID=$!
API="http://127.0.0.1:$PORT/lambda-url/ingest"
URL="$API/notifications"
HOOKS="$API/webhooks"
ORG=0b9d8c1e-0000-4000-8000-0000000000d0

# request STEP WANT METHOD URL [CURL-ARGS...]: prints the answer; fails STEP unless its status
# is WANT. Sets STATUS and BODY. The first call compiles ingest if it is not fresh: 10 minutes.
# With BODY_SHOWN_BELOW=1 it prints the body's size instead (the caller shows it).
request() {
  local step=$1 want=$2 method=$3 url=$4 out shown
  shift 4
  out=$(curl -sS -m 600 -w '\n%{http_code}' -X "$method" "$url" -H "X-Organization-Id: $ORG" "$@") \
    || fail "$step" "no answer from $method $url"
  STATUS=${out##*$'\n'}
  BODY=${out%$'\n'*}
  shown=$BODY
  [ -n "${BODY_SHOWN_BELOW:-}" ] && shown="(${#BODY} bytes, below)"
  printf '  %-28s %s  %s\n' "$step" "$STATUS" "$shown"
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

say "POST /webhooks: the receiver hears every status event of the organization's notifications"
# an endpoint registered before a change commits is sure to get its event
request "register the receiver" 201 POST "$HOOKS" -H 'Content-Type: application/json' \
  -d "{\"url\":\"http://127.0.0.1:$RECEIVER_PORT/hooks\"}"
check_json "register the receiver" "$BODY" "url=http://127.0.0.1:$RECEIVER_PORT/hooks" \
  events=null disabled=false failing_since=null
HOOK_ID=$(id_of "$BODY")
SECRET=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1]).get("secret") or "")' "$BODY")
case "$SECRET" in
  whsec_?*) ;;
  *) fail "register the receiver" "the answer's secret does not start with whsec_: $BODY" ;;
esac
# shown this once: the receiver keeps it
printf '%s\n' "$SECRET" >"$RECEIVER_SECRET"

say "a job with a number the stand-in rejects (inserted directly: ingest refuses such numbers)"
# (its id a UUIDv7 of now, as ingest makes ids: the job's day is read from it); inserted before
# the requests below, so the worker the first of them wakes claims it with them
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

say "POST /notifications (X-Organization-Id: $ORG): each accepted request wakes the worker"
post "sms" 202 '{"channel":"sms","to":"+15555550101","message":"Your invoice INV-1 is paid"}'
check_json "sms" "$BODY" status=pending
SMS_ID=$(id_of "$BODY")
post "email (text + html)" 202 '{"channel":"email","to":"ann@example.com","subject":"Receipt","text":"Thanks!","html":"<p>Thanks!</p>"}'
ANN_ID=$(id_of "$BODY")
post "email (text)" 202 '{"channel":"email","to":"bob@example.com","subject":"Welcome","text":"Hello Bob"}'
BOB_ID=$(id_of "$BODY")
# due 20 seconds from now: once the woken workers have left; the one-minute schedule would
# send it (here the demo invokes the worker as the schedule would)
AHEAD_EPOCH=$(($(date +%s) + 20))
AHEAD=$(date -u -d "@$AHEAD_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
post "sms scheduled +20s" 202 "{\"channel\":\"sms\",\"to\":\"+15555550102\",\"message\":\"Reminder\",\"send_at\":\"$AHEAD\"}"
SCHEDULED_ID=$(id_of "$BODY")
check_json "sms scheduled +20s" "$BODY" "next_attempt_at=$AHEAD"
post "sms with key (first)" 202 '{"channel":"sms","to":"+15555550103","message":"Code 1234"}' demo-key-1
KEYED_ID=$(id_of "$BODY")
post "sms with key (repeat)" 200 '{"channel":"sms","to":"+15555550103","message":"Code 1234"}' demo-key-1
check_json "sms with key (repeat)" "$BODY" "id=$KEYED_ID"
post "sms, same key, new body" 409 '{"channel":"sms","to":"+15555550103","message":"Code 9999"}' demo-key-1
post "sms to an invalid number" 400 '{"channel":"sms","to":"+0555","message":"never sent"}'
request "GET an unknown id" 404 GET "$URL/00000000-0000-4000-8000-000000000000"

# settled STEP: waits until no job is due or claimed and no worker holds a slot (the woken
# workers sent what was due and left after WORKER_IDLE_MS); the first wake starts the
# worker's process, which cargo lambda watch may compile: 10 minutes at most
settled() {
  local step=$1 waiting
  for _ in $(seq 1 3000); do
    waiting=$(psql "$DATABASE_URL" -X -q -tA -c "SELECT
        (SELECT count(*) FROM job_queue WHERE next_attempt_at <= now())
      + (SELECT count(*) FROM worker_slots WHERE until > now())")
    [ "$waiting" = 0 ] && return 0
    kill -0 "$WATCH_PID" 2>/dev/null || fail "$step" "cargo lambda watch exited"
    sleep 0.2
  done
  fail "$step" "jobs still due, or a worker still running, after 10 minutes"
}
# accept_to_provider ID: how long the job waited from its accept to its first provider call
accept_to_provider() {
  psql "$DATABASE_URL" -X -q -tA -c "SELECT round(extract(epoch FROM a.started_at - r.created_at) * 1000)
    FROM job_requests r JOIN job_attempt_history a ON a.job_id = r.id
    WHERE r.id = '$1' AND a.attempt = 1"
}
say "the woken worker sends what is due: no invoke by hand"
settled "the woken worker"
request "GET the sms" 200 GET "$URL/$SMS_ID"
check_json "GET the sms" "$BODY" status=sent attempts=1
echo "  the sms: accepted → handed to SNS in $(accept_to_provider "$SMS_ID") ms (the worker's first start under watch)"
post "another sms, after the worker left" 202 '{"channel":"sms","to":"+15555550104","message":"Your code is 4242"}'
AGAIN_ID=$(id_of "$BODY")
settled "the worker woken again"
request "GET it" 200 GET "$URL/$AGAIN_ID"
check_json "GET it" "$BODY" status=sent attempts=1
echo "  accepted → handed to SNS in $(accept_to_provider "$AGAIN_ID") ms (a warm worker woken again)"

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
[ "$(date +%s)" -lt "$AHEAD_EPOCH" ] \
  || fail "the scheduled send" "the samples took so long that the scheduled send is already due"
sleep $((AHEAD_EPOCH - $(date +%s) + 1))
say "the scheduled send is due: the worker invoked as the one-minute schedule would, and the sweeper"
# a send scheduled ahead becomes due without a request to wake a worker: a worker running
# then claims it, else the schedule's next invocation does, within a minute (here at once);
# the invocation also posts the retries of the events the receiver answered 500
invoke "worker, as the schedule" worker claimed=1 sent=1 retried=0 held=0 dead=0 released=0 \
  fenced=0 fleet.woken=false
invoke "sweeper" sweeper requeued=0 dead=0 expired=0 feedback_applied=0 feedback_dropped=0
request "GET the scheduled sms" 200 GET "$URL/$SCHEDULED_ID"
check_json "GET the scheduled sms" "$BODY" status=sent attempts=1
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
SMS_MESSAGE_ID=$(message_id "GET the sms")
request "GET ann's email" 200 GET "$URL/$ANN_ID"
check_json "GET ann's email" "$BODY" status=sent attempts=1
ANN_MESSAGE_ID=$(message_id "GET ann's email")
request "GET bob's email" 200 GET "$URL/$BOB_ID"
check_json "GET bob's email" "$BODY" status=sent attempts=1
BOB_MESSAGE_ID=$(message_id "GET bob's email")

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

say "invoke the worker twice more, as the schedule would: it posts the events of the feedback, then their retries"
# each run posts the events due to the webhook: the new ones (delivered, bounced) and the
# retries of those the receiver answered 500, due about 5 s (up to 5.5 s) after
invoke "worker, as the schedule (2)" worker claimed=0 sent=0 dead=0 events.webhooks_failed=3 \
  events.webhooks_dead=0
sleep 6
invoke "worker, as the schedule (3)" worker claimed=0 sent=0 dead=0 events.webhooks_failed=0 \
  events.webhooks_dead=0

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
say "webhooks: what the receiver got"
# one line per delivery, in the order they came (the receiver answers them on threads, so
# two lines may share a line of its log: each is printed on its own here)
python3 -c '
import re, sys
for line in re.findall(r"received .*?answered \d+", open(sys.argv[1]).read()):
    print("  " + line)
' "$NOTIF_STATE/receiver.log"
# every event recorded for the organization reached the receiver: its first delivery answered
# 500, then the same webhook-id, signed again, delivered (204) by a later run
EVENTS=$(psql "$DATABASE_URL" -X -q -tA -c "SELECT coalesce(json_agg(json_build_object(
    'id', id, 'type', type, 'sequence', sequence) ORDER BY sequence), '[]')
  FROM status_events WHERE organization_id = '$ORG'")
summary=$(python3 - "$RECEIVER_RECORD" "$EVENTS" 2>&1 <<'PY'
import collections, json, sys
record, events = sys.argv[1], json.loads(sys.argv[2])
got = [json.loads(line) for line in open(record)]
bad = ["not verified: %s" % r for r in got if not r["verified"]]
answers = collections.defaultdict(list)
for r in got:
    answers[r["headers"]["webhook-id"]].append(r["status"])
    body = json.loads(r["body"])
    if body["id"] != r["headers"]["webhook-id"]:
        bad.append("webhook-id %s is not the event's id %s"
                   % (r["headers"]["webhook-id"], body["id"]))
for e in events:
    if answers.get(e["id"]) != [500, 204]:
        bad.append("event %s (%s): answered %s, expected 500 then 204"
                   % (e["id"], e["type"], answers.get(e["id"])))
unknown = set(answers) - {e["id"] for e in events}
if unknown:
    bad.append("deliveries of no recorded event: %s" % sorted(unknown))
types = collections.Counter(e["type"] for e in events)
for want in ("notification.sent", "notification.delivered", "notification.bounced"):
    if not types[want]:
        bad.append("no %s event" % want)
if bad:
    sys.exit("; ".join(bad))
print("  %d deliveries, every signature verified; %d events, each answered 500, then 204: %s"
      % (len(got), len(events), ", ".join("%s %d" % t for t in sorted(types.items()))))
PY
) || fail "webhooks: what the receiver got" "$summary"
echo "$summary"
echo "  the bounce's delivery, as the receiver got it (headers and the raw body it verified):"
python3 - "$RECEIVER_RECORD" <<'PY'
import json, sys
got = [json.loads(line) for line in open(sys.argv[1])]
bounce = next(r for r in got if json.loads(r["body"])["type"] == "notification.bounced")
for name, value in bounce["headers"].items():
    print("    %s: %s" % (name, value))
print("    " + bounce["body"])
PY
BODY_SHOWN_BELOW=1 request "GET its deliveries" 200 GET "$HOOKS/$HOOK_ID/deliveries?limit=100"
# newest first: one row per attempt, as many as the receiver was sent
table=$(python3 - "$BODY" "$RECEIVER_RECORD" 2>&1 <<'PY'
import json, sys
items = json.loads(sys.argv[1])["items"]
received = sum(1 for _ in open(sys.argv[2]))
if len(items) != received:
    sys.exit("%d attempts listed, the receiver was sent %d" % (len(items), received))
outcomes = {(a["outcome"], a["status_code"]) for a in items}
if outcomes != {("retry", 500), ("delivered", 204)}:
    sys.exit("expected attempts retried after a 500 and attempts delivered with 204, got %s"
             % sorted(map(str, outcomes)))
row = "    %-24s %-24s %-8s %-7s %-9s %-6s %-7s %s"
print(row % ("attempted_at", "event_type", "event_id", "attempt", "outcome", "status",
             "latency", "next_attempt_at"))
for a in items:
    print(row % (a["attempted_at"][:23], a["event_type"], a["event_id"][:8], a["attempt"],
                 a["outcome"], a["status_code"], "%d ms" % a["latency_ms"],
                 (a["next_attempt_at"] or "-")[:23]))
PY
) || fail "GET its deliveries" "$table"
echo "$table"
check_json "GET its deliveries" "$BODY" items.0.outcome=delivered items.0.status_code=204

unfinished=$(psql "$DATABASE_URL" -X -q -tA -c "SELECT count(*) FROM job_states
  WHERE status NOT IN ('sent', 'delivered', 'bounced', 'dead')")
[ "$unfinished" = 0 ] || fail "final status" "$unfinished job(s) not sent, delivered, bounced or dead"
say "done: every sample above ended sent (no report yet), delivered, bounced or dead," \
  "and the webhook heard each change"
