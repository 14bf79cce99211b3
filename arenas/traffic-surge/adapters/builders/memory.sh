#!/usr/bin/env bash
# Faulty builder "memory" for traffic-surge (run as root inside the territory, `bash -s`).
# A threaded service with a durable sqlite ledger that answers priority requests at
# once. Optional lookups are handed to one in-memory queue with no limit, served by a
# single worker (0.45 s each) that never sheds work: under a burst of concurrent
# optional requests the queue only grows, and most callers wait far longer than 2 s.
set -uo pipefail
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: inspect traffic-surge.service and the running program"
systemctl cat traffic-surge.service >/dev/null 2>&1 || die "traffic-surge.service does not exist"
[[ -f /var/lib/traffic-surge/priority.json ]] || die "/var/lib/traffic-surge/priority.json is missing"

echo "aoe-step: write a threaded app: sqlite ledger, optional work through a background queue"
cat > /opt/traffic-surge/app.py.new <<'PY'
#!/usr/bin/env python3
"""Traffic surge service: threaded, sqlite priority ledger, optional lookups queued to a worker."""

import json
import os
import queue
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE_DIR = "/var/lib/traffic-surge"
DB = os.path.join(STATE_DIR, "ledger.sqlite3")
LEGACY = os.path.join(STATE_DIR, "priority.json")
OPTIONAL_COST_SECONDS = 0.45
OPTIONAL_QUEUE = queue.Queue()  # background work; every request is eventually served
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
    conn = db()
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS ledger (id TEXT PRIMARY KEY, value BLOB NOT NULL)")
    try:
        with open(LEGACY, encoding="utf-8") as fh:
            records = json.load(fh)
    except (OSError, ValueError):
        records = {}
    conn.executemany(
        "INSERT OR IGNORE INTO ledger (id, value) VALUES (?, ?)",
        [(k, str(v).encode("utf-8")) for k, v in records.items()],
    )


def optional_worker():
    while True:
        key, done, result = OPTIONAL_QUEUE.get()
        time.sleep(OPTIONAL_COST_SECONDS)
        result.append(("optional:" + key).encode("utf-8"))
        done.set()


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
            row = db().execute("SELECT value FROM ledger WHERE id = ?", (self.path[10:],)).fetchone()
            self.reply(404) if row is None else self.reply(200, bytes(row[0]))
        elif self.path.startswith("/optional/"):
            done, result = threading.Event(), []
            OPTIONAL_QUEUE.put((self.path[10:], done, result))
            done.wait()
            self.reply(200, result[0])
        else:
            self.reply(404)

    def do_PUT(self):
        if not self.path.startswith("/priority/"):
            self.reply(404)
            return
        value = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        db().execute("INSERT OR REPLACE INTO ledger (id, value) VALUES (?, ?)", (self.path[10:], value))
        self.reply(204)

    def log_message(self, fmt, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


if __name__ == "__main__":
    init()
    threading.Thread(target=optional_worker, daemon=True).start()
    Server(("0.0.0.0", 8080), Handler).serve_forever()
PY
chmod 0755 /opt/traffic-surge/app.py.new && mv -f /opt/traffic-surge/app.py.new /opt/traffic-surge/app.py \
  || die "cannot install /opt/traffic-surge/app.py"
sync

echo "aoe-step: restart traffic-surge.service"
systemctl reset-failed traffic-surge.service >/dev/null 2>&1 || true
systemctl restart traffic-surge.service || die "systemctl restart traffic-surge.service failed"

echo "aoe-step: check health, the history, a write and an optional lookup"
u=http://127.0.0.1:8080
ok=""
for _ in $(seq 1 150); do
  [[ "$(curl -s --max-time 1 $u/health 2>/dev/null)" == ready ]] && { ok=1; break; }
  sleep 0.1
done
[[ -n "$ok" ]] || die "GET /health is not 'ready' after the restart"
[[ "$(curl -s --max-time 2 $u/priority/history-umber-2d4)" == ledger-gamma ]] || die "historical record history-umber-2d4 is missing"
[[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary selfcheck-value $u/priority/selfcheck-1)" == 204 ]] \
  || die "PUT /priority/selfcheck-1 did not return 204"
[[ "$(curl -s --max-time 2 $u/priority/selfcheck-1)" == selfcheck-value ]] || die "GET /priority/selfcheck-1 did not return the value"
[[ "$(curl -s --max-time 30 $u/optional/selfcheck)" == optional:selfcheck ]] || die "GET /optional/selfcheck did not answer"
echo "aoe-summary: Threaded the surge service (sqlite ledger) and moved optional lookups to a background worker queue; endpoints checked."
exit 0
