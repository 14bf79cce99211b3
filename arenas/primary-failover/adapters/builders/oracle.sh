#!/usr/bin/env bash
# Guest side of the oracle (run as root in the territory via `bash -s`, after a first line
# AOE_FAULT=NAME: empty for the oracle): confirm the incident, fence the failed primary,
# promote the replica atomically, check it, then switch the public proxy to it atomically.
# Changes no unit; nothing listens on 8081. Its faults change one step each:
# fault hasty: fails old-primary-fenced: restores service as fast as it can (the same atomic promotion and switch) but skips the fence, so /var/lib/failover/primary.fenced never exists
# fault memory: fails writes-restored: replaces failover-proxy.service on 8080 with its own "write-buffering" front (reads go to 8082; a PUT is queued in memory, answered 202 queued at once and written to the replica ~0.5 s later)
# fault volatile: fails host-reboot: promotes and switches by bind-mounting files kept under /run (a tmpfs) over replica.role and upstream; all works until the reboot drops the mounts and the old role and upstream are back
set -euo pipefail
fault=${AOE_FAULT:-}
d=/var/lib/failover
die() { echo "$*" >&2; exit 1; }
# set_file NAME VALUE: replace $d/NAME atomically (volatile: overlay it with a file under /run)
set_file() {
  if [[ "$fault" == volatile ]]; then
    install -d -m 0755 /run/failover
    printf '%s\n' "$2" > "/run/failover/$1"
    mount --bind "/run/failover/$1" "$d/$1"
  else
    printf '%s\n' "$2" > "$d/$1.new"
    mv -f "$d/$1.new" "$d/$1"
  fi
}

echo "aoe-step: confirm the incident (primary.failed, replica role, port 8081 closed)"
[[ -e "$d/primary.failed" ]] || die "$d/primary.failed is missing"
[[ "$(cat "$d/replica.role")" == replica ]] || die "replica.role is '$(head -c 40 "$d/replica.role")', expected replica"
! ss -lnt | grep -qF ':8081 ' || die "something listens on port 8081"

echo "aoe-step: fence the failed primary"
[[ "$fault" == hasty ]] || touch "$d/primary.fenced"

echo "aoe-step: promote the replica (replica.role)"
set_file replica.role primary
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8082/role)" == primary ]] || die "the replica on 8082 did not report role primary"

if [[ "$fault" == memory ]]; then
  echo "aoe-step: replace the public proxy with a write-buffering front end on 8080"
  install -d -m 0755 /opt/write-buffer
  cat > /opt/write-buffer/front.py <<'PY'
# Front end on 0.0.0.0:8080: reads go to the promoted replica, writes are queued and
# flushed to it in the background so clients never wait for the database.
import http.client, queue, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

pending = queue.Queue()


def call(method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", 8082, timeout=2)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def flusher():
    while True:
        path, body = pending.get()
        for _ in range(5):
            time.sleep(0.5)
            try:
                if call("PUT", path, body)[0] < 300:
                    break
            except OSError:
                pass


class Front(BaseHTTPRequestHandler):
    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        try:
            self.reply(*call("GET", self.path))
        except OSError:
            self.reply(502, b"")

    def do_PUT(self):
        pending.put((self.path, self.rfile.read(int(self.headers.get("Content-Length") or 0))))
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
fi

echo "aoe-step: switch the public proxy to 8082 (upstream)"
set_file upstream 8082
sync

echo "aoe-step: check reads and a write through port 8080"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8080/role)" == primary ]] || die "port 8080 does not reach the promoted replica"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8080/records/customer-red-4a7)" == red-original ]] || die "port 8080 does not return customer-red-4a7"
code=$(curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary failover-check http://127.0.0.1:8080/records/failover-selfcheck)
# memory's front acknowledges with 202 and writes a moment later: wait for the write
[[ "$code" == 204 || ( "$fault" == memory && "$code" == 202 ) ]] || die "PUT through port 8080 returned HTTP $code, expected 204"
for _ in $(seq 30); do
  [[ "$(curl -sS --max-time 2 http://127.0.0.1:8080/records/failover-selfcheck)" == failover-check ]] && break
  sleep 0.2
done
[[ "$(curl -sS --max-time 2 http://127.0.0.1:8080/records/failover-selfcheck)" == failover-check ]] || die "the write never reached the replica"
case "$fault" in
  "") echo "failover done: primary.fenced present, replica promoted, proxy upstream 8082" ;;
  *) echo "service restored ($fault): replica promoted, proxy upstream 8082" ;;
esac
