# Durable-job-queue's verifier helpers (sourced, not executed): the runner's verifier toolkit
# (docs/arena-packages.md, "The verifier toolkit"), then what is this arena's own.
. "${AOE_TUI_VERIFY_KIT:?the aoe-tui referee names its verifier toolkit here}"

# LOST_AFTER_MS: a job that answers 404 for this long is unknown to the service (the poll
# stops early instead of waiting for its whole window; the milestone is retried anyway).
LOST_AFTER_MS=${LOST_AFTER_MS:-3000}

# BODY: a temporary file for response bodies, removed when the verifier exits
BODY=$(mktemp) || fail "cannot create a temporary file"
trap 'rm -f "$BODY"' EXIT

# A verifier's own deadline, kept well inside the milestone's timeout_seconds (the runner
# kills a verifier at its timeout, which would leave only "verifier timed out").
# start_clock SECONDS: the deadline is SECONDS from now; time_left_ms: what remains (ms).
DEADLINE_MS=0
start_clock() { DEADLINE_MS=$(( $(now_ms) + $1 * 1000 )); }
time_left_ms() { local left=$(( DEADLINE_MS - $(now_ms) )); (( left > 0 )) || left=0; printf '%s' "$left"; }

# curl_timeout SECONDS: SECONDS, or less when the deadline is closer (at least 0.2 s)
curl_timeout() {
  local left
  left=$(time_left_ms)
  (( DEADLINE_MS == 0 || left >= $1 * 1000 )) && { printf '%s' "$1"; return; }
  (( left >= 200 )) || left=200
  printf '%d.%03d' $(( left / 1000 )) $(( left % 1000 ))
}

# probe_get PATH [TIMEOUT_S]: the toolkit's http_get into $BODY (timeout 3 s, cut to the
# deadline); sets HTTP_CODE (000: no answer) and keeps the toolkit's HTTP_ERR (no subshell).
# probe_post PATH DATA [TIMEOUT_S]: POST DATA raw (as `curl --data-binary`), the same way.
HTTP_CODE=000
probe_get() { HTTP_TIMEOUT=$(curl_timeout "${2:-3}") http_get "$1" "$BODY" >/dev/null; HTTP_CODE=${CURL_OUT:-000}; }
probe_post() {
  local CURL_WRITE='%{http_code}'
  curl_call --max-time "$(curl_timeout "${3:-3}")" -o "$BODY" -X POST -H 'Content-Type: application/octet-stream' \
    --data-binary @- "$(base_url)$1" < <(printf '%s' "$2")
  HTTP_CODE=${CURL_OUT:-000}
}

# no_answer: " (curl's error)" for a request that got no HTTP answer, else ""
no_answer() { [[ -n "$HTTP_ERR" ]] && printf ' (%s)' "$HTTP_ERR"; return 0; }

# answered CODE: curl --fail semantics (an HTTP answer below 400)
answered() { [[ "$1" =~ ^[123][0-9][0-9]$ ]]; }

# poll CHECK...: run CHECK (true when satisfied) up to 30 rounds, 1 s apart, while the
# deadline leaves time (0.3 s for a round, 1.3 s to sleep first); ROUND: the last round
poll() {
  for (( ROUND = 1; ROUND <= 30; ROUND++ )); do
    (( $(time_left_ms) >= 300 )) || return 1
    "$@" && return 0
    (( $(time_left_ms) > 1300 && ROUND < 30 )) || return 1
    sleep 1
  done
}

# health_check [TIMEOUT_S]: GET /health; WHY is empty when it answers (below 400) the body
# "ready" (trailing newlines tolerated), else says what it answered
health_check() {
  local got
  probe_get /health "${1:-3}"
  WHY=""
  if [[ "$HTTP_CODE" == 000 ]]; then WHY="GET /health: no answer$(no_answer)"
  elif ! answered "$HTTP_CODE"; then WHY="GET /health returned HTTP $HTTP_CODE"
  else
    got=$(head -c 200 "$BODY" | tr -d '\0')
    [[ "$got" == ready ]] || WHY="GET /health body was '$(printf '%s' "$got" | head -c 60 | tr -c '[:print:]' '?')'"
  fi
}

# job_check ID PAYLOAD [TIMEOUT_S]: one GET /jobs/ID (2 s); sets HTTP_CODE, JOB_WHY (empty when
# the job shows completed exactly once, else "no answer (...)", "HTTP CODE" or job_problem's
# list) and JOB_ATTEMPTS (.attempts of a wrong answer when it is a number, else empty)
job_check() {
  JOB_ATTEMPTS=""
  probe_get "/jobs/$1" "${3:-2}"
  if [[ "$HTTP_CODE" == 000 ]]; then JOB_WHY="no answer$(no_answer)"
  elif ! answered "$HTTP_CODE"; then JOB_WHY="HTTP $HTTP_CODE"
  else
    JOB_WHY=$(job_problem "$BODY" "$1" "$2")
    [[ -z "$JOB_WHY" ]] || JOB_ATTEMPTS=$(jq -r 'if type == "object" and (.attempts | type) == "number"
      then .attempts else empty end' "$BODY" 2>/dev/null)
  fi
}

# processed_again: job_check saw more than one attempt (attempts never go down)
processed_again() { [[ "$JOB_ATTEMPTS" =~ ^[0-9]+$ ]] && (( JOB_ATTEMPTS > 1 )); }

# lost_for_long MSG [TAIL]: after job_check; fails with "MSG for N s TAIL" once the job has
# answered HTTP 404 for LOST_AFTER_MS in a row (FIRST_404: when that began, ms)
FIRST_404=""
lost_for_long() {
  if [[ "$HTTP_CODE" != 404 ]]; then FIRST_404=""; return 0; fi
  FIRST_404=${FIRST_404:-$(now_ms)}
  (( $(now_ms) - FIRST_404 < LOST_AFTER_MS )) || fail "$1 for $(( LOST_AFTER_MS / 1000 )) s${2:-}"
}

# job_problem BODYFILE ID PAYLOAD: prints what is wrong with a GET /jobs/<id> answer, or
# nothing when it shows the job completed exactly once: a JSON object with .id and
# .payload equal to the originals, .status "completed", .result "processed:"+payload and
# .attempts the number 1.
job_problem() {
  local out
  job_plainly_ok "$1" "$2" "$3" && return 0
  if ! out=$(jq -r --arg id "$2" --arg p "$3" '
      def show: tojson | if length > 60 then .[0:57] + "..." else . end;
      if type != "object" then "the answer is JSON but not an object: \(show)"
      else [ (if .id != $id then "id \(.id | show) (expected \($id | show))" else empty end),
             (if .payload != $p then "payload \(.payload | show) (expected \($p | show))" else empty end),
             (if .status != "completed" then "status \(.status | show) (expected \"completed\")" else empty end),
             (if .result != ("processed:" + $p) then "result \(.result | show) (expected \("processed:" + $p | show))" else empty end),
             (if (.attempts | type) != "number" or .attempts != 1 then "attempts \(.attempts | show) (expected the number 1)" else empty end)
           ] | join(", ")
      end' "$1" 2>/dev/null); then
    printf 'the answer is not JSON: %s' "$(head -c 80 "$1" | tr -c '[:print:]' '?')"
    return
  fi
  printf '%s' "$out"
}

# job_plainly_ok BODYFILE ID PAYLOAD: true when the body is certainly what job_problem accepts,
# told with bash builtins instead of a jq run (jq 1.6 costs ~45 ms of CPU a start): a flat
# JSON object (JSON whitespace only) whose members are all plain strings (no escapes, no
# control characters) or integers, no name twice, with .id ID, .payload PAYLOAD, .status "completed", .result
# "processed:"PAYLOAD and .attempts 1. Anything else (false) is left to job_problem's jq.
job_plainly_ok() {
  local body rest key ws=$'[ \t\n\r]*'
  local -A seen=()
  local mre="^$ws\"([^\"\\\\[:cntrl:]]*)\"$ws:$ws(\"[^\"\\\\[:cntrl:]]*\"|-?(0|[1-9][0-9]*))$ws(,|\$)"
  IFS= read -r -d '' body < "$1"
  [[ "$body" =~ ^$ws\{(.*)\}$ws$ ]] || return 1
  rest=${BASH_REMATCH[1]}
  while [[ -n "${rest//[$' \t\n\r']/}" ]]; do
    [[ "$rest" =~ $mre ]] || return 1
    key=${BASH_REMATCH[1]}
    [[ -z "${seen["$key"]+set}" ]] || return 1
    seen["$key"]=${BASH_REMATCH[2]}
    rest=${rest:${#BASH_REMATCH[0]}}
    [[ "${BASH_REMATCH[4]}" != , || -n "${rest//[$' \t\n\r']/}" ]] || return 1
  done
  [[ "${seen[id]-}" == "\"$2\"" && "${seen[payload]-}" == "\"$3\"" && "${seen[status]-}" == '"completed"' \
    && "${seen[result]-}" == "\"processed:$3\"" && "${seen[attempts]-}" == 1 ]]
}
