#!/usr/bin/env python3
"""Traffic surge service: a priority ledger and optional lookups on port 8080.

GET /health            -> 200 "ready"
GET /priority/<id>     -> 200 with the stored value, or 404
PUT /priority/<id>     -> stores the request body, 204
GET /optional/<id>     -> 200 "optional:<id>" (an expensive, nonessential lookup)

The ledger is the JSON object in /var/lib/traffic-surge/priority.json.
"""

import json
import os
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

STATE_DIR = "/var/lib/traffic-surge"
LEDGER = os.path.join(STATE_DIR, "priority.json")
LEDGER_TMP = os.path.join(STATE_DIR, "priority.tmp")
OPTIONAL_COST_SECONDS = 0.45


def read_ledger():
    with open(LEDGER, encoding="utf-8") as fh:
        return json.load(fh)


def write_ledger(records):
    with open(LEDGER_TMP, "w", encoding="utf-8") as fh:
        json.dump(records, fh, sort_keys=True)
    os.replace(LEDGER_TMP, LEDGER)


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, b"ready")
        elif self.path.startswith("/priority/"):
            key = self.path[len("/priority/"):]
            records = read_ledger()
            if key in records:
                self.reply(200, records[key].encode("utf-8"))
            else:
                self.reply(404)
        elif self.path.startswith("/optional/"):
            key = self.path[len("/optional/"):]
            time.sleep(OPTIONAL_COST_SECONDS)
            self.reply(200, ("optional:" + key).encode("utf-8"))
        else:
            self.reply(404)

    def do_PUT(self):
        if not self.path.startswith("/priority/"):
            self.reply(404)
            return
        key = self.path[len("/priority/"):]
        length = int(self.headers.get("Content-Length") or 0)
        value = self.rfile.read(length).decode("utf-8")
        records = read_ledger()
        records[key] = value
        write_ledger(records)
        self.reply(204)

    def log_message(self, fmt, *args):
        pass


if __name__ == "__main__":
    HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
