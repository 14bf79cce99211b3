#!/usr/bin/env bash
# Milestone worker-restart: the verifier restarts job-worker.service (the toolkit's restart_unit; the unit
# must exist), then ONE immediate GET /jobs/<id> (3 s) of the process-new job must still
# show it completed exactly once (id, payload, status "completed", result
# "processed:<payload>", attempts 1): the API stays up while the worker restarts, and a
# restarted worker neither loses nor reprocesses finished work.
# Evidence: {"job","payload","worker_restart":true,"boot_id"} (boot_id lets host-reboot
# prove that the host really rebooted)
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE
previous_fields job=process-new.job payload=process-new.payload
[[ -n "$job" && -n "$payload" ]] || fail "no process-new evidence (job/payload) in $AOE_PREVIOUS_EVIDENCE"

load_password
unit=job-worker.service
restart_unit $unit 'cat /proc/sys/kernel/random/boot_id'
boot_id=$(printf '%s\n' "$RESTART_OUT" | tail -n 1 | tr -d '[:space:]')

job_check "$job" "$payload" 3
after="right after systemctl restart $unit"
[[ "$HTTP_CODE" != 000 ]] || fail "$after, GET /jobs/$job got no answer$(no_answer): the API must stay up while the worker restarts"
[[ "$HTTP_CODE" != 404 ]] || fail "$after, GET /jobs/$job returned HTTP 404: the completed job was lost"
answered "$HTTP_CODE" || fail "$after, GET /jobs/$job returned HTTP $HTTP_CODE, expected the completed job"
if [[ -n "$JOB_WHY" ]]; then
  status=$(json_field "$BODY" status)
  why=""
  if processed_again; then
    why=" (the restarted worker processed the finished job again)"
  elif [[ "$status" != completed && "$JOB_ATTEMPTS" =~ ^[0-9]+$ ]] && (( JOB_ATTEMPTS >= 1 )); then
    why=" (the finished job went back to the queue when the worker restarted)"
  fi
  fail "$after, job $job is no longer completed exactly once: $JOB_WHY$why"
fi
write_evidence "{\"job\":$(json_str "$job"),\"payload\":$(json_str "$payload"),\"worker_restart\":true${boot_id:+,\"boot_id\":$(json_str "$boot_id")}}"
