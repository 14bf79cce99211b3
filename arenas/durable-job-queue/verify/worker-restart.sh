#!/usr/bin/env bash
# Milestone worker-restart: the verifier restarts job-worker.service over SSH (the unit
# must exist), then ONE immediate GET /jobs/<id> (3 s) of the process-new job must still
# show it completed exactly once (id, payload, status "completed", result
# "processed:<payload>", attempts 1): the API stays up while the worker restarts, and a
# restarted worker neither loses nor reprocesses finished work.
# Evidence: {"job","payload","worker_restart":true,"boot_id"} (boot_id lets host-reboot
# prove that the host really rebooted)
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

job=$(previous_field process-new job)
payload=$(previous_field process-new payload)
[[ -n "$job" && -n "$payload" ]] || fail "no process-new evidence (job/payload) in $AOE_PREVIOUS_EVIDENCE"

load_password
out=$(guest "$(unit_ids before job-worker.service)systemctl restart job-worker.service 2>&1; rc=\$?; $(unit_ids after job-worker.service)cat /proc/sys/kernel/random/boot_id; exit \$rc" 2>&1)
rc=$?
tampering=$(restart_tampering "$out" job-worker.service)
out=$(without_ids "$out")
[[ $rc != 125 ]] || fail "$(printf '%s' "$out" | head -n 1)"
boot_id=$(printf '%s\n' "$out" | tail -n 1 | tr -d '[:space:]')
if [[ $rc == 255 ]]; then
  said=$(printf '%s' "$out" | tr '\n' ' ' | head -c 200)
  fail "cannot log in to the territory over SSH to restart job-worker.service: ${said:-ssh exited 255 without a message}"
fi
[[ $rc == 0 ]] || fail "systemctl restart job-worker.service failed (exit $rc): $(printf '%s' "$out" | head -n 1 | head -c 200)"
[[ -z "$tampering" ]] || fail "$tampering"

body=$(mktemp); trap 'rm -f "$body"' EXIT
http_get "/jobs/$job" "$body" 3; code=$HTTP_CODE
after="right after systemctl restart job-worker.service"
[[ "$code" != 000 ]] || fail "$after, GET /jobs/$job got no answer$(no_answer): the API must stay up while the worker restarts"
[[ "$code" != 404 ]] || fail "$after, GET /jobs/$job returned HTTP 404: the completed job was lost"
answered "$code" || fail "$after, GET /jobs/$job returned HTTP $code, expected the completed job"
problem=$(job_problem "$body" "$job" "$payload")
if [[ -n "$problem" ]]; then
  status=$(jq -r 'if type == "object" then .status // "" | tostring else "" end' "$body" 2>/dev/null)
  attempts=$(job_attempts "$body")
  why=""
  if [[ "$attempts" =~ ^[0-9]+$ ]] && (( attempts > 1 )); then
    why=" (the restarted worker processed the finished job again)"
  elif [[ "$status" != completed && "$attempts" =~ ^[0-9]+$ ]] && (( attempts >= 1 )); then
    why=" (the finished job went back to the queue when the worker restarted)"
  fi
  fail "$after, job $job is no longer completed exactly once: $problem$why"
fi

write_evidence "{\"job\":$(json_str "$job"),\"payload\":$(json_str "$payload"),\"worker_restart\":true${boot_id:+,\"boot_id\":$(json_str "$boot_id")}}"
