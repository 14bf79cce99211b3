# Primary-failover's verifier helpers (sourced, not executed): the runner's verifier toolkit
# (docs/arena-packages.md, "The verifier toolkit"), then what is primary-failover's own: the
# seeded topology, reads of the public endpoint that say what was wrong, and the guest-side
# probe of the failover state.
. "${AOE_TUI_VERIFY_KIT:?the aoe-tui referee names its verifier toolkit here}"

# The seeded topology (CONTRACT.md): state folder, the failed primary's port, the
# replica's port and the three records replicated before the failure.
STATE_DIR=/var/lib/failover
OLD_PORT=8081
NEW_PORT=8082
ORIGINAL_IDS=(customer-red-4a7 customer-blue-8d2 customer-green-f31)
declare -A ORIGINAL_VALUE=(
  [customer-red-4a7]=red-original
  [customer-blue-8d2]=blue-original
  [customer-green-f31]=green-original
)

# ask PATH [VALUE]: GET PATH from the public endpoint (PUT VALUE when given), 2 s at most
# (HTTP_TIMEOUT); sets CODE (the HTTP status, 000: no answer) and HTTP_ERR (curl's error),
# the answer's body in the file $BODY (a temporary file, removed at exit)
BODY="" CODE=000
ask() {
  local put=()
  [[ -n "$BODY" ]] || { BODY=$(mktemp) && trap 'rm -f "$BODY"' EXIT; }
  (( $# < 2 )) || put=(-X PUT -H 'Content-Type: application/octet-stream' --data-binary @-)
  curl_call --max-time "${HTTP_TIMEOUT:-2}" -o "$BODY" "${put[@]}" "$(base_url)$1" < <(printf '%s' "${2-}")
  CODE=${CURL_OUT:-000}
}

# what_answered: after ask, "HTTP 502 (empty body)", "HTTP 503 'read-only'" (the body's first
# 60 bytes, printable) or "no answer (curl's error)"
what_answered() {
  if [[ "$CODE" == 000 ]]; then
    printf 'no answer%s' "${HTTP_ERR:+ ($HTTP_ERR)}"
  elif [[ -s "$BODY" ]]; then
    printf "HTTP %s '%s'" "$CODE" "$(head -c 60 "$BODY" | tr -c '[:print:]' '?')"
  else
    printf 'HTTP %s (empty body)' "$CODE"
  fi
}

# get_is PATH TEXT [exact]: GET PATH answers 200 with TEXT (trailing newlines dropped, as
# "$(curl ...)" compares; "exact": byte for byte); otherwise status 1 and WRONG says what was
# wrong ("GET PATH$VIA: HTTP 502 (empty body), expected 200 'TEXT'", "... returned 'x', ...")
VIA="" WRONG="no attempt"
get_is() {
  ask "$1"
  if [[ "$CODE" != 200 ]]; then WRONG="GET $1$VIA: $(what_answered), expected 200 '$2'"; return 1; fi
  if [[ "${3-}" == exact ]]; then body_is "$BODY" "$2"; else [[ "$(cat "$BODY")" == "$2" ]]; fi && return 0
  WRONG="GET $1$VIA returned '$(head -c 60 "$BODY" | tr -c '[:print:]' '?')', expected '$2'"
  return 1
}

# keep_trying ROUNDS PAUSE_S UNTIL_MS CMD...: run CMD up to ROUNDS times, PAUSE_S apart, with
# no new round once now_ms reaches UNTIL_MS; status 0 as soon as CMD succeeds, else 1
keep_trying() {
  local round
  for (( round = 1; round <= $1; round++ )); do
    "${@:4}" && return 0
    (( $(now_ms) < $3 )) || return 1
    sleep "$2"
  done
  return 1
}

# The guest-side probe of the failover state, one KEY=VALUE line each:
#   failed / fenced: yes|no (primary.failed / primary.fenced exist)
#   upstream_ok / role_ok: yes|no ("$(cat upstream)" is 8082 / "$(cat replica.role)" is primary)
#   upstream / role: the files' first bytes, printable (for failure details)
#   ss: ok|missing (ss is installed); old_listener: the first `ss -lnt` line with ":8081 "
#   boot_id: the guest's boot id
STATE_PROBE='d='"$STATE_DIR"'
yn() { if "$@"; then echo yes; else echo no; fi; }
shown() { local v; if [[ -e "$1" ]]; then v=$(head -c 40 "$1" 2>/dev/null); printf "%s" "$v" | tr -c "[:print:]" "?"; else printf "(missing)"; fi; }
echo "failed=$(yn test -e "$d/primary.failed")"
echo "fenced=$(yn test -e "$d/primary.fenced")"
echo "upstream_ok=$(yn test "$(cat "$d/upstream" 2>/dev/null)" == '"$NEW_PORT"')"
echo "role_ok=$(yn test "$(cat "$d/replica.role" 2>/dev/null)" == primary)"
echo "upstream=$(shown "$d/upstream")"
echo "role=$(shown "$d/replica.role")"
if command -v ss >/dev/null 2>&1; then
  echo "ss=ok"
  l=$(ss -lnt 2>/dev/null | grep -F -m1 ":'"$OLD_PORT"' ")
  echo "old_listener=$(printf "%s" "$l" | tr -s " " | tr -c "[:print:]" "?")"
else
  echo "ss=missing"
fi
echo "boot_id=$(cat /proc/sys/kernel/random/boot_id)"'

# probe_state: run STATE_PROBE in the guest; sets S_failed S_fenced S_upstream_ok S_role_ok
# S_upstream S_role S_ss S_old_listener S_boot_id; returns non-zero (and sets PROBE_ERR)
# when SSH fails.
PROBE_ERR=""
probe_state() {
  local out rc line key
  S_failed="" S_fenced="" S_upstream_ok="" S_role_ok="" S_upstream="" S_role="" S_ss="" S_old_listener="" S_boot_id=""
  out=$(guest "$STATE_PROBE" 2>&1); rc=$?
  if (( rc != 0 )) || [[ "$out" != *boot_id=* ]]; then
    PROBE_ERR="SSH to the territory failed (exit $rc): $(printf '%s' "$out" | tr '\n' ' ' | head -c 200)"
    return 1
  fi
  while IFS= read -r line; do
    key=${line%%=*}
    case "$key" in
      failed|fenced|upstream_ok|role_ok|upstream|role|ss|old_listener|boot_id) printf -v "S_$key" '%s' "${line#*=}" ;;
    esac
  done <<< "$out"
  return 0
}

# check_old_port_closed PREFIX: after probe_state, fail if ss is missing or something listens
# on 8081 (PREFIX starts the failure detail, e.g. "after the reboot, ")
check_old_port_closed() {
  [[ "$S_ss" == ok ]] || fail "cannot check port $OLD_PORT: ss is not installed in the territory"
  [[ -z "$S_old_listener" ]] || fail "$1something listens on port $OLD_PORT again (ss -lnt: $S_old_listener); the failed primary's port must stay closed"
}
