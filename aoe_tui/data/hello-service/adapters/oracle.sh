#!/usr/bin/env bash
# The arena's oracle as a spec §5 command adapter (agents with adapter = "oracle", and
# `--agent oracle`): runs builders/oracle.sh in the territory as root with one password
# SSH session (`bash -s`), then writes AOE_USAGE_FILE and AOE_RESULT_FILE (atomically).
# Reads AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE
# (AOE_SSH_PASSWORD=...) AOE_RESULT_FILE [AOE_USAGE_FILE]. Exit 0 when the deployment
# checked out. The password reaches sshpass through SSHPASS, never argv or output.
set -uo pipefail
builder="$(dirname "$(readlink -f "$0")")/builders/oracle.sh"

put_json() {  # FILE JSON
  printf '%s\n' "$2" > "$1.partial" && mv -f "$1.partial" "$1"
}
finish() {  # STATUS SUMMARY: write usage and result, exit 0 when completed
  local usage='{"resource_units":1}' who
  who=$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" '{schema_version:1, agent:$a, territory:$t}')
  [[ -z "${AOE_USAGE_FILE:-}" ]] || put_json "$AOE_USAGE_FILE" "$(jq -c --argjson u "$usage" '. + {usage:$u}' <<< "$who")"
  put_json "$AOE_RESULT_FILE" "$(jq -c --arg s "$1" --arg m "$2" --argjson u "$usage" \
    '. + {status:$s, summary:$m, usage:$u, transcript:null}' <<< "$who")"
  [[ "$1" == completed ]] || { echo "oracle: $2" >&2; exit 1; }
  exit 0
}

SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
[[ -n "$SSHPASS" ]] || finish failed "no AOE_SSH_PASSWORD in $AOE_CREDENTIAL_FILE"
export SSHPASS
ssh=(sshpass -e ssh -p "$AOE_SSH_PORT" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
     -o LogLevel=ERROR -o PreferredAuthentications=password -o PubkeyAuthentication=no
     -o NumberOfPasswordPrompts=1 -o ConnectTimeout=5 "root@$AOE_TERRITORY_HOST")

deadline=$(( $(date +%s) + 120 ))
until timeout 15 "${ssh[@]}" true </dev/null >/dev/null 2>&1; do
  (( $(date +%s) < deadline )) || finish failed "no root SSH login on $AOE_TERRITORY_ID within 120 s"
  sleep 1
done
err=$(mktemp)
trap 'rm -f "$err"' EXIT
timeout 120 "${ssh[@]}" 'bash -s' < "$builder" 2>"$err"  # its aoe-step lines: our output
rc=$?
(( rc == 0 )) || finish failed "builders/oracle.sh failed (exit $rc): $(grep . "$err" | tail -n 1 | head -c 300)"
finish completed "deployed builders/oracle.sh"
