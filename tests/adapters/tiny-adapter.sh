#!/usr/bin/env bash
# tiny-adapter.sh: a minimal external adapter written from the upstream adapter contract
# (spec §5), used by the "external adapter contract" acceptance test.
#
# Reads: AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_MODEL
#        AOE_INSTRUCTION_FILE AOE_RESULT_FILE AOE_USAGE_FILE AOE_CREDENTIAL_FILE
# Does:  deploys a durable first-build records service over password SSH (file per
#        record under /var/lib/tiny-builder, fsync'd), writes two cumulative usage
#        checkpoints to AOE_USAGE_FILE (.partial + rename), writes AOE_RESULT_FILE.
# Knobs (tests only): TINY_ADAPTER_MODE=crash (exit 3, no result) | sleep (hang) |
#        wrong-agent (result names another agent); TINY_ADAPTER_STEP_S (pause, default 0.3).
set -euo pipefail

for v in AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_INSTRUCTION_FILE \
         AOE_RESULT_FILE AOE_USAGE_FILE AOE_CREDENTIAL_FILE; do
  [[ -n "${!v:-}" ]] || { echo "tiny-adapter: $v is not set" >&2; exit 2; }
done
[[ -s "$AOE_INSTRUCTION_FILE" ]] || { echo "tiny-adapter: empty instruction file" >&2; exit 2; }

mode="${TINY_ADAPTER_MODE:-}"
step="${TINY_ADAPTER_STEP_S:-0.3}"

# The password reaches sshpass through SSHPASS (never argv, never printed).
SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
[[ -n "$SSHPASS" ]] || { echo "tiny-adapter: no AOE_SSH_PASSWORD in the credential file" >&2; exit 2; }
export SSHPASS
guest() {
  sshpass -e ssh -p "$AOE_SSH_PORT" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -o PreferredAuthentications=password -o PubkeyAuthentication=no \
    -o ConnectTimeout=10 "root@$AOE_TERRITORY_HOST" "$@"
}

usage_json() { # input output cost rounds
  jq -cn --argjson i "$1" --argjson o "$2" --argjson c "$3" --argjson r "$4" \
    '{rounds:$r, tool_calls:$r, input_tokens:$i, output_tokens:$o, cost_microusd:$c, resource_units:1}'
}
checkpoint() {
  jq -n --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --argjson u "$1" \
    '{schema_version:1, agent:$a, territory:$t, usage:$u}' > "$AOE_USAGE_FILE.partial"
  mv -f "$AOE_USAGE_FILE.partial" "$AOE_USAGE_FILE"
}
result() { # status summary usage-json [agent]
  jq -n --arg a "${4:-$AOE_AGENT_ID}" --arg t "$AOE_TERRITORY_ID" --arg s "$1" --arg m "$2" --argjson u "$3" \
    '{schema_version:1, agent:$a, territory:$t, status:$s, summary:$m, usage:$u, transcript:null}' > "$AOE_RESULT_FILE.partial"
  mv -f "$AOE_RESULT_FILE.partial" "$AOE_RESULT_FILE"
}

echo "tiny-adapter: model=${AOE_MODEL:-?} territory=$AOE_TERRITORY_ID"
echo "tiny-adapter: looking around"
guest 'systemctl cat builder-app.service >/dev/null && command -v python3' || { echo "tiny-adapter: discovery failed" >&2; exit 4; }
checkpoint "$(usage_json 1200 80 1520 1)"
sleep "$step"

case "$mode" in
  crash) echo "tiny-adapter: crashing on purpose" >&2; exit 3 ;;
  sleep) echo "tiny-adapter: hanging on purpose"; sleep 3600 & wait ;;
esac

echo "tiny-adapter: deploying /opt/builder/app.py"
guest 'mkdir -p /opt/builder /var/lib/tiny-builder && cat > /opt/builder/app.py.new && mv -f /opt/builder/app.py.new /opt/builder/app.py && sync && systemctl reset-failed builder-app.service >/dev/null 2>&1; systemctl restart builder-app.service' <<'PY'
import binascii, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
D = "/var/lib/tiny-builder"
def path(rid): return os.path.join(D, binascii.hexlify(rid.encode()).decode())
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def send(self, code, body=b""):
        self.send_response(code); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        if self.path == "/health": return self.send(200, b"ready")
        if not self.path.startswith("/records/"): return self.send(404)
        try:
            with open(path(self.path[9:]), "rb") as f: return self.send(200, f.read())
        except OSError: return self.send(404)
    def do_PUT(self):
        if not self.path.startswith("/records/") or len(self.path) <= 9: return self.send(404)
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        p = path(self.path[9:]); tmp = p + ".tmp"
        with open(tmp, "wb") as f: f.write(data); f.flush(); os.fsync(f.fileno())
        os.replace(tmp, p); fd = os.open(D, os.O_RDONLY); os.fsync(fd); os.close(fd)
        self.send(204)
class S(ThreadingHTTPServer): allow_reuse_address = True; daemon_threads = True
S(("0.0.0.0", 8080), H).serve_forever()
PY
checkpoint "$(usage_json 3400 410 5040 2)"
sleep "$step"

echo "tiny-adapter: checking /health"
guest 'for i in $(seq 1 100); do [ "$(curl -fsS --max-time 1 http://127.0.0.1:8080/health 2>/dev/null)" = ready ] && exit 0; sleep 0.1; done; exit 1' \
  || { result failed "service never became healthy" "$(usage_json 3400 410 5040 2)"; exit 1; }

final="$(usage_json 5200 655 7820 3)"
checkpoint "$final"
if [[ "$mode" == wrong-agent ]]; then
  result completed "tiny adapter deployed the service" "$final" "someone-else"
else
  result completed "tiny adapter deployed the service" "$final"
fi
echo "tiny-adapter: done"
