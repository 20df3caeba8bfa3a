"""A small webhook receiver, as a caller of notification-service would write one: it verifies
each delivery's signature with the Standard Webhooks library from PyPI (`standardwebhooks`, a
client nobody on this project wrote) and records what it received.

    python webhook_receiver.py --port 0 --secret-file SECRET --record RECORD.jsonl \
        [--fail-first N] [--ready READY]

- The endpoint's secret (`whsec_…`) is read from SECRET at each request: the receiver starts
  before the endpoint is registered, which is when the secret is known.
- Each request is one JSON line in RECORD: the path, the three `webhook-*` headers, the body,
  whether the signature verified (`verified`, and `verify_error` when not) and the status this
  receiver answered.
- The first N deliveries of each `webhook-id` are answered 500, to show a retry (default 0).
  Any other verified delivery is answered 204; an unverified one 401.
- With --port 0 a free port is taken; the port is written to READY once listening.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret-file", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--ready")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()

    lock = threading.Lock()
    seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace")
            headers = {
                name: self.headers.get(name)
                for name in ("webhook-id", "webhook-timestamp", "webhook-signature")
            }
            record = {"path": self.path, "headers": headers, "body": body}
            try:
                with open(args.secret_file, encoding="utf-8") as f:
                    secret = f.read().strip()
                Webhook(secret).verify(body, headers)
                record["verified"] = True
            except (OSError, WebhookVerificationError, ValueError) as err:
                record["verified"] = False
                record["verify_error"] = f"{type(err).__name__}: {err}"
            with lock:
                count = seen.get(headers["webhook-id"], 0) + 1
                seen[headers["webhook-id"]] = count
                if not record["verified"]:
                    status = 401
                elif count <= args.fail_first:
                    status = 500
                else:
                    status = 204
                record["status"] = status
                with open(args.record, "a", encoding="utf-8") as out:
                    out.write(json.dumps(record) + "\n")
                # under the lock: one whole line per delivery, whatever the threads do
                if not args.quiet:
                    event = {}
                    try:
                        event = json.loads(body)
                    except ValueError:
                        pass
                    print(
                        f"received {event.get('type', '?')} for {event.get('data', {}).get('id', '?')}"
                        f" (webhook-id {headers['webhook-id']}): signature "
                        f"{'verified' if record['verified'] else 'NOT verified'}, answered {status}",
                        flush=True,
                    )
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.ready:
        with open(args.ready, "w", encoding="utf-8") as f:
            f.write(str(server.server_address[1]))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
