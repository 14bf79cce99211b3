# Shared helpers for the first-build verifiers (sourced, not executed).
# Environment (spec §4): AOE_TERRITORY_ID AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT
# AOE_CREDENTIAL_FILE AOE_PREVIOUS_EVIDENCE AOE_EVIDENCE_FILE.
# Rules: a failure prints ONE line to stderr and exits non-zero; the password is
# never echoed (it reaches sshpass through the environment, not argv).
set -uo pipefail

fail() { local msg="$*"; printf '%s\n' "${msg//$'\n'/ }" >&2; exit 1; }

need_env() {
  local v
  for v in "$@"; do
    [[ -n "${!v:-}" ]] || fail "verifier environment is missing $v"
  done
}

base_url() { printf 'http://%s:%s' "$AOE_HOST" "$AOE_SERVICE_PORT"; }

# random_hex N: N random bytes as lowercase hex (opaque ids, spec §4 pattern)
random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# http_get PATH OUTFILE -> prints the HTTP status code (000 if no answer); curl's
# error line (if any) goes to $HTTP_ERR.
HTTP_ERR=""
http_get() {
  local errf code
  errf=$(mktemp)
  code=$(curl -sS --max-time "${HTTP_TIMEOUT:-3}" -o "$2" -w '%{http_code}' "$(base_url)$1" 2>"$errf") || true
  HTTP_ERR=$(head -c 300 "$errf" | tr '\n' ' ' | sed 's/ *$//')
  rm -f "$errf"
  printf '%s' "${code:-000}"
}

# http_put PATH VALUE -> prints the HTTP status code
http_put() {
  local errf code
  errf=$(mktemp)
  code=$(printf '%s' "$2" | curl -sS --max-time "${HTTP_TIMEOUT:-3}" -o /dev/null -w '%{http_code}' \
    -X PUT -H 'Content-Type: application/octet-stream' --data-binary @- "$(base_url)$1" 2>"$errf") || true
  HTTP_ERR=$(head -c 300 "$errf" | tr '\n' ' ' | sed 's/ *$//')
  rm -f "$errf"
  printf '%s' "${code:-000}"
}

# body_is FILE VALUE: exact byte comparison of a response body with VALUE
body_is() { printf '%s' "$2" | cmp -s - "$1"; }

# previous_field MILESTONE FIELD: a string field of an earlier milestone's evidence
# from the AOE_PREVIOUS_EVIDENCE file (map milestone -> MilestoneView), or empty.
previous_field() {
  [[ -f "${AOE_PREVIOUS_EVIDENCE:-}" ]] || return 0
  jq -r --arg m "$1" --arg f "$2" '(.[$m].evidence // {})[$f] // empty | tostring' "$AOE_PREVIOUS_EVIDENCE" 2>/dev/null || true
}

# load_password: read AOE_SSH_PASSWORD from the credential file without exporting
# anything else from it into this shell (the file may also set other AOE_* keys).
load_password() {
  need_env AOE_CREDENTIAL_FILE
  [[ -r "$AOE_CREDENTIAL_FILE" ]] || fail "credential file $AOE_CREDENTIAL_FILE is not readable"
  SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
  [[ -n "$SSHPASS" ]] || fail "credential file $AOE_CREDENTIAL_FILE has no AOE_SSH_PASSWORD"
  export SSHPASS
}

# guest CMD...: run a command as root in the territory over password SSH
guest() {
  sshpass -e ssh -p "$AOE_SSH_PORT" \
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o PreferredAuthentications=password -o PubkeyAuthentication=no -o NumberOfPasswordPrompts=1 \
    -o ConnectTimeout="${SSH_CONNECT_TIMEOUT:-5}" -o ServerAliveInterval=2 -o ServerAliveCountMax=2 \
    "root@$AOE_HOST" "$@"
}

# write_evidence JSON: store the evidence (must be valid JSON) at AOE_EVIDENCE_FILE
write_evidence() {
  local tmp="$AOE_EVIDENCE_FILE.tmp.$$"
  printf '%s\n' "$1" > "$tmp" && mv -f "$tmp" "$AOE_EVIDENCE_FILE" || fail "cannot write evidence file $AOE_EVIDENCE_FILE"
}

# now_s: wall-clock seconds (integer) for poll deadlines; now_ms: milliseconds
now_s() { date +%s; }
now_ms() { local t=${EPOCHREALTIME/[.,]/}; printf '%s' $((t / 1000)); }

# LOST_AFTER_MS: a service that answers 404 for a record for this long has lost it
# (the poll stops early instead of waiting for its whole deadline).
LOST_AFTER_MS=${LOST_AFTER_MS:-3000}
