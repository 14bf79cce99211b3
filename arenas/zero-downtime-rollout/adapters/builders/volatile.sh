#!/usr/bin/env bash
# Guest-side builder "volatile": a correct sqlite-backed v2 and a correct atomic
# cutover, but the program is built in /run/rollout-build/ and the slot's
# /opt/rollout/v2.py is only a symlink to it. /run is a tmpfs: after a reboot the link
# dangles, rollout-v2.service cannot start and the proxy (upstream 8082) answers 502
# (host-reboot fails).
set -uo pipefail
step() { printf 'aoe-step: %s\n' "$*"; }
die() { printf '%s\n' "$*" >&2; exit 1; }
get() { curl -sS --max-time 2 "http://127.0.0.1:$1$2" 2>/dev/null; }

step "inspect the live stack: v1, proxy, upstream file, records"
systemctl is-active --quiet rollout-v1.service rollout-proxy.service || die "rollout-v1.service or rollout-proxy.service is not running"
[[ -d /opt/rollout && -f /var/lib/rollout/records.sqlite3 ]] || die "/opt/rollout or /var/lib/rollout/records.sqlite3 is missing"
current=$(tr -d '[:space:]' < /var/lib/rollout/upstream)

step "build v2 in /run/rollout-build and link it into the slot as /opt/rollout/v2.py"
install -d -m 0755 /run/rollout-build || die "cannot create /run/rollout-build"
cat > /run/rollout-build/v2.py.new <<'PY'
import sqlite3
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DB = "/var/lib/rollout/records.sqlite3"


def database():
    connection = sqlite3.connect(DB, timeout=10)
    connection.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, value TEXT NOT NULL)")
    return connection


class Handler(BaseHTTPRequestHandler):
    def send(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send(200, b"ready")
        elif self.path == "/version":
            self.send(200, b"v2")
        elif self.path.startswith("/records/"):
            connection = database()
            try:
                row = connection.execute("SELECT value FROM records WHERE id=?", (self.path[9:],)).fetchone()
            finally:
                connection.close()
            if row is None:
                self.send(404)
            else:
                self.send(200, row[0].encode())
        else:
            self.send(404)

    def do_PUT(self):
        if not self.path.startswith("/records/"):
            self.send(404)
            return
        value = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        connection = database()
        try:
            connection.execute(
                "INSERT INTO records(id,value) VALUES(?,?) ON CONFLICT(id) DO UPDATE SET value=excluded.value",
                (self.path[9:], value),
            )
            connection.commit()
        finally:
            connection.close()
        self.send(204)

    def log_message(self, *_):
        pass


ThreadingHTTPServer(("127.0.0.1", 8082), Handler).serve_forever()
PY
mv -f /run/rollout-build/v2.py.new /run/rollout-build/v2.py && ln -sfn /run/rollout-build/v2.py /opt/rollout/v2.py \
  || die "cannot link /opt/rollout/v2.py"

step "start rollout-v2.service and check v2 directly on 127.0.0.1:8082"
systemctl reset-failed rollout-v2.service >/dev/null 2>&1
systemctl restart rollout-v2.service || die "systemctl restart rollout-v2.service failed"
for _ in $(seq 30); do [[ "$(get 8082 /version)" == v2 ]] && break; sleep 0.1; done
[[ "$(get 8082 /version)" == v2 ]] || die "v2 did not answer GET /version with v2 on 127.0.0.1:8082 within 3 s"
[[ "$(get 8082 /health)" == ready ]] || die "v2 GET /health is not ready"
[[ "$(get 8082 /records/customer-alpha-73c)" == alpha-original && "$(get 8082 /records/customer-beta-a19)" == beta-original ]] \
  || die "v2 does not serve the existing customer records"

if [[ "$current" != 8082 ]]; then
  step "confirm the public endpoint is serving live traffic before the switch"
  # connections from outside the host closed by the proxy (TIME-WAIT on :8080)
  for _ in $(seq 300); do
    n=$(ss -Htn state time-wait '( sport = :8080 )' 2>/dev/null | awk '$NF !~ /^(127\.|\[::1\]|\[::ffff:127\.)/' | wc -l)
    (( n >= 12 )) && break
    sleep 0.1
  done
  step "switch the proxy to v2: write upstream.new, rename it over upstream"
  printf '8082\n' > /var/lib/rollout/upstream.new && sync /var/lib/rollout/upstream.new \
    && mv -f /var/lib/rollout/upstream.new /var/lib/rollout/upstream || die "cannot switch /var/lib/rollout/upstream"
  sync /var/lib/rollout
fi


step "self-check through the public endpoint (v2, records, v1 still running)"
[[ "$(get 8080 /version)" == v2 && "$(get 8080 /health)" == ready ]] || die "the public endpoint does not serve v2 after the switch"
[[ "$(get 8080 /records/customer-alpha-73c)" == alpha-original ]] || die "the public endpoint lost customer-alpha-73c"
systemctl is-active --quiet rollout-v1.service rollout-v2.service rollout-proxy.service || die "a rollout unit is not active after the switch"
systemctl is-enabled --quiet rollout-v2.service rollout-proxy.service || die "rollout-v2.service or rollout-proxy.service is not enabled"
printf 'aoe-summary: %s\n' "v2 built in /run/rollout-build and linked into the slot; the proxy was switched to 8082 atomically"
exit 0
