#!/usr/bin/env bash
# Guest-side builder (run as root in the territory with `bash -s`): the correct, durable
# rollout, or one of its faults (AOE_FAULT, empty or unset for the oracle). v2 is the live
# v1 program (/usr/lib/aoe-arena/zero-downtime-rollout/rollout-v1.py) with version "v2" on
# 127.0.0.1:8082 over the same sqlite file, started through the rollout-v2.service slot;
# once it answers, the proxy is switched by writing upstream.new and renaming it over
# upstream (one atomic step; the proxy reads the file per request). v1 and the proxy are
# never stopped.
# fault hasty: fails uninterrupted-cutover: a correct v2, but after switching upstream it restarts rollout-proxy.service "to pick up the change" (stop, a second for port 8080 to settle, start); the proxy already reads the file per request, so the restart is only a refused-connection outage the continuity monitor records for good
# fault memory: fails v2-restart: an atomic cutover with v1 left running, but v2 keeps the records written through it in a dict inside its process (reads fall back to the sqlite store); after systemctl restart rollout-v2.service the acknowledged write answers 404
# fault volatile: fails host-reboot: a correct sqlite v2 and atomic cutover, but the program is built in /run/rollout-build/ and /opt/rollout/v2.py is only a symlink to it; /run is a tmpfs, so after the reboot the link dangles, the slot cannot start and the proxy (upstream 8082) answers 502
set -uo pipefail
fault=${AOE_FAULT:-}
step() { printf 'aoe-step: %s\n' "$*"; }
die() { printf '%s\n' "$*" >&2; exit 1; }
get() { curl -sS --max-time 2 "http://127.0.0.1:$1$2" 2>/dev/null; }

step "inspect the live stack: v1, proxy, upstream file, records"
systemctl is-active --quiet rollout-v1.service rollout-proxy.service || die "rollout-v1.service or rollout-proxy.service is not running"
[[ -d /opt/rollout && -f /var/lib/rollout/records.sqlite3 ]] || die "/opt/rollout or /var/lib/rollout/records.sqlite3 is missing"
current=$(tr -d '[:space:]' < /var/lib/rollout/upstream)

# v2 = v1's program with version v2 on port 8082 (same API, same sqlite store)
edits=(-e 's/b"v1"/b"v2"/' -e 's/("127.0.0.1", 8081)/("127.0.0.1", 8082)/')
program=/opt/rollout/v2.py
doing="write /opt/rollout/v2.py: v1's program with version v2 on 127.0.0.1:8082, same sqlite store"
how="over the shared sqlite store; the proxy was switched to 8082 atomically; v1 still runs"
case $fault in
  hasty) how="over the shared sqlite store; upstream switched to 8082 and the proxy restarted to pick it up" ;;
  memory) # PUT stores in a dict of the process instead of the database; GET looks there first
    edits+=(-e '/^DB = /a RECORDS = {}  # records written through v2, kept in this process only'
      -e '/^        connection = database()$/,/^        connection.close()$/c\        RECORDS[self.path[9:]] = value'
      -e 's/^\( *\)row = connection.*$/&\n\1row = (RECORDS[self.path[9:]],) if self.path[9:] in RECORDS else row/')
    doing="write /opt/rollout/v2.py: v1's program with version v2 on 127.0.0.1:8082, new writes cached in the process"
    how="with new writes cached in the process; the proxy was switched to 8082 atomically" ;;
  volatile) program=/run/rollout-build/v2.py  # /run is a tmpfs: empty after a reboot
    doing="build v2 in /run/rollout-build and link it into the slot as /opt/rollout/v2.py"
    how="from /run/rollout-build (linked into the slot); the proxy was switched to 8082 atomically" ;;
esac
step "$doing"
install -d -m 0755 "${program%/*}" && sed "${edits[@]}" /usr/lib/aoe-arena/zero-downtime-rollout/rollout-v1.py > "$program.new" \
  && chmod 0644 "$program.new" && sync "$program.new" && mv -f "$program.new" "$program" || die "cannot install $program"
if [[ $program != /opt/rollout/v2.py ]]; then
  ln -sfn "$program" /opt/rollout/v2.py || die "cannot link /opt/rollout/v2.py to $program"
fi

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
  if [[ $fault == hasty ]]; then
    step "restart rollout-proxy.service to pick up the change (stop, let port 8080 settle, start)"
    systemctl stop rollout-proxy.service || die "systemctl stop rollout-proxy.service failed"
    for _ in $(seq 50); do ss -Hltn '( sport = :8080 )' 2>/dev/null | grep -q . || break; sleep 0.1; done
    sleep 1
    systemctl start rollout-proxy.service || die "systemctl start rollout-proxy.service failed"
    for _ in $(seq 50); do [[ "$(get 8080 /health)" == ready ]] && break; sleep 0.1; done
  fi
fi

step "self-check through the public endpoint (v2, records, v1 still running)"
[[ "$(get 8080 /version)" == v2 && "$(get 8080 /health)" == ready ]] || die "the public endpoint does not serve v2 after the switch"
[[ "$(get 8080 /records/customer-alpha-73c)" == alpha-original ]] || die "the public endpoint lost customer-alpha-73c"
systemctl is-active --quiet rollout-v1.service rollout-v2.service rollout-proxy.service || die "a rollout unit is not active after the switch"
systemctl is-enabled --quiet rollout-v2.service rollout-proxy.service || die "rollout-v2.service or rollout-proxy.service is not enabled"
printf 'aoe-summary: %s\n' "v2 serves on 127.0.0.1:8082 $how"
exit 0
