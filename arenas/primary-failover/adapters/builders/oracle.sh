#!/usr/bin/env bash
# Guest side of the oracle (run as root in the territory via `bash -s`): confirm the
# incident, fence the failed primary, promote the replica atomically, check it, then
# switch the public proxy to it atomically. Changes no unit; nothing listens on 8081.
set -euo pipefail
d=/var/lib/failover
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: confirm the incident (primary.failed, replica role, port 8081 closed)"
[[ -e "$d/primary.failed" ]] || die "$d/primary.failed is missing"
[[ "$(cat "$d/replica.role")" == replica ]] || die "replica.role is '$(head -c 40 "$d/replica.role")', expected replica"
! ss -lnt | grep -qF ':8081 ' || die "something listens on port 8081"

echo "aoe-step: fence the failed primary"
touch "$d/primary.fenced"

echo "aoe-step: promote the replica (atomic rename of replica.role)"
printf 'primary\n' > "$d/replica.role.new"
mv -f "$d/replica.role.new" "$d/replica.role"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8082/role)" == primary ]] || die "the replica on 8082 did not report role primary"

echo "aoe-step: switch the public proxy to 8082 (atomic rename of upstream)"
printf '8082\n' > "$d/upstream.new"
mv -f "$d/upstream.new" "$d/upstream"
sync

echo "aoe-step: check reads and writes through port 8080"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8080/role)" == primary ]] || die "port 8080 does not reach the promoted replica"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8080/records/customer-red-4a7)" == red-original ]] || die "port 8080 does not return customer-red-4a7"
code=$(curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary 'failover-check' http://127.0.0.1:8080/records/failover-selfcheck)
[[ "$code" == 204 ]] || die "PUT through port 8080 returned HTTP $code, expected 204"
echo "failover done: primary.fenced present, replica promoted, proxy upstream 8082"
