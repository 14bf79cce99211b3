#!/usr/bin/env bash
# Guest side of scripted:volatile: fences the failed primary on disk, but promotes the
# replica and switches the proxy by bind-mounting files kept under /run (a tmpfs) over
# replica.role and upstream. It all works until the host reboots: the mounts and /run
# are gone, and the old role and upstream are back.
set -euo pipefail
d=/var/lib/failover
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: confirm the incident and fence the failed primary"
[[ -e "$d/primary.failed" ]] || die "$d/primary.failed is missing"
touch "$d/primary.fenced"

echo "aoe-step: promote the replica (role file overlaid from /run)"
install -d -m 0755 /run/failover
printf 'primary\n' > /run/failover/replica.role
mount --bind /run/failover/replica.role "$d/replica.role"

echo "aoe-step: switch the public proxy to 8082 (upstream file overlaid from /run)"
printf '8082\n' > /run/failover/upstream
mount --bind /run/failover/upstream "$d/upstream"

echo "aoe-step: check reads and writes through port 8080"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8080/role)" == primary ]] || die "port 8080 does not reach the promoted replica"
code=$(curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary 'volatile-check' http://127.0.0.1:8080/records/volatile-check)
[[ "$code" == 204 ]] || die "PUT through port 8080 returned HTTP $code, expected 204"
echo "service restored: replica promoted, proxy upstream 8082"
