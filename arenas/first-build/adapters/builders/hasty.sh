# first-build builder "hasty" (aoe-tui built-in scripted:hasty), run as root in the
# territory with `bash -s`. A durable sqlite records service, except that it answers
# GET /records/<id> with a JSON document ({"id": ..., "value": ...}) instead of the exact
# stored bytes: write-read fails ("a different value than was written").
set -euo pipefail
echo "aoe-step: reading the slot unit and the contract"
systemctl cat builder-app.service >/dev/null
echo "aoe-step: writing /opt/builder/app.py (sqlite under /var/lib/builder)"
install -d -m 0755 /opt/builder /var/lib/builder
cat > /opt/builder/app.py.new <<'PY'
#!/usr/bin/env python3
import json, sqlite3, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DB = sqlite3.connect("/var/lib/builder/records.sqlite3", check_same_thread=False, isolation_level=None)
DB.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, value BLOB NOT NULL)")
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, b"ready")
        if self.path.startswith("/records/"):
            key = self.path[len("/records/"):]
            with LOCK:
                row = DB.execute("SELECT value FROM records WHERE id = ?", (key,)).fetchone()
            if row is None:
                return self.reply(404)
            doc = {"id": key, "value": bytes(row[0]).decode("utf-8", "replace")}
            return self.reply(200, json.dumps(doc).encode(), "application/json")
        self.reply(404)

    def do_PUT(self):
        if not self.path.startswith("/records/"):
            return self.reply(404)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with LOCK:
            DB.execute("INSERT OR REPLACE INTO records (id, value) VALUES (?, ?)", (self.path[len("/records/"):], body))
        self.reply(204)

    do_POST = do_PUT


ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
PY
chmod 0755 /opt/builder/app.py.new
mv -f /opt/builder/app.py.new /opt/builder/app.py
echo "aoe-step: restarting builder-app.service"
systemctl reset-failed builder-app.service >/dev/null 2>&1 || true
systemctl restart builder-app.service
echo "aoe-step: checking /health and a record"
for _ in $(seq 1 100); do
  [ "$(curl -fsS --max-time 1 http://127.0.0.1:8080/health 2>/dev/null)" = ready ] && break
  sleep 0.1
done
curl -fsS -X PUT --data-binary selftest http://127.0.0.1:8080/records/selftest >/dev/null
curl -fsS http://127.0.0.1:8080/records/selftest >/dev/null || { echo "self-check failed" >&2; exit 1; }
echo "aoe-summary: Deployed the records service on port 8080 (sqlite) and checked health, write and read."
