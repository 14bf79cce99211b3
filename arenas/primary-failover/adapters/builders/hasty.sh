#!/usr/bin/env bash
# Guest side of scripted:hasty: restores service as fast as it can. It promotes the
# replica and switches the proxy correctly (atomic renames), but skips the fence: it
# never creates /var/lib/failover/primary.fenced.
set -euo pipefail
d=/var/lib/failover
die() { echo "$*" >&2; exit 1; }

echo "aoe-step: look at the topology (proxy upstream, replica role)"
cat "$d/upstream" "$d/replica.role" >/dev/null
curl -fsS --max-time 2 http://127.0.0.1:8082/health >/dev/null || die "the replica on 8082 is not healthy"

echo "aoe-step: promote the replica"
printf 'primary\n' > "$d/replica.role.new"
mv -f "$d/replica.role.new" "$d/replica.role"

echo "aoe-step: point the public proxy at 8082"
printf '8082\n' > "$d/upstream.new"
mv -f "$d/upstream.new" "$d/upstream"
sync

echo "aoe-step: check reads and writes through port 8080"
[[ "$(curl -fsS --max-time 2 http://127.0.0.1:8080/role)" == primary ]] || die "port 8080 does not reach the promoted replica"
code=$(curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -X PUT --data-binary 'hasty-check' http://127.0.0.1:8080/records/hasty-check)
[[ "$code" == 204 ]] || die "PUT through port 8080 returned HTTP $code, expected 204"
echo "service restored: replica promoted, proxy upstream 8082"
