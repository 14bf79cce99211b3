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
previous_fields job=worker-restart.job payload=worker-restart.payload old_boot=worker-restart.boot_id \
  new_job=process-new.job new_payload=process-new.payload
job=${job:-$new_job} payload=${payload:-$new_payload}
[[ -n "$job" && -n "$payload" ]] || fail "no job/payload in earlier evidence in $AOE_PREVIOUS_EVIDENCE"

start_clock "${REBOOT_POLL_SECONDS:-26}"
load_password
boot_id=""
until boot_id=$(guest 'cat /proc/sys/kernel/random/boot_id' 2>/dev/null | tr -d '[:space:]') && [[ -n "$boot_id" ]]; do
  (( $(time_left_ms) > 0 )) || fail "cannot log in to the territory over SSH after the reboot"
  sleep 0.2
done
[[ -z "$old_boot" || "$boot_id" != "$old_boot" ]] || fail "the host did not reboot (boot id unchanged: $boot_id)"

back_and_kept() {
  health_check 2
  [[ -z "$WHY" ]] || return 1
  job_check "$job" "$payload"
  lost_for_long "after the reboot, GET /jobs/$job returned HTTP 404" " while /health is ready (the completed job was lost)"
  ! processed_again || fail "after the reboot, job $job was processed again: $JOB_WHY"
  if [[ -z "$JOB_WHY" ]]; then return 0
  elif [[ "$HTTP_CODE" == 404 ]]; then WHY="GET /jobs/$job returned HTTP 404 (job lost)"
  elif answered "$HTTP_CODE"; then WHY="job $job: $JOB_WHY"
  else WHY="GET /jobs/$job: $JOB_WHY"
  fi
  return 1
}
WHY="not checked"
poll back_and_kept || fail "after the reboot: $WHY"
write_evidence "{\"job\":$(json_str "$job"),\"payload\":$(json_str "$payload"),\"reboot\":true,\"boot_id\":$(json_str "$boot_id")}"
