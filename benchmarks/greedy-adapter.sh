#!/usr/bin/env bash
# greedy-adapter.sh: an external adapter (upstream contract, spec §5) that plays a greedy
# seat for benchmarks/greedy_seat.py: it builds nothing and takes what its territory gives.
#
# GREEDY_MODE=cpu  (default) one busy loop per CPU the guest sees (`nproc`), until stopped;
# GREEDY_MODE=fork a fork bomb, stopped only by the territory's own tasks and memory limits;
# GREEDY_MODE=calm nothing: the same seat doing no work (the baseline beside the same rivals).
# Reads AOE_TERRITORY_HOST AOE_SSH_PORT AOE_CREDENTIAL_FILE AOE_RESULT_FILE AOE_AGENT_ID
# AOE_TERRITORY_ID; the password goes to sshpass through SSHPASS, never argv.
set -euo pipefail
SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
export SSHPASS
guest() {
  sshpass -e ssh -p "$AOE_SSH_PORT" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -o PreferredAuthentications=password -o PubkeyAuthentication=no \
    -o ConnectTimeout=10 "root@$AOE_TERRITORY_HOST" "$@"
}
result() { # status summary
  jq -n --arg a "$AOE_AGENT_ID" --arg t "$AOE_TERRITORY_ID" --arg s "$1" --arg m "$2" \
    '{schema_version:1, agent:$a, territory:$t, status:$s, summary:$m,
      usage:{rounds:0, tool_calls:0, input_tokens:0, output_tokens:0, cost_microusd:0, resource_units:1},
      transcript:null}' > "$AOE_RESULT_FILE.partial"
  mv -f "$AOE_RESULT_FILE.partial" "$AOE_RESULT_FILE"
}
trap 'result failed "greedy seat (${GREEDY_MODE:-cpu}) stopped"; exit 0' TERM INT
case "${GREEDY_MODE:-cpu}" in
  cpu)
    # the loops live in their own unit, so the SSH session's end does not stop them
    n=$(guest 'n=$(nproc); for i in $(seq "$n"); do systemd-run --quiet --unit=greedy-$i sh -c "while :; do :; done"; done; echo $n')
    echo "greedy-adapter: $n busy loop(s) (nproc = $n)" ;;
  fork)
    # a fork bomb in its own unit without systemd's per-unit tasks cap: only the territory's limit stops it
    # (the unit's main process stays, or systemd would stop the unit and kill the bomb with it)
    guest 'systemd-run --quiet --unit=greedy-fork -p TasksMax=infinity bash -c ":(){ :|:& };:; sleep 3600"'
    echo "greedy-adapter: fork bomb" ;;
esac
sleep 3600 &
wait
