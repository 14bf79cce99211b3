#!/usr/bin/env bash
# oracle-failover: the primary-failover oracle as a §5 command adapter (runs on the
# controller host). Waits up to 120 s for the territory's SSH, runs builders/oracle.sh in
# the guest as root with one password SSH call (`bash -s`), then writes AOE_RESULT_FILE
# and AOE_USAGE_FILE atomically. The password reaches sshpass through the environment.
# Reads: AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE
#        AOE_RESULT_FILE AOE_USAGE_FILE
set -uo pipefail

script="$(cd "$(dirname "$0")" && pwd)/builders/oracle.sh"
for v in AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE AOE_RESULT_FILE; do
  [[ -n "${!v:-}" ]] || { echo "oracle-failover: $v is not set" >&2; exit 2; }
done
[[ -r "$script" ]] || { echo "oracle-failover: $script is missing" >&2; exit 2; }

write_json() { # FILE JQ-FILTER: the filter's JSON (with $a agent, $t territory), replaced atomically
  jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --arg s "${status-}" --arg m "${summary-}" "$2" \
    > "$1.partial.$$" && mv -f "$1.partial.$$" "$1"
}
finish() { # STATUS SUMMARY: the result (and usage) files; a failure is also told on stderr, exit 1
  local status=$1 summary=$2
  write_json "$AOE_RESULT_FILE" '{schema_version:1, agent:$a, territory:$t, status:$s, summary:$m, usage:{resource_units:1}, transcript:null}'
  [[ -z "${AOE_USAGE_FILE:-}" ]] || write_json "$AOE_USAGE_FILE" '{schema_version:1, agent:$a, territory:$t, usage:{resource_units:1}}'
  [[ "$status" == completed ]] || { echo "oracle-failover: $summary" >&2; exit 1; }
}

SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
[[ -n "$SSHPASS" ]] || finish failed "no AOE_SSH_PASSWORD in the credential file"
export SSHPASS
guest() {
  sshpass -e ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1 \
    -o ConnectTimeout=5 "root@$AOE_TERRITORY_HOST" -p "$AOE_SSH_PORT" "$@"
}

deadline=$(( $(date +%s) + 120 ))
until guest true </dev/null >/dev/null 2>&1; do
  (( $(date +%s) < deadline )) || finish failed "territory SSH did not answer within 120 s"
  sleep 1
done

err=$(mktemp); trap 'rm -f "$err"' EXIT
guest 'bash -s' < "$script" 2>"$err"
rc=$?
cat "$err" >&2
why=$(grep -v '^[[:space:]]*$' "$err" | tail -n 1 | head -c 300)
(( rc == 0 )) || finish failed "oracle failover failed (exit $rc): ${why:-no detail}"
finish completed "oracle promoted replica, fenced failed primary, and switched traffic"
