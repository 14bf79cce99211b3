#!/usr/bin/env bash
# Oracle adapter of traffic-surge (spec §5 command adapter, registered as `oracle-surge`;
# adapters/oracle.sh links here). Runs on the controller host: waits for the territory's
# SSH, runs builders/oracle.sh in it as root with one password SSH call (`bash -s`),
# then writes the §5.3 result file and a usage checkpoint. Spends no model tokens.
# Environment: AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT
# AOE_CREDENTIAL_FILE AOE_RESULT_FILE [AOE_USAGE_FILE]. The password is read from the
# credential file (AOE_SSH_PASSWORD only) and reaches sshpass through the environment.
set -uo pipefail

here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
script="$here/builders/oracle.sh"

for v in AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE AOE_RESULT_FILE; do
  [[ -n "${!v:-}" ]] || { echo "oracle-surge: environment is missing $v" >&2; exit 2; }
done

# write_json FILE JSON: atomic replace
write_json() {
  local tmp="$1.tmp.$$"
  printf '%s\n' "$2" > "$tmp" && mv -f "$tmp" "$1"
}

# finish STATUS SUMMARY: result file (and usage checkpoint), then exit 0 if completed
finish() {
  local usage='{"resource_units":1}'
  if [[ -n "${AOE_USAGE_FILE:-}" ]]; then
    write_json "$AOE_USAGE_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --argjson u "$usage" \
      '{schema_version:1, agent:$a, territory:$t, usage:$u}')"
  fi
  write_json "$AOE_RESULT_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --arg s "$1" \
    --arg m "$2" --argjson u "$usage" \
    '{schema_version:1, agent:$a, territory:$t, status:$s, summary:$m, usage:$u, transcript:null}')" \
    || { echo "oracle-surge: cannot write $AOE_RESULT_FILE" >&2; exit 1; }
  [[ "$1" == completed ]] && exit 0
  exit 1
}

[[ -r "$script" ]] || finish failed "oracle-surge: builder script $script is missing"
[[ -r "$AOE_CREDENTIAL_FILE" ]] || finish failed "oracle-surge: credential file is not readable"
SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
[[ -n "$SSHPASS" ]] || finish failed "oracle-surge: the credential file has no AOE_SSH_PASSWORD"
export SSHPASS

ssh_opts=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
          -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1
          -o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=6)
target=(root@"$AOE_TERRITORY_HOST" -p "$AOE_SSH_PORT")

deadline=$(( $(date +%s) + 120 ))
until sshpass -e ssh "${ssh_opts[@]}" "${target[@]}" true </dev/null >/dev/null 2>&1; do
  (( $(date +%s) < deadline )) || finish failed "oracle-surge: SSH to $AOE_TERRITORY_ID did not come up within 120 s"
  sleep 1
done

errf=$(mktemp); trap 'rm -f "$errf"' EXIT
sshpass -e ssh "${ssh_opts[@]}" "${target[@]}" 'bash -s' < "$script" 2> >(tee "$errf" >&2)
rc=$?
wait 2>/dev/null
if [[ $rc == 0 ]]; then
  finish completed "Threaded the surge service over a durable sqlite ledger and bounded its optional work; priority writes stay prompt."
fi
marker="$(dirname "$AOE_RESULT_FILE")/referee-reboot"
if [[ $rc == 255 && -e "$marker" ]]; then
  write_json "$AOE_RESULT_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" \
    '{schema_version:1, agent:$a, territory:$t, status:"interrupted", summary:"agent session was interrupted by the referee'"'"'s host reboot", usage:{resource_units:1}, transcript:null}')"
  exit 1
fi
why=$(grep -v '^[[:space:]]*$' "$errf" | tail -n 1 | head -c 300)
finish failed "oracle-surge: deployment failed (exit $rc)${why:+: $why}"
