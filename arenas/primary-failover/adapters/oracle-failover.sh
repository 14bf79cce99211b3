#!/usr/bin/env bash
# oracle-failover: the primary-failover oracle as a §5 command adapter (runs on the
# controller host). Waits up to 120 s for the territory's SSH, runs builders/oracle.sh in
# the guest as root with one password SSH call (`bash -s`), then writes AOE_RESULT_FILE
# and AOE_USAGE_FILE atomically. The password reaches sshpass through the environment.
# Reads: AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE
#        AOE_RESULT_FILE AOE_USAGE_FILE
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
script="$here/builders/oracle.sh"

for v in AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE AOE_RESULT_FILE; do
  [[ -n "${!v:-}" ]] || { echo "oracle-failover: $v is not set" >&2; exit 2; }
done
[[ -r "$script" ]] || { echo "oracle-failover: $script is missing" >&2; exit 2; }

write_json() { # FILE JSON: atomic replace
  local tmp="$1.partial.$$"
  printf '%s\n' "$2" > "$tmp" && mv -f "$tmp" "$1"
}
result() { # STATUS SUMMARY
  write_json "$AOE_RESULT_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --arg s "$1" --arg m "$2" \
    '{schema_version:1, agent:$a, territory:$t, status:$s, summary:$m, usage:{resource_units:1}, transcript:null}')"
  if [[ -n "${AOE_USAGE_FILE:-}" ]]; then
    write_json "$AOE_USAGE_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" \
      '{schema_version:1, agent:$a, territory:$t, usage:{resource_units:1}}')"
  fi
}

SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
[[ -n "$SSHPASS" ]] || { result failed "no AOE_SSH_PASSWORD in the credential file"; echo "oracle-failover: no AOE_SSH_PASSWORD in the credential file" >&2; exit 1; }
export SSHPASS
guest() {
  sshpass -e ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1 \
    -o ConnectTimeout=5 "root@$AOE_TERRITORY_HOST" -p "$AOE_SSH_PORT" "$@"
}

deadline=$(( $(date +%s) + 120 ))
until guest true </dev/null >/dev/null 2>&1; do
  if (( $(date +%s) >= deadline )); then
    result failed "territory SSH did not answer within 120 s"
    echo "oracle-failover: territory SSH did not answer within 120 s" >&2
    exit 1
  fi
  sleep 1
done

err=$(mktemp); trap 'rm -f "$err"' EXIT
guest 'bash -s' < "$script" 2>"$err"
rc=$?
cat "$err" >&2
if (( rc != 0 )); then
  why=$(grep -v '^[[:space:]]*$' "$err" | tail -n 1 | head -c 300)
  result failed "oracle failover failed (exit $rc): ${why:-no detail}"
  exit 1
fi
result completed "oracle promoted replica, fenced failed primary, and switched traffic"
