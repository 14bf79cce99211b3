#!/usr/bin/env bash
# Milestone host-reboot (operation host_reboot): runs after the referee rebooted the
# territory and SSH came back. Polls for up to 35 s (about once a second) until /health
# answers "ready", the record written at restart-under-load reads back unchanged and
# the three historical records are intact. A record answered 404 while the service is
# ready for 5 s in a row is lost: the poll stops early.
# Evidence: {"historical_records":3,"reboot":true,"record","value"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields record=restart-under-load.record value=restart-under-load.value
[[ -n "$record" && -n "$value" ]] || fail "no restart-under-load evidence (record/value) in $AOE_PREVIOUS_EVIDENCE"

LOST_AFTER_MS=${LOST_AFTER_MS:-5000}
deadline=$(( $(now_ms) + ${REBOOT_POLL_SECONDS:-35} * 1000 ))
ids=("$record" "${HISTORY_IDS[@]}")
vals=("$value" "${HISTORY_VALUES[@]}")
what=("the record acknowledged after the restart under load" "historical record" "historical record" "historical record")
first_404=""
last="no attempt"
while :; do
  round=$(now_ms)
  ok=1 saw_404=""
  if check_health "$(cap_time "$deadline" 2000)"; then
    for k in 0 1 2 3; do
      if ! check_get "/priority/${ids[$k]}" "${vals[$k]}" "$(cap_time "$deadline" 2000)" "${what[$k]}"; then
        ok=0; last=$CHECK_REASON
        [[ "$CHECK_CODE" == 404 ]] && saw_404=1
        break
      fi
    done
  else
    ok=0; last=$CHECK_REASON
  fi
  (( ok )) && break
  if [[ -n "$saw_404" ]]; then
    first_404=${first_404:-$round}
    (( $(now_ms) - first_404 < LOST_AFTER_MS )) || fail "after the reboot, $last for $((LOST_AFTER_MS / 1000)) s while /health was ready: record lost"
  else
    first_404=""
  fi
  (( $(now_ms) < deadline )) || fail "after the reboot (polled for ${REBOOT_POLL_SECONDS:-35} s): $last"
  pause=$(( 1000 - ($(now_ms) - round) ))
  (( pause > 0 )) && sleep "$((pause / 1000)).$(printf '%03d' $((pause % 1000)))"
done

write_evidence "{\"historical_records\":3,\"reboot\":true,\"record\":$(json_str "$record"),\"value\":$(json_str "$value")}"
