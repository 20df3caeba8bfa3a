"""Schemathesis hooks of tests/scripts/contract.sh: the local credential, what a schema cannot
say of a valid request, and what `cargo lambda watch` cannot carry.

The fuzzed function runs as `make watch` runs it (ALLOW_ORG_HEADER=true), with no API Gateway in
front to check a JWT: the organization comes in the `X-Organization-Id` header. The spec declares
that scheme (`localOrganizationHeader`) but, as no deployment accepts it, requires only `jwt`.
For this run alone the loaded spec also requires the local scheme, so the fuzzer sends it (its
value is in schemathesis.toml) and `ignored_auth` checks that a request without it, or with a
bad one, is refused.

Every answer the fuzzer judges must be the ingest function's own. `cargo lambda watch`'s
function-URL emulation answers some requests with a 500 of its own (RFC 7807 text, no
`x-request-id`), without the function ever seeing them:

- a request it cannot put into a Lambda event: a body that is not UTF-8 (the negative phase's
  random bytes) or a header value that is not (a Latin-1 character, which `requests` sends as
  one byte). AWS base64-encodes such a body (`isBase64Encoded`) and the function refuses it with
  400 (shared/api/src/event.rs and its tests; tests/it/ingest_property.rs sends bad
  UTF-8 too). Such requests are sent as UTF-8 the emulator can carry, keeping what made them
  invalid: a header value spelled in UTF-8 (the function sees the same characters), a body's
  undecodable bytes replaced by U+FFFD (still not the JSON object any operation takes);
- now and then, a request that arrives as the function's runtime client opens a new connection
  to the emulator's runtime API (about one in a few hundred). The function never saw it, so it
  is sent again (at most 3 times); each retry is counted in $CONTRACT_RETRIES (a file), which
  contract.sh reports. An answer of the function itself always has `x-request-id`, so a 500 of
  the function is never retried.
"""

import os
from datetime import datetime, timedelta, timezone

import requests
import schemathesis
from schemathesis.core.transport import Response
from schemathesis.generation.modes import GenerationMode


def _utf8_header(value):
    if isinstance(value, str) and any(ord(c) > 0x7F for c in value):
        # requests sends a header value as Latin-1 bytes: these are the value's UTF-8 bytes
        return value.encode("utf-8").decode("latin-1")
    return value


@schemathesis.hook
def before_load_schema(context, raw_schema):
    raw_schema["security"] = [{"localOrganizationHeader": []}]


# What a schema cannot say, made true of every positive case, so that `positive_data_acceptance`
# holds the function to a 2xx for each (a refusal of one is a failure, never an allowed 400):
# - a listing's `cursor` must be a `next_cursor` this API returned: a made-up one is dropped
#   (the stateful phase follows the listings' next-page links with real ones);
# - `send_at` at most 30 days ahead; `expires_at` after it (or now) and at most 30 days after:
#   a `send_at` past that is moved to an hour from now, an `expires_at` outside it is dropped;
# - a bulk requeue's `until` must be later than its `since`: an `until` that is not is dropped;
# - a webhook's `url` must be one the function can resolve and may reach: it becomes a local
#   address (the run allows private addresses, as `make watch` does), its path kept.
LISTINGS = {"GET /notifications", "GET /suppressions"}
MAX_AHEAD = timedelta(days=30) - timedelta(minutes=5)
LOCAL_WEBHOOK = "http://127.0.0.1:9/hooks"
SPEC_EXAMPLE_WEBHOOK = "https://hooks.example.com/notifications"


def _time(value):
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    return at if at.tzinfo else None


def _timely(request, now):
    """A send request (or batch item) with its `send_at` and `expires_at` in range."""
    if not isinstance(request, dict):
        return request
    due = now
    if "send_at" in request:
        send_at = _time(request["send_at"])
        if send_at is None or send_at.year < 1900 or send_at > now + MAX_AHEAD:
            request["send_at"] = (now + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
            send_at = now + timedelta(hours=1)
        due = max(send_at, now)
    if "expires_at" in request:
        expires = _time(request["expires_at"])
        if expires is None or not due + timedelta(minutes=1) < expires < due + MAX_AHEAD:
            del request["expires_at"]
    return request


@schemathesis.hook
def map_case(context, case):
    label = f"{case.method.upper()} {case.operation.path}"
    if case.meta is None or case.meta.generation.mode != GenerationMode.POSITIVE:
        return case
    now = datetime.now(timezone.utc)
    if label in LISTINGS and isinstance(case.query, dict):
        case.query.pop("cursor", None)
    elif label == "POST /notifications":
        case.body = _timely(case.body, now)
    elif label == "POST /notifications/batch" and isinstance(case.body, dict):
        items = case.body.get("notifications")
        if isinstance(items, list):
            case.body["notifications"] = [_timely(item, now) for item in items]
    elif label == "POST /webhooks" and isinstance(case.body, dict) and "url" in case.body:
        case.body["url"] = LOCAL_WEBHOOK
    elif label == "POST /notifications/requeue" and isinstance(case.body, dict):
        since, until = _time(case.body.get("since")), _time(case.body.get("until"))
        if "until" in case.body and (until is None or (since is not None and until <= since)):
            del case.body["until"]
    return case


@schemathesis.hook
def before_call(context, case, kwargs):
    if (
        f"{case.method.upper()} {case.operation.path}" == "POST /webhooks"
        and isinstance(case.body, dict)
        and case.body.get("url") == SPEC_EXAMPLE_WEBHOOK
    ):
        # the spec's example names a host this machine cannot resolve (no DNS out)
        case.body["url"] = LOCAL_WEBHOOK
    if case.headers:
        case.headers = {name: _utf8_header(value) for name, value in case.headers.items()}
    if isinstance(case.body, (bytes, bytearray)):
        try:
            bytes(case.body).decode("utf-8")
        except UnicodeDecodeError:
            case.body = bytes(case.body).decode("utf-8", "replace").encode("utf-8")


def _from_the_emulator(response):
    return (
        response.status_code == 500
        and "x-request-id" not in response.headers
        and b"httpstatuses.com/500" in response.content
    )


@schemathesis.hook
def after_call(context, case, response):
    for _ in range(3):
        if not _from_the_emulator(response):
            return
        with requests.Session() as session:
            again = session.send(response.request, timeout=120)
        fresh = Response.from_requests(again, verify=response.verify)
        for slot in Response.__slots__:
            if slot not in ("request", "_override"):
                setattr(response, slot, getattr(fresh, slot))
        log = os.environ.get("CONTRACT_RETRIES")
        if log:
            with open(log, "a") as f:
                f.write(f"{response.request.method} {response.request.url} -> {response.status_code}\n")
