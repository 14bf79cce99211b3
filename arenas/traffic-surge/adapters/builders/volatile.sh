#!/usr/bin/env bash
# Faulty builder "volatile" for traffic-surge (run as root inside the territory, `bash -s`).
# Gets the surge right: a threaded service, optional lookups bounded to 4 concurrent
# slots and shed with 503 beyond that, every write committed (sqlite, WAL, synchronous)
# before it is acknowledged. But the ledger database lives under /run/traffic-surge
# (a tmpfs), seeded from /var/lib/traffic-surge/priority.json each time the service
# starts: it survives a service restart, and after a reboot only the history is back.
set -uo pipefail
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: inspect traffic-surge.service and the running program"
systemctl cat traffic-surge.service >/dev/null 2>&1 || die "traffic-surge.service does not exist"
[[ -f /opt/traffic-surge/app.py ]] || die "/opt/traffic-surge/app.py is missing"
install -d -m 0755 /opt/traffic-surge /var/lib/traffic-surge

echo "aoe-step: write a threaded app: fast sqlite ledger under /run, seeded from priority.json, bounded optional work"
cat > /opt/traffic-surge/app.py.new <<'PY'
#!/usr/bin/env python3
"""Surge service: sqlite priority ledger (seeded from priority.json) and bounded optional lookups."""

import json
import os
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DB = "/run/traffic-surge/ledger.sqlite3"
SEED = "/var/lib/traffic-surge/priority.json"
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
    try:
        with open(SEED, encoding="utf-8") as fh:
            history = json.load(fh)
    except (OSError, ValueError):
        history = {}
    conn.executemany(
        "INSERT OR IGNORE INTO priority (id, value) VALUES (?, ?)",
        [(k, str(v).encode("utf-8")) for k, v in history.items()],
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
[[ "$(curl -s --max-time 2 $u/priority/history-cobalt-f73)" == ledger-beta ]] || die "historical record history-cobalt-f73 is missing"
[[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary selfcheck-value $u/priority/selfcheck-1)" == 204 ]] \
  || die "PUT /priority/selfcheck-1 did not return 204"
[[ "$(curl -s --max-time 2 $u/priority/selfcheck-1)" == selfcheck-value ]] || die "GET /priority/selfcheck-1 did not return the value"
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' $u/optional/selfcheck)
[[ "$code" == 200 || "$code" == 503 ]] || die "GET /optional/selfcheck returned HTTP $code"
echo "aoe-summary: Threaded the surge service with a fast sqlite ledger and bounded optional work (503 beyond 4 at once); endpoints checked."
exit 0
