#!/usr/bin/env bash
# oracle-queue: the durable-job-queue oracle as a spec §5 command adapter (the manifest's
# agents name it `oracle-queue`; adapters/oracle.sh links here).
#
# Reads:  AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE
#         (KEY=value lines; only AOE_SSH_PASSWORD is used) AOE_RESULT_FILE AOE_USAGE_FILE
# Does:   waits up to 120 s for root SSH, then runs builders/oracle.sh in the territory
#         with ONE password SSH call (`bash -s`; repeated only when a session stalls before
#         it runs); writes usage.json and the result file (.partial + rename).
#         Exit 0 when the deployment checked out, 1 otherwise.
# The password reaches sshpass through SSHPASS (never argv, never printed).
set -uo pipefail

here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
builder="$here/builders/oracle.sh"

for v in AOE_AGENT_ID AOE_TERRITORY_ID AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE AOE_RESULT_FILE; do
  [[ -n "${!v:-}" ]] || { echo "oracle-queue: $v is not set" >&2; exit 2; }
done

write_json() { # FILE JSON: atomic replace
  printf '%s\n' "$2" > "$1.partial" && mv -f "$1.partial" "$1"
}
result() { # STATUS SUMMARY
  write_json "$AOE_RESULT_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --arg s "$1" --arg m "$2" \
    '{schema_version:1, agent:$a, territory:$t, status:$s, summary:$m, usage:{resource_units:1}, transcript:null}')"
}
usage() {
  [[ -n "${AOE_USAGE_FILE:-}" ]] || return 0
  write_json "$AOE_USAGE_FILE" "$(jq -cn --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" \
    '{schema_version:1, agent:$a, territory:$t, usage:{resource_units:1}}')"
}
give_up() { echo "oracle-queue: $1" >&2; usage; result failed "$1"; exit 1; }

[[ -r "$builder" ]] || give_up "builder script $builder is missing"
[[ -r "$AOE_CREDENTIAL_FILE" ]] || give_up "credential file $AOE_CREDENTIAL_FILE is not readable"
SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
[[ -n "$SSHPASS" ]] || give_up "the credential file has no AOE_SSH_PASSWORD"
export SSHPASS

ssh_opts=(-p "$AOE_SSH_PORT" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
          -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1
          -o ConnectTimeout=5)

# bounded SECONDS CMD...: run CMD, killed after SECONDS (status 124); a password login
# that stalls before authentication would otherwise wait for sshd's 120 s LoginGraceTime
bounded() {
  local limit=$1 pid dog rc
  shift
  "$@" 0<&0 &   # keep the caller's stdin (an async command would get /dev/null)
  pid=$!
  ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    sleep "$limit" & nap=$!; wait "$nap"
    kill -TERM "$pid" 2>/dev/null; sleep 1; kill -KILL "$pid" 2>/dev/null ) </dev/null >/dev/null 2>&1 &
  dog=$!
  wait "$pid"; rc=$?
  kill -TERM "$dog" 2>/dev/null; wait "$dog" 2>/dev/null
  (( rc == 143 || rc == 137 )) && rc=124
  return "$rc"
}

err=$(mktemp); trap 'rm -f "$err"' EXIT
last_err() { grep -v '^[[:space:]]*$' "$err" | tail -n 1 | head -c 300; }

echo "oracle-queue: waiting for SSH on $AOE_TERRITORY_ID"
deadline=$(( $(date +%s) + 120 ))
tries=0
until bounded 15 sshpass -e ssh "${ssh_opts[@]}" "root@$AOE_TERRITORY_HOST" true </dev/null >/dev/null 2>"$err"; do
  rc=$?
  tries=$(( tries + 1 ))
  why="exit $rc"; (( rc == 124 )) && why="no login within 15 s"
  echo "oracle-queue: SSH not ready (attempt $tries, $why): $(last_err)" >&2
  (( $(date +%s) < deadline )) || give_up "no root SSH login on $AOE_TERRITORY_ID within 120 s"
  sleep 0.5
done

# the deployment is idempotent: a session that stalls at login is retried (at most 3 runs)
echo "oracle-queue: deploying the durable job queue"
for run in 1 2 3; do
  bounded 90 sshpass -e ssh "${ssh_opts[@]}" "root@$AOE_TERRITORY_HOST" 'bash -s' < "$builder" 2>"$err"
  rc=$?
  (( rc == 124 )) || break
  echo "oracle-queue: deployment session $run stalled for 90 s; retrying" >&2
done
if (( rc != 0 )); then
  reason=$(last_err)
  give_up "oracle deployment failed (exit $rc): ${reason:-no reason given}"
fi
usage
result completed "oracle deployed durable exactly-once queue"
echo "oracle-queue: done"
