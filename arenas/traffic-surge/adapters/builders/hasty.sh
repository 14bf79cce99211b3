#!/usr/bin/env bash
# Faulty builder "hasty" for traffic-surge (run as root inside the territory, `bash -s`).
# It fixes what it notices first: the JSON ledger becomes a durable sqlite store that
# keeps the historical records. It leaves the server as it found it: one request at a
# time (plain HTTPServer) with the 0.45 s optional lookup, so under an optional surge a
# priority write waits behind every optional request queued before it.
set -uo pipefail
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: inspect traffic-surge.service and the running program"
systemctl cat traffic-surge.service >/dev/null 2>&1 || die "traffic-surge.service does not exist"
[[ -f /var/lib/traffic-surge/priority.json ]] || die "/var/lib/traffic-surge/priority.json is missing"

echo "aoe-step: move the ledger from priority.json to sqlite (keeping the history)"
cat > /opt/traffic-surge/app.py.new <<'PY'
#!/usr/bin/env python3
"""Traffic surge service with a sqlite priority ledger (imported from priority.json)."""

import json
import os
import sqlite3
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

STATE_DIR = "/var/lib/traffic-surge"
DB = os.path.join(STATE_DIR, "ledger.sqlite3")
LEGACY = os.path.join(STATE_DIR, "priority.json")
OPTIONAL_COST_SECONDS = 0.45


def connect():
    conn = sqlite3.connect(DB, timeout=10, isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS ledger (id TEXT PRIMARY KEY, value BLOB NOT NULL)")
    return conn


def import_legacy(conn):
    try:
        with open(LEGACY, encoding="utf-8") as fh:
            records = json.load(fh)
    except (OSError, ValueError):
        return
    conn.executemany(
        "INSERT OR IGNORE INTO ledger (id, value) VALUES (?, ?)",
        [(k, str(v).encode("utf-8")) for k, v in records.items()],
    )


CONN = connect()


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
            row = CONN.execute("SELECT value FROM ledger WHERE id = ?", (self.path[10:],)).fetchone()
            self.reply(404) if row is None else self.reply(200, bytes(row[0]))
        elif self.path.startswith("/optional/"):
            time.sleep(OPTIONAL_COST_SECONDS)
            self.reply(200, ("optional:" + self.path[10:]).encode("utf-8"))
        else:
            self.reply(404)

    def do_PUT(self):
        if not self.path.startswith("/priority/"):
            self.reply(404)
            return
        value = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        CONN.execute("INSERT OR REPLACE INTO ledger (id, value) VALUES (?, ?)", (self.path[10:], value))
        self.reply(204)

    def log_message(self, fmt, *args):
        pass


if __name__ == "__main__":
    import_legacy(CONN)
    HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
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
  [[ "$(curl -s --max-time 10 $u/health 2>/dev/null)" == ready ]] && { ok=1; break; }
  sleep 0.1
done
[[ -n "$ok" ]] || die "GET /health is not 'ready' after the restart"
[[ "$(curl -s --max-time 10 $u/priority/history-cobalt-f73)" == ledger-beta ]] || die "historical record history-cobalt-f73 is missing"
[[ "$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -X PUT --data-binary selfcheck-value $u/priority/selfcheck-1)" == 204 ]] \
  || die "PUT /priority/selfcheck-1 did not return 204"
[[ "$(curl -s --max-time 10 $u/priority/selfcheck-1)" == selfcheck-value ]] || die "GET /priority/selfcheck-1 did not return the value"
[[ "$(curl -s --max-time 10 $u/optional/selfcheck)" == optional:selfcheck ]] || die "GET /optional/selfcheck did not answer"
echo "aoe-summary: Moved the priority ledger to sqlite (history kept) and restarted traffic-surge.service; endpoints checked."
exit 0
