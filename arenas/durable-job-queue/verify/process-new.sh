#!/usr/bin/env bash
# Milestone process-new: POST /jobs/fresh-<16 hex> with the raw body opaque-<24 hex> must
# answer exactly 202 (3 s); then up to 30 rounds, 1 s apart, GET /jobs/<id> must show the
# job with its id and payload, status "completed", result "processed:<payload>" and
# attempts the number 1. Each attempt posts a new job. The poll stops early when the
# accepted job is unknown (HTTP 404) for 3 s or was processed more than once.
# Evidence: {"completed":true,"job","payload"} (worker-restart and host-reboot read them)
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

job="fresh-$(random_hex 8)" payload="opaque-$(random_hex 12)"
start_clock "${PROCESS_POLL_SECONDS:-31}"
probe_post "/jobs/$job" "$payload"
[[ "$HTTP_CODE" != 000 ]] || fail "POST /jobs/$job: no answer$(no_answer), expected HTTP 202"
[[ "$HTTP_CODE" == 202 ]] || fail "POST /jobs/$job returned HTTP $HTTP_CODE, expected exactly 202 (accepted)"

completed_once() {
  job_check "$job" "$payload"
  lost_for_long "job $job was accepted with HTTP 202 but GET /jobs/$job returned HTTP 404" " (job lost)"
  [[ "$HTTP_CODE" != 404 ]] || JOB_WHY="HTTP 404 (unknown job)"
  ! processed_again || fail "new job $job was processed $JOB_ATTEMPTS times, expected exactly once ($JOB_WHY)"
  [[ -z "$JOB_WHY" ]]
}
JOB_WHY="not checked"
poll completed_once || fail "new job $job (accepted with 202) was not completed exactly once after $ROUND rounds: GET /jobs/$job gave $JOB_WHY"
write_evidence "{\"completed\":true,\"job\":$(json_str "$job"),\"payload\":$(json_str "$payload")}"
