# hello-service's oracle builder, run as root in the territory (`bash -s`): deploys a
# durable greeting service into the hello.service slot and checks it. Its faults are
# declared variations of it (`aoe match run ... --agent scripted:NAME` runs this script
# with AOE_FAULT=NAME as its first line; the oracle itself gets AOE_FAULT empty):
# fault memory: keeps the names in a Python dict, so service-restart finds the name lost
# fault volatile: keeps the names on the /run tmpfs, which survives a service restart but not host-reboot
set -euo pipefail
case "${AOE_FAULT:-}" in
  "")       store=/var/lib/hello ;;
  memory)   store="" ;;
  volatile) store=/run/hello ;;
  *)        echo "oracle.sh: unknown fault '$AOE_FAULT'" >&2; exit 2 ;;
esac

echo "aoe-step: writing /opt/hello/app.py (names in ${store:-memory})"
install -d -m 0755 /opt/hello
cat > /opt/hello/app.py.new <<PY
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STORE = "$store"  # one file per id; empty: a dict in memory
names = {}


def valid(key):
    return 0 < len(key) <= 64 and key.replace("-", "").replace("_", "").isalnum()


def load(key):
    if STORE and os.path.exists(f"{STORE}/{key}"):
        with open(f"{STORE}/{key}", "rb") as f:
            return f.read()
    return names.get(key)


def save(key, name):
    if STORE:  # written, flushed and renamed into place before the service answers
        with open(f"{STORE}/{key}.tmp", "wb") as f:
            f.write(name)
            f.flush()
            os.fsync(f.fileno())
        os.replace(f"{STORE}/{key}.tmp", f"{STORE}/{key}")
    names[key] = name


class Hello(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, b"ready")
        key = self.path.removeprefix("/hello/")
        name = load(key) if key != self.path and valid(key) else None
        self.reply(404) if name is None else self.reply(200, b"hello, " + name)

    def do_PUT(self):
        key = self.path.removeprefix("/names/")
        if key == self.path or not valid(key):
            return self.reply(404)
        save(key, self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.reply(204)


if STORE:
    os.makedirs(STORE, exist_ok=True)
ThreadingHTTPServer(("0.0.0.0", 8080), Hello).serve_forever()
PY
mv -f /opt/hello/app.py.new /opt/hello/app.py

echo "aoe-step: restarting hello.service"
systemctl reset-failed hello.service 2>/dev/null || true
systemctl restart hello.service
echo "aoe-step: checking /health, a write and its greeting"
for _ in $(seq 50); do
  [[ "$(curl -fsS --max-time 1 http://127.0.0.1:8080/health 2>/dev/null)" == ready ]] && break
  sleep 0.2
done
curl -fsS -X PUT --data-binary builder http://127.0.0.1:8080/names/self-check >/dev/null
[[ "$(curl -fsS http://127.0.0.1:8080/hello/self-check)" == "hello, builder" ]] || { echo "the greeting self-check failed" >&2; exit 1; }
echo "aoe-summary: hello.service greets from ${store:-memory}"
