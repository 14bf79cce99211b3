#!/usr/bin/env bash
# Milestone host-reboot (operation host_reboot): runs after the referee rebooted the
# territory and SSH came back. Checks that the host really rebooted (a boot id other than
# the one recorded at worker-restart), then polls up to 30 rounds, 1 s apart, for
# GET /health "ready" and the process-new job still completed exactly once (id, payload,
# status "completed", result "processed:<payload>", attempts 1). The accepted jobs are
# not checked again. The poll stops early when the job answers HTTP 404 for 3 s while the
# service is healthy (job lost) or shows more than one attempt.
# Evidence: {"job","payload","reboot":true,"boot_id"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

job=$(previous_field worker-restart job)
payload=$(previous_field worker-restart payload)
[[ -n "$job" ]] || job=$(previous_field process-new job)
[[ -n "$payload" ]] || payload=$(previous_field process-new payload)
[[ -n "$job" && -n "$payload" ]] || fail "no job/payload in earlier evidence in $AOE_PREVIOUS_EVIDENCE"
old_boot=$(previous_field worker-restart boot_id)

start_clock "${REBOOT_POLL_SECONDS:-26}"
load_password
boot_id=""
until boot_id=$(guest 'cat /proc/sys/kernel/random/boot_id' 2>/dev/null | tr -d '[:space:]') && [[ -n "$boot_id" ]]; do
  (( $(time_left_ms) > 0 )) || fail "cannot log in to the territory over SSH after the reboot"
  sleep 0.2
done
if [[ -n "$old_boot" && "$boot_id" == "$old_boot" ]]; then
  fail "the host did not reboot (boot id unchanged: $boot_id)"
fi

body=$(mktemp); trap 'rm -f "$body"' EXIT
last="not checked"
first_404=""
for (( round = 1; round <= 30; round++ )); do
  (( $(time_left_ms) >= 300 )) || break
  http_get /health "$body" 2; hcode=$HTTP_CODE
  got=$(head -c 100 "$body" 2>/dev/null | tr -d '\n')
  if [[ "$hcode" == 000 ]]; then
    last="GET /health: no answer$(no_answer)"
  elif ! answered "$hcode"; then
    last="GET /health returned HTTP $hcode"
  elif [[ "$got" != ready ]]; then
    last="GET /health body was '$(printf '%s' "$got" | head -c 60 | tr -c '[:print:]' '?')', expected 'ready'"
  else
    http_get "/jobs/$job" "$body" 2; code=$HTTP_CODE
    if [[ "$code" == 404 ]]; then
      first_404=${first_404:-$(now_ms)}
      (( $(now_ms) - first_404 < LOST_AFTER_MS )) || \
        fail "after the reboot, GET /jobs/$job returned HTTP 404 for $(( LOST_AFTER_MS / 1000 )) s while /health is ready (the completed job was lost)"
      last="GET /jobs/$job returned HTTP 404 (job lost)"
    else
      first_404=""
      if [[ "$code" == 000 ]]; then last="GET /jobs/$job: no answer$(no_answer)"
      elif ! answered "$code"; then last="GET /jobs/$job returned HTTP $code"
      else
        last=$(job_problem "$body" "$job" "$payload")
        [[ -z "$last" ]] && break
        attempts=$(job_attempts "$body")
        if [[ "$attempts" =~ ^[0-9]+$ ]] && (( attempts > 1 )); then
          fail "after the reboot, job $job was processed again: $last"
        fi
        last="job $job: $last"
      fi
    fi
  fi
  (( $(time_left_ms) > 1300 && round < 30 )) || break
  sleep 1
done
[[ -z "$last" ]] || fail "after the reboot: $last"
write_evidence "{\"job\":$(json_str "$job"),\"payload\":$(json_str "$payload"),\"reboot\":true,\"boot_id\":$(json_str "$boot_id")}"
