"""The local AWS stand-in: moto's server, plus the one SES v2 call the worker needs that moto
lacks.

    .venv/bin/python stand_in.py -H 127.0.0.1 -p PORT

Serves moto's own WSGI app, built as `moto_server` builds it (threaded, moto's request
handler), behind a small WSGI middleware that answers SES v2 `GetAccount`
(`GET /v2/email/account`) in SES's wire shape (REST-JSON, the API reference's "Response
Syntax"), with a generous quota: local runs are effectively unpaced, but read the quota the
way they do on AWS. Everything else, `/moto-api/` included, goes to moto unchanged.

The quota, from the environment (numbers):
  STAND_IN_SES_MAX_SEND_RATE       messages per second (default 1000)
  STAND_IN_SES_MAX_24_HOUR_SEND    messages per rolling 24 hours (default 1000000)
  STAND_IN_SES_SENT_LAST_24_HOURS  messages sent in the last 24 hours (default 0)
"""

import argparse
import json
import os
import signal
import sys
import uuid

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

GET_ACCOUNT = ("GET", "/v2/email/account")

QUOTA_VARS = (
    ("MaxSendRate", "STAND_IN_SES_MAX_SEND_RATE", 1000.0),
    ("Max24HourSend", "STAND_IN_SES_MAX_24_HOUR_SEND", 1000000.0),
    ("SentLast24Hours", "STAND_IN_SES_SENT_LAST_24_HOURS", 0.0),
)


def send_quota(env):
    """The `SendQuota` from the environment; exits with a message on a value that is not a
    number."""
    quota = {}
    for field, var, default in QUOTA_VARS:
        raw = env.get(var, "").strip()
        try:
            quota[field] = float(raw) if raw else default
        except ValueError:
            sys.exit(f"stand-in: {var}={raw!r} is not a number")
    return quota


def account(quota):
    """`GetAccount`'s answer for a production account in good standing."""
    return {
        "DedicatedIpAutoWarmupEnabled": False,
        "EnforcementStatus": "HEALTHY",
        "ProductionAccessEnabled": True,
        "SendQuota": quota,
        "SendingEnabled": True,
        "SuppressionAttributes": {"SuppressedReasons": ["BOUNCE", "COMPLAINT"]},
    }


class SesAccount:
    """WSGI middleware: answers `GetAccount` itself, hands every other request to `app`."""

    def __init__(self, app, quota):
        self.app = app
        self.body = json.dumps(account(quota)).encode()

    def __call__(self, environ, start_response):
        if (environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")) == GET_ACCOUNT:
            start_response(
                "200 OK",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(self.body))),
                    ("x-amzn-RequestId", str(uuid.uuid4())),
                ],
            )
            return [self.body]
        return self.app(environ, start_response)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()

    quota = send_quota(os.environ)
    # moto_server does the same: moto reads its own port from here
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    moto = DomainDispatcherApplication(create_backend_app)
    moto.debug = True
    print(f"stand-in: SES v2 GetAccount answers SendQuota {json.dumps(quota)}", file=sys.stderr)
    run_simple(
        args.host,
        args.port,
        SesAccount(moto, quota),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
