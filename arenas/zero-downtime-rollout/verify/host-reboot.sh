#!/usr/bin/env bash
# Milestone host-reboot (operation host_reboot): runs after the referee rebooted the
# territory and SSH came back. Polls the public endpoint once a second (up to ~30 s,
# inside the 40 s timeout) until GET /health is "ready", GET /version is "v2", the
# write-new record reads back unchanged and both seeded customer records still have
# their original values. On a failure it adds what the guest shows (unit states, the
# v2 program file) to the detail.
# Evidence: {"reboot":true,"record","value","version":"v2"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields record=v2-restart.record value=v2-restart.value written=write-new.record wrote=write-new.value
record=${record:-$written} value=${value:-$wrote}
[[ -n "$record" && -n "$value" ]] || fail "no write-new record/value in earlier evidence in $AOE_PREVIOUS_EVIDENCE"

checks() {
  get_check /health ready word || return 1
  get_check /version v2 word || return 1
  get_check "/records/$record" "$value" exact || return 1
  local id
  for id in "${SEEDED_IDS[@]}"; do get_check "/records/$id" "${SEEDED[$id]}" exact || return 1; done
}

deadline=$(( $(now_s) + ${REBOOT_POLL_SECONDS:-30} ))
last="no attempt"
while :; do
  if checks; then
    write_evidence "{\"reboot\":true,\"record\":$(json_str "$record"),\"value\":$(json_str "$value"),\"version\":\"v2\"}"
    exit 0
  fi
  last=$WHY
  (( $(now_s) < deadline )) || break
  sleep 1
done

# what the guest shows, for the detail (best effort, bounded by the SSH timeouts)
load_password
remote='for u in rollout-proxy.service rollout-v1.service rollout-v2.service; do printf "%s %s, " "$u" "$(systemctl is-active "$u" 2>/dev/null)"; done
printf "upstream %s, " "$(tr -d "[:space:]" < /var/lib/rollout/upstream 2>/dev/null)"
f=/opt/rollout/v2.py
if [ -L "$f" ] && [ ! -e "$f" ]; then printf "%s is a dangling symlink to %s" "$f" "$(readlink "$f")"
elif [ -L "$f" ]; then printf "%s is a symlink to %s" "$f" "$(readlink "$f")"
elif [ -e "$f" ]; then printf "%s present" "$f"
else printf "%s missing" "$f"; fi'
diag=$(SSH_CONNECT_TIMEOUT=3 guest "$remote" 2>/dev/null | tr '\n' ' ' | head -c 400)
fail "after the reboot the public endpoint did not serve v2 with the records within ${REBOOT_POLL_SECONDS:-30} s; last: $last${diag:+ (guest: $diag)}"
