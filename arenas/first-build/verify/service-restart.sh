#!/usr/bin/env bash
# Milestone service-restart: the verifier itself restarts builder-app.service over SSH,
# then polls until the record written by write-read reads back unchanged.
# Evidence: {"record","value","restart":true,"boot_id"} (boot_id lets host-reboot
# prove that a reboot really happened).
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

record=$(previous_field write-read record)
value=$(previous_field write-read value)
[[ -n "$record" && -n "$value" ]] || fail "no write-read evidence (record/value) in $AOE_PREVIOUS_EVIDENCE"

load_password
out=$(guest 'systemctl reset-failed builder-app.service >/dev/null 2>&1; systemctl restart builder-app.service 2>&1; rc=$?; cat /proc/sys/kernel/random/boot_id; exit $rc' 2>&1)
rc=$?
boot_id=$(printf '%s\n' "$out" | tail -n 1 | tr -d '[:space:]')
[[ $rc == 0 ]] || fail "systemctl restart builder-app.service failed (exit $rc): $(printf '%s' "$out" | head -c 200)"

body=$(mktemp); trap 'rm -f "$body"' EXIT
deadline=$(( $(now_s) + ${RESTART_POLL_SECONDS:-11} ))
last="no attempt"
first_404=""
while :; do
  code=$(http_get "/records/$record" "$body")
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

write_evidence "$(jq -cn --arg r "$record" --arg v "$value" --arg b "$boot_id" '{record:$r, restart:true, value:$v} + (if $b == "" then {} else {boot_id:$b} end)')"
