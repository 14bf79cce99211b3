#!/usr/bin/env bash
# Milestone recover-accepted: the jobs accepted before the deployment (the spool the
# territory seeds at every boot) must be known to the API and completed exactly once.
# Up to 30 rounds, 1 s apart: every one of the three ids must answer GET /jobs/<id> with
# JSON whose .id and .payload are the originals, .status "completed", .result
# "processed:<payload>" and .attempts the number 1. The poll stops early when the job
# API answers but does not know an accepted job (HTTP 404, and again 0.3 s later), or
# when a job was processed more than once (attempts > 1 never becomes 1 again); the
# milestone is retried at the next tick anyway.
# Evidence: {"accepted_jobs":[ids],"recovered":true}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SERVICE_PORT AOE_EVIDENCE_FILE

ids=(accepted-alpha-7d3 accepted-beta-91e accepted-gamma-c42)
payloads=(alpha beta gamma)
WHAT="pre-existing accepted jobs were not recovered exactly once"

all_recovered() {
  local i id
  problems=()
  for i in 0 1 2; do
    id=${ids[i]}
    if (( $(time_left_ms) < 300 )); then problems+=("$id: not checked (out of time)"); continue; fi
    job_check "$id" "${payloads[i]}"
    if [[ "$HTTP_CODE" == 404 ]]; then
      # an answering API that does not know an accepted job: look once more, 0.3 s later
      # (it may be importing right now); still unknown = not recovered, stop here
      sleep 0.3
      job_check "$id" "${payloads[i]}"
      [[ "$HTTP_CODE" != 404 ]] || \
        fail "$WHAT: GET /jobs/$id returned HTTP 404 twice, 0.3 s apart (the service does not know this accepted job)"
    fi
    # no answer at all: the job API is down; the other ids would say the same
    if [[ "$HTTP_CODE" == 000 ]]; then problems=("GET /jobs/$id: $JOB_WHY"); break; fi
    ! processed_again || fail "$WHAT: $id was processed $JOB_ATTEMPTS times ($JOB_WHY)"
    [[ -z "$JOB_WHY" ]] || problems+=("$id: $JOB_WHY")
  done
  (( ${#problems[@]} == 0 ))
}
start_clock "${RECOVER_POLL_SECONDS:-31}"
problems=("not checked")
if ! poll all_recovered; then
  detail=$(printf '%s; ' "${problems[@]}")
  fail "$WHAT after $ROUND rounds: ${detail%; }"
fi
jobs=""
for id in "${ids[@]}"; do jobs+="${jobs:+,}$(json_str "$id")"; done
write_evidence "{\"accepted_jobs\":[$jobs],\"recovered\":true}"
