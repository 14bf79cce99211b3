#!/usr/bin/env bash
# Milestone service-restart: the verifier itself restarts builder-app.service (through
# lib.sh's guest: from the host side on a container, out of the player's reach), then
# polls until the record written by write-read reads back unchanged. A restart that did
# not restart anything fails as tampering: systemd's InvocationID or a non-zero MainPID
# unchanged, a process of the unit's cgroup still there after it, or (container
# territories, seen from the host) the same process still serving the port.
# Evidence: {"record","value","restart":true,"boot_id","main_pid_before","main_pid_after",
# "invocation_before","invocation_after","listener_before","listener_after"} (boot_id lets
# host-reboot prove that a reboot really happened; listener_*: "hostpid:start", empty
# where the host cannot see the guest's processes).
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields record=write-read.record value=write-read.value
[[ -n "$record" && -n "$value" ]] || fail "no write-read evidence (record/value) in $AOE_PREVIOUS_EVIDENCE"

load_password
listener_before=$(service_listener "$AOE_SERVICE_PORT")
unit=builder-app.service
out=$(guest "$(unit_ids before $unit)systemctl reset-failed $unit >/dev/null 2>&1; systemctl restart $unit 2>&1; rc=\$?; $(unit_ids after $unit)cat /proc/sys/kernel/random/boot_id; exit \$rc" 2>&1)
rc=$?
prop() {  # the first "WHEN UNIT KEY=VALUE" line's VALUE (bash builtins only)
  local line
  while IFS= read -r line; do
    if [[ "$line" == "$1 $unit $2="* ]]; then printf '%s\n' "${line#*=}"; return; fi
  done <<< "$out"
}
main_before=$(prop before MainPID); main_after=$(prop after MainPID)
inv_before=$(prop before InvocationID); inv_after=$(prop after InvocationID)
tampering=$(restart_tampering "$out" $unit)
out=$(without_ids "$out")
[[ $rc != 125 ]] || fail "$(printf '%s' "$out" | head -n 1)"
boot_id=$(printf '%s\n' "$out" | tail -n 1 | tr -d '[:space:]')
[[ $rc == 0 ]] || fail "systemctl restart builder-app.service failed (exit $rc): $(printf '%s' "$out" | sed '$d' | head -c 200)"
[[ -z "$tampering" ]] || fail "$tampering"

body=$(mktemp); trap 'rm -f "$body"' EXIT
deadline=$(( $(now_s) + ${RESTART_POLL_SECONDS:-11} ))
last="no attempt"
first_404=""
while :; do
  http_get "/records/$record" "$body" >/dev/null; code=${CURL_OUT:-000}
  if [[ "$code" == 200 ]] && body_is "$body" "$value"; then break; fi
  if [[ "$code" == 404 ]]; then
    first_404=${first_404:-$(now_ms)}
    (( $(now_ms) - first_404 < LOST_AFTER_MS )) || fail "after restarting builder-app.service, GET /records/$record returned HTTP 404 (record lost)"
  else
    first_404=""
  fi
  case "$code" in
    000) last="no answer${HTTP_ERR:+ ($HTTP_ERR)}" ;;
    200) last="a different value" ;;
    *)   last="HTTP $code" ;;
  esac
  (( $(now_s) < deadline )) || fail "after restarting builder-app.service, GET /records/$record gave $last"
  sleep 0.1
done

listener_after=$(service_listener "$AOE_SERVICE_PORT")
if [[ -n "$listener_before" && "$listener_after" == "$listener_before" ]]; then
  fail "tampering: the process serving port $AOE_SERVICE_PORT (host pid ${listener_before%%:*}) is the same before and after restarting builder-app.service"
fi

# the same bytes as jq -c of {record, restart:true, value} + {boot_id} (when known) + the ids
ev="{\"record\":$(json_str "$record"),\"restart\":true,\"value\":$(json_str "$value")"
[[ -z "$boot_id" ]] || ev+=",\"boot_id\":$(json_str "$boot_id")"
ev+=",\"main_pid_before\":$(json_str "$main_before"),\"main_pid_after\":$(json_str "$main_after")"
ev+=",\"invocation_before\":$(json_str "$inv_before"),\"invocation_after\":$(json_str "$inv_after")"
ev+=",\"listener_before\":$(json_str "$listener_before"),\"listener_after\":$(json_str "$listener_after")}"
write_evidence "$ev"
