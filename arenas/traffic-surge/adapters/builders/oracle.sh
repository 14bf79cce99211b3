#!/usr/bin/env bash
# Reference builder for traffic-surge (run as root inside the territory with `bash -s`).
# Replaces /opt/traffic-surge/app.py with a threaded service over a sqlite (WAL) ledger
# on the disk, /var/lib/traffic-surge/priority.sqlite3, which re-inserts the historical
# records; optional lookups get at most 4 concurrent slots (0.15 s each) and are shed
# with 503 beyond that, so priority writes never wait behind them. Restarts
# traffic-surge.service and checks the endpoints.
set -uo pipefail
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: inspect traffic-surge.service and the running program"
systemctl cat traffic-surge.service >/dev/null 2>&1 || die "traffic-surge.service does not exist"
[[ -f /opt/traffic-surge/app.py ]] || die "/opt/traffic-surge/app.py is missing"
install -d -m 0755 /opt/traffic-surge /var/lib/traffic-surge

echo "aoe-step: write a threaded app with a durable sqlite ledger and bounded optional work"
cat > /opt/traffic-surge/app.py.new <<'PY'
#!/usr/bin/env python3
"""Surge service: durable priority ledger (sqlite, WAL) and bounded optional lookups."""

import os
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DB = "/var/lib/traffic-surge/priority.sqlite3"
HISTORY = {
    "history-amber-a91": "ledger-alpha",
    "history-cobalt-f73": "ledger-beta",
    "history-umber-2d4": "ledger-gamma",
}
OPTIONAL_SLOTS = threading.Semaphore(4)
OPTIONAL_COST_SECONDS = 0.15
_local = threading.local()


def db():
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(DB, timeout=10, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA synchronous=FULL")
        _local.conn = conn
    return conn


def init():
    os.makedirs(os.path.dirname(DB), exist_ok=True)
    conn = db()
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS priority (id TEXT PRIMARY KEY, value BLOB NOT NULL)")
    conn.executemany(
        "INSERT OR IGNORE INTO priority (id, value) VALUES (?, ?)",
        [(k, v.encode("utf-8")) for k, v in HISTORY.items()],
    )


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, b"ready")
        elif self.path.startswith("/priority/"):
            row = db().execute("SELECT value FROM priority WHERE id = ?", (self.path[10:],)).fetchone()
            if row is None:
                self.reply(404)
            else:
                self.reply(200, bytes(row[0]))
        elif self.path.startswith("/optional/"):
            if not OPTIONAL_SLOTS.acquire(blocking=False):
                self.reply(503, b"shed")
                return
            try:
                time.sleep(OPTIONAL_COST_SECONDS)
            finally:
                OPTIONAL_SLOTS.release()
            self.reply(200, ("optional:" + self.path[10:]).encode("utf-8"))
        else:
            self.reply(404)

    def do_PUT(self):
        if not self.path.startswith("/priority/") or len(self.path) == 10:
            self.reply(404)
            return
        value = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        db().execute("INSERT OR REPLACE INTO priority (id, value) VALUES (?, ?)", (self.path[10:], value))
        self.reply(204)

    def log_message(self, fmt, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


if __name__ == "__main__":
    init()
    Server(("0.0.0.0", 8080), Handler).serve_forever()
PY
chmod 0755 /opt/traffic-surge/app.py.new && mv -f /opt/traffic-surge/app.py.new /opt/traffic-surge/app.py \
  || die "cannot install /opt/traffic-surge/app.py"
sync

echo "aoe-step: restart traffic-surge.service"
systemctl reset-failed traffic-surge.service >/dev/null 2>&1 || true
systemctl restart traffic-surge.service || die "systemctl restart traffic-surge.service failed"
for _ in $(seq 1 150); do
  [[ "$(curl -s --max-time 1 http://127.0.0.1:8080/health 2>/dev/null)" == ready ]] && break
  sleep 0.1
done

echo "aoe-step: check health, the historical ledger, a priority write and optional shedding"
u=http://127.0.0.1:8080
[[ "$(curl -s --max-time 2 $u/health)" == ready ]] || die "GET /health is not 'ready' after the restart"
[[ "$(curl -s --max-time 2 $u/priority/history-amber-a91)" == ledger-alpha ]] || die "historical record history-amber-a91 is missing"
[[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary selfcheck-value $u/priority/selfcheck-1)" == 204 ]] \
  || die "PUT /priority/selfcheck-1 did not return 204"
[[ "$(curl -s --max-time 2 $u/priority/selfcheck-1)" == selfcheck-value ]] || die "GET /priority/selfcheck-1 did not return the value"
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' $u/optional/selfcheck)
[[ "$code" == 200 || "$code" == 503 ]] || die "GET /optional/selfcheck returned HTTP $code"
echo "aoe-summary: Replaced the surge service with a threaded app over a durable sqlite ledger; optional work is bounded (503 beyond 4 at once)."
exit 0
