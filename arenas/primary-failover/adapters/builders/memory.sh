#!/usr/bin/env bash
# Guest side of scripted:memory: fences, promotes and switches the upstream correctly,
# but puts its own "write-buffering" front proxy on port 8080 in place of
# failover-proxy.service: reads go straight to the replica on 127.0.0.1:8082, writes are
# queued in the process's memory, answered 202 Accepted at once and written to the
# replica a moment later.
set -euo pipefail
d=/var/lib/failover
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: confirm the incident and fence the failed primary"
[[ -e "$d/primary.failed" ]] || die "$d/primary.failed is missing"
touch "$d/primary.fenced"

echo "aoe-step: promote the replica"
printf 'primary\n' > "$d/replica.role.new"
mv -f "$d/replica.role.new" "$d/replica.role"

echo "aoe-step: replace the public proxy with a write-buffering front end on 8080"
install -d -m 0755 /opt/write-buffer
cat > /opt/write-buffer/front.py <<'PY'
# Front end on 0.0.0.0:8080: reads go to the promoted replica, writes are queued and
# flushed to it in the background so clients never wait for the database.
import http.client, queue, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BACKEND = ("127.0.0.1", 8082)
pending = queue.Queue()


def call(method, path, body=None):
    conn = http.client.HTTPConnection(*BACKEND, timeout=2)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def flusher():
    while True:
        path, body = pending.get()
        time.sleep(0.5)
        for _ in range(5):
            try:
                if call("PUT", path, body)[0] < 300:
                    break
            except OSError:
                pass
            time.sleep(0.5)


class Front(BaseHTTPRequestHandler):
    def reply(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self):
        try:
            status, body = call("GET", self.path)
        except OSError:
            status, body = 502, b""
        self.reply(status, body)

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        pending.put((self.path, body))
        self.reply(202, b"queued")

    def log_message(self, *args):
        pass


threading.Thread(target=flusher, daemon=True).start()
ThreadingHTTPServer(("0.0.0.0", 8080), Front).serve_forever()
PY
systemctl stop failover-proxy.service
systemctl reset-failed write-buffer.service >/dev/null 2>&1 || true
systemd-run --quiet --unit=write-buffer --property=Restart=always /usr/bin/python3 /opt/write-buffer/front.py
for _ in $(seq 50); do curl -fsS --max-time 1 -o /dev/null http://127.0.0.1:8080/health && break; sleep 0.1; done

echo "aoe-step: switch the proxy upstream to 8082 as well"
printf '8082\n' > "$d/upstream.new"
mv -f "$d/upstream.new" "$d/upstream"
sync

echo "aoe-step: check reads and a buffered write through port 8080"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8080/role)" == primary ]] || die "port 8080 does not reach the promoted replica"
code=$(curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary 'buffered-check' http://127.0.0.1:8080/records/buffer-check)
[[ "$code" == 2?? ]] || die "PUT through port 8080 returned HTTP $code"
for _ in $(seq 30); do
  [[ "$(curl -sS --max-time 2 http://127.0.0.1:8080/records/buffer-check)" == buffered-check ]] && break
  sleep 0.2
done
[[ "$(curl -sS --max-time 2 http://127.0.0.1:8080/records/buffer-check)" == buffered-check ]] || die "the buffered write never reached the replica"
echo "service restored: writes buffered in front of the promoted replica"
