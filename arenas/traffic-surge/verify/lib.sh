# Traffic-surge's verifier helpers (sourced, not executed): the runner's verifier toolkit
# (docs/arena-packages.md, "The verifier toolkit"), then what is traffic-surge's own: the
# historical records, background optional load stopped when the verifier exits, timed HTTP
# requests and the checks built on them.
. "${AOE_TUI_VERIFY_KIT:?the aoe-tui referee names its verifier toolkit here}"

# The three records the territory starts with (the historical priority ledger).
HISTORY_IDS=(history-amber-a91 history-cobalt-f73 history-umber-2d4)
HISTORY_VALUES=(ledger-alpha ledger-beta ledger-gamma)

# --- scratch space and background load, both cleaned up at exit -------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/aoe-surge.XXXXXX") || fail "cannot create a temporary folder"
BG_PIDS=()
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# optional_load PREFIX COUNT MAX_TIME: COUNT concurrent background GETs of
# /optional/PREFIX-1..COUNT, each allowed MAX_TIME seconds; answers are not judged.
optional_load() {
  local n
  for n in $(seq 1 "$2"); do
    curl -s --noproxy '*' --max-time "$3" -o /dev/null "$(base_url)/optional/$1-$n" >/dev/null 2>&1 &
    BG_PIDS+=("$!")
  done
}

# --- HTTP with time ------------------------------------------------------------------
# http METHOD PATH MAX_TIME OUTFILE [BODY]: one request through the toolkit's curl_call (BODY
# is sent for PUT). Sets HTTP_CODE (the status, 000 = no answer), HTTP_RC (curl's exit status:
# 28 = timed out, 7 = connection refused), HTTP_TIME (seconds taken) and the toolkit's HTTP_ERR
# (curl's error line). Call it directly, not in $(...), or these are lost.
HTTP_CODE=000 HTTP_RC=0 HTTP_TIME=0
http() {
  local method=$1 path=$2 max=$3 out=$4 meta CURL_WRITE='%{http_code} %{time_total}'
  local args=(--noproxy '*' --max-time "$max" -o "$out" -X "$method")
  if [[ $# -ge 5 ]]; then
    curl_call "${args[@]}" -H 'Content-Type: application/octet-stream' \
      --data-binary @- "http://$AOE_HOST:$AOE_SERVICE_PORT$path" < <(printf '%s' "$5")
  else
    curl_call "${args[@]}" "http://$AOE_HOST:$AOE_SERVICE_PORT$path"
  fi
  HTTP_RC=$CURL_RC meta=$CURL_OUT
  HTTP_TIME=${meta#* }
  [[ "$HTTP_TIME" =~ ^[0-9.]+$ ]] || HTTP_TIME=$max
  HTTP_CODE=${meta%% *}
  [[ "$HTTP_CODE" =~ ^[0-9]{3}$ ]] || HTTP_CODE=000
}

# no_answer WHAT MAX_TIME: the reason text for a request that got no HTTP answer
no_answer() {
  if [[ "$HTTP_RC" == 28 ]]; then
    printf '%s: no answer within %s s' "$1" "$2"
  else
    printf '%s: no answer%s' "$1" "${HTTP_ERR:+ ($HTTP_ERR)}"
  fi
}

# body_reads FILE VALUE: the body equals VALUE with trailing newlines ignored (as upstream's
# $(curl ...) compares; the toolkit's body_is compares byte for byte)
body_reads() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }

# shown FILE: a short printable excerpt of a response body for a failure detail
shown() { head -c 60 "$1" 2>/dev/null | tr -c '[:print:]' '?'; }

# check_get PATH VALUE MAX_TIME WHAT: GET PATH must be 200 with VALUE; on failure sets
# CHECK_REASON (one line) and CHECK_CODE and returns 1.
CHECK_REASON="" CHECK_CODE=""
check_get() {
  local body="$WORK/body.$BASHPID.$RANDOM" code
  http GET "$1" "$3" "$body"
  code=$HTTP_CODE CHECK_CODE=$HTTP_CODE
  if [[ "$code" == 200 ]] && body_reads "$body" "$2"; then rm -f "$body"; return 0; fi
  case "$code" in
    000) CHECK_REASON=$(no_answer "GET $1" "$3") ;;
    200) CHECK_REASON="GET $1 returned '$(shown "$body")', expected '$2'" ;;
    404) CHECK_REASON="GET $1 returned HTTP 404 ($4 is missing)" ;;
    *)   CHECK_REASON="GET $1 returned HTTP $code, expected 200 with '$2'" ;;
  esac
  rm -f "$body"
  return 1
}

# check_health MAX_TIME: GET /health must be 200 "ready"; else CHECK_REASON, return 1
check_health() { check_get /health ready "$1" "the health endpoint"; }

# put_204 PATH VALUE MAX_TIME CONTEXT SUFFIX: PUT PATH = VALUE must answer 204 within MAX_TIME
# seconds; otherwise fail "CONTEXT<no answer / HTTP code> SUFFIX" (CONTEXT ends with its own
# separator; SUFFIX starts with its own)
put_204() {
  http PUT "$1" "$3" /dev/null "$2"
  [[ "$HTTP_CODE" != 000 ]] || fail "$4$(no_answer "PUT $1" "$3")$5"
  [[ "$HTTP_CODE" == 204 ]] || fail "$4PUT $1 returned HTTP $HTTP_CODE, expected 204"
}

# cap_time DEADLINE_MS LIMIT_MS: a curl --max-time in seconds: LIMIT_MS, or what is left
# until DEADLINE_MS if that is less (at least 0.2 s)
cap_time() {
  local left=$(( $1 - $(now_ms) )) t=$2
  (( left < t )) && t=$left
  (( t < 200 )) && t=200
  printf '%d.%03d' $((t / 1000)) $((t % 1000))
}
