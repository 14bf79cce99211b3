#!/usr/bin/env bash
# Milestone host-reboot (operation host_reboot): runs after the referee rebooted the
# territory's guest OS and SSH came back. Checks that the host really rebooted (a new
# boot id compared with the service-restart evidence), that /health answers "ready"
# and that the record from write-read still reads back unchanged. Polls up to ~25 s.
# Evidence: {"reboot":true,"record","value","boot_id"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

previous_fields record=service-restart.record value=service-restart.value old_boot=service-restart.boot_id \
  wr_record=write-read.record wr_value=write-read.value
[[ -n "$record" ]] || record=$wr_record
[[ -n "$value" ]] || value=$wr_value
[[ -n "$record" && -n "$value" ]] || fail "no record/value in earlier evidence in $AOE_PREVIOUS_EVIDENCE"

load_password
deadline=$(( $(now_s) + ${REBOOT_POLL_SECONDS:-24} ))
boot_id=""
until boot_id=$(guest 'cat /proc/sys/kernel/random/boot_id' 2>/dev/null | tr -d '[:space:]') && [[ -n "$boot_id" ]]; do
  (( $(now_s) < deadline )) || fail "cannot log in to the territory over SSH after the reboot"
  sleep 0.2
done
if [[ -n "$old_boot" && "$boot_id" == "$old_boot" ]]; then
  fail "the host did not reboot (boot id unchanged: $boot_id)"
fi

body=$(mktemp); trap 'rm -f "$body"' EXIT
last="no attempt"
first_404=""
while :; do
  http_get /health "$body" >/dev/null; hcode=${CURL_OUT:-000}
  if [[ "$hcode" == 200 ]]; then
    http_get "/records/$record" "$body" >/dev/null; code=${CURL_OUT:-000}
    if [[ "$code" == 200 ]] && body_is "$body" "$value"; then break; fi
    if [[ "$code" == 404 ]]; then
      first_404=${first_404:-$(now_ms)}
      (( $(now_ms) - first_404 < LOST_AFTER_MS )) || fail "after the reboot, GET /records/$record returned HTTP 404 (record lost)"
    else
      first_404=""
    fi
    case "$code" in
      000) last="GET /records/$record: no answer${HTTP_ERR:+ ($HTTP_ERR)}" ;;
      200) last="GET /records/$record returned a different value" ;;
      404) last="GET /records/$record returned HTTP 404 (record lost)" ;;
      *)   last="GET /records/$record returned HTTP $code" ;;
    esac
  elif [[ "$hcode" == 000 ]]; then
    last="GET /health: no answer${HTTP_ERR:+ ($HTTP_ERR)}"
  else
    last="GET /health returned HTTP $hcode"
  fi
  (( $(now_s) < deadline )) || fail "after the reboot: $last"
  sleep 0.1
done

write_evidence "{\"reboot\":true,\"record\":$(json_str "$record"),\"value\":$(json_str "$value"),\"boot_id\":$(json_str "$boot_id")}"
