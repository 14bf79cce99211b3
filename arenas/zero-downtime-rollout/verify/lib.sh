# zero-downtime-rollout's verifier helpers (sourced, not executed): the runner's verifier
# toolkit (docs/arena-packages.md, "The verifier toolkit"), then what is this arena's own.
. "${AOE_TUI_VERIFY_KIT:?the aoe-tui referee names its verifier toolkit here}"

# each probe's limit in seconds (the toolkit's http_get and http_put read it)
HTTP_TIMEOUT=2

# the seeded customer records (starting state) and their original values
SEEDED_IDS=(customer-alpha-73c customer-beta-a19)
declare -A SEEDED=([customer-alpha-73c]=alpha-original [customer-beta-a19]=beta-original)

# audit_dir: the continuity audit folder, shared by baseline-ready (starts the monitor) and
# uninterrupted-cutover (reads and stops it)
audit_dir() { printf '%s/continuity-audit' "$(dirname "$AOE_EVIDENCE_FILE")"; }

# monitor_alive PID: PID is a running continuity monitor (not a reused pid)
monitor_alive() {
  [[ "$1" =~ ^[0-9]+$ ]] || return 1
  { tr '\0' ' ' < "/proc/$1/cmdline"; } 2>/dev/null | grep -q 'continuity-monitor\.sh'
}

# get_check PATH EXPECTED MODE: one GET through the public endpoint; MODE "word" (the body is
# EXPECTED, a trailing newline tolerated: health, version) or "exact" (byte for byte). On a
# mismatch sets WHY (what was expected and what was seen) and returns 1.
WHY=""
get_check() {
  local body code got ok=1
  body=$(mktemp)
  http_get "$1" "$body" >/dev/null; code=${CURL_OUT:-000}
  if [[ "$code" == 200 ]]; then
    if [[ "$3" == word ]]; then got=$(head -c 200 "$body"); [[ "${got%$'\n'}" == "$2" ]] && ok=0
    else body_is "$body" "$2" && ok=0; fi
    (( ok == 0 )) || WHY="GET $1 returned '$(head -c 60 "$body" | tr -c '[:print:]' '?')', expected '$2'"
  elif [[ "$code" == 000 ]]; then
    WHY="GET $1: no answer${HTTP_ERR:+ ($HTTP_ERR)}"
  elif [[ "$code" == 404 && "$1" == /records/* ]]; then
    WHY="GET $1 returned HTTP 404 (the record is gone), expected 200 '$2'"
  else
    WHY="GET $1 returned HTTP $code, expected 200 '$2'"
  fi
  rm -f "$body"
  return "$ok"
}
