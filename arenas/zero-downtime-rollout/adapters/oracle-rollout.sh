#!/usr/bin/env bash
# Oracle command adapter (spec §5) of zero-downtime-rollout, run on the controller.
# Waits up to 120 s for the territory's SSH port, then runs builders/oracle.sh in the
# guest as root with one password SSH call (`bash -s`, script on stdin): v2 in the
# rollout-v2.service slot over the same sqlite store, then an atomic switch of the
# proxy's upstream file. Writes usage.json and result.json atomically.
# Environment: AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT
# AOE_CREDENTIAL_FILE (only AOE_SSH_PASSWORD is read from it) AOE_RESULT_FILE AOE_USAGE_FILE.
set -uo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)

for v in AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE AOE_RESULT_FILE; do
  [[ -n "${!v:-}" ]] || { printf 'oracle-rollout: %s is not set\n' "$v" >&2; exit 2; }
done

write_json() { # FILE JSON: atomic replace
  local tmp="$1.partial.$$"
  printf '%s\n' "$2" > "$tmp" && mv -f "$tmp" "$1"
}
finish() { # STATUS SUMMARY EXIT
  local usage
  usage='{"resource_units":1}'
  if [[ -n "${AOE_USAGE_FILE:-}" ]]; then
    write_json "$AOE_USAGE_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --argjson u "$usage" \
      '{schema_version:1, agent:$a, territory:$t, usage:$u}')"
  fi
  write_json "$AOE_RESULT_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --arg s "$1" --arg m "$2" \
    --argjson u "$usage" '{schema_version:1, agent:$a, territory:$t, status:$s, summary:$m, usage:$u, transcript:null}')" \
    || { printf 'oracle-rollout: cannot write %s\n' "$AOE_RESULT_FILE" >&2; exit 1; }
  exit "$3"
}

[[ -r "$AOE_CREDENTIAL_FILE" ]] || finish failed "credential file is not readable" 1
SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
[[ -n "$SSHPASS" ]] || finish failed "credential file has no AOE_SSH_PASSWORD" 1
export SSHPASS

deadline=$(( $(date +%s) + 120 ))
until timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$AOE_TERRITORY_HOST" "$AOE_SSH_PORT" 2>/dev/null; do
  (( $(date +%s) < deadline )) || finish failed "SSH port of $AOE_TERRITORY_ID did not open within 120 s" 1
  sleep 0.2
done

err=$(mktemp); trap 'rm -f "$err"' EXIT
sshpass -e ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
  -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1 \
  -o ConnectTimeout=10 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 \
  "root@$AOE_TERRITORY_HOST" -p "$AOE_SSH_PORT" 'bash -s' < "$here/builders/oracle.sh" 2>"$err"
rc=$?
if [[ $rc != 0 ]]; then
  reason=$(grep -v '^\s*$' "$err" | tail -n 1 | head -c 300)
  printf 'oracle-rollout: %s\n' "${reason:-exit $rc}" >&2
  finish failed "oracle rollout failed (exit $rc): ${reason:-no detail}" 1
fi
finish completed "oracle performed an atomic stateful v2 cutover" 0
