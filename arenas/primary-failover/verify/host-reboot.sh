#!/usr/bin/env bash
# Milestone host-reboot (operation host_reboot): runs after the referee rebooted the
# territory and SSH came back. Polls the public endpoint (40 rounds, 1 s apart, no new
# round after 29 s of the 40 s budget) until /health is "ready", /role is "primary", and
# the writes-restored record and the three original records read back. Then checks over
# SSH that the host really rebooted (boot id differs from the service-restart evidence),
# that primary.failed and primary.fenced exist, upstream is 8082, replica.role is
# primary and nothing listens on port 8081.
# Evidence: {"old_primary":"fenced","reboot":true,"record","role":"primary","value","boot_id"}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_SERVICE_PORT AOE_EVIDENCE_FILE AOE_PREVIOUS_EVIDENCE

started=$(now_ms)
record=$(previous_field service-restart record)
value=$(previous_field service-restart value)
[[ -n "$record" ]] || record=$(previous_field writes-restored record)
[[ -n "$value" ]] || value=$(previous_field writes-restored value)
[[ -n "$record" && -n "$value" ]] || fail "no record/value in earlier evidence in $AOE_PREVIOUS_EVIDENCE"
old_boot=$(previous_field service-restart boot_id)
load_password

body=$(mktemp); trap 'rm -f "$body"' EXIT
# check PATH TEXT EXACT: sets $last and returns non-zero unless GET PATH answers 200 TEXT
check() {
  local code
  code=$(http_get "$1" "$body")
  if [[ "$code" != 200 ]]; then
    last="GET $1: $(what_answered "$code" "$body"), expected 200 '$2'"; return 1
  fi
  if [[ "$3" == exact ]]; then body_is "$body" "$2"; else body_text_is "$body" "$2"; fi ||
    { last="GET $1 returned '$(shown "$body")', expected '$2'"; return 1; }
}
all_reads() {
  check /health ready text && check /role primary text && check "/records/$record" "$value" exact || return 1
  local id
  for id in "${ORIGINAL_IDS[@]}"; do check "/records/$id" "${ORIGINAL_VALUE[$id]}" exact || return 1; done
}

deadline=$(( started + ${REBOOT_DEADLINE_MS:-29000} ))
last="no attempt"
ok=""
for (( round = 1; round <= 40; round++ )); do
  if all_reads; then ok=1; break; fi
  (( $(now_ms) < deadline )) || break
  sleep 1
done
if [[ -z "$ok" ]]; then
  if probe_state; then
    fail "after the reboot, $last (territory state: upstream '$S_upstream', replica.role '$S_role')"
  fi
  fail "after the reboot, $last"
fi

probe_state || fail "after the reboot: $PROBE_ERR"
if [[ -n "$old_boot" && "$S_boot_id" == "$old_boot" ]]; then
  fail "the host did not reboot (boot id unchanged: $S_boot_id)"
fi
[[ "$S_failed" == yes ]] || fail "after the reboot, $STATE_DIR/primary.failed is missing"
[[ "$S_fenced" == yes ]] || fail "after the reboot, $STATE_DIR/primary.fenced is missing: the fence did not survive the reboot"
[[ "$S_upstream_ok" == yes ]] || fail "after the reboot, $STATE_DIR/upstream is '$S_upstream', expected $NEW_PORT"
[[ "$S_role_ok" == yes ]] || fail "after the reboot, $STATE_DIR/replica.role is '$S_role', expected primary"
check_old_port_closed "after the reboot, "

write_evidence "{\"old_primary\":\"fenced\",\"reboot\":true,\"record\":$(json_str "$record"),\"role\":\"primary\",\"value\":$(json_str "$value"),\"boot_id\":$(json_str "$S_boot_id")}"
