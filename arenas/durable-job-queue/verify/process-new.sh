#!/usr/bin/env bash
# Milestone process-new: POST /jobs/fresh-<16 hex> with the raw body opaque-<24 hex> must
# answer exactly 202 (3 s); then up to 30 rounds, 1 s apart, GET /jobs/<id> must show the
# job with its id and payload, status "completed", result "processed:<payload>" and
# attempts the number 1. Each attempt posts a new job. The poll stops early when the
# accepted job is unknown (HTTP 404) for 3 s or was processed more than once.
# Evidence: {"completed":true,"job","payload"} (worker-restart and host-reboot read them)
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

job="fresh-$(random_hex 8)"
payload="opaque-$(random_hex 12)"
body=$(mktemp); trap 'rm -f "$body"' EXIT
start_clock "${PROCESS_POLL_SECONDS:-31}"

http_post "/jobs/$job" "$payload" "$body" 3; code=$HTTP_CODE
[[ "$code" != 000 ]] || fail "POST /jobs/$job: no answer$(no_answer), expected HTTP 202"
[[ "$code" == 202 ]] || fail "POST /jobs/$job returned HTTP $code, expected exactly 202 (accepted)"

first_404=""
last="not checked"
for (( round = 1; round <= 30; round++ )); do
  (( $(time_left_ms) >= 300 )) || break
  http_get "/jobs/$job" "$body" 2; code=$HTTP_CODE
  if [[ "$code" == 404 ]]; then
    first_404=${first_404:-$(now_ms)}
    (( $(now_ms) - first_404 < LOST_AFTER_MS )) || \
      fail "job $job was accepted with HTTP 202 but GET /jobs/$job returned HTTP 404 for $(( LOST_AFTER_MS / 1000 )) s (job lost)"
    last="HTTP 404 (unknown job)"
  else
    first_404=""
    if [[ "$code" == 000 ]]; then last="no answer$(no_answer)"
    elif ! answered "$code"; then last="HTTP $code"
    else
      last=$(job_problem "$body" "$job" "$payload")
      [[ -z "$last" ]] && break
      attempts=$(job_attempts "$body")
      if [[ "$attempts" =~ ^[0-9]+$ ]] && (( attempts > 1 )); then
        fail "new job $job was processed $attempts times, expected exactly once ($last)"
      fi
    fi
  fi
  (( $(time_left_ms) > 1300 && round < 30 )) || break
  sleep 1
done
[[ -z "$last" ]] || fail "new job $job (accepted with 202) was not completed exactly once after $round rounds: GET /jobs/$job gave $last"
write_evidence "{\"completed\":true,\"job\":$(json_str "$job"),\"payload\":$(json_str "$payload")}"
